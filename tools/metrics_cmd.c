/* odbox — `odbox metrics`: the database metrics of the notifications per
 * shard and handler in the Prometheus text exposition format. */
#include <stdio.h>
#include <stdlib.h>
#include "ops_cli.h"

const char usage_metrics[] =
    "usage: odbox metrics (--dsn DSN | --config FILE) [--shard G.M] [--lag-window SECONDS]\n"
    "                     [--eventlog NAME] [--json]\n"
    "\n"
    "Prints, in the Prometheus text exposition format (0.0.4), per shard and\n"
    "handler: notifications by state, the backlog (PENDING + FAILED), the due ones\n"
    "and the oldest due age, and the delivery lag (commit to handler success) of\n"
    "the successes of the last lag window as a summary (p50, p99) and its maximum.\n"
    "Every sample has a shard label: sum over it in Prometheus for a cluster.\n"
    "With --json, the same figures as a JSON document.\n"
    "\n"
    "  --shard G.M           one shard (default: every shard of the registry)\n"
    "  --lag-window SECONDS  the delivery lag's window, 1..86400 (default 600)\n"
    "\n"
    "Exit codes: 0 ok; 1 runtime error; 2 usage or invalid input; 3 the database has\n"
    "no odbox schema, or an older one: run odbox migrate; 4 cannot connect (also a\n"
    "SQLite file that does not exist).\n"
    "\n";

int cmd_metrics(int argc, char **argv)
{
    const char *window_text = NULL;
    const ops_opt opts[] = {{"lag-window", &window_text}, {NULL, NULL}};
    cli c;
    odbox_registry *r = NULL;
    odbox_shard *shard = NULL;
    int u = ops_begin(argc, argv, usage_metrics, 0, opts, &c, &r, &shard);
    if (u)
        return u;
    long window = 0;
    if (window_text)
        u = ops_number(&c, "lag-window", window_text, 86400, &window);
    odbox_error err = {0};
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    int rc = ODBOX_OK;
    if (!u) {
        odbox_notification_metrics_options mo = {.shard = shard, .lag_window_s = (int)window};
        rc = odbox_notifications_metrics(r, &mo, &st, &n, &err);
    }
    if (!u && rc != ODBOX_OK)
        cli_explain_schema(r, shard, &err);
    odbox_registry_free(&r);
    if (u || rc != ODBOX_OK)
        return u ? u : cli_fail(&c, &err);
    if (c.json) {
        json_object *top = json_object_new_object(), *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++)
            json_object_array_add(arr, ops_stats_json(&st[i], 1));
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "lag_window_s", json_object_new_int(window ? (int)window : 600));
        json_object_object_add(top, "handlers", arr);
        cli_print_json(top);
        json_object_put(top);
    } else {
        char *text = NULL;
        if ((rc = odbox_notifications_prometheus(st, n, &text, &err)) == ODBOX_OK)
            fputs(text, stdout);
        free(text);
    }
    odbox_notification_stats_free(&st, n);
    return rc == ODBOX_OK ? 0 : cli_fail(&c, &err);
}
