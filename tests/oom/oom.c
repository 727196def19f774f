/* odbox — allocation failures, the way SQLite tests them: each scenario
 * runs again and again, the k-th allocation made by odbox's own code
 * failing once in run k (k = 1, 2, ...), until a run makes fewer than k
 * allocations. Every run must end without a crash, with ODBOX_OK or
 * ODBOX_ENOMEM (a run whose failed allocation was optional may still
 * succeed, and must then have done all its work), holding no allocation
 * it did not free, and, where it writes, having written all of its
 * transaction or none of it.
 *
 * The allocator below stands in for the C library's in this program: its
 * malloc, calloc, realloc, strdup and free are the ones every library of
 * the process calls. Only calls whose return address lies in this
 * program's text fail: odbox is linked in statically, so those are
 * odbox's (and this file's, which allocates nothing while armed); json-c,
 * unixODBC and the SQLite driver are not made to fail. Not built with
 * the sanitizers, which bring their own allocator. */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <odbox/odbox.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern char __executable_start[], etext[];

static long armed = -1; /* the number of odbox allocations still to succeed; -1: none fail */
static int hit;         /* this run's failure happened */
static const void *hit_at; /* the failed call's return address */
static long live;       /* allocations made minus frees, while counting */
static int counting;
static int trace; /* debugging: ODBOX_OOM_TRACE=1 prints the stack of each failed allocation */

static int fail_now(const void *ra)
{
    if (__atomic_load_n(&armed, __ATOMIC_RELAXED) < 0 || (const char *)ra < __executable_start ||
        (const char *)ra >= etext)
        return 0;
    if (__atomic_fetch_sub(&armed, 1, __ATOMIC_RELAXED) == 0) {
        __atomic_store_n(&hit, 1, __ATOMIC_RELAXED);
        hit_at = ra;
        if (trace) {
            void *frames[16];
            backtrace_symbols_fd(frames, backtrace(frames, 16), 2);
        }
        errno = ENOMEM;
        return 1;
    }
    return 0;
}

static void *counted(void *p)
{
    if (p && __atomic_load_n(&counting, __ATOMIC_RELAXED))
        __atomic_add_fetch(&live, 1, __ATOMIC_RELAXED);
    return p;
}

void *malloc(size_t n)
{
    return fail_now(__builtin_return_address(0)) ? NULL : counted(__libc_malloc(n));
}

void *calloc(size_t n, size_t size)
{
    return fail_now(__builtin_return_address(0)) ? NULL : counted(__libc_calloc(n, size));
}

void *realloc(void *p, size_t n)
{
    if (fail_now(__builtin_return_address(0)))
        return NULL;
    void *q = __libc_realloc(p, n);
    if (!p)
        counted(q);
    return q;
}

char *strdup(const char *s)
{
    if (fail_now(__builtin_return_address(0)))
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = counted(__libc_malloc(n));
    return d ? memcpy(d, s, n) : NULL;
}

void free(void *p)
{
    if (p && __atomic_load_n(&counting, __ATOMIC_RELAXED))
        __atomic_sub_fetch(&live, 1, __ATOMIC_RELAXED);
    __libc_free(p);
}

/* ---- scenarios ------------------------------------------------------------ */

static const odbox_column account_columns[] = {
    {"owner", ODBOX_TYPE_TEXT, 0, 200},
    {"balance", ODBOX_TYPE_INT64, 0, 0},
};
static const odbox_model_type Account = {"Account", "accounts", ODBOX_KIND_MODEL, account_columns, 2};
static const odbox_event_type Opened = {"AccountOpenedEvent"};
static const odbox_event_type Audited = {"AccountAuditedEvent"};

static char dsn[600];

static int parse_config(void)
{
    static const char text[] = "{\"default_shard\": \"0.0\", \"pool\": {\"size\": 3},\n"
                               " \"shards\": [{\"group\": 0, \"member\": 0, \"primary\": \"postgresql://u@h1/app\",\n"
                               "              \"replica\": \"postgresql://u@h1r/app?eventlog=ev\"},\n"
                               "             {\"group\": 1, \"member\": 2, \"primary\": \"mariadb://u:pw@h2:3307/app\"}]}";
    odbox_registry *r = NULL;
    odbox_error e;
    int rc = odbox_registry_parse(text, &r, &e);
    if (rc != ODBOX_OK && rc != ODBOX_ENOMEM)
        fprintf(stderr, "parse_config: %s\n", e.message);
    if (rc == ODBOX_OK && odbox_registry_shard_count(r) != 2) {
        fprintf(stderr, "parse_config: %zu shards\n", odbox_registry_shard_count(r));
        rc = ODBOX_EINVAL;
    }
    odbox_registry_free(&r);
    return rc;
}

static int parse_dsns(void)
{
    static const char *const texts[] = {
        "postgresql://user:p%40ss@db.example:6432/app?eventlog=ev&connect_timeout_ms=500",
        "mariadb://u:pw@[::1]:3307/app",
        "sqlite:///var/lib/app/app.db",
        "DRIVER={PostgreSQL ANSI};SERVER=h;DATABASE=app;UID=u;PWD={a;b}",
    };
    int rc = ODBOX_OK;
    for (size_t i = 0; rc == ODBOX_OK && i < sizeof texts / sizeof texts[0]; i++) {
        odbox_dsn *d = NULL;
        odbox_error e;
        rc = odbox_dsn_parse(texts[i], &d, &e);
        odbox_dsn_free(&d);
    }
    return rc;
}

/* A registry of where and an executor with Account registered; what was
 * opened before a failure is left for the caller to free. */
static int open_executor(const char *where, odbox_registry **r, odbox_executor **exe, odbox_error *e)
{
    int rc = odbox_registry_open_dsn(where, r, e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_open("com.example.oom", *r, NULL, exe, e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(*exe, &Account, e);
    return rc;
}

static int models_and_executor(void)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_model *m = NULL;
    odbox_error e;
    int rc = open_executor("postgresql://u@127.0.0.1:1/db", &r, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_event(exe, &Opened, &e);
    if (rc == ODBOX_OK)
        rc = odbox_model_new(&Account, NULL, &m, &e);
    if (rc == ODBOX_OK)
        rc = odbox_model_set_text(m, "owner", "alice", &e);
    if (rc == ODBOX_OK)
        rc = odbox_model_set_int64(m, "balance", 5, &e);
    odbox_model_free(&m);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc;
}

static int open_account(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    odbox_model *a = NULL;
    json_object *payload = json_object_new_object(); /* json-c's allocations do not fail here */
    (void)ctx, (void)params, (void)user;
    json_object_object_add(payload, "owner", json_object_new_string("alice"));
    int rc = odbox_model_new(&Account, NULL, &a, err);
    if (rc == ODBOX_OK && (rc = odbox_model_set_text(a, "owner", "alice", err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(a, "balance", 0, err)) == ODBOX_OK &&
        (rc = odbox_plan_add(plan, a, err)) == ODBOX_OK &&
        (rc = odbox_plan_emit(plan, a, &Opened, payload, err)) == ODBOX_OK)
        rc = odbox_plan_emit(plan, a, &Audited, payload, err);
    odbox_model_free(&a);
    json_object_put(payload);
    return rc;
}

/* Reads and writes of the checks, with the allocator disarmed. */
static int64_t query(const char *sql)
{
    odbox_conn *c = NULL;
    odbox_error e;
    int64_t v = -1;
    if (odbox_conn_open(dsn, &c, &e) != ODBOX_OK || odbox_conn_query_int64(c, sql, &v, &e) != ODBOX_OK) {
        fprintf(stderr, "oom: %s: %s\n", sql, e.message);
        exit(1);
    }
    odbox_conn_close(&c);
    return v;
}

static void empty_tables(void)
{
    odbox_conn *c = NULL;
    odbox_error e;
    static const char *const tables[] = {"accounts", "eventlog_events", "eventlog_event_notifications",
                                         "eventlog_idempotency_keys"};
    if (odbox_conn_open(dsn, &c, &e) != ODBOX_OK) {
        fprintf(stderr, "oom: %s\n", e.message);
        exit(1);
    }
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "DELETE FROM %s", tables[i]);
        if (odbox_conn_exec(c, sql, &e) != ODBOX_OK) {
            fprintf(stderr, "oom: %s: %s\n", sql, e.message);
            exit(1);
        }
    }
    odbox_conn_close(&c);
}

/* A run that wrote: all of it (rc OK) or none of it (any error). */
static int all_or_nothing(int rc, int64_t want_accounts, int64_t want_events)
{
    int64_t accounts = query("SELECT COUNT(*) FROM accounts"), events = query("SELECT COUNT(*) FROM eventlog_events");
    int ok = rc == ODBOX_OK ? accounts == want_accounts && events == want_events : accounts == 0 && events == 0;
    if (!ok)
        fprintf(stderr, "oom: %s: %lld accounts, %lld events\n", odbox_errname(rc), (long long)accounts,
                (long long)events);
    empty_tables();
    return ok;
}

/* The action on SQLite, with an idempotency key or without (NULL): its
 * row and two events, or nothing. */
static int run_open_account(const char *key)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_result res = {0};
    odbox_error e;
    const odbox_action open = {"OpenAccountAction", open_account, NULL};
    int rc = open_executor(dsn, &r, &exe, &e);
    if (rc == ODBOX_OK)
        rc = key ? odbox_execute_keyed(exe, &open, NULL, key, NULL, &res, &e)
                 : odbox_execute(exe, &open, NULL, NULL, &res, &e);
    if (rc != ODBOX_OK && rc != ODBOX_ENOMEM)
        fprintf(stderr, "oom: %s: %s\n", open.name, e.message);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc;
}

static int execute_action(void) { return run_open_account(NULL); }

/* The caller's own transaction on SQLite: its INSERT and one event, or nothing. */
static int own_transaction(void)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_tx *tx = NULL;
    odbox_stmt *s = NULL;
    odbox_error e;
    int rc = open_executor(dsn, &r, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_tx_begin(exe, (odbox_shard_id){0, 0}, NULL, &tx, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_prepare(odbox_tx_conn(tx),
                                "INSERT INTO accounts (id, version, state, created_date, updated_date, owner, balance) "
                                "VALUES ('0192f0c1-7a3e-7abc-8def-0123456789ab', 1, 'ACTIVE', '2026-11-27 00:00:00', "
                                "'2026-11-27 00:00:00', ?, 0)",
                                &s, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, 1, "bob", &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    odbox_stmt_free(&s);
    json_object *payload = json_object_new_object();
    if (rc == ODBOX_OK)
        rc = odbox_tx_emit(tx, "Account", "0192f0c1-7a3e-7abc-8def-0123456789ab", &Opened, payload, &e);
    json_object_put(payload);
    if (rc == ODBOX_OK)
        rc = odbox_tx_commit(&tx, &e);
    odbox_tx_rollback(&tx);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc;
}

static int verify_action(int rc) { return all_or_nothing(rc, 1, 2); }
static int verify_own_transaction(int rc) { return all_or_nothing(rc, 1, 1); }

/* A keyed action: a new key each run (the run without a failure commits
 * its key), the key's row with the action or not at all. */
static int execute_keyed(void)
{
    static int runs;
    char key[32];
    snprintf(key, sizeof key, "request-%d", ++runs);
    return run_open_account(key);
}

static int verify_keyed(int rc)
{
    int64_t keys = query("SELECT COUNT(*) FROM eventlog_idempotency_keys");
    if (keys != (rc == ODBOX_OK)) {
        fprintf(stderr, "oom: %s: %lld keys\n", odbox_errname(rc), (long long)keys);
        empty_tables();
        return 0;
    }
    return all_or_nothing(rc, 1, 2);
}

/* Delivery: an action's events (written before the allocator is armed),
 * then a fan-out round and a handling round of a handler of one of them.
 * Whatever failed, no event is delivered without its notification row;
 * a run that succeeded called the handler once and recorded it. */
static int handled;

static int on_opened(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)user, (void)err;
    __atomic_add_fetch(&handled, 1, __ATOMIC_RELAXED);
    return ODBOX_OK;
}

static void prepare_delivery(void)
{
    handled = 0;
    if (execute_action() != ODBOX_OK) {
        fprintf(stderr, "oom: the delivery's action failed\n");
        exit(1);
    }
}

static int deliver(void)
{
    odbox_registry *r = NULL;
    odbox_handlers *h = NULL;
    odbox_delivery *d = NULL;
    odbox_error e;
    const odbox_handler audit = {.name = "audit", .event_type = "AccountOpenedEvent", .handle = on_opened};
    int rc = odbox_registry_open_dsn(dsn, &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_new(&h, &e);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_add(h, &audit, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(r, h, NULL, &d, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_register(d, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_fanout_round(d, odbox_registry_default_shard(r), NULL, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_handling_round(d, odbox_registry_default_shard(r), NULL, &e);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    odbox_registry_free(&r);
    return rc;
}

static int verify_delivery(int rc)
{
    int64_t lost = query("SELECT COUNT(*) FROM eventlog_events e WHERE e.event_type = 'AccountOpenedEvent' AND "
                         "e.delivered = 1 AND NOT EXISTS (SELECT 1 FROM eventlog_event_notifications n "
                         "WHERE n.event_id = e.id AND n.handler_name = 'audit')");
    int64_t done = query("SELECT COUNT(*) FROM eventlog_event_notifications WHERE state = 'SUCCEEDED'");
    int64_t due = query("SELECT COUNT(*) FROM eventlog_event_notifications WHERE state = 'PENDING' AND "
                        "lease_owner IS NULL");
    int calls = __atomic_load_n(&handled, __ATOMIC_RELAXED);
    /* a call that could not be started (no memory for it, or for a
     * worker thread) is not an error of the round: its row is due again */
    int ok = lost == 0 && done <= calls && calls <= 1 &&
             (rc != ODBOX_OK || (done == 1 && calls == 1) || (calls == 0 && due == 1));
    if (!ok)
        fprintf(stderr, "oom: %s: %lld events lost, %lld notifications succeeded, %d calls\n", odbox_errname(rc),
                (long long)lost, (long long)done, calls);
    empty_tables();
    return ok;
}

/* The operators' calls over a delivered event: notifications listed,
 * counted, measured and shown as Prometheus text, subscriptions listed,
 * rows requeued, a replay, a purge. */
static void prepare_ops(void)
{
    prepare_delivery();
    if (deliver() != ODBOX_OK) {
        fprintf(stderr, "oom: the operations' delivery failed\n");
        exit(1);
    }
}

static int operations(void)
{
    odbox_registry *r = NULL;
    odbox_notification_row *rows = NULL;
    odbox_notification_stats *stats = NULL;
    odbox_subscription *subs = NULL;
    odbox_purge_result *purged = NULL;
    size_t nrows = 0, nstats = 0, nsubs = 0, npurged = 0;
    int64_t moved = 0, created = 0;
    char *text = NULL;
    odbox_error e;
    int rc = odbox_registry_open_dsn(dsn, &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_notifications_list(r, NULL, 10, &rows, &nrows, &e);
    if (rc == ODBOX_OK)
        rc = odbox_notifications_count(r, NULL, &stats, &nstats, &e);
    odbox_notification_stats_free(&stats, nstats);
    if (rc == ODBOX_OK)
        rc = odbox_notifications_metrics(r, NULL, &stats, &nstats, &e);
    if (rc == ODBOX_OK)
        rc = odbox_notifications_prometheus(stats, nstats, &text, &e);
    if (rc == ODBOX_OK)
        rc = odbox_subscriptions_list(r, NULL, 0, &subs, &nsubs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_notifications_requeue(r, NULL, &moved, &e);
    if (rc == ODBOX_OK)
        rc = odbox_subscription_replay(r, "audit", 0, NULL, &created, &e);
    odbox_purge_options po = {.older_than_us = INT64_C(86400000000)};
    if (rc == ODBOX_OK)
        rc = odbox_purge_run(r, &po, &purged, &npurged, &e);
    free(text);
    odbox_purge_results_free(&purged);
    odbox_subscriptions_free(&subs, nsubs);
    odbox_notification_stats_free(&stats, nstats);
    odbox_notification_rows_free(&rows, nrows);
    odbox_registry_free(&r);
    return rc;
}

static int verify_ops(int rc)
{
    (void)rc;
    int64_t lost = query("SELECT COUNT(*) FROM eventlog_events e WHERE e.delivered = 1 AND e.event_type = "
                         "'AccountOpenedEvent' AND NOT EXISTS (SELECT 1 FROM eventlog_event_notifications n "
                         "WHERE n.event_id = e.id)");
    empty_tables();
    return lost == 0;
}

/* Migrations of a new database file each run: a run that failed leaves
 * a database the next migration completes. */
static char fresh_dsn[640];

static void prepare_migration(void)
{
    static int n;
    snprintf(fresh_dsn, sizeof fresh_dsn, "%s.%d", dsn, ++n);
}

static int migrate_fresh(void)
{
    odbox_registry *r = NULL;
    odbox_error e;
    int rc = odbox_registry_open_dsn(fresh_dsn, &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_migrate_registry(r, NULL, &e);
    odbox_registry_free(&r);
    return rc;
}

static int verify_migration(int rc)
{
    (void)rc;
    odbox_registry *r = NULL;
    odbox_error e;
    int again = odbox_registry_open_dsn(fresh_dsn, &r, &e);
    if (again == ODBOX_OK)
        again = odbox_migrate_registry(r, NULL, &e);
    if (again != ODBOX_OK)
        fprintf(stderr, "oom: migrating again: %s\n", e.message);
    odbox_registry_free(&r);
    unlink(fresh_dsn + strlen("sqlite://"));
    return again == ODBOX_OK;
}

/* A delivery's worker threads end after odbox_delivery_free returns (the
 * last one frees the pool): waits, at most 5 s, until this is the only
 * thread, so that a run's frees are counted in its own run. */
static void wait_for_threads(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)getpid());
    for (int i = 0; i < 500; i++) {
        DIR *d = opendir(path);
        int n = 0;
        for (struct dirent *e; d && (e = readdir(d)) != NULL;)
            n += e->d_name[0] != '.';
        if (d)
            closedir(d);
        if (n <= 1)
            return;
        usleep(10 * 1000);
    }
    fprintf(stderr, "oom: threads still running after 5 s\n");
}

typedef struct scenario {
    const char *name;
    int (*run)(void);
    void (*prepare)(void);  /* before each run, not failing (NULL: none) */
    int (*verify)(int rc);  /* after each run, not failing: 1 when the database holds what rc says */
    int leak_check; /* the allocations a run did not free are counted (see wait_for_threads) */
    int stride; /* fail allocations 1, 1 + stride, ... (0: every one): for the long scenarios */
} scenario;

static int run_scenario(const scenario *sc)
{
    int bad = 0;
    long runs = 0, nomem = 0, recovered = 0;
    /* a first run, not counted: what the process allocates once and
     * keeps is not a run's leak (the first fan-out and handling round
     * keeps 4 allocations, of libsqlite3 and of one statement's columns;
     * no later run keeps any, and no file stays open) */
    if (sc->prepare)
        sc->prepare();
    int rc0 = sc->run();
    wait_for_threads();
    if (sc->verify && !sc->verify(rc0))
        rc0 = ODBOX_EDB;
    if (rc0 != ODBOX_OK) {
        fprintf(stderr, "oom: %s: the first run: %s\n", sc->name, odbox_errname(rc0));
        return 1;
    }
    for (long k = 0;; k += sc->stride ? sc->stride : 1) {
        if (sc->prepare)
            sc->prepare();
        wait_for_threads();
        hit = 0;
        live = 0;
        counting = sc->leak_check;
        __atomic_store_n(&armed, k, __ATOMIC_RELAXED);
        int rc = sc->run();
        __atomic_store_n(&armed, -1, __ATOMIC_RELAXED);
        wait_for_threads();
        counting = 0;
        runs++;
        int stored = sc->verify ? sc->verify(rc) : 1;
        if (!hit) {
            if (rc != ODBOX_OK || !stored || (sc->leak_check && live != 0)) {
                fprintf(stderr, "oom: %s: the run without a failure: %s, %ld allocations not freed\n", sc->name,
                        odbox_errname(rc), live);
                bad++;
            }
            break;
        }
        if (rc == ODBOX_ENOMEM)
            nomem++;
        else if (rc == ODBOX_OK)
            recovered++;
        if (rc == ODBOX_OK && getenv("ODBOX_OOM_VERBOSE")) /* where: addr2line -e oom -f <offset> */
            fprintf(stderr, "oom: %s: allocation %ld failed at +0x%lx, and the run succeeded\n", sc->name, k + 1,
                    (unsigned long)((const char *)hit_at - __executable_start));
        if ((rc != ODBOX_OK && rc != ODBOX_ENOMEM) || !stored || (sc->leak_check && live != 0)) {
            fprintf(stderr, "oom: %s: allocation %ld failed: %s, %ld allocations not freed\n", sc->name, k + 1,
                    odbox_errname(rc), live);
            bad++;
        }
    }
    printf("oom: %s: %ld runs (odbox's allocations failed one at a time%s): %ld ended ODBOX_ENOMEM, %ld succeeded "
           "anyway, %d wrong\n",
           sc->name, runs - 1, sc->stride ? ", every 5th" : "", nomem, recovered, bad);
    return bad;
}

int main(void)
{
    const char *srcdir = getenv("ODBOX_SRCDIR");
    if (getenv("ODBOX_OOM_TRACE")) {
        void *frames[2];
        backtrace(frames, 2); /* its first call loads libgcc_s, allocating */
        trace = 1;
    }
    char dir[] = "/tmp/odbox-oom.XXXXXX", user_dir[512];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(dsn, sizeof dsn, "sqlite://%s/oom.db", dir);
    snprintf(user_dir, sizeof user_dir, "%s/examples/quickstart/migrations", srcdir ? srcdir : ".");
    odbox_registry *r = NULL;
    odbox_error e;
    odbox_migrate_options mo = {.user_dir = user_dir, .user_set = "quickstart"};
    if (odbox_registry_open_dsn(dsn, &r, &e) || odbox_migrate_registry(r, &mo, &e)) {
        fprintf(stderr, "oom: setup: %s\n", e.message);
        return 1;
    }
    odbox_registry_free(&r);

    static const scenario scenarios[] = {
        {"registry config", parse_config, NULL, NULL, 1, 0},
        {"DSNs", parse_dsns, NULL, NULL, 1, 0},
        {"models and executor", models_and_executor, NULL, NULL, 1, 0},
        {"an action on SQLite", execute_action, NULL, verify_action, 1, 0},
        {"a keyed action on SQLite", execute_keyed, NULL, verify_keyed, 1, 0},
        {"an own transaction on SQLite", own_transaction, NULL, verify_own_transaction, 1, 0},
        {"a fan-out and a handling round on SQLite", deliver, prepare_delivery, verify_delivery, 1, 0},
        {"operations on SQLite", operations, prepare_ops, verify_ops, 1, 5},
        {"migrations of a new SQLite file", migrate_fresh, prepare_migration, verify_migration, 1, 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        bad += run_scenario(&scenarios[i]);
    char path[600];
    snprintf(path, sizeof path, "%s/oom.db", dir);
    unlink(path);
    rmdir(dir);
    return bad ? 1 : 0;
}
