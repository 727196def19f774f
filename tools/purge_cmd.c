/* odbox — `odbox purge`: retention, in bounded batches. */
#include <stdio.h>
#include <stdlib.h>
#include "ops_cli.h"

const char usage_purge[] =
    "usage: odbox purge (--dsn DSN | --config FILE) --older-than DURATION [--batch N]\n"
    "                   [--keys-older-than DURATION] [--unsubscribed-older-than DURATION]\n"
    "                   [--shard G.M] [--eventlog NAME] [--json]\n"
    "\n"
    "Deletes, on each shard, what the outbox is done with and is older than\n"
    "DURATION (30d, 12h, 90m, 3600s): finished notifications (SUCCEEDED, EXPIRED;\n"
    "by updated_date), delivered events and sentinel rows (an action's row without\n"
    "events; by event_date), and idempotency keys older than the keys' window (by\n"
    "created_date: such a key executes again), and the rows of subscription_processes\n"
    "not seen for DURATION (processes long gone; a live one's heartbeat keeps its\n"
    "rows young, or writes them again). Ages are in the database's time. Never an\n"
    "undelivered event with a type (but with --unsubscribed-older-than), never a\n"
    "PENDING or FAILED notification. Each\n"
    "DELETE removes at most N rows and is its own transaction. Prints what it\n"
    "removed per shard and table, also before an error (--json too).\n"
    "\n"
    "  --older-than DURATION  required: what is older than now - DURATION goes\n"
    "  --keys-older-than DURATION  idempotency keys older than now - DURATION go\n"
    "                         (default 7d, whatever --older-than says)\n"
    "  --unsubscribed-older-than DURATION  also undelivered events older than\n"
    "                         now - DURATION whose type no subscription takes (an\n"
    "                         outbox read by CDC only); a handler subscribing to such\n"
    "                         a type later cannot backfill them\n"
    "  --batch N              rows per DELETE, 1..100000 (default 1000)\n"
    "  --shard G.M            one shard (default: every shard of the registry)\n"
    "\n"
    "Exit codes: 0 ok; 1 runtime error (what was removed before it is printed);\n"
    "2 usage or invalid input; 3 the database has no odbox schema, or an older one:\n"
    "run odbox migrate; 4 cannot connect (also a SQLite file that does not exist).\n"
    "\n";

/* The per-shard counts as a JSON array; with unsub (the unsubscribed
 * events' purge, nu shards done) their "unsubscribed" too. */
static json_object *shards_json(const odbox_purge_result *res, size_t n, const odbox_purge_result *unsub, size_t nu)
{
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *o = ops_json_of_shard(res[i].shard);
        if (unsub)
            json_object_object_add(o, "unsubscribed", json_object_new_int64(i < nu ? unsub[i].events : 0));
        json_object_object_add(o, "notifications", json_object_new_int64(res[i].notifications));
        json_object_object_add(o, "events", json_object_new_int64(res[i].events));
        json_object_object_add(o, "sentinels", json_object_new_int64(res[i].sentinels));
        json_object_object_add(o, "keys", json_object_new_int64(res[i].keys));
        json_object_object_add(o, "processes", json_object_new_int64(res[i].processes));
        json_object_object_add(o, "batches", json_object_new_int64(res[i].batches));
        json_object_array_add(arr, o);
    }
    return arr;
}

/* What was removed, per shard: also before an error (it is gone for
 * good), in the error's JSON document then (cli_fail_with). */
static void report(const odbox_purge_result *res, size_t n, const odbox_purge_result *unsub, size_t nu,
                   const cli *c)
{
    if (c->json) {
        json_object *top = json_object_new_object();
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "shards", shards_json(res, n, unsub, nu));
        cli_print_json(top);
        json_object_put(top);
        return;
    }
    for (size_t i = 0; i < n; i++)
        printf("shard %d.%d: removed %lld notification(s), %lld event(s), %lld sentinel row(s), %lld idempotency "
               "key(s), %lld process row(s) in %lld batch(es)\n",
               res[i].shard.group, res[i].shard.member, (long long)res[i].notifications, (long long)res[i].events,
               (long long)res[i].sentinels, (long long)res[i].keys, (long long)res[i].processes,
               (long long)res[i].batches);
    for (size_t i = 0; unsub && i < nu; i++)
        printf("shard %d.%d: removed %lld undelivered event(s) of types no subscription takes in %lld batch(es)\n",
               unsub[i].shard.group, unsub[i].shard.member, (long long)unsub[i].events, (long long)unsub[i].batches);
}

int cmd_purge(int argc, char **argv)
{
    const char *older = NULL, *batch = NULL, *keys = NULL, *unsubscribed = NULL;
    const ops_opt opts[] = {{"older-than", &older},
                            {"batch", &batch},
                            {"keys-older-than", &keys},
                            {"unsubscribed-older-than", &unsubscribed},
                            {NULL, NULL}};
    cli c;
    odbox_registry *r = NULL;
    odbox_shard *shard = NULL;
    int u = ops_begin(argc, argv, usage_purge, 0, opts, &c, &r, &shard);
    if (u)
        return u;
    odbox_error err = {0};
    odbox_purge_options o = {0};
    int64_t unsub_us = 0;
    long b = 0;
    if (!older)
        u = cli_usage_error(c.json, "odbox", "purge wants --older-than DURATION (e.g. 30d)");
    else if (odbox_duration_parse(older, &o.older_than_us, &err) != ODBOX_OK)
        u = cli_usage_error(c.json, "odbox", "--older-than: %s", err.message);
    else if (keys && odbox_duration_parse(keys, &o.keys_older_than_us, &err) != ODBOX_OK)
        u = cli_usage_error(c.json, "odbox", "--keys-older-than: %s", err.message);
    else if (unsubscribed && odbox_duration_parse(unsubscribed, &unsub_us, &err) != ODBOX_OK)
        u = cli_usage_error(c.json, "odbox", "--unsubscribed-older-than: %s", err.message);
    else if (batch)
        u = ops_number(&c, "batch", batch, 100000, &b);
    odbox_purge_result *res = NULL, *unsub = NULL;
    size_t n = 0, nu = 0;
    int rc = ODBOX_OK;
    if (!u) {
        o.batch_size = (int)b;
        o.shard = shard;
        rc = odbox_purge_run(r, &o, &res, &n, &err);
        odbox_purge_options ou = o;
        ou.older_than_us = unsub_us;
        if (rc == ODBOX_OK && unsub_us)
            rc = odbox_purge_unsubscribed_run(r, &ou, &unsub, &nu, &err);
        if (rc == ODBOX_OK || !c.json)
            report(res, n, unsub, nu, &c);
    }
    json_object *done = NULL;
    if (!u && rc != ODBOX_OK && c.json) {
        done = json_object_new_object();
        json_object_object_add(done, "shards", shards_json(res, n, unsub, nu));
    }
    odbox_purge_results_free(&res);
    odbox_purge_results_free(&unsub);
    if (!u && rc != ODBOX_OK)
        cli_explain_schema(r, shard, &err);
    odbox_registry_free(&r);
    return u ? u : rc == ODBOX_OK ? 0 : cli_fail_with(&c, &err, done);
}
