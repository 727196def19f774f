/* odbox — `odbox notifications`: counts by handler and state with the due
 * rows, rows in due order (--list), and `odbox notifications requeue`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops_cli.h"

const char usage_notifications[] =
    "usage: odbox notifications (--dsn DSN | --config FILE) [--state S] [--handler H]\n"
    "                           [--event-type T] [--shard G.M] [--list N] [--eventlog NAME]\n"
    "                           [--json]\n"
    "       odbox notifications requeue (--dsn DSN | --config FILE) [--handler H | --id ID]\n"
    "                           [--state FAILED|EXPIRED] [--shard G.M] [--eventlog NAME]\n"
    "                           [--json]\n"
    "\n"
    "Without a subcommand: per shard and handler, the notifications by state\n"
    "(PENDING, FAILED, SUCCEEDED, EXPIRED), how many are due and how long the\n"
    "oldest due one has waited; with --list N, the first N rows in due order (id,\n"
    "event id, handler, state, attempts, next retry, event type).\n"
    "\n"
    "requeue: FAILED and EXPIRED notifications (all, one handler's or one id) go\n"
    "back to PENDING, due now by the database's time, with attempts 0 and a fresh\n"
    "retention window; prints how many moved, and how many it skipped as in flight\n"
    "(a handling round is calling them: their outcome decides them), also before\n"
    "an error on a later shard (what the earlier shards moved).\n"
    "\n"
    "  --state S          PENDING, FAILED, SUCCEEDED or EXPIRED (requeue: FAILED or\n"
    "                     EXPIRED; default both)\n"
    "  --handler H        one handler's notifications\n"
    "  --event-type T     one event type's notifications\n"
    "  --id ID            requeue: this notification only\n"
    "  --shard G.M        one shard (default: every shard of the registry)\n"
    "  --list N           rows instead of counts, at most N (1..100000)\n"
    "\n"
    "Exit codes: 0 ok; 1 runtime error, also requeue --id of no FAILED or EXPIRED\n"
    "notification; 2 usage or invalid input (a bad state or id, --handler with\n"
    "--id); 3 the database has no odbox schema, or an older one: run odbox migrate;\n"
    "4 cannot connect (also a SQLite file that does not exist).\n"
    "\n";

typedef struct nopts {
    const char *state, *handler, *event_type, *list, *id;
} nopts;

static int show_counts(odbox_registry *r, const odbox_notification_filter *f, const cli *c, odbox_error *err)
{
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    int rc = odbox_notifications_count(r, f, &st, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    if (c->json) {
        json_object *top = json_object_new_object(), *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++)
            json_object_array_add(arr, ops_stats_json(&st[i], 0));
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "handlers", arr);
        cli_print_json(top);
        json_object_put(top);
    } else if (!n) {
        puts(f->state || f->handler || f->event_type ? "no notifications match" : "no notifications");
    } else {
        printf("%-6s %-24s %9s %9s %10s %9s %9s %12s\n", "SHARD", "HANDLER", "PENDING", "FAILED", "SUCCEEDED",
               "EXPIRED", "DUE", "OLDEST DUE");
        for (size_t i = 0; i < n; i++) {
            char shard[16], age[32];
            snprintf(shard, sizeof shard, "%d.%d", st[i].shard.group, st[i].shard.member);
            printf("%-6s %-24s %9lld %9lld %10lld %9lld %9lld %12s\n", shard, st[i].handler, (long long)st[i].pending,
                   (long long)st[i].failed, (long long)st[i].succeeded, (long long)st[i].expired, (long long)st[i].due,
                   ops_seconds(st[i].oldest_due_age_us, !st[i].due, age, sizeof age));
        }
    }
    odbox_notification_stats_free(&st, n);
    return ODBOX_OK;
}

static int show_rows(odbox_registry *r, const odbox_notification_filter *f, size_t limit, const cli *c,
                     odbox_error *err)
{
    odbox_notification_row *rows = NULL;
    size_t n = 0;
    int rc = odbox_notifications_list(r, f, limit, &rows, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    if (c->json) {
        json_object *top = json_object_new_object(), *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
            json_object *o = ops_json_of_shard(rows[i].shard);
            char t[40];
            json_object_object_add(o, "id", json_object_new_string(rows[i].id));
            json_object_object_add(o, "event_id", json_object_new_string(rows[i].event_id));
            json_object_object_add(o, "handler", json_object_new_string(rows[i].handler));
            json_object_object_add(o, "state", json_object_new_string(rows[i].state));
            json_object_object_add(o, "attempts", json_object_new_int(rows[i].attempts));
            json_object_object_add(o, "next_retry_at",
                                   json_object_new_string(cli_format_time(rows[i].next_retry_us, 1, t, sizeof t)));
            json_object_object_add(o, "event_type", json_object_new_string(rows[i].event_type));
            json_object_array_add(arr, o);
        }
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "notifications", arr);
        cli_print_json(top);
        json_object_put(top);
    } else if (!n) {
        puts("no notifications match");
    } else {
        printf("%-6s %-36s %-36s %-20s %-9s %8s %-19s %s\n", "SHARD", "ID", "EVENT ID", "HANDLER", "STATE", "ATTEMPTS",
               "NEXT RETRY (UTC)", "EVENT TYPE");
        for (size_t i = 0; i < n; i++) {
            char shard[16], t[40];
            snprintf(shard, sizeof shard, "%d.%d", rows[i].shard.group, rows[i].shard.member);
            printf("%-6s %-36s %-36s %-20s %-9s %8d %-19s %s\n", shard, rows[i].id, rows[i].event_id, rows[i].handler,
                   rows[i].state, rows[i].attempts, cli_format_time(rows[i].next_retry_us, 0, t, sizeof t),
                   rows[i].event_type);
        }
    }
    odbox_notification_rows_free(&rows, n);
    return ODBOX_OK;
}

/* The counts as JSON members of o: "requeued", "in_flight". */
static json_object *requeue_json(json_object *o, const odbox_requeue_result *res)
{
    json_object_object_add(o, "requeued", json_object_new_int64(res->moved));
    json_object_object_add(o, "in_flight", json_object_new_int64(res->in_flight));
    return o;
}

/* What moved is told also before an error (the shards before the failing
 * one are requeued for good, and run again the command would not say):
 * in the error's JSON document then (cli_fail_with, *done). */
static int requeue(odbox_registry *r, const nopts *o, odbox_shard *shard, const cli *c, json_object **done,
                   odbox_error *err)
{
    odbox_requeue_spec s = {.shard = shard, .state = o->state, .handler = o->handler, .id = o->id};
    odbox_requeue_result res;
    int rc = odbox_notifications_requeue_run(r, &s, &res, err);
    if (rc != ODBOX_OK && c->json) {
        *done = requeue_json(json_object_new_object(), &res);
    } else if (c->json) {
        json_object *top = json_object_new_object();
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        cli_print_json(requeue_json(top, &res));
        json_object_put(top);
    } else if (rc == ODBOX_OK || res.moved || res.in_flight) {
        printf("requeued %lld notification(s); skipped %lld in flight\n", (long long)res.moved,
               (long long)res.in_flight);
    }
    return rc;
}

int cmd_notifications(int argc, char **argv)
{
    nopts o = {0};
    const ops_opt opts[] = {{"state", &o.state}, {"handler", &o.handler}, {"event-type", &o.event_type},
                            {"list", &o.list},   {"id", &o.id},           {NULL, NULL}};
    cli c;
    odbox_registry *r = NULL;
    odbox_shard *shard = NULL;
    int u = ops_begin(argc, argv, usage_notifications, CLI_ARGS, opts, &c, &r, &shard);
    if (u)
        return u;
    int is_requeue = c.nargs == 1 && !strcmp(c.args[0], "requeue");
    long limit = 0;
    if (c.nargs && !is_requeue)
        u = cli_usage_error(c.json, "odbox", "unknown notifications command '%s' (requeue)", c.args[0]);
    else if (is_requeue && (o.list || o.event_type))
        u = cli_usage_error(c.json, "odbox", "notifications requeue takes no %s", o.list ? "--list" : "--event-type");
    else if (is_requeue && o.handler && o.id)
        u = cli_usage_error(c.json, "odbox", "notifications requeue takes --handler or --id, not both");
    else if (!is_requeue && o.id)
        u = cli_usage_error(c.json, "odbox", "--id goes with notifications requeue");
    else if (o.list)
        u = ops_number(&c, "list", o.list, 100000, &limit);
    odbox_error err = {0};
    int rc = ODBOX_OK;
    json_object *done = NULL;
    if (!u) {
        odbox_notification_filter f = {.shard = shard, .state = o.state, .handler = o.handler,
                                       .event_type = o.event_type};
        rc = is_requeue ? requeue(r, &o, shard, &c, &done, &err)
             : limit    ? show_rows(r, &f, (size_t)limit, &c, &err)
                        : show_counts(r, &f, &c, &err);
    }
    if (!u && rc != ODBOX_OK)
        cli_explain_schema(r, shard, &err);
    odbox_registry_free(&r);
    return u ? u : rc == ODBOX_OK ? 0 : cli_fail_with(&c, &err, done);
}
