/* odbox — `odbox handlers`: the subscriptions (types, live processes,
 * backlog, oldest due age, lag), `odbox handlers retire NAME` and
 * `odbox handlers replay NAME --since TIME`. */
/* timegm: _GNU_SOURCE comes from config.h */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ops_cli.h"

const char usage_handlers[] =
    "usage: odbox handlers (--dsn DSN | --config FILE) [--shard G.M] [--live-ms N]\n"
    "                      [--eventlog NAME] [--json]\n"
    "       odbox handlers retire NAME (--dsn DSN | --config FILE) [--eventlog NAME] [--json]\n"
    "       odbox handlers replay NAME --since TIME (--dsn DSN | --config FILE)\n"
    "                      [--eventlog NAME] [--json]\n"
    "\n"
    "Without a subcommand: per shard, the subscriptions recorded in the eventlog\n"
    "(each handler's name and event types), the live processes serving each (a\n"
    "heartbeat within --live-ms, default 30000; one that stopped cleanly is not\n"
    "listed, one killed until its heartbeat is older), its backlog (PENDING and\n"
    "FAILED rows), how long the oldest due row has waited, and the delivery lag\n"
    "(p50 of the successes of the last 10 minutes). In --json: \"subscriptions\",\n"
    "an array of objects with name, types, processes, backlog, ...\n"
    "\n"
    "retire: the fan-out writes no more rows for NAME (its rows are still\n"
    "handled); a process going away never retires a subscription, and one that\n"
    "registers a retired name again leaves it retired.\n"
    "\n"
    "replay: rows of NAME for the events of its types still in the eventlog\n"
    "since TIME, an ISO 8601 UTC time such as 2026-01-01T00:00:00Z; rows that\n"
    "exist are skipped. Prints how many were created.\n"
    "\n"
    "Exit codes: 0 ok; 1 runtime error, also no subscription named NAME or NAME\n"
    "retired (replay); 2 usage or invalid input (no NAME, a TIME that does not\n"
    "parse or is in the future); 3 the database has no odbox schema, or an older\n"
    "one: run odbox migrate; 4 cannot connect (also a SQLite file that does not\n"
    "exist).\n"
    "\n";

/* YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z (a space for the T is taken) to UTC us;
 * 0 or -1. */
static int parse_utc(const char *s, int64_t *us)
{
    struct tm tm = {0};
    int n = 0;
    char t = 0;
    if (sscanf(s, "%4d-%2d-%2d%c%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &t, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &n) != 7 ||
        (t != 'T' && t != 't' && t != ' ') || n != 19)
        return -1;
    if (tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    const char *p = s + n;
    int64_t frac = 0;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 6)
                frac = frac * 10 + (*p - '0');
        if (!digits)
            return -1;
        for (; digits < 6; digits++)
            frac *= 10;
    }
    if ((*p != 'Z' && *p != 'z') || p[1])
        return -1;
    int mday = tm.tm_mday, mon = tm.tm_mon;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t secs = timegm(&tm);
    if (secs == (time_t)-1 || tm.tm_mday != mday || tm.tm_mon != mon - 1) /* 2026-02-30 */
        return -1;
    *us = (int64_t)secs * 1000000 + frac;
    return 0;
}

static const odbox_notification_stats *stats_of(const odbox_notification_stats *st, size_t n,
                                                const odbox_subscription *s)
{
    for (size_t i = 0; i < n; i++)
        if (st[i].shard.group == s->shard.group && st[i].shard.member == s->shard.member &&
            !strcmp(st[i].handler, s->name))
            return &st[i];
    return NULL;
}

static json_object *strv_json(char **v, size_t n)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(a, json_object_new_string(v[i]));
    return a;
}

/* The settings of each of the n subscriptions v, into set (n of them);
 * one retired and deleted since the list keeps the defaults. */
static int settings_of(odbox_registry *r, const odbox_subscription *v, size_t n, odbox_subscription_settings *set,
                       odbox_error *err)
{
    for (size_t i = 0; i < n; i++) {
        set[i] = (odbox_subscription_settings){.version = ODBOX_SUBSCRIPTION_SETTINGS_VERSION};
        int rc = odbox_subscription_settings_get(r, odbox_registry_shard(r, v[i].shard), v[i].name, &set[i], err);
        if (rc != ODBOX_OK && rc != ODBOX_ENOTFOUND)
            return rc;
    }
    return ODBOX_OK;
}

static int show(odbox_registry *r, odbox_shard *shard, int live_ms, const cli *c, odbox_error *err)
{
    odbox_subscription *v = NULL;
    size_t n = 0, nst = 0;
    int rc = odbox_subscriptions_list(r, shard, live_ms, &v, &n, err);
    odbox_notification_stats *st = NULL;
    odbox_notification_metrics_options mo = {.shard = shard};
    if (rc == ODBOX_OK)
        rc = odbox_notifications_metrics(r, &mo, &st, &nst, err);
    odbox_subscription_settings *set = rc == ODBOX_OK ? calloc(n ? n : 1, sizeof *set) : NULL;
    if (rc == ODBOX_OK && !set)
        rc = odbox_error_set(err, ODBOX_ENOMEM, "out of memory");
    if (rc == ODBOX_OK)
        rc = settings_of(r, v, n, set, err);
    if (rc != ODBOX_OK) {
        free(set);
        odbox_notification_stats_free(&st, nst);
        odbox_subscriptions_free(&v, n);
        return rc;
    }
    static const odbox_notification_stats none;
    if (c->json) {
        json_object *top = json_object_new_object(), *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
            const odbox_notification_stats *s = stats_of(st, nst, &v[i]);
            if (!s)
                s = &none;
            char t[40];
            json_object *o = ops_json_of_shard(v[i].shard);
            json_object_object_add(o, "name", json_object_new_string(v[i].name));
            json_object_object_add(o, "types", strv_json(v[i].types, v[i].ntypes));
            json_object_object_add(o, "processes", strv_json(v[i].processes, v[i].nprocesses));
            json_object_object_add(o, "former_names",
                                   v[i].former_names ? json_object_new_string(v[i].former_names) : NULL);
            json_object_object_add(o, "created", json_object_new_string(cli_format_time(v[i].created_us, 1, t,
                                                                                         sizeof t)));
            json_object_object_add(o, "retired",
                                   v[i].retired_us ? json_object_new_string(cli_format_time(v[i].retired_us, 1, t,
                                                                                            sizeof t))
                                                   : NULL);
            json_object_object_add(o, "waiting", json_object_new_boolean(!v[i].retired_us && !v[i].nprocesses));
            json_object_object_add(o, "ordered", json_object_new_boolean(set[i].ordered));
            json_object_object_add(o, "max_attempts",
                                   set[i].max_attempts ? json_object_new_int(set[i].max_attempts) : NULL);
            json_object_object_add(o, "backlog", json_object_new_int64(s->backlog));
            json_object_object_add(o, "due", json_object_new_int64(s->due));
            json_object_object_add(o, "oldest_due_age_s", json_object_new_double(s->oldest_due_age_us / 1e6));
            json_object_object_add(o, "lag_p50_s", json_object_new_double(s->lag_p50_us / 1e6));
            json_object_object_add(o, "lag_p99_s", json_object_new_double(s->lag_p99_us / 1e6));
            json_object_object_add(o, "last_error", cli_json_text(v[i].last_error));
            json_object_object_add(o, "last_error_at",
                                   v[i].last_error_us ? json_object_new_string(cli_format_time(v[i].last_error_us, 1,
                                                                                               t, sizeof t))
                                                      : NULL);
            json_object_array_add(arr, o);
        }
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "subscriptions", arr);
        cli_print_json(top);
        json_object_put(top);
    } else if (!n) {
        puts("no subscriptions");
    } else {
        printf("%-6s %-24s %-9s %9s %12s %9s %-28s %s\n", "SHARD", "SUBSCRIPTION", "STATE", "BACKLOG", "OLDEST DUE",
               "LAG P50", "TYPES", "PROCESSES");
        for (size_t i = 0; i < n; i++) {
            const odbox_notification_stats *s = stats_of(st, nst, &v[i]);
            if (!s)
                s = &none;
            char shard_s[16], age[32], lag[32];
            snprintf(shard_s, sizeof shard_s, "%d.%d", v[i].shard.group, v[i].shard.member);
            /* rows of a subscription no live process serves wait for one */
            const char *state = v[i].retired_us ? "retired" : v[i].nprocesses ? "active" : "waiting";
            printf("%-6s %-24s %-9s %9lld %12s %9s ", shard_s, v[i].name, state,
                   (long long)s->backlog, ops_seconds(s->oldest_due_age_us, !s->due, age, sizeof age),
                   ops_seconds(s->lag_p50_us, !s->lag_count, lag, sizeof lag));
            int w = 0;
            for (size_t k = 0; k < v[i].ntypes; k++)
                w += printf("%s%s", k ? "," : "", v[i].types[k]);
            printf("%*s ", w < 28 ? 28 - w : 0, "");
            if (!v[i].nprocesses)
                fputs("(none live)", stdout);
            for (size_t k = 0; k < v[i].nprocesses; k++)
                printf("%s%s", k ? "," : "", v[i].processes[k]);
            putchar('\n');
            if (set[i].ordered && set[i].max_attempts)
                printf("       ordered by model id; gives a row up after %d attempts\n", set[i].max_attempts);
            else if (set[i].ordered)
                puts("       ordered by model id");
            else if (set[i].max_attempts)
                printf("       gives a row up after %d attempts\n", set[i].max_attempts);
            if (v[i].last_error) {
                char at[40];
                printf("       last error at %s UTC: %s\n", cli_format_time(v[i].last_error_us, 0, at, sizeof at),
                       v[i].last_error);
            }
        }
    }
    free(set);
    odbox_notification_stats_free(&st, nst);
    odbox_subscriptions_free(&v, n);
    return ODBOX_OK;
}

/* {"ok": true, "name": name, key: n} on stdout. */
static void print_count_json(const char *name, const char *key, int64_t n)
{
    json_object *top = json_object_new_object();
    json_object_object_add(top, "ok", json_object_new_boolean(1));
    json_object_object_add(top, "name", json_object_new_string(name));
    json_object_object_add(top, key, json_object_new_int64(n));
    cli_print_json(top);
    json_object_put(top);
}

static int retire(odbox_registry *r, const char *name, const cli *c, odbox_error *err)
{
    int64_t n = 0;
    int rc = odbox_subscription_retire(r, name, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    if (c->json)
        print_count_json(name, "retired_shards", n);
    else if (n)
        printf("retired subscription '%s' on %lld shard(s)\n", name, (long long)n);
    else
        printf("subscription '%s' was retired already\n", name);
    return ODBOX_OK;
}

static int replay(odbox_registry *r, const char *name, int64_t since, const cli *c, odbox_error *err)
{
    int64_t n = 0;
    int rc = odbox_subscription_replay(r, name, since, NULL, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    if (c->json)
        print_count_json(name, "created", n);
    else
        printf("replayed %lld notification(s) for subscription '%s'\n", (long long)n, name);
    return ODBOX_OK;
}

int cmd_handlers(int argc, char **argv)
{
    const char *since = NULL, *live = NULL;
    const ops_opt opts[] = {{"since", &since}, {"live-ms", &live}, {NULL, NULL}};
    cli c;
    odbox_registry *r = NULL;
    odbox_shard *shard = NULL;
    int u = ops_begin(argc, argv, usage_handlers, CLI_ARGS, opts, &c, &r, &shard);
    if (u)
        return u;
    const char *sub = c.nargs ? c.args[0] : NULL;
    int is_retire = sub && !strcmp(sub, "retire"), is_replay = sub && !strcmp(sub, "replay");
    long live_ms = 0;
    int64_t since_us = 0;
    if (sub && !is_retire && !is_replay)
        u = cli_usage_error(c.json, "odbox", "unknown handlers command '%s' (retire, replay)", sub);
    else if ((is_retire || is_replay) && c.nargs != 2)
        u = cli_usage_error(c.json, "odbox", "handlers %s takes one NAME", sub);
    else if ((is_retire || is_replay) && (shard || live))
        u = cli_usage_error(c.json, "odbox", "handlers %s takes no %s", sub, shard ? "--shard" : "--live-ms");
    else if (!is_replay && since)
        u = cli_usage_error(c.json, "odbox", "--since goes with handlers replay");
    else if (is_replay && !since)
        u = cli_usage_error(c.json, "odbox", "handlers replay wants --since TIME (such as 2026-01-01T00:00:00Z)");
    else if (is_replay && parse_utc(since, &since_us) != 0)
        u = cli_usage_error(c.json, "odbox",
                            "--since: '%s' is not an ISO 8601 UTC time such as 2026-01-01T00:00:00Z", since);
    else if (live)
        u = ops_number(&c, "live-ms", live, 86400000, &live_ms);
    odbox_error err = {0};
    int rc = ODBOX_OK;
    if (!u)
        rc = is_retire   ? retire(r, c.args[1], &c, &err)
             : is_replay ? replay(r, c.args[1], since_us, &c, &err)
                         : show(r, shard, (int)live_ms, &c, &err);
    if (!u && rc != ODBOX_OK)
        cli_explain_schema(r, shard, &err);
    odbox_registry_free(&r);
    return u ? u : rc == ODBOX_OK ? 0 : cli_fail(&c, &err);
}
