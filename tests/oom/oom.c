/* odbox — allocation failures, the way SQLite tests them: each scenario
 * runs again and again, the k-th allocation made by odbox's own code
 * failing once in run k (k = 1, 2, ...), until a run makes fewer than k
 * allocations. Every run must end without a crash, with ODBOX_OK or
 * ODBOX_ENOMEM (a run whose failed allocation was optional may still
 * succeed, and must then have done all its work), holding no allocation
 * it did not free, and, where it writes, having written all of its
 * transaction or none of it. The writing scenarios run on SQLite, then
 * on PostgreSQL and MariaDB (a database and an eventlog of their own on
 * the servers of ODBOX_TEST_PG_DSN and ODBOX_TEST_MARIADB_DSN).
 *
 * The allocator below stands in for the C library's in this program: its
 * malloc, calloc, realloc, strdup and free are the ones every library of
 * the process calls. Only calls whose return address lies in this
 * program's text fail: odbox is linked in statically, so those are
 * odbox's (and this file's, which allocates nothing while armed); json-c,
 * unixODBC and the drivers are not made to fail. What a run did not free
 * is counted of the allocations made by odbox and by json-c (whose
 * objects odbox owns); unixODBC, the drivers and their libraries keep
 * caches of their own from one connection to the next, made and dropped
 * at times that vary. Not built with the sanitizers, which bring their
 * own allocator. */
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
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
static int counting;
static long own_live; /* while counting: odbox's and json-c's allocations made minus those freed */
static int trace; /* debugging: ODBOX_OOM_TRACE=1 prints the stack of each failed allocation */

static int in_text(const void *ra) { return (const char *)ra >= __executable_start && (const char *)ra < etext; }

/* json-c's executable segment, found at start (find_json_c) */
static const char *json_c_text, *json_c_etext;

static int json_c_segment(struct dl_phdr_info *info, size_t size, void *base)
{
    (void)size;
    if ((void *)info->dlpi_addr != base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD && (info->dlpi_phdr[i].p_flags & PF_X)) {
            json_c_text = (const char *)info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            json_c_etext = json_c_text + info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}

static int find_json_c(void)
{
    Dl_info di;
    if (!dladdr((void *)json_object_new_object, &di) || !di.dli_fbase)
        return -1;
    dl_iterate_phdr(json_c_segment, di.dli_fbase);
    return json_c_text ? 0 : -1;
}

static int counted_caller(const void *ra)
{
    return in_text(ra) || ((const char *)ra >= json_c_text && (const char *)ra < json_c_etext);
}

static int fail_now(const void *ra)
{
    if (__atomic_load_n(&armed, __ATOMIC_RELAXED) < 0 || !in_text(ra))
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

/* odbox's and json-c's live allocations of a counted run, by address
 * (open addressing, a freed slot marked GONE), so that a free knows whose
 * block it frees. */
#define OWN_SLOTS (1 << 18)
#define GONE ((void *)1)
static void *own[OWN_SLOTS];
static size_t own_used; /* slots taken, GONE ones too */
static int own_lock;

static void own_reset(void)
{
    memset(own, 0, sizeof own);
    own_used = 0;
    own_live = 0;
}

static size_t own_slot(const void *p) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15u >> 46; }

static void own_add(void *p)
{
    while (__atomic_exchange_n(&own_lock, 1, __ATOMIC_ACQUIRE))
        ;
    if (own_used < OWN_SLOTS - 1) { /* else uncounted: the check only misses what it cannot hold */
        size_t i = own_slot(p);
        while (own[i] && own[i] != GONE)
            i = (i + 1) & (OWN_SLOTS - 1);
        own_used += !own[i];
        own[i] = p;
        own_live++;
    }
    __atomic_store_n(&own_lock, 0, __ATOMIC_RELEASE);
}

static int own_remove(const void *p)
{
    int found = 0;
    while (__atomic_exchange_n(&own_lock, 1, __ATOMIC_ACQUIRE))
        ;
    for (size_t i = own_slot(p); own[i]; i = (i + 1) & (OWN_SLOTS - 1))
        if (own[i] == p) {
            own[i] = GONE;
            own_live--;
            found = 1;
            break;
        }
    __atomic_store_n(&own_lock, 0, __ATOMIC_RELEASE);
    return found;
}

static void *counted(void *p, const void *ra)
{
    if (p && __atomic_load_n(&counting, __ATOMIC_RELAXED) && counted_caller(ra))
        own_add(p);
    return p;
}

void *malloc(size_t n)
{
    const void *ra = __builtin_return_address(0);
    return fail_now(ra) ? NULL : counted(__libc_malloc(n), ra);
}

void *calloc(size_t n, size_t size)
{
    const void *ra = __builtin_return_address(0);
    return fail_now(ra) ? NULL : counted(__libc_calloc(n, size), ra);
}

void *realloc(void *p, size_t n)
{
    const void *ra = __builtin_return_address(0);
    if (fail_now(ra))
        return NULL;
    void *q = __libc_realloc(p, n);
    if (!p)
        counted(q, ra);
    else if (q && __atomic_load_n(&counting, __ATOMIC_RELAXED) && own_remove(p))
        own_add(q);
    return q;
}

char *strdup(const char *s)
{
    const void *ra = __builtin_return_address(0);
    if (fail_now(ra))
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = counted(__libc_malloc(n), ra);
    return d ? memcpy(d, s, n) : NULL;
}

void free(void *p)
{
    if (p && __atomic_load_n(&counting, __ATOMIC_RELAXED))
        own_remove(p);
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

/* The writing scenarios' database: a SQLite file, then one on each
 * server (on_server). ev is the eventlog tables' prefix there. */
static char dsn[600];
static const char *ev = "eventlog_";

static int parse_config(void)
{
    static const char text[] = "{\"default_shard\": \"0.0\", \"pool\": {\"size\": 3},\n"
                               " \"shards\": [{\"group\": 0, \"member\": 0, \"primary\": \"postgresql://u@h1/app?eventlog=ev\",\n"
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

static const odbox_action open_account_action = {"OpenAccountAction", open_account, NULL};

/* Reads and writes of the checks, with the allocator disarmed. Each %s
 * of the SQL is the eventlog tables' prefix. */
static int64_t query(const char *fmt)
{
    odbox_conn *c = NULL;
    odbox_error e;
    int64_t v = -1;
    char sql[512];
    snprintf(sql, sizeof sql, fmt, ev, ev, ev);
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
    static const char *const tables[] = {"accounts", "events", "event_notifications", "idempotency_keys"};
    if (odbox_conn_open(dsn, &c, &e) != ODBOX_OK) {
        fprintf(stderr, "oom: %s\n", e.message);
        exit(1);
    }
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "DELETE FROM %s%s", i ? ev : "", tables[i]);
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
    int64_t accounts = query("SELECT COUNT(*) FROM accounts"), events = query("SELECT COUNT(*) FROM %sevents");
    int ok = rc == ODBOX_OK ? accounts == want_accounts && events == want_events : accounts == 0 && events == 0;
    if (!ok)
        fprintf(stderr, "oom: %s: %lld accounts, %lld events\n", odbox_errname(rc), (long long)accounts,
                (long long)events);
    empty_tables();
    return ok;
}

/* The action, with an idempotency key or without (NULL): its row and
 * two events, or nothing. */
static int run_open_account(const char *key)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_result res = {0};
    odbox_error e;
    int rc = open_executor(dsn, &r, &exe, &e);
    if (rc == ODBOX_OK)
        rc = key ? odbox_execute_keyed(exe, &open_account_action, NULL, key, NULL, &res, &e)
                 : odbox_execute(exe, &open_account_action, NULL, NULL, &res, &e);
    if (rc != ODBOX_OK && rc != ODBOX_ENOMEM)
        fprintf(stderr, "oom: %s: %s\n", open_account_action.name, e.message);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc;
}

static int execute_action(void) { return run_open_account(NULL); }

/* The caller's own transaction: its INSERT and one event, or nothing. */
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
    int64_t keys = query("SELECT COUNT(*) FROM %sidempotency_keys");
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

static const odbox_handler audit = {.name = "audit", .event_type = "AccountOpenedEvent", .handle = on_opened};

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

/* Events flipped to delivered without their notification row. */
#define LOST_SQL                                                                                                      \
    "SELECT COUNT(*) FROM %sevents e WHERE e.event_type = 'AccountOpenedEvent' AND e.delivered = TRUE AND NOT "       \
    "EXISTS (SELECT 1 FROM %sevent_notifications n WHERE n.event_id = e.id AND n.handler_name = 'audit')"

/* What any delivery run must leave: no event flipped without its
 * notification row, at most one call, no success without its call; with
 * complete, also the call made and its success recorded. */
static int delivered_right(int rc, int complete)
{
    int calls = __atomic_load_n(&handled, __ATOMIC_RELAXED);
    int64_t lost = query(LOST_SQL), done = query("SELECT COUNT(*) FROM %sevent_notifications WHERE state = 'SUCCEEDED'");
    int ok = lost == 0 && done <= calls && calls <= 1 && (!complete || (rc == ODBOX_OK && calls == 1 && done == 1));
    if (!ok || (getenv("ODBOX_OOM_VERBOSE") && calls == 0))
        fprintf(stderr, "oom: %s: %lld events lost, %d calls, %lld notifications succeeded\n", odbox_errname(rc),
                (long long)lost, calls, (long long)done);
    empty_tables();
    return ok;
}

/* a call that could not be started (no memory for it, or for a worker
 * thread) leaves its row due, and the round says so */
static int verify_delivery(int rc) { return delivered_right(rc, rc == ODBOX_OK); }

/* The delivery running as jobs (its loops, its worker threads, and on
 * PostgreSQL its LISTEN session) and an executor attached to it: an
 * action's event reaches the handler (waited for at most 1.5 s), then a
 * stop. The run without a failure called the handler once and recorded
 * it; any run delivered no event without its notification row. */
static int deliver_in_background(void)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_handlers *h = NULL;
    odbox_delivery *d = NULL;
    odbox_jobs *jobs = NULL;
    odbox_result res = {0};
    odbox_error e;
    odbox_delivery_config dc = {.fanout_poll_ms = 50, .handling_poll_ms = 50, .workers = 2};
    odbox_jobs_config jc = {.poll_interval_ms = 20, .heartbeat_interval_ms = 50};
    handled = 0;
    int rc = open_executor(dsn, &r, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_new(&h, &e);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_add(h, &audit, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(r, h, &dc, &d, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(r, &jc, &jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(d, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_attach(d, exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_execute(exe, &open_account_action, NULL, NULL, &res, &e);
    for (int i = 0; rc == ODBOX_OK && i < 150 && !__atomic_load_n(&handled, __ATOMIC_RELAXED); i++)
        usleep(10 * 1000);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_stop(jobs, &e);
    odbox_result_clear(&res);
    odbox_jobs_free(&jobs);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc;
}

/* a failure in the loops' threads does not reach rc: the run without
 * one delivered */
static int verify_background(int rc) { return delivered_right(rc, !hit); }

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
    int64_t lost = query(LOST_SQL);
    empty_tables();
    return lost == 0;
}

/* The job registry: a job whose first run is due at start, run once on
 * its thread (waited for at most 1 s), its outcome written, then a stop;
 * the operators' calls on its row. Whatever failed, the process neither
 * crashes nor keeps anything, and the row is left free or held by a run
 * that is found dead later. */
static int ticks;

static int tick(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)ctx, (void)user, (void)err;
    __atomic_add_fetch(&ticks, 1, __ATOMIC_RELAXED);
    return ODBOX_OK;
}

static void prepare_jobs(void)
{
    odbox_conn *c = NULL;
    odbox_error e;
    ticks = 0;
    if (odbox_conn_open(dsn, &c, &e) != ODBOX_OK || odbox_conn_exec(c, "DELETE FROM scheduled_tasks", &e) != ODBOX_OK) {
        fprintf(stderr, "oom: jobs: %s\n", e.message);
        exit(1);
    }
    odbox_conn_close(&c);
}

static int run_jobs(void)
{
    odbox_registry *r = NULL;
    odbox_jobs *jobs = NULL;
    odbox_job_info *infos = NULL;
    size_t ninfos = 0;
    odbox_error e;
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .heartbeat_interval_ms = 50};
    const odbox_job job = {"oom-tick", odbox_schedule_fixed_delay(3600 * 1000), tick, NULL};
    int rc = odbox_registry_open_dsn(dsn, &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(r, &cfg, &jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_add(jobs, &job, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, &e);
    for (int i = 0; rc == ODBOX_OK && i < 100 && !__atomic_load_n(&ticks, __ATOMIC_RELAXED); i++)
        usleep(10 * 1000);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_stop(jobs, &e);
    odbox_pool *pool = r ? odbox_shard_primary(odbox_registry_default_shard(r)) : NULL;
    if (rc == ODBOX_OK)
        rc = odbox_jobs_list(pool, &infos, &ninfos, &e);
    odbox_job_infos_free(&infos, ninfos);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_pause(pool, "oom-tick", &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_resume(pool, "oom-tick", &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_run_now(pool, "oom-tick", &e);
    odbox_jobs_free(&jobs);
    odbox_registry_free(&r);
    return rc;
}

static int verify_jobs(int rc)
{
    /* the run without a failure ran the job once and wrote its outcome */
    return hit || (rc == ODBOX_OK && __atomic_load_n(&ticks, __ATOMIC_RELAXED) == 1 &&
                   query("SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = 'oom-tick' AND picked = FALSE") == 1);
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

/* A run must also close every descriptor it opened (a connection left
 * open holds one, whatever the driver allocated for it). */
static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

typedef struct scenario {
    const char *name;
    int (*run)(void);
    void (*prepare)(void);  /* before each run, not failing (NULL: none) */
    int (*verify)(int rc);  /* after each run, not failing: 1 when the database holds what rc says */
    int leak_check; /* the allocations and descriptors a run did not free are counted (see wait_for_threads) */
    int stride; /* fail allocations 1, 1 + stride, ... (0: every one): for the long scenarios */
} scenario;

/* Run k of sc (k: the allocations to succeed first), its verify, and its
 * count of what it did not free; 1 when it kept something. */
static int one_run(const scenario *sc, long k, int *rc, long *left, int *fds, int *stored)
{
    if (sc->prepare)
        sc->prepare();
    wait_for_threads();
    hit = 0;
    own_reset();
    *fds = open_fds();
    counting = sc->leak_check;
    __atomic_store_n(&armed, k, __ATOMIC_RELAXED);
    *rc = sc->run();
    __atomic_store_n(&armed, -1, __ATOMIC_RELAXED);
    wait_for_threads();
    counting = 0;
    *left = own_live;
    *fds = open_fds() - *fds;
    *stored = sc->verify ? sc->verify(*rc) : 1;
    return sc->leak_check && (*left != 0 || *fds != 0);
}

static int run_scenario(const scenario *sc, const char *where)
{
    int bad = 0;
    long runs = 0, nomem = 0, recovered = 0;
    /* debugging: ODBOX_OOM_ONLY=text runs the scenarios whose name holds
     * it, ODBOX_OOM_FROM=k from the k-th allocation on, one at a time */
    const char *only = getenv("ODBOX_OOM_ONLY"), *from = getenv("ODBOX_OOM_FROM");
    if (only && !strstr(sc->name, only))
        return 0;
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
        fprintf(stderr, "oom: %s%s: the first run: %s\n", sc->name, where, odbox_errname(rc0));
        return 1;
    }
    for (long k = from ? atol(from) - 1 : 0;; k += sc->stride && !from ? sc->stride : 1) {
        int rc, fds, stored;
        long left;
        int leaked = one_run(sc, k, &rc, &left, &fds, &stored);
        if (leaked && hit && stored && (rc == ODBOX_OK || rc == ODBOX_ENOMEM)) {
            /* once (in CI, under load) a run kept 36 allocations that the
             * same failure again did not: what does not repeat is noted,
             * not counted; a leak on an error path repeats */
            long left1 = left;
            int fds1 = fds;
            if (!(leaked = one_run(sc, k, &rc, &left, &fds, &stored)))
                fprintf(stderr, "oom: %s%s: allocation %ld failed: %ld allocations not freed, %d descriptors left "
                        "open; not so when it failed again (not counted)\n", sc->name, where, k + 1, left1, fds1);
        }
        runs++;
        if (!hit) {
            if (rc != ODBOX_OK || !stored || leaked) {
                fprintf(stderr, "oom: %s%s: the run without a failure: %s, %ld allocations not freed, %d "
                        "descriptors left open\n", sc->name, where, odbox_errname(rc), left, fds);
                bad++;
            }
            break;
        }
        if (rc == ODBOX_ENOMEM)
            nomem++;
        else if (rc == ODBOX_OK)
            recovered++;
        if (rc == ODBOX_OK && getenv("ODBOX_OOM_VERBOSE")) /* where: addr2line -e oom -f <offset> */
            fprintf(stderr, "oom: %s%s: allocation %ld failed at +0x%lx, and the run succeeded\n", sc->name, where,
                    k + 1, (unsigned long)((const char *)hit_at - __executable_start));
        if ((rc != ODBOX_OK && rc != ODBOX_ENOMEM) || !stored || leaked) {
            fprintf(stderr, "oom: %s%s: allocation %ld failed: %s, %ld allocations not freed, %d descriptors left "
                    "open\n", sc->name, where, k + 1, odbox_errname(rc), left, fds);
            bad++;
        }
    }
    printf("oom: %s%s: %ld runs (odbox's allocations failed one at a time", sc->name, where, runs - 1);
    if (sc->stride && !from)
        printf(", every %dth", sc->stride);
    printf("): %ld ended ODBOX_ENOMEM, %ld succeeded anyway, %d wrong\n", nomem, recovered, bad);
    return bad;
}

/* Migrates the database of dsn (the quickstart's accounts, the eventlog). */
static int migrate(const char *srcdir)
{
    char user_dir[512];
    snprintf(user_dir, sizeof user_dir, "%s/examples/quickstart/migrations", srcdir ? srcdir : ".");
    odbox_registry *r = NULL;
    odbox_error e;
    odbox_migrate_options mo = {.user_dir = user_dir, .user_set = "quickstart"};
    int rc = odbox_registry_open_dsn(dsn, &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_migrate_registry(r, &mo, &e);
    if (rc != ODBOX_OK)
        fprintf(stderr, "oom: setup of %s: %s\n", dsn, e.message);
    odbox_registry_free(&r);
    return rc;
}

/* On base's server, drops the databases name and name_ev (MySQL's and
 * MariaDB's eventlog is one) and, with create, makes name anew. */
static int server_database(const char *base, const char *name, int create)
{
    odbox_conn *c = NULL;
    odbox_error e;
    char sql[128];
    int rc = odbox_conn_open(base, &c, &e);
    for (int i = 0; i < 3 && rc == ODBOX_OK; i++) {
        snprintf(sql, sizeof sql, i < 2 ? "DROP DATABASE IF EXISTS %s%s" : "CREATE DATABASE %s", name,
                 i == 1 ? "_ev" : "");
        if (i < 2 || create)
            rc = odbox_conn_exec(c, sql, &e);
    }
    if (rc != ODBOX_OK)
        fprintf(stderr, "oom: %s: %s\n", sql, e.message);
    odbox_conn_close(&c);
    return rc;
}

/* The scenarios on a database of their own (and an eventlog of their
 * own) on the server of the DSN in $var, dropped afterwards. Without the
 * variable: skipped, or under CI=true a failure. */
static int on_server(const char *label, const char *var, const scenario *const *scs, size_t n, const char *srcdir)
{
    const char *base = getenv(var), *hosts = base ? strstr(base, "://") : NULL;
    const char *query = base ? strchr(base, '?') : NULL, *slash = NULL;
    for (const char *p = hosts ? hosts + 3 : NULL; p && *p && p != query; p++)
        if (*p == '/') /* the last before the query: the database's name follows */
            slash = p;
    if (!slash) {
        if (getenv("CI") && strcmp(getenv("CI"), "true") == 0) {
            fprintf(stderr, "oom: no %s under CI=true (%s unset or without a database)\n", label, var);
            return 1;
        }
        fprintf(stderr, "*** SKIPPED: oom on %s: %s unset (run through tests/db/with-servers.sh)\n", label, var);
        return 0;
    }
    char name[64], where[64];
    static char prefix[80];
    snprintf(name, sizeof name, "odbox_oom_%d", (int)getpid());
    snprintf(dsn, sizeof dsn, "%.*s%s%s%seventlog=%s_ev", (int)(slash + 1 - base), base, name, query ? query : "",
             query ? "&" : "?", name);
    snprintf(prefix, sizeof prefix, "%s_ev.", name);
    snprintf(where, sizeof where, " on %s", label);
    ev = prefix;
    if (server_database(base, name, 1) != ODBOX_OK || migrate(srcdir) != ODBOX_OK)
        return 1;
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += run_scenario(scs[i], where);
    return bad + (server_database(base, name, 0) != ODBOX_OK);
}

int main(void)
{
    const char *srcdir = getenv("ODBOX_SRCDIR");
    if (find_json_c() != 0) {
        fprintf(stderr, "oom: json-c's code not found in the process\n");
        return 1;
    }
    if (getenv("ODBOX_OOM_TRACE")) {
        void *frames[2];
        backtrace(frames, 2); /* its first call loads libgcc_s, allocating */
        trace = 1;
    }
    static const scenario alone[] = {
        {"registry config", parse_config, NULL, NULL, 1, 0},
        {"DSNs", parse_dsns, NULL, NULL, 1, 0},
        {"models and executor", models_and_executor, NULL, NULL, 1, 0},
    };
    static const scenario writing[] = {
        {"an action", execute_action, NULL, verify_action, 1, 0},
        {"a keyed action", execute_keyed, NULL, verify_keyed, 1, 0},
        {"an own transaction", own_transaction, NULL, verify_own_transaction, 1, 0},
        {"a fan-out and a handling round", deliver, prepare_delivery, verify_delivery, 1, 0},
        {"operations", operations, prepare_ops, verify_ops, 1, 5},
        {"the job registry", run_jobs, prepare_jobs, verify_jobs, 1, 0},
    };
    static const scenario background = {"a delivery as jobs (with LISTEN)", deliver_in_background, NULL,
                                        verify_background, 1, 7};
    static const scenario migration = {"migrations of a new file", migrate_fresh, prepare_migration, verify_migration,
                                       1, 0};
    int bad = 0;
    for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++)
        bad += run_scenario(&alone[i], "");

    char dir[] = "/tmp/odbox-oom.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(dsn, sizeof dsn, "sqlite://%s/oom.db", dir);
    if (migrate(srcdir) != ODBOX_OK)
        return 1;
    for (size_t i = 0; i < sizeof writing / sizeof writing[0]; i++)
        bad += run_scenario(&writing[i], " on SQLite");
    bad += run_scenario(&migration, " on SQLite");
    char path[600];
    snprintf(path, sizeof path, "%s/oom.db", dir);
    unlink(path);
    rmdir(dir);

    /* the servers: their dialects' SQL, their drivers; PostgreSQL's
     * one-statement writes, wake-up thread and LISTEN session */
    const scenario *on_servers[sizeof writing / sizeof writing[0] + 1];
    for (size_t i = 0; i < sizeof writing / sizeof writing[0]; i++)
        on_servers[i] = &writing[i];
    on_servers[sizeof writing / sizeof writing[0]] = &background;
    bad += on_server("PostgreSQL", "ODBOX_TEST_PG_DSN", on_servers, sizeof on_servers / sizeof on_servers[0], srcdir);
    bad += on_server("MariaDB", "ODBOX_TEST_MARIADB_DSN", on_servers, sizeof writing / sizeof writing[0], srcdir);
    return bad ? 1 : 0;
}
