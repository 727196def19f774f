/* odbox — what the CLI's operations commands (notifications, metrics,
 * purge) and status share: their own options, the shard they pick, and
 * handler stats as JSON and text. */
#ifndef ODBOX_TOOLS_OPS_CLI_H
#define ODBOX_TOOLS_OPS_CLI_H

#include "cli.h"

/* An option of one command: --name VALUE or --name=VALUE. */
typedef struct ops_opt {
    const char *name;   /* without the dashes */
    const char **value; /* where its value goes (NULL until given) */
} ops_opt;

/* What each of these commands starts with: takes its options (opts,
 * NULL-name-terminated, at most 14) and --shard G.M out of argv, lets
 * cli_begin parse the rest (takes: CLI_* flags) and open the registry
 * *r, and picks the shard (*shard; NULL: all). 0, or the exit code after
 * saying why (an option given twice or without a value, no such shard). */
int ops_begin(int argc, char **argv, const char *usage, int takes, const ops_opt *opts, cli *c, odbox_registry **r,
              odbox_shard **shard);

/* A positive whole number up to max from --name's text; 0, or EXIT_USAGE
 * after reporting it (cli_usage_error). */
int ops_number(const cli *c, const char *name, const char *text, long max, long *out);

/* A JSON object whose first member is "shard": "G.M". */
json_object *ops_json_of_shard(odbox_shard_id id);
/* One handler's stats as JSON (with the lag when with_lag). */
json_object *ops_stats_json(const odbox_notification_stats *s, int with_lag);
/* Seconds with one decimal ("90.0s"), or "-" when us is 0 and dash. */
const char *ops_seconds(int64_t us, int dash, char *buf, size_t cap);

#endif
