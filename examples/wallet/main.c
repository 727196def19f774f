/* odbox-wallet — command-line front end of the wallet example service.
 *
 * Every command validates its arguments before it connects, so bad input
 * never reaches the database. Exit codes: see usage_main. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "wallet.h"
#include "worker.h"

#ifndef ODBOX_WALLET_MIGRATIONS_DIR
#define ODBOX_WALLET_MIGRATIONS_DIR "/usr/local/share/odbox/examples/wallet/migrations"
#endif

enum {
    EXIT_RUNTIME = 1,      /* database or other runtime error */
    EXIT_USAGE = 2,        /* usage error or invalid input */
    EXIT_NOT_FOUND = 3,    /* no such wallet */
    EXIT_CONNECT = 4,      /* cannot connect */
    EXIT_INSUFFICIENT = 5, /* insufficient balance */
    EXIT_STALE = 6,        /* changed concurrently, retries exhausted */
    EXIT_CROSS_SHARD = 7,  /* transfer across shards refused */
    EXIT_PARTIAL = 8,      /* cross-shard transfer committed on some shards only */
    EXIT_IN_DOUBT = 9,     /* connection lost after the commit was sent */
    EXIT_NOT_IDLE = 10     /* worker --until-idle: still work left at --timeout */
};

static const char usage_main[] =
    "usage: odbox-wallet <command> [options]\n"
    "\n"
    "A small wallet service on odbox: every change writes the wallet rows and\n"
    "its events (eventlog.events) in one transaction.\n"
    "\n"
    "commands:\n"
    "  migrate                       create the wallets table (and odbox's tables)\n"
    "  open OWNER [--shard G.M]      open a wallet; prints its id\n"
    "  deposit ID AMOUNT             add AMOUNT to the balance\n"
    "  withdraw ID AMOUNT            take AMOUNT from the balance\n"
    "  transfer FROM TO AMOUNT       move AMOUNT between two wallets\n"
    "  show ID                       print balance and version\n"
    "  worker [--until-idle|--for S] deliver the events to the statement and audit handlers\n"
    "  help [COMMAND]                this text, or a command's options\n"
    "\n"
    "AMOUNT is a positive integer in minor units (cents).\n"
    "\n"
    "exit codes:\n"
    "  0  success\n"
    "  1  database or other runtime error\n"
    "  2  usage error or invalid input (amount, id, DSN, config)\n"
    "  3  no such wallet\n"
    "  4  cannot connect to the database\n"
    "  5  insufficient balance\n"
    "  6  the wallet was changed concurrently and the retries ran out\n"
    "  7  transfer between wallets on different shards refused\n"
    "  8  cross-shard transfer committed on some shards only\n"
    "  9  the connection was lost after the commit was sent: it may have been\n"
    "     applied or not (show ID tells)\n"
    "  10 worker --until-idle: events or notifications still to deliver at --timeout\n"
    "Nothing is written when the exit code is 1, 2, 3, 4, 5, 6 or 7.\n";

static const char usage_common[] =
    "\n"
    "options:\n"
    "  --dsn DSN          one database (URL or ODBC string); default $ODBOX_DSN\n"
    "  --eventlog NAME    with --dsn: the eventlog schema/database (default: eventlog)\n"
    "  --config FILE      a registry config file (JSON: shards, see odbox's README)\n"
    "  --json             machine-readable output on stdout\n"
    "  --help             this text\n";

static const char usage_retries[] =
    "  --retries N        re-run the action up to N times when a wallet changed\n"
    "                     concurrently (100 ms apart; default 1)\n";

static const char usage_key[] =
    "  --key K            an idempotency key (1..255 bytes of UTF-8, e.g. a request\n"
    "                     id): a second call with K prints the first one's result\n"
    "                     and writes nothing; K with another command or other\n"
    "                     values: exit 2\n";

enum { OPT_RETRIES = 1, OPT_SHARD = 2, OPT_CROSS = 4, OPT_MIGRATIONS = 8, OPT_WORKER = 16, OPT_KEY = 32 };

typedef struct opts {
    const char *dsn;
    const char *config;
    const char *eventlog;
    const char *migrations;
    const char *shard;
    const char *key; /* --key: idempotency key, NULL: none */
    int retries; /* -1: executor default */
    int allow_cross_shard;
    int json;
    /* worker (checked by cmd_worker) */
    const char *for_s, *timeout_s, *fail_rate, *backoff_ms, *poll_ms, *heartbeat_ms, *workers;
    int until_idle;
    const char *args[4];
    int nargs;
} opts;

typedef struct command {
    const char *name;
    const char *synopsis;
    const char *text;
    int nargs;
    unsigned allowed;
    int (*run)(const opts *o);
} command;

/* ---- output --------------------------------------------------------------------- */

static void print_json(json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                               JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

/* Prints the error (stderr, and on stdout with --json); returns code. */
static int report(const opts *o, int code, const char *name, const char *message)
{
    if (o->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "ok", json_object_new_boolean(0));
        json_object_object_add(j, "error", json_object_new_string(name));
        json_object_object_add(j, "message", json_object_new_string(message));
        json_object_object_add(j, "exit", json_object_new_int(code));
        print_json(j);
    }
    fprintf(stderr, "odbox-wallet: %s\n", message);
    return code;
}

static int usage_error(const opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const opts *o, const char *fmt, ...)
{
    char msg[ODBOX_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return report(o, EXIT_USAGE, "usage", msg);
}

/* Exit code of a library error, for errors that are not a wallet refusal. */
static int exit_code(int rc)
{
    switch (rc) {
    case ODBOX_OK: return 0;
    case ODBOX_EINVAL: case ODBOX_EUNIQUE: return EXIT_USAGE; /* EUNIQUE: --key of another command or values */
    case ODBOX_ECONNECT: case ODBOX_ECONNLOST: return EXIT_CONNECT;
    case ODBOX_ESTALE: return EXIT_STALE;
    case ODBOX_ECROSSSHARD: return EXIT_CROSS_SHARD;
    case ODBOX_EPARTIAL: return EXIT_PARTIAL;
    case ODBOX_EINDOUBT: return EXIT_IN_DOUBT;
    default: return EXIT_RUNTIME;
    }
}

static int fail(const opts *o, const odbox_error *err)
{
    return report(o, exit_code(err->code), odbox_errname(err->code),
                  err->message[0] ? err->message : odbox_strerror(err->code));
}

static json_object *view_json(const wallet_view *v)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "id", json_object_new_string(v->id));
    json_object_object_add(j, "owner", json_object_new_string(v->owner));
    json_object_object_add(j, "balance", json_object_new_int64(v->balance));
    json_object_object_add(j, "version", json_object_new_int64(v->version));
    return j;
}

/* ---- argument checks ---------------------------------------------------------------- */

/* A positive integer that fits in int64: digits only, no sign, no blanks. */
static int parse_amount(const char *text, int64_t *out)
{
    if (!*text)
        return -1;
    for (const char *p = text; *p; p++)
        if (!isdigit((unsigned char)*p))
            return -1;
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (errno == ERANGE || *end || v <= 0)
        return -1;
    *out = v;
    return 0;
}

/* A wallet id: a UUID, copied in lower case. */
static int parse_id(const char *text, char out[ODBOX_UUID_LEN + 1])
{
    if (!odbox_uuid_is_valid(text))
        return -1;
    for (int i = 0; i <= ODBOX_UUID_LEN; i++)
        out[i] = (char)tolower((unsigned char)text[i]);
    return 0;
}

static int check_amount(const opts *o, const char *text, int64_t *amount)
{
    if (parse_amount(text, amount) == 0)
        return 0;
    return usage_error(o, "AMOUNT must be a positive integer (minor units) up to 9223372036854775807, not '%.64s'",
                       text);
}

static int check_id(const opts *o, const char *text, char out[ODBOX_UUID_LEN + 1])
{
    if (parse_id(text, out) == 0)
        return 0;
    return usage_error(o, "'%.64s' is not a wallet id (a UUID)", text);
}

/* ---- option parsing --------------------------------------------------------------------- */

static void print_help(const command *c, FILE *f)
{
    fprintf(f, "usage: odbox-wallet %s\n\n%s", c->synopsis, c->text);
    fputs(usage_common, f);
    if (c->allowed & OPT_RETRIES)
        fputs(usage_retries, f);
    if (c->allowed & OPT_KEY)
        fputs(usage_key, f);
}

typedef struct option_def {
    const char *name;
    int has_value;
    unsigned need; /* 0: every command */
} option_def;

static const option_def option_defs[] = {
    {"dsn", 1, 0},         {"config", 1, 0},        {"eventlog", 1, 0},
    {"json", 0, 0},        {"help", 0, 0},          {"retries", 1, OPT_RETRIES},
    {"shard", 1, OPT_SHARD}, {"allow-cross-shard", 0, OPT_CROSS}, {"migrations", 1, OPT_MIGRATIONS},
    {"for", 1, OPT_WORKER}, {"until-idle", 0, OPT_WORKER}, {"timeout", 1, OPT_WORKER},
    {"fail-rate", 1, OPT_WORKER}, {"backoff-ms", 1, OPT_WORKER}, {"poll-ms", 1, OPT_WORKER},
    {"heartbeat-ms", 1, OPT_WORKER}, {"workers", 1, OPT_WORKER}, {"key", 1, OPT_KEY},
};

/* Options may come anywhere; "--" ends them. A lone "-5" is an argument
 * (it is then refused as an amount), "-h" is --help. Returns -1 to go on,
 * else an exit code. */
static int parse(const command *c, int argc, char **argv, opts *o)
{
    int only_args = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (only_args || a[0] != '-' || isdigit((unsigned char)a[1]) || !a[1]) {
            if (o->nargs >= c->nargs)
                return usage_error(o, "unexpected argument '%.64s' (see --help)", a);
            o->args[o->nargs++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_args = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help(c, stdout);
            return 0;
        }
        const char *name = a + 2, *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const option_def *d = NULL;
        if (a[1] == '-')
            for (size_t k = 0; k < sizeof option_defs / sizeof option_defs[0]; k++)
                if (strlen(option_defs[k].name) == len && !strncmp(option_defs[k].name, name, len))
                    d = &option_defs[k];
        if (!d || (d->need && !(c->allowed & d->need)))
            return usage_error(o, "unknown option '%.64s' (see --help)", a);
        const char *value = NULL;
        if (d->has_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return usage_error(o, "option '%.64s' needs a value", a);
        } else if (eq) {
            return usage_error(o, "option '--%.64s' takes no value", d->name);
        }
        if (!strcmp(d->name, "dsn")) o->dsn = value;
        else if (!strcmp(d->name, "config")) o->config = value;
        else if (!strcmp(d->name, "eventlog")) o->eventlog = value;
        else if (!strcmp(d->name, "migrations")) o->migrations = value;
        else if (!strcmp(d->name, "shard")) o->shard = value;
        else if (!strcmp(d->name, "json")) o->json = 1;
        else if (!strcmp(d->name, "allow-cross-shard")) o->allow_cross_shard = 1;
        else if (!strcmp(d->name, "for")) o->for_s = value;
        else if (!strcmp(d->name, "until-idle")) o->until_idle = 1;
        else if (!strcmp(d->name, "timeout")) o->timeout_s = value;
        else if (!strcmp(d->name, "fail-rate")) o->fail_rate = value;
        else if (!strcmp(d->name, "backoff-ms")) o->backoff_ms = value;
        else if (!strcmp(d->name, "poll-ms")) o->poll_ms = value;
        else if (!strcmp(d->name, "heartbeat-ms")) o->heartbeat_ms = value;
        else if (!strcmp(d->name, "workers")) o->workers = value;
        else if (!strcmp(d->name, "key")) o->key = value;
        else if (!strcmp(d->name, "retries")) {
            int64_t n = 0;
            if (strcmp(value, "0") && (parse_amount(value, &n) || n > 1000))
                return usage_error(o, "--retries wants a number 0..1000, not '%.64s'", value);
            o->retries = (int)n;
        }
    }
    if (o->nargs < c->nargs) {
        fprintf(stderr, "odbox-wallet: missing arguments\n");
        print_help(c, stderr);
        return EXIT_USAGE;
    }
    if (!o->dsn && !o->config)
        o->dsn = getenv("ODBOX_DSN");
    if (!o->dsn == !o->config)
        return usage_error(o, "give exactly one of --dsn and --config (or set ODBOX_DSN)");
    if (o->eventlog && o->config)
        return usage_error(o, "--eventlog goes with --dsn; a config file names each shard's eventlog");
    return -1;
}

/* ---- plumbing ------------------------------------------------------------------------------ */

static int open_registry(const opts *o, odbox_registry **r, odbox_error *err)
{
    if (o->config)
        return odbox_registry_load(o->config, r, err);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = o->dsn, .eventlog = o->eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    return odbox_registry_open(&cfg, r, err);
}

static void exec_config(const opts *o, odbox_exec_config *cfg)
{
    odbox_exec_config_default(cfg);
    cfg->allow_cross_shard = o->allow_cross_shard;
    if (o->retries < 0)
        return;
    for (int i = 0; i < cfg->nretries; i++)
        if (cfg->retries[i].code == ODBOX_ESTALE) {
            cfg->retries[i].max_retries = o->retries;
            return;
        }
    if (cfg->nretries < ODBOX_MAX_RETRY_RULES)
        cfg->retries[cfg->nretries++] = (odbox_retry_rule){ODBOX_ESTALE, o->retries, 100};
}

/* Maps a failed action to its exit code and message. */
static int action_failed(const opts *o, const wallet_reply *reply, const odbox_error *err, const char *what)
{
    char msg[ODBOX_ERROR_MESSAGE_MAX + 160];
    switch (reply->refusal) {
    case WALLET_REFUSED_NOT_FOUND: return report(o, EXIT_NOT_FOUND, "not_found", err->message);
    case WALLET_REFUSED_INSUFFICIENT: return report(o, EXIT_INSUFFICIENT, "insufficient_balance", err->message);
    case WALLET_REFUSED_OVERFLOW: return report(o, EXIT_USAGE, "overflow", err->message);
    case WALLET_REFUSED_NONE: break;
    }
    switch (err->code) {
    case ODBOX_ESTALE:
        snprintf(msg, sizeof msg,
                 "%s was changed concurrently; gave up after %d attempt(s), nothing written "
                 "(try again, or raise --retries)",
                 what, reply->attempts);
        return report(o, EXIT_STALE, odbox_errname(err->code), msg);
    case ODBOX_ECROSSSHARD:
        snprintf(msg, sizeof msg, "%s; nothing written (pass --allow-cross-shard to allow it)", err->message);
        return report(o, EXIT_CROSS_SHARD, odbox_errname(err->code), msg);
    default: return fail(o, err);
    }
}

/* Opens registry and executor, runs fn, closes them. */
typedef int (*action_fn)(const opts *o, odbox_registry *r, odbox_executor *exe, const odbox_exec_config *cfg,
                         odbox_error *err);

static int with_executor(const opts *o, action_fn fn)
{
    odbox_error err = {0};
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_exec_config cfg;
    if (open_registry(o, &r, &err) != ODBOX_OK)
        return fail(o, &err);
    exec_config(o, &cfg);
    int code = wallet_executor_open(r, &cfg, &exe, &err) == ODBOX_OK ? fn(o, r, exe, &cfg, &err) : fail(o, &err);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return code;
}

static int print_result(const opts *o, const wallet_reply *reply, int transfer)
{
    if (o->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "ok", json_object_new_boolean(1));
        json_object_object_add(j, "action_id", json_object_new_string(reply->action_id));
        json_object_object_add(j, "attempts", json_object_new_int(reply->attempts));
        json_object_object_add(j, "replayed", json_object_new_boolean(reply->replayed));
        if (transfer) {
            json_object_object_add(j, "from", view_json(&reply->wallet));
            json_object_object_add(j, "to", view_json(&reply->other));
        } else {
            json_object_object_add(j, "wallet", view_json(&reply->wallet));
        }
        print_json(j);
    } else if (transfer) {
        printf("from %s balance %lld version %lld\n", reply->wallet.id, (long long)reply->wallet.balance,
               (long long)reply->wallet.version);
        printf("to %s balance %lld version %lld\n", reply->other.id, (long long)reply->other.balance,
               (long long)reply->other.version);
    } else {
        printf("balance %lld version %lld\n", (long long)reply->wallet.balance, (long long)reply->wallet.version);
    }
    return 0;
}

/* ---- commands ------------------------------------------------------------------------------------ */

typedef struct migrate_progress {
    const opts *o;
    int applied;
    json_object *shards;
} migrate_progress;

static void on_migrate(void *ud, const odbox_migrate_event *ev)
{
    migrate_progress *mp = ud;
    char shard[16];
    snprintf(shard, sizeof shard, "%d.%d", ev->shard.group, ev->shard.member);
    if (ev->phase == ODBOX_MIGRATE_APPLIED) {
        mp->applied++;
        if (!mp->o->json)
            printf("shard %s: applied %s V%s %s\n", shard, ev->set, ev->version, ev->description);
    } else if (ev->phase == ODBOX_MIGRATE_DONE) {
        if (mp->o->json) {
            json_object *s = json_object_new_object();
            json_object_object_add(s, "shard", json_object_new_string(shard));
            json_object_object_add(s, "applied", json_object_new_int(mp->applied));
            json_object_array_add(mp->shards, s);
        } else {
            printf("shard %s: %d migration(s) applied\n", shard, mp->applied);
        }
        mp->applied = 0;
    }
    fflush(stdout);
}

static int cmd_migrate(const opts *o)
{
    const char *dir = o->migrations ? o->migrations : getenv("ODBOX_WALLET_MIGRATIONS");
    if (!dir || !*dir)
        dir = ODBOX_WALLET_MIGRATIONS_DIR;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return usage_error(o, "wallet migrations not found at '%.300s' (use --migrations DIR or "
                              "ODBOX_WALLET_MIGRATIONS)", dir);
    odbox_error err = {0};
    odbox_registry *r = NULL;
    if (open_registry(o, &r, &err) != ODBOX_OK)
        return fail(o, &err);
    migrate_progress mp = {.o = o, .shards = json_object_new_array()};
    odbox_migrate_options mo = {
        .user_dir = dir, .user_set = "wallet", .progress = on_migrate, .progress_ud = &mp};
    int rc = odbox_migrate_registry(r, &mo, &err);
    odbox_registry_free(&r);
    if (rc != ODBOX_OK) {
        json_object_put(mp.shards);
        return fail(o, &err);
    }
    if (o->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "ok", json_object_new_boolean(1));
        json_object_object_add(j, "shards", mp.shards);
        print_json(j);
    } else {
        json_object_put(mp.shards);
    }
    return 0;
}

static int act_open(const opts *o, odbox_registry *r, odbox_executor *exe, const odbox_exec_config *cfg,
                    odbox_error *err)
{
    odbox_shard_id shard = odbox_shard_get_id(odbox_registry_default_shard(r));
    if (o->shard) {
        if (odbox_shard_id_parse(o->shard, &shard, err) != ODBOX_OK)
            return fail(o, err);
        if (!odbox_registry_shard(r, shard))
            return usage_error(o, "shard %.16s is not in the registry", o->shard);
    }
    wallet_reply reply;
    if (wallet_open(exe, o->args[0], shard, cfg, &reply, err) != ODBOX_OK)
        return action_failed(o, &reply, err, "the new wallet");
    if (o->json) {
        json_object *j = json_object_new_object();
        char text[16];
        snprintf(text, sizeof text, "%d.%d", shard.group, shard.member);
        json_object_object_add(j, "ok", json_object_new_boolean(1));
        json_object_object_add(j, "action_id", json_object_new_string(reply.action_id));
        json_object_object_add(j, "shard", json_object_new_string(text));
        json_object_object_add(j, "wallet", view_json(&reply.wallet));
        print_json(j);
    } else {
        printf("%s\n", reply.wallet.id);
    }
    return 0;
}

static int cmd_open(const opts *o)
{
    size_t len = strlen(o->args[0]);
    if (len == 0 || len > WALLET_OWNER_MAX)
        return usage_error(o, "OWNER must be 1..%d bytes long", WALLET_OWNER_MAX);
    return with_executor(o, act_open);
}

static int act_money(const opts *o, odbox_executor *exe, const odbox_exec_config *cfg, odbox_error *err, int deposit)
{
    char id[ODBOX_UUID_LEN + 1], what[64];
    int64_t amount;
    parse_id(o->args[0], id);
    parse_amount(o->args[1], &amount);
    wallet_reply reply;
    int rc = deposit ? wallet_deposit(exe, id, amount, o->key, cfg, &reply, err)
                     : wallet_withdraw(exe, id, amount, o->key, cfg, &reply, err);
    snprintf(what, sizeof what, "wallet %s", id);
    return rc == ODBOX_OK ? print_result(o, &reply, 0) : action_failed(o, &reply, err, what);
}

static int act_deposit(const opts *o, odbox_registry *r, odbox_executor *exe, const odbox_exec_config *cfg,
                       odbox_error *err)
{
    return act_money(o, exe, cfg, err, 1);
}

static int act_withdraw(const opts *o, odbox_registry *r, odbox_executor *exe, const odbox_exec_config *cfg,
                        odbox_error *err)
{
    return act_money(o, exe, cfg, err, 0);
}

static int cmd_money(const opts *o, action_fn fn)
{
    char id[ODBOX_UUID_LEN + 1];
    int64_t amount;
    int code;
    if ((code = check_id(o, o->args[0], id)) || (code = check_amount(o, o->args[1], &amount)))
        return code;
    return with_executor(o, fn);
}

static int cmd_deposit(const opts *o) { return cmd_money(o, act_deposit); }
static int cmd_withdraw(const opts *o) { return cmd_money(o, act_withdraw); }

static int act_transfer(const opts *o, odbox_registry *r, odbox_executor *exe, const odbox_exec_config *cfg,
                        odbox_error *err)
{
    char from[ODBOX_UUID_LEN + 1], to[ODBOX_UUID_LEN + 1];
    int64_t amount;
    parse_id(o->args[0], from);
    parse_id(o->args[1], to);
    parse_amount(o->args[2], &amount);
    wallet_reply reply;
    if (wallet_transfer(exe, from, to, amount, o->key, cfg, &reply, err) == ODBOX_OK)
        return print_result(o, &reply, 1);
    return action_failed(o, &reply, err, "a wallet of the transfer");
}

static int cmd_transfer(const opts *o)
{
    char from[ODBOX_UUID_LEN + 1], to[ODBOX_UUID_LEN + 1];
    int64_t amount;
    int code;
    if ((code = check_id(o, o->args[0], from)) || (code = check_id(o, o->args[1], to)) ||
        (code = check_amount(o, o->args[2], &amount)))
        return code;
    if (!strcmp(from, to))
        return usage_error(o, "FROM and TO are the same wallet");
    return with_executor(o, act_transfer);
}

static int cmd_show(const opts *o)
{
    char id[ODBOX_UUID_LEN + 1];
    int code;
    if ((code = check_id(o, o->args[0], id)))
        return code;
    odbox_error err = {0};
    odbox_registry *r = NULL;
    wallet_view v;
    if (open_registry(o, &r, &err) != ODBOX_OK)
        return fail(o, &err);
    int rc = wallet_find(r, id, &v, &err);
    odbox_registry_free(&r);
    if (rc == ODBOX_ENOTFOUND)
        return report(o, EXIT_NOT_FOUND, "not_found", err.message);
    if (rc != ODBOX_OK)
        return fail(o, &err);
    if (o->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "ok", json_object_new_boolean(1));
        json_object_object_add(j, "wallet", view_json(&v));
        print_json(j);
    } else {
        printf("balance %lld version %lld\n", (long long)v.balance, (long long)v.version);
    }
    return 0;
}

/* ---- worker ------------------------------------------------------------------------------------ */

static volatile sig_atomic_t worker_stop;
static void on_stop_signal(int sig) { (void)sig, worker_stop = 1; }

/* NAME's value: an integer in lo..hi (absent: keeps *out). */
static int check_int(const opts *o, const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;
    if (!text)
        return 0;
    if ((strcmp(text, "0") && parse_amount(text, &v)) || v < lo || v > hi)
        return usage_error(o, "--%s wants a whole number %lld..%lld, not '%.64s'", name, (long long)lo,
                           (long long)hi, text);
    *out = v;
    return 0;
}

static int cmd_worker(const opts *o)
{
    int64_t for_s = 0, timeout_s = 600, backoff = 0, poll = 0, heartbeat = 0, workers = 0;
    int code;
    if ((code = check_int(o, "for", o->for_s, 1, 86400 * 365, &for_s)) ||
        (code = check_int(o, "timeout", o->timeout_s, 1, 86400, &timeout_s)) ||
        (code = check_int(o, "backoff-ms", o->backoff_ms, 1, 300000, &backoff)) ||
        (code = check_int(o, "poll-ms", o->poll_ms, 10, 600000, &poll)) ||
        (code = check_int(o, "heartbeat-ms", o->heartbeat_ms, 10, 600000, &heartbeat)) ||
        (code = check_int(o, "workers", o->workers, 1, 256, &workers)))
        return code;
    if (o->for_s && o->until_idle)
        return usage_error(o, "give at most one of --for and --until-idle");
    if (o->timeout_s && !o->until_idle)
        return usage_error(o, "--timeout goes with --until-idle");
    wallet_worker_config wc = {.backoff_ms = backoff, .poll_ms = (int)poll, .heartbeat_ms = (int)heartbeat,
                               .workers = (int)workers, .run_ms = for_s * 1000, .until_idle = o->until_idle,
                               .timeout_ms = timeout_s * 1000, .stop = &worker_stop};
    if (o->fail_rate) {
        char *end;
        errno = 0;
        wc.faults.fail_rate = strtod(o->fail_rate, &end);
        if (errno || end == o->fail_rate || *end || !(wc.faults.fail_rate >= 0 && wc.faults.fail_rate <= 1))
            return usage_error(o, "--fail-rate wants a probability 0..1, not '%.64s'", o->fail_rate);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    odbox_error err = {0};
    odbox_registry *r = NULL;
    if (open_registry(o, &r, &err) != ODBOX_OK)
        return fail(o, &err);
    wallet_worker_result res;
    int rc = wallet_worker_run(r, &wc, &res, &err);
    odbox_registry_free(&r);
    if (rc != ODBOX_OK)
        return fail(o, &err);
    code = o->until_idle && !res.idle ? EXIT_NOT_IDLE : 0;
    if (o->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "ok", json_object_new_boolean(code == 0));
        if (o->until_idle)
            json_object_object_add(j, "idle", json_object_new_boolean(res.idle));
        json_object_object_add(j, "calls", json_object_new_int64(res.calls));
        json_object_object_add(j, "injected_failures", json_object_new_int64(res.injected));
        json_object_object_add(j, "database_errors", json_object_new_int64(res.errors));
        json_object_object_add(j, "elapsed_ms", json_object_new_int64(res.elapsed_ms));
        if (o->until_idle) {
            json_object *b = json_object_new_object();
            json_object_object_add(b, "undelivered", json_object_new_int64(res.backlog.undelivered));
            json_object_object_add(b, "pending", json_object_new_int64(res.backlog.pending));
            json_object_object_add(b, "failed", json_object_new_int64(res.backlog.failed));
            json_object_object_add(j, "backlog", b);
        }
        if (code)
            json_object_object_add(j, "exit", json_object_new_int(code));
        print_json(j);
    } else {
        printf("worker: %lld handler call(s), %lld failed on purpose, %lld database error(s), %lld ms\n",
               (long long)res.calls, (long long)res.injected, (long long)res.errors, (long long)res.elapsed_ms);
        if (o->until_idle)
            printf("%s: %lld undelivered event(s), %lld pending and %lld failed notification(s)\n",
                   res.idle ? "idle" : "not idle at --timeout", (long long)res.backlog.undelivered,
                   (long long)res.backlog.pending, (long long)res.backlog.failed);
    }
    if (code)
        fprintf(stderr, "odbox-wallet: still work left after --timeout %llds\n", (long long)timeout_s);
    return code;
}

static const command commands[] = {
    {"migrate", "migrate [--migrations DIR] (--dsn DSN | --config FILE)",
     "Applies odbox's own migrations ($ODBOX_MIGRATIONS_DIR, else the installed\n"
     "copy) and the wallet's (set \"wallet\") on every shard.\n"
     "  --migrations DIR   the wallet's migrations (DIR/<dialect>/); default\n"
     "                     $ODBOX_WALLET_MIGRATIONS, else " ODBOX_WALLET_MIGRATIONS_DIR "\n",
     0, OPT_MIGRATIONS, cmd_migrate},
    {"open", "open OWNER [--shard G.M] [options]",
     "Opens a wallet with balance 0 (event WalletOpenedEvent) and prints its id.\n"
     "  --shard G.M        the shard to create it on (default: the registry's default)\n",
     1, OPT_SHARD | OPT_RETRIES, cmd_open},
    {"deposit", "deposit ID AMOUNT [options]",
     "Adds AMOUNT to the balance (event WalletMoneyDepositedEvent); prints the\n"
     "new balance and version.\n",
     2, OPT_RETRIES | OPT_KEY, cmd_deposit},
    {"withdraw", "withdraw ID AMOUNT [options]",
     "Takes AMOUNT from the balance (event WalletMoneyWithdrawnEvent); refused with\n"
     "exit code 5 when the balance is smaller.\n",
     2, OPT_RETRIES | OPT_KEY, cmd_withdraw},
    {"transfer", "transfer FROM TO AMOUNT [--allow-cross-shard] [options]",
     "Moves AMOUNT from FROM to TO (events WalletTransferSentEvent on FROM,\n"
     "WalletTransferReceivedEvent on TO), both in one action.\n"
     "  --allow-cross-shard  allow wallets on different shards (one transaction\n"
     "                     per shard: not atomic across them; exit 8 if only\n"
     "                     some committed)\n",
     3, OPT_RETRIES | OPT_CROSS | OPT_KEY, cmd_transfer},
    {"show", "show ID [options]", "Prints the wallet's balance and version.\n", 1, 0, cmd_show},
    {"worker", "worker [--until-idle [--timeout S] | --for S] [--fail-rate P] [options]",
     "Runs the fan-out and handling jobs with two handlers until SIGINT or SIGTERM\n"
     "(a graceful stop: running calls get 5 s), for --for seconds, or until idle.\n"
     "statement writes one wallet_statement row per money event, audit counts its\n"
     "calls per event in wallet_handler_calls. Several workers may run at once.\n"
     "  --until-idle       exit 0 once no wallet event is undelivered and no\n"
     "                     notification is PENDING or FAILED, on every shard\n"
     "  --timeout S        with --until-idle: exit 10 if not idle after S seconds\n"
     "                     (default 600)\n"
     "  --for S            stop after S seconds\n"
     "  --fail-rate P      each handler call fails with probability P (0..1) after\n"
     "                     its effect, as a real handler may\n"
     "  --backoff-ms N     backoff base of a failed call (default 30000; cap 16 x N)\n"
     "  --poll-ms N        the jobs' poll interval and the rounds' poll delays\n"
     "                     (defaults 10000 and 1000)\n"
     "  --heartbeat-ms N   job heartbeat interval (default 10000)\n"
     "  --workers N        handler threads (default 8)\n",
     0, OPT_WORKER, cmd_worker},
};

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        const command *c = argc > 2 ? find_command(argv[2]) : NULL;
        if (c)
            print_help(c, stdout);
        else
            fputs(usage_main, stdout);
        return 0;
    }
    const command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "odbox-wallet: unknown command '%s'\n%s", name, usage_main);
        return EXIT_USAGE;
    }
    opts o = {.retries = -1};
    int code = parse(c, argc - 2, argv + 2, &o);
    return code >= 0 ? code : c->run(&o);
}
