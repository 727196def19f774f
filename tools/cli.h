/* odbox — what the command-line tool's commands share: options, the
 * registry they work on, exit codes and output. */
#ifndef ODBOX_TOOLS_CLI_H
#define ODBOX_TOOLS_CLI_H

#include <stdio.h>
#include <json-c/json.h>
#include "odbox/odbox.h"

/* Exit codes: 0 success, 1 database or other runtime error, and: */
enum { EXIT_USAGE = 2, EXIT_MISMATCH = 3, EXIT_CONNECT = 4, EXIT_LOCK = 5, EXIT_OWNER = 6 };

typedef struct cli {
    const char *dsn;
    const char *config;
    const char *dir;
    const char *set;
    const char *migrations;
    const char *eventlog;
    int lock_timeout_ms;
    int json;
    int quiet;
    int yes;   /* migrate repair: make the changes */
    int tty;
    char **args; /* with CLI_ARGS: the arguments after the options */
    int nargs;
} cli;

/* What a command takes beyond the options every command on shards takes
 * (--dsn, --config, --eventlog, --json and migrate's and status's
 * --dir, --set, --migrations), or instead of them. */
enum {
    CLI_YES = 1,         /* --yes */
    CLI_ARGS = 2,        /* arguments (c->args, c->nargs), which the command checks */
    CLI_TARGET_ONLY = 4, /* --dsn, --config and --json only; its usage lists them */
    CLI_OPS = 8,         /* --dsn, --config, --eventlog and --json: none of migrate's */
    CLI_LOCK = 16,       /* --lock-timeout (migrate and repair: they take the migration lock) */
    CLI_QUIET = 32,      /* --quiet (migrate: its per-shard summary) */
    CLI_CREATES = 64,    /* may create the database (migrate); the others never
                            do (odbox_registry_never_create): a mistyped SQLite
                            path is refused, not made */
};

/* 1 when text is a whole number min..max written in digits only (no
 * blank, no sign), in *out. */
int cli_whole_number(const char *text, long min, long max, long *out);
/* Prints usage and the options a command of takes (CLI_*) takes. */
void cli_print_usage(FILE *f, const char *usage, int takes);

/* Parses argv (argv[0] is the command) into c; 0, or an exit code after
 * printing why. --help prints usage and exits. takes: CLI_* flags. */
int cli_parse_options(int argc, char **argv, cli *c, const char *usage, int takes);
int cli_open_registry(const cli *c, odbox_registry **r, odbox_error *err);
void cli_migrate_options(const cli *c, odbox_migrate_options *o);
/* What every command on shards starts with: parses argv into c, opens
 * the registry *r and fills o; 0, or the exit code after reporting. */
int cli_begin(int argc, char **argv, const char *usage, int takes, cli *c, odbox_registry **r,
              odbox_migrate_options *o);

/* After a command failed with err on shard only (NULL: any shard of r):
 * when that was the database's error (ODBOX_EDB: a table or column it
 * lacks) and a shard's eventlog has no odbox schema, or one older than
 * this odbox's migrations, err says so instead, and to run odbox migrate
 * (ODBOX_EMIGRATION, exit 3), the database's message after it. Looked
 * at only after a failure: an older schema that serves the command is
 * not refused. */
void cli_explain_schema(odbox_registry *r, odbox_shard *only, odbox_error *err);

/* The exit code for an ODBOX_E* code. */
int cli_exit_code(int rc);
/* Reports err (on stderr; with --json also as a document on stdout) and
 * returns its exit code. */
int cli_fail(const cli *c, const odbox_error *err);
/* cli_fail whose --json document also carries the members of more (an
 * object, taken; may be NULL): what was done before the error. */
int cli_fail_with(const cli *c, const odbox_error *err, json_object *more);
/* Whether argv (argv[0] the command) asks for --json (or -j) before any
 * "--": usage errors found before or without the whole parse are
 * reported as JSON too. */
int cli_argv_json(int argc, char **argv);
/* A usage error: "WHO: MESSAGE" on stderr and, with json, the error
 * document (ODBOX_EINVAL, MESSAGE) on stdout; returns EXIT_USAGE. */
int cli_usage_error(int json, const char *who, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The option getopt_long refused, for the message: a short one inside a
 * group ("-xh") is not argv[optind - 1], which getopt has not passed yet
 * (a static buffer for a short one). */
const char *cli_bad_option(char **argv);
/* Prints a JSON document on stdout, indented, '/' left as it is. */
void cli_print_json(json_object *o);
/* A JSON string of text from outside (a database's or a handler's
 * message): its bytes that are not UTF-8 become U+FFFD, as JSON is
 * UTF-8 and json-c would write them as they are. NULL: NULL. */
json_object *cli_json_text(const char *s);
/* "G.M" */
void cli_shard_name(const odbox_shard *s, char *buf, size_t cap);
/* "2030-01-01 00:15:00" (text) or "2030-01-01T00:15:00.000000Z" (iso, for
 * JSON); "-" when us is 0 (none). */
const char *cli_format_time(int64_t us, int iso, char *buf, size_t cap);
/* The monotonic clock in microseconds: the commands' elapsed times and
 * waits. */
int64_t cli_mono_us(void);

int cmd_migrate(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_jobs(int argc, char **argv);
extern const char usage_migrate[];
extern const char usage_status[];
extern const char usage_jobs[];
int cmd_notifications(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_purge(int argc, char **argv);
extern const char usage_notifications[];
extern const char usage_metrics[];
extern const char usage_purge[];
int cmd_handlers(int argc, char **argv);
extern const char usage_handlers[];
int cmd_demo(int argc, char **argv);
extern const char usage_demo[];
int cmd_relay(int argc, char **argv);
extern const char usage_relay[];

#endif
