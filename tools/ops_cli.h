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

/* Takes the options in opts (NULL-name-terminated) out of argv (before
 * cli_begin parses the rest); *argc shrinks. 0, or EXIT_USAGE after
 * saying why (an option given twice or without a value). */
int ops_take_options(int *argc, char **argv, const ops_opt *opts);

/* With --shard G.M: that shard of r (*shard), else NULL for all.
 * 0, or EXIT_USAGE after saying why. */
int ops_pick_shard(const char *text, odbox_registry *r, odbox_shard **shard);

/* A positive whole number up to max from --name's text; 0 or EXIT_USAGE. */
int ops_number(const char *name, const char *text, long max, long *out);

/* One handler's stats as JSON (with the lag when with_lag). */
json_object *ops_stats_json(const odbox_handler_stats *s, int with_lag);
/* Seconds with one decimal ("90.0s"), or "-" when us is 0 and dash. */
const char *ops_seconds(int64_t us, int dash, char *buf, size_t cap);
/* "2030-01-01 00:15:00.000000" (text) or "2030-01-01T00:15:00.000000Z" (JSON). */
const char *ops_time(int64_t us, int iso, char *buf, size_t cap);

#endif
