/* odbox — the command-line tool: migrate, status, version.
 *
 * Exit codes: 0 success; 1 database or other runtime error; 2 usage error
 * or invalid input (DSN, config); 3 migration history does not match the
 * files; 4 cannot connect; 5 another migrator held the lock too long. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <json-c/json.h>
#include "odbox/odbox.h"
#include "jobs_cmd.h"

enum { EXIT_USAGE = 2, EXIT_MISMATCH = 3, EXIT_CONNECT = 4, EXIT_LOCK = 5 };

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
    int tty;
} cli;

static const char usage_main[] =
    "usage: odbox <command> [options]\n"
    "\n"
    "commands:\n"
    "  migrate   apply pending migrations on every shard\n"
    "  status    per shard: dialect, server, migrations, event and notification counts\n"
    "  jobs      list jobs; pause, resume or run one now (`odbox jobs --help`)\n"
    "  version   print the version\n"
    "  help      this text; `odbox <command> --help` for a command's options\n"
    "\n"
    "Exit codes: 0 ok, 1 runtime error, 2 usage or invalid input, 3 migration\n"
    "history does not match the files, 4 cannot connect, 5 migration lock timeout.\n";

static const char usage_target[] =
    "  --dsn DSN          one database (URL or ODBC string); default $ODBOX_DSN\n"
    "  --config FILE      a registry config file (JSON, see README)\n"
    "  --eventlog NAME    with --dsn: the eventlog schema/database (default: eventlog)\n"
    "  --dir DIR          also the service's own migrations (DIR/<dialect>/ or DIR)\n"
    "  --set NAME         history name of --dir's migrations (default: app)\n"
    "  --migrations DIR   odbox's own migrations (default: installed copy)\n"
    "  --json             machine-readable output on stdout\n";

static const char usage_migrate[] =
    "usage: odbox migrate (--dsn DSN | --config FILE) [options]\n"
    "\n"
    "Applies pending migrations, in version order, on every shard's primary.\n"
    "A changed or missing applied file stops the run before anything is applied.\n"
    "\n";

static const char usage_status[] =
    "usage: odbox status (--dsn DSN | --config FILE) [options]\n"
    "\n"
    "Shows, per shard, the dialect, the server version, applied and pending\n"
    "migrations and the counts of events and notifications by state.\n"
    "\n";

static int exit_code(int rc)
{
    switch (rc) {
    case ODBOX_OK: return 0;
    case ODBOX_EINVAL: return EXIT_USAGE;
    case ODBOX_EMIGRATION: return EXIT_MISMATCH;
    case ODBOX_ECONNECT: case ODBOX_ECONNLOST: case ODBOX_EINDOUBT: return EXIT_CONNECT;
    case ODBOX_ETIMEDOUT: case ODBOX_EBUSY: return EXIT_LOCK;
    default: return 1;
    }
}

static int fail(const cli *c, const odbox_error *err)
{
    if (c->json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "ok", json_object_new_boolean(0));
        json_object_object_add(o, "error", json_object_new_string(odbox_errname(err->code)));
        json_object_object_add(o, "sqlstate", json_object_new_string(err->sqlstate));
        json_object_object_add(o, "message", json_object_new_string(err->message));
        puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
        json_object_put(o);
    }
    fprintf(stderr, "odbox: %s\n", err->message[0] ? err->message : odbox_strerror(err->code));
    return exit_code(err->code);
}

static int parse_options(int argc, char **argv, cli *c, const char *usage)
{
    static const struct option opts[] = {
        {"dsn", required_argument, 0, 'd'},     {"config", required_argument, 0, 'c'},
        {"dir", required_argument, 0, 'D'},     {"set", required_argument, 0, 's'},
        {"migrations", required_argument, 0, 'm'}, {"lock-timeout", required_argument, 0, 'l'},
        {"eventlog", required_argument, 0, 'e'},
        {"json", no_argument, 0, 'j'},          {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hjq", opts, NULL)) != -1) {
        switch (ch) {
        case 'd': c->dsn = optarg; break;
        case 'c': c->config = optarg; break;
        case 'D': c->dir = optarg; break;
        case 's': c->set = optarg; break;
        case 'm': c->migrations = optarg; break;
        case 'e': c->eventlog = optarg; break;
        case 'l': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 86400000) {
                fprintf(stderr, "odbox: --lock-timeout wants milliseconds 1..86400000\n");
                return EXIT_USAGE;
            }
            c->lock_timeout_ms = (int)v;
            break;
        }
        case 'j': c->json = 1; break;
        case 'q': c->quiet = 1; break;
        case 'h': printf("%s%s", usage, usage_target); exit(0);
        default:
            fprintf(stderr, "odbox: unknown or incomplete option '%s'\n%s%s", argv[optind - 1], usage,
                    usage_target);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "odbox: unexpected argument '%s'\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (!c->dsn && !c->config)
        c->dsn = getenv("ODBOX_DSN");
    if (!c->dsn == !c->config) {
        fprintf(stderr, "odbox: give exactly one of --dsn and --config (or set ODBOX_DSN)\n");
        return EXIT_USAGE;
    }
    if (c->eventlog && c->config) {
        fprintf(stderr, "odbox: --eventlog goes with --dsn; a config file names each shard's eventlog\n");
        return EXIT_USAGE;
    }
    return 0;
}

static int open_registry(const cli *c, odbox_registry **r, odbox_error *err)
{
    if (c->config)
        return odbox_registry_load(c->config, r, err);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = c->dsn, .eventlog = c->eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    return odbox_registry_open(&cfg, r, err);
}

static void migrate_options(const cli *c, odbox_migrate_options *o)
{
    memset(o, 0, sizeof *o);
    o->framework_dir = c->migrations;
    o->user_dir = c->dir;
    o->user_set = c->set;
    o->lock_timeout_ms = c->lock_timeout_ms;
}

typedef struct progress_state {
    const cli *c;
    json_object *shards;   /* --json: array of per-shard objects */
    json_object *current;
    int applied;
} progress_state;

static void on_progress(void *ud, const odbox_migrate_event *ev)
{
    progress_state *ps = ud;
    const cli *c = ps->c;
    if (ev->phase == ODBOX_MIGRATE_APPLIED) {
        ps->applied++;
        if (ps->current) {
            json_object *a = json_object_new_object();
            json_object_object_add(a, "set", json_object_new_string(ev->set));
            json_object_object_add(a, "version", json_object_new_int64(ev->version));
            json_object_object_add(a, "description", json_object_new_string(ev->description));
            json_object *arr;
            json_object_object_get_ex(ps->current, "applied", &arr);
            json_object_array_add(arr, a);
        }
    }
    if (c->json || c->quiet || !c->tty)
        return;
    switch (ev->phase) {
    case ODBOX_MIGRATE_WAITING:
        printf("shard %d.%d: waiting for another migrator to finish\n", ev->shard.group, ev->shard.member);
        break;
    case ODBOX_MIGRATE_APPLYING:
        printf("shard %d.%d: applying %s V%lld %s ... ", ev->shard.group, ev->shard.member, ev->set,
               (long long)ev->version, ev->description);
        fflush(stdout);
        break;
    case ODBOX_MIGRATE_APPLIED: printf("done\n"); break;
    case ODBOX_MIGRATE_UP_TO_DATE:
        printf("shard %d.%d: %s is up to date\n", ev->shard.group, ev->shard.member, ev->set);
        break;
    case ODBOX_MIGRATE_DONE: break;
    }
    fflush(stdout);
}

static int cmd_migrate(int argc, char **argv)
{
    cli c = {.tty = isatty(1)};
    int u = parse_options(argc, argv, &c, usage_migrate);
    if (u)
        return u;
    odbox_error err = {0};
    odbox_registry *r = NULL;
    if (open_registry(&c, &r, &err) != ODBOX_OK)
        return fail(&c, &err);
    odbox_migrate_options o;
    migrate_options(&c, &o);
    progress_state ps = {.c = &c};
    o.progress = on_progress;
    o.progress_ud = &ps;
    if (c.json)
        ps.shards = json_object_new_array();
    int rc = ODBOX_OK;
    for (size_t i = 0; i < odbox_registry_shard_count(r) && rc == ODBOX_OK; i++) {
        odbox_shard *s = odbox_registry_shard_at(r, i);
        odbox_shard_id id = odbox_shard_get_id(s);
        ps.applied = 0;
        if (c.json) {
            char name[16];
            snprintf(name, sizeof name, "%d.%d", id.group, id.member);
            ps.current = json_object_new_object();
            json_object_object_add(ps.current, "shard", json_object_new_string(name));
            json_object_object_add(ps.current, "applied", json_object_new_array());
            json_object_array_add(ps.shards, ps.current);
        }
        rc = odbox_migrate_shard(s, &o, &err);
        if (rc == ODBOX_OK && !c.json && !c.quiet)
            printf("shard %d.%d: %d migration(s) applied\n", id.group, id.member, ps.applied);
    }
    odbox_registry_free(&r);
    if (rc != ODBOX_OK) {
        json_object_put(ps.shards);
        return fail(&c, &err);
    }
    if (c.json) {
        json_object *o2 = json_object_new_object();
        json_object_object_add(o2, "ok", json_object_new_boolean(1));
        json_object_object_add(o2, "shards", ps.shards);
        puts(json_object_to_json_string_ext(o2, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
        json_object_put(o2);
    }
    return 0;
}

/* Adds {"total","undelivered","sentinel"} and {"<STATE>": n} counts. */
static int shard_counts(odbox_conn *conn, const char *eventlog, json_object *out, odbox_error *err)
{
    char sql[512];
    int exists = 0, rc;
    odbox_stmt *s = NULL;
    if ((rc = odbox_conn_table_exists(conn, eventlog, "events", &exists, err)) != ODBOX_OK)
        return rc;
    if (exists) {
        int64_t total = 0, undelivered = 0, sentinel = 0;
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*), COALESCE(SUM(CASE WHEN delivered THEN 0 ELSE 1 END), 0), "
                 "COALESCE(SUM(CASE WHEN event_type IS NULL THEN 1 ELSE 0 END), 0) FROM %s.events",
                 eventlog);
        if ((rc = odbox_stmt_prepare(conn, sql, &s, err)) == ODBOX_OK &&
            (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1 &&
            (rc = odbox_stmt_get_int64(s, 1, &total, NULL, err)) == ODBOX_OK &&
            (rc = odbox_stmt_get_int64(s, 2, &undelivered, NULL, err)) == ODBOX_OK)
            rc = odbox_stmt_get_int64(s, 3, &sentinel, NULL, err);
        odbox_stmt_free(&s);
        if (rc < 0)
            return rc;
        json_object *ev = json_object_new_object();
        json_object_object_add(ev, "total", json_object_new_int64(total));
        json_object_object_add(ev, "undelivered", json_object_new_int64(undelivered));
        json_object_object_add(ev, "delivered", json_object_new_int64(total - undelivered));
        json_object_object_add(ev, "sentinel", json_object_new_int64(sentinel));
        json_object_object_add(out, "events", ev);
    }
    if ((rc = odbox_conn_table_exists(conn, eventlog, "event_notifications", &exists, err)) != ODBOX_OK)
        return rc;
    if (exists) {
        json_object *no = json_object_new_object();
        snprintf(sql, sizeof sql, "SELECT state, COUNT(*) FROM %s.event_notifications GROUP BY state ORDER BY state",
                 eventlog);
        if ((rc = odbox_stmt_prepare(conn, sql, &s, err)) == ODBOX_OK)
            rc = odbox_stmt_execute(s, err);
        while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
            const char *state;
            int64_t n;
            if ((rc = odbox_stmt_get_text(s, 1, &state, NULL, err)) == ODBOX_OK &&
                (rc = odbox_stmt_get_int64(s, 2, &n, NULL, err)) == ODBOX_OK)
                json_object_object_add(no, state, json_object_new_int64(n));
        }
        odbox_stmt_free(&s);
        json_object_object_add(out, "notifications", no);
        if (rc < 0)
            return rc;
    }
    return ODBOX_OK;
}

static void print_time(int64_t us, char *buf, size_t cap)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

static void print_shard_text(json_object *o)
{
    json_object *v, *m;
    json_object_object_get_ex(o, "shard", &v);
    printf("shard %s\n", json_object_get_string(v));
    static const char *const keys[] = {"primary", "dialect", "server", "eventlog", NULL};
    for (const char *const *k = keys; *k; k++)
        if (json_object_object_get_ex(o, *k, &v))
            printf("  %-10s %s\n", *k, json_object_get_string(v));
    if (json_object_object_get_ex(o, "migrations", &m)) {
        size_t n = json_object_array_length(m);
        int pending = 0;
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(m, i), *x;
            json_object_object_get_ex(e, "applied", &x);
            int applied = json_object_get_boolean(x);
            pending += !applied;
            json_object *set, *ver, *desc, *when;
            json_object_object_get_ex(e, "set", &set);
            json_object_object_get_ex(e, "version", &ver);
            json_object_object_get_ex(e, "description", &desc);
            char ts[40] = "";
            if (json_object_object_get_ex(e, "installed_on", &when))
                snprintf(ts, sizeof ts, "%s", json_object_get_string(when));
            printf("  %-7s %-6s V%-4lld %-36s %s\n", applied ? "applied" : "pending", json_object_get_string(set),
                   (long long)json_object_get_int64(ver), json_object_get_string(desc), ts);
        }
        printf("  migrations: %zu applied, %d pending\n", n - (size_t)pending, pending);
    }
    if (json_object_object_get_ex(o, "events", &v)) {
        json_object *t, *u, *d, *s;
        json_object_object_get_ex(v, "total", &t);
        json_object_object_get_ex(v, "undelivered", &u);
        json_object_object_get_ex(v, "delivered", &d);
        json_object_object_get_ex(v, "sentinel", &s);
        printf("  events: %lld total, %lld undelivered, %lld delivered, %lld sentinel\n",
               (long long)json_object_get_int64(t), (long long)json_object_get_int64(u),
               (long long)json_object_get_int64(d), (long long)json_object_get_int64(s));
    }
    if (json_object_object_get_ex(o, "notifications", &v)) {
        printf("  notifications:");
        int any = 0;
        json_object_object_foreach(v, state, n) {
            printf(" %s=%lld", state, (long long)json_object_get_int64(n));
            any = 1;
        }
        printf("%s\n", any ? "" : " none");
    }
}

static int cmd_status(int argc, char **argv)
{
    cli c = {.tty = isatty(1)};
    int u = parse_options(argc, argv, &c, usage_status);
    if (u)
        return u;
    odbox_error err = {0};
    odbox_registry *r = NULL;
    if (open_registry(&c, &r, &err) != ODBOX_OK)
        return fail(&c, &err);
    odbox_migrate_options o;
    migrate_options(&c, &o);
    json_object *shards = json_object_new_array();
    int rc = ODBOX_OK;
    for (size_t i = 0; i < odbox_registry_shard_count(r) && rc == ODBOX_OK; i++) {
        odbox_shard *s = odbox_registry_shard_at(r, i);
        odbox_shard_id id = odbox_shard_get_id(s);
        odbox_conn *conn = NULL;
        char name[16];
        snprintf(name, sizeof name, "%d.%d", id.group, id.member);
        json_object *so = json_object_new_object();
        json_object_array_add(shards, so);
        json_object_object_add(so, "shard", json_object_new_string(name));
        json_object_object_add(so, "primary", json_object_new_string(odbox_shard_primary_redacted(s)));
        if ((rc = odbox_pool_acquire(odbox_shard_primary(s), &conn, &err)) != ODBOX_OK)
            break;
        char server[160];
        snprintf(server, sizeof server, "%s %s", odbox_conn_server_name(conn), odbox_conn_server_version(conn));
        json_object_object_add(so, "dialect", json_object_new_string(odbox_conn_dialect(conn)->name));
        json_object_object_add(so, "server", json_object_new_string(server));
        json_object_object_add(so, "eventlog", json_object_new_string(odbox_shard_eventlog(s)));
        rc = shard_counts(conn, odbox_shard_eventlog(s), so, &err);
        odbox_pool_release(odbox_shard_primary(s), &conn);
        if (rc != ODBOX_OK)
            break;
        odbox_migration_info *list = NULL;
        size_t n = 0;
        if ((rc = odbox_migrate_status(s, &o, &list, &n, &err)) != ODBOX_OK)
            break;
        json_object *m = json_object_new_array();
        for (size_t k = 0; k < n; k++) {
            json_object *e = json_object_new_object();
            json_object_object_add(e, "set", json_object_new_string(list[k].set));
            json_object_object_add(e, "version", json_object_new_int64(list[k].version));
            json_object_object_add(e, "description", json_object_new_string(list[k].description));
            json_object_object_add(e, "applied", json_object_new_boolean(list[k].applied));
            if (list[k].installed_on_us) {
                char ts[40];
                print_time(list[k].installed_on_us, ts, sizeof ts);
                json_object_object_add(e, "installed_on", json_object_new_string(ts));
            }
            json_object_array_add(m, e);
        }
        free(list);
        json_object_object_add(so, "migrations", m);
    }
    odbox_registry_free(&r);
    if (rc != ODBOX_OK) {
        json_object_put(shards);
        return fail(&c, &err);
    }
    if (c.json) {
        json_object *top = json_object_new_object();
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "shards", shards);
        puts(json_object_to_json_string_ext(top, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
        json_object_put(top);
    } else {
        for (size_t i = 0; i < json_object_array_length(shards); i++)
            print_shard_text(json_object_array_get_idx(shards, i));
        json_object_put(shards);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        if (argc > 2 && !strcmp(argv[2], "migrate"))
            printf("%s%s", usage_migrate, usage_target);
        else if (argc > 2 && !strcmp(argv[2], "status"))
            printf("%s%s", usage_status, usage_target);
        else if (argc > 2 && !strcmp(argv[2], "jobs"))
            return cmd_jobs(2, (char *[]){"jobs", "--help", NULL});
        else
            fputs(usage_main, stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        if (argc > 2 && !strcmp(argv[2], "--help")) {
            puts("usage: odbox version\n\nPrints odbox's version.");
            return 0;
        }
        printf("odbox %s\n", odbox_version());
        return 0;
    }
    if (!strcmp(cmd, "migrate"))
        return cmd_migrate(argc - 1, argv + 1);
    if (!strcmp(cmd, "status"))
        return cmd_status(argc - 1, argv + 1);
    if (!strcmp(cmd, "jobs"))
        return cmd_jobs(argc - 1, argv + 1);
    fprintf(stderr, "odbox: unknown command '%s'\n%s", cmd, usage_main);
    return EXIT_USAGE;
}
