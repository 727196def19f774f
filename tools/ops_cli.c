/* odbox — the CLI's operations commands' shared parts (see ops_cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops_cli.h"

/* Takes the options in opts out of argv, before cli_begin parses the rest. */
static int take_options(int *argc, char **argv, const ops_opt *opts, int json)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const ops_opt *hit = NULL;
        const char *value = NULL;
        if (!strcmp(a, "--")) { /* the rest is not options */
            while (i < *argc)
                argv[out++] = argv[i++];
            break;
        }
        for (const ops_opt *o = opts; o->name && !hit; o++) {
            size_t n = strlen(o->name);
            if (strncmp(a, "--", 2) || strncmp(a + 2, o->name, n))
                continue;
            if (a[2 + n] == '=')
                hit = o, value = a + 3 + n;
            else if (!a[2 + n]) {
                hit = o;
                if (i + 1 >= *argc)
                    return cli_usage_error(json, "odbox", "option '--%s' wants a value", o->name);
                value = argv[++i];
            }
        }
        if (!hit) {
            argv[out++] = argv[i];
            continue;
        }
        if (*hit->value)
            return cli_usage_error(json, "odbox", "option '--%s' given twice", hit->name);
        *hit->value = value;
    }
    argv[out] = NULL;
    *argc = out;
    return 0;
}

static int pick_shard(const char *text, odbox_registry *r, odbox_shard **shard, int json)
{
    *shard = NULL;
    if (!text)
        return 0;
    odbox_shard_id id;
    odbox_error err = {0};
    if (odbox_shard_id_parse(text, &id, &err) != ODBOX_OK)
        return cli_usage_error(json, "odbox", "--shard: %s", err.message);
    if (!(*shard = odbox_registry_shard(r, id)))
        return cli_usage_error(json, "odbox", "--shard: the registry has no shard %d.%d", id.group, id.member);
    return 0;
}

int ops_begin(int argc, char **argv, const char *usage, int takes, const ops_opt *opts, cli *c, odbox_registry **r,
              odbox_shard **shard)
{
    const char *shard_text = NULL;
    ops_opt all[16] = {{"shard", &shard_text}};
    for (size_t i = 0; opts[i].name && i + 2 < sizeof all / sizeof all[0]; i++)
        all[i + 1] = opts[i];
    odbox_migrate_options unused;
    int u = take_options(&argc, argv, all, cli_argv_json(argc, argv));
    if (u || (u = cli_begin(argc, argv, usage, takes | CLI_OPS, c, r, &unused)) != 0)
        return u;
    if ((u = pick_shard(shard_text, *r, shard, c->json)) != 0)
        odbox_registry_free(r);
    return u;
}

int ops_number(const cli *c, const char *name, const char *text, long max, long *out)
{
    if (!cli_whole_number(text, 1, max, out))
        return cli_usage_error(c->json, "odbox", "--%s wants a whole number 1..%ld, not '%s'", name, max, text);
    return 0;
}

const char *ops_seconds(int64_t us, int dash, char *buf, size_t cap)
{
    if (!us && dash)
        return "-";
    snprintf(buf, cap, "%.1fs", (double)us / 1e6);
    return buf;
}

static void add_int(json_object *o, const char *k, int64_t v)
{
    json_object_object_add(o, k, json_object_new_int64(v));
}
/* Seconds to the microsecond, written as such (not 64.060184000000007). */
static void add_s(json_object *o, const char *k, int64_t us)
{
    char t[40];
    snprintf(t, sizeof t, "%.6f", (double)us / 1e6);
    json_object_object_add(o, k, json_object_new_double_s((double)us / 1e6, t));
}

json_object *ops_json_of_shard(odbox_shard_id id)
{
    json_object *o = json_object_new_object();
    char shard[16];
    snprintf(shard, sizeof shard, "%d.%d", id.group, id.member);
    json_object_object_add(o, "shard", json_object_new_string(shard));
    return o;
}

json_object *ops_stats_json(const odbox_notification_stats *s, int with_lag)
{
    json_object *o = ops_json_of_shard(s->shard);
    json_object_object_add(o, "handler", json_object_new_string(s->handler));
    add_int(o, "pending", s->pending);
    add_int(o, "failed", s->failed);
    add_int(o, "succeeded", s->succeeded);
    add_int(o, "expired", s->expired);
    add_int(o, "backlog", s->backlog);
    add_int(o, "due", s->due);
    add_s(o, "oldest_due_age_s", s->oldest_due_age_us);
    if (with_lag) {
        json_object *l = json_object_new_object();
        add_int(l, "count", s->lag_count);
        if (s->lag_count) {
            add_s(l, "p50_s", s->lag_p50_us);
            add_s(l, "p99_s", s->lag_p99_us);
            add_s(l, "max_s", s->lag_max_us);
            add_s(l, "sum_s", s->lag_sum_us);
        }
        json_object_object_add(o, "delivery_lag", l);
    }
    return o;
}
