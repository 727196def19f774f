/* odbox-bench-deposit — deposit actions through the odbox executor.
 *
 * N threads share one executor over a one-shard registry (pool size N).
 * Each thread owns one wallet (so clients never conflict) and loops:
 * odbox_execute of a deposit action whose perform reads the wallet
 * (odbox_repo_find on the primary: one SELECT in autocommit, on a pooled
 * connection), stages balance + 1 (odbox_plan_update) and emits one event
 * with a fixed JSON payload (odbox_plan_emit). The executor then, on a
 * pooled connection, writes one UPDATE ... WHERE id = ? AND version = ?
 * and one INSERT into <eventlog>.events: on PostgreSQL as ONE statement
 * in autocommit (the INSERT depends on the UPDATE in a data-modifying
 * WITH), elsewhere in ONE transaction. Prints actions per second (total and
 * per client), the latency of each action (avg, p50, p99, max; from a
 * log-linear histogram, < 0.8 % bucket error), the process's CPU time per
 * action over the measured window, and the retries the executor took
 * (none are expected: the wallets are disjoint).
 *
 * --keys runs every deposit with its own idempotency key (as each request
 * would carry one; odbox_execute_keyed): one SELECT of the key before
 * perform and the key's INSERT in the transaction (on PostgreSQL, one
 * more item of the one statement). With --owntx, every transaction
 * carries its own key (odbox_tx_config.idempotency_key): the key's INSERT
 * as its first statement, no read. --claim-keys-first (with --keys, not
 * --owntx): odbox_executor_claim_keys_first, the key's INSERT opening the
 * transaction before perform on every dialect. Compare a run with and one
 * without, on the same server, for the cost of a key (bench/keys.sh).
 *
 * bench/deposit.sh runs pgbench (PostgreSQL) and mariadb-slap (MariaDB)
 * with the same statements (from --print-sql) on the same server in the
 * same run and prints the ratios.
 *
 * Usage: odbox-bench-deposit [--dsn DSN] --clients N --seconds S [--json] [--owntx] [--keys]
 *                            [--claim-keys-first] [--table NAME] [--eventlog NAME] [--payload JSON]
 *        odbox-bench-deposit [--dsn DSN] --setup --clients N [--table NAME] [--eventlog NAME]
 *        odbox-bench-deposit [--dsn DSN | --dialect NAME] --print-sql [--clients N] [...]
 * Without --dsn the DSN comes from ODBOX_BENCH_DSN (keeps the password off
 * the command line). --setup applies the framework migrations (from
 * $ODBOX_MIGRATIONS_DIR, else the installed folder), drops and creates
 * the wallet table, empties <eventlog>.events and inserts N wallets with
 * balance 0: wallet k has id 00000000-0000-4000-8000-<k as 12 digits>
 * (a v4-shaped id: it routes to the default shard). Exit status: 0 when
 * every action succeeded, 1 on any error, 2 on a usage error. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <odbox/action.h>
#include <odbox/db.h>
#include <odbox/dialect.h>
#include <odbox/error.h>
#include <odbox/migrate.h>
#include <odbox/model.h>
#include <odbox/registry.h>
#include <odbox/tx.h>
#include "bench_util.h"

/* What every event row carries besides the per-action values; the raw
 * clients get the same texts from --print-sql. */
#define NAMESPACE "bench.odbox"
#define ACTION_NAME "BenchDeposit"
#define MODEL_TYPE_NAME "BenchWallet"
#define EVENT_TYPE_NAME "BenchWalletDepositedEvent"
#define WALLET_ID_PREFIX "00000000-0000-4000-8000-"
#define DEFAULT_PAYLOAD "{\"amount\":1,\"currency\":\"EUR\",\"reference\":\"bench-deposit\"}"
#define DEPOSIT_AMOUNT 1

/* ---- the model, the event, the action ------------------------------------------ */

static const odbox_column wallet_columns[] = {
    {.name = "owner", .type = ODBOX_TYPE_TEXT, .nullable = 0, .max_length = 200},
    {.name = "balance", .type = ODBOX_TYPE_INT64, .nullable = 0},
};

static odbox_model_type g_wallet_type = {
    .name = MODEL_TYPE_NAME,
    .table = "bench_wallets", /* --table */
    .kind = ODBOX_KIND_MODEL,
    .columns = wallet_columns,
    .ncolumns = sizeof wallet_columns / sizeof wallet_columns[0],
};

static const odbox_event_type g_deposited = {EVENT_TYPE_NAME};

typedef struct worker {
    pthread_t th;
    int id;
    char wallet_id[40];
    json_object *payload; /* this thread's own: json-c caches the serialised text in the object */
    odbox_action action;  /* user = this worker */
    uint64_t count;
    uint64_t retries;
    uint64_t lat_sum_ns;
    uint64_t lat_max_ns;
    uint64_t *hist;
    uint64_t end_ns;
    int failed;
    odbox_error err;
} worker;

static odbox_registry *g_registry;
static odbox_executor *g_exe;
static pthread_barrier_t g_ready, g_go;
static uint64_t g_start_ns, g_deadline_ns; /* written before g_go */
static atomic_int g_stop;
static int g_owntx;                        /* --owntx */
static char g_own_update[256];             /* --owntx: the caller's own UPDATE */
static int g_keys;                         /* --keys: a new idempotency key per deposit */
static int g_claim_first;                  /* --claim-keys-first */

static void wallet_id_of(int k, char out[40])
{
    snprintf(out, 40, WALLET_ID_PREFIX "%012d", k);
}

static int fail_msg(odbox_error *err, int code, const char *msg)
{
    if (err) {
        odbox_error_clear(err);
        err->code = code;
        snprintf(err->message, sizeof err->message, "%s", msg);
    }
    return code;
}

/* params: {"wallet_id": "...", "amount": 1}. Reads the wallet (primary),
 * stages balance + amount and emits one event. Never writes. */
static int perform_deposit(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user,
                           odbox_error *err)
{
    worker *w = user;
    json_object *v;
    if (!json_object_object_get_ex(params, "wallet_id", &v) || !json_object_is_type(v, json_type_string))
        return fail_msg(err, ODBOX_EINVAL, "deposit: parameter 'wallet_id' missing");
    const char *id = json_object_get_string(v);
    if (!json_object_object_get_ex(params, "amount", &v) || !json_object_is_type(v, json_type_int))
        return fail_msg(err, ODBOX_EINVAL, "deposit: parameter 'amount' missing");
    int64_t amount = json_object_get_int64(v), balance = 0;
    odbox_model *m = NULL;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &g_wallet_type, id, ODBOX_READ_PRIMARY, &m, err);
    if (rc == ODBOX_OK && (rc = odbox_model_get_int64(m, "balance", &balance, err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(m, "balance", balance + amount, err)) == ODBOX_OK &&
        (rc = odbox_plan_update(plan, m, NULL, err)) == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &g_deposited, w->payload, err);
    odbox_model_free(&m);
    return rc;
}

/* --owntx: a deposit as a service with its own SQL writes it (odbox/tx.h):
 * BEGIN, its own UPDATE ... SET balance = balance + 1 (no read, no
 * version), one event, COMMIT: what the raw client's transaction holds
 * too, plus the events INSERT. */
static int own_deposit(worker *w, json_object *params, const char *key, odbox_error *err)
{
    odbox_tx *tx = NULL;
    odbox_tx_config cfg = {.action_name = ACTION_NAME, .params = params, .idempotency_key = key};
    odbox_stmt *s = NULL;
    int rc = odbox_tx_begin(g_exe, (odbox_shard_id){0, 0}, &cfg, &tx, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_prepare(odbox_tx_conn(tx), g_own_update, &s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 1, DEPOSIT_AMOUNT, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_uuid(s, 2, w->wallet_id, err)) == ODBOX_OK &&
        (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && odbox_stmt_rows_affected(s) != 1)
        rc = fail_msg(err, ODBOX_ENOTFOUND, "own deposit: no such wallet");
    odbox_stmt_free(&s);
    if (rc == ODBOX_OK && (rc = odbox_tx_emit(tx, MODEL_TYPE_NAME, w->wallet_id, &g_deposited, w->payload, err)) == ODBOX_OK)
        rc = odbox_tx_commit(&tx, err);
    odbox_tx_rollback(&tx);
    return rc;
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&g_ready); /* main opened the pool's connections */
    pthread_barrier_wait(&g_go);    /* main has set the clock */

    uint64_t t0 = now_ns();
    while (!w->failed && !atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        /* New params per action, as a caller handling requests builds them. */
        json_object *params = json_object_new_object();
        if (params) {
            json_object_object_add(params, "wallet_id", json_object_new_string(w->wallet_id));
            json_object_object_add(params, "amount", json_object_new_int64(DEPOSIT_AMOUNT));
        }
        odbox_result res;
        if (params)
            memset(&res, 0, sizeof res);
        char key[96];
        snprintf(key, sizeof key, "bench-%ld-%llx-%d-%llu", (long)getpid(), (unsigned long long)g_start_ns, w->id,
                 (unsigned long long)w->count);
        int rc = !params  ? fail_msg(&w->err, ODBOX_ENOMEM, "out of memory")
                 : g_owntx ? own_deposit(w, params, g_keys ? key : NULL, &w->err)
                 : g_keys  ? odbox_execute_keyed(g_exe, &w->action, params, key, NULL, &res, &w->err)
                           : odbox_execute(g_exe, &w->action, params, NULL, &res, &w->err);
        uint64_t t1 = now_ns();
        json_object_put(params);
        if (params) {
            for (int i = 0; i < ODBOX_MAX_RETRY_RULES; i++)
                w->retries += (uint64_t)res.retries[i];
            odbox_result_clear(&res);
        }
        if (rc != ODBOX_OK) {
            w->failed = 1;
            atomic_store(&g_stop, 1);
            break;
        }
        uint64_t d = t1 - t0;
        w->count++;
        w->lat_sum_ns += d;
        if (d > w->lat_max_ns)
            w->lat_max_ns = d;
        w->hist[hist_index(d)]++;
        t0 = t1;
        if (t1 >= g_deadline_ns)
            break;
    }
    w->end_ns = now_ns();
    return NULL;
}

/* ---- SQL as the library writes it ---------------------------------------------
 * These texts mirror src/repository.c (read_shard: the select of
 * odbox_repo_find; odbox_repo_write_sql: the one-row UPDATE, whose SET
 * list is every column but id, version and created_date, in column order)
 * and src/persist.c (events_sql: the INSERT whose completion_date and
 * event_date are the database's clock, stmt_now_sql). Where the dialect
 * joins writes, write is what the executor sends instead of BEGIN, the
 * UPDATE, the INSERT and COMMIT: the two joined by the dialect's own
 * join_writes_sql, the INSERT in its one-row SELECT form. deposit.sh checks
 * them against the server's statement log once per run. */
typedef struct sqls {
    char select[512];
    char update[512];
    char insert[768];
    char write[2048]; /* "" where the dialect does not join writes */
} sqls;

/* name in the dialect's identifier quotes, as the repository writes the
 * model's table and columns. */
static const char *quoted(const odbox_dialect *d, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s", d->identifier_quote, name, d->identifier_quote);
    return buf;
}

static void build_sql(const odbox_dialect *d, const char *table, const char *eventlog, sqls *q)
{
    const char *ts_open = d->timestamp_read_open ? d->timestamp_read_open : "";
    const char *ts_close = d->timestamp_read_open ? d->timestamp_read_close : "";
    char t[160], id[8], ver[16], st[16], cd[24], ud[24], ow[16], ba[16];
    quoted(d, table, t, sizeof t), quoted(d, "id", id, sizeof id), quoted(d, "version", ver, sizeof ver);
    quoted(d, "state", st, sizeof st), quoted(d, "created_date", cd, sizeof cd);
    quoted(d, "updated_date", ud, sizeof ud), quoted(d, "owner", ow, sizeof ow), quoted(d, "balance", ba, sizeof ba);
    snprintf(q->select, sizeof q->select,
             "SELECT %s, %s, %s, %s%s%s, %s%s%s, %s, %s FROM %s WHERE state <> 'DELETED' AND id IN (%s) ORDER BY id",
             id, ver, st, ts_open, cd, ts_close, ts_open, ud, ts_close, ow, ba, t, d->uuid_param);
    snprintf(q->update, sizeof q->update,
             "UPDATE %s SET %s = ?, %s = ?, %s = ?, %s = ?, version = version + 1 WHERE id = %s AND version = ?", t,
             st, ud, ow, ba, d->uuid_param);
    snprintf(q->insert, sizeof q->insert,
             "INSERT INTO %s.events (id, namespace, action_id, action_name, action_params, started_date, "
             "completion_date, model_id, model_type, event_type, payload, event_date, delivered) "
             "VALUES (%s,?,%s,?,%s,?,%s,?,?,?,%s,%s,FALSE)",
             eventlog, d->uuid_param, d->uuid_param, d->json_param, d->stmt_now_sql, d->json_param, d->stmt_now_sql);
    q->write[0] = '\0';
    char insert_select[768], *joined = NULL;
    snprintf(insert_select, sizeof insert_select, "%.*sSELECT %s,?,%s,?,%s,?,%s,?,?,?,%s,%s,FALSE",
             (int)(strstr(q->insert, "VALUES ") - q->insert), q->insert, d->uuid_param, d->uuid_param, d->json_param,
             d->stmt_now_sql, d->json_param, d->stmt_now_sql);
    const char *const parts[] = {q->update, insert_select};
    if (d->join_writes_sql && d->join_writes_sql(d, parts, 2, 1, &joined, NULL) == ODBOX_OK)
        snprintf(q->write, sizeof q->write, "%s", joined);
    free(joined);
}

/* The action_params text odbox writes for client k (json-c, plain). */
static char *params_text(int k)
{
    char id[40];
    wallet_id_of(k, id);
    json_object *p = json_object_new_object();
    if (!p)
        return NULL;
    json_object_object_add(p, "wallet_id", json_object_new_string(id));
    json_object_object_add(p, "amount", json_object_new_int64(DEPOSIT_AMOUNT));
    char *s = strdup(json_object_to_json_string_ext(p, JSON_C_TO_STRING_PLAIN));
    json_object_put(p);
    return s;
}

/* ---- command line ---------------------------------------------------------- */

static void usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "odbox-bench-deposit: %s\n", msg);
    fprintf(stderr,
            "usage: odbox-bench-deposit [--dsn DSN] --clients N --seconds S [--json] [--owntx] [--keys]\n"
            "                           [--claim-keys-first] [--table NAME] [--eventlog NAME] [--payload JSON]\n"
            "       odbox-bench-deposit [--dsn DSN] --setup --clients N [--table NAME] [--eventlog NAME]\n"
            "       odbox-bench-deposit [--dsn DSN | --dialect NAME] --print-sql [--clients N]\n"
            "                           [--table NAME] [--eventlog NAME] [--payload JSON]\n"
            "Without --dsn, ODBOX_BENCH_DSN is used.\n");
    exit(2);
}

static int report(const char *what, const odbox_error *err)
{
    fprintf(stderr, "odbox-bench-deposit: %s: %s [%s] %s\n", what, odbox_errname(err->code), err->sqlstate,
            err->message);
    return 1;
}

static int open_registry(const char *dsn, const char *eventlog, int pool_size, odbox_error *err)
{
    odbox_shard_config sc = {
        .id = {0, 0},
        .primary_dsn = dsn,
        .eventlog = eventlog,
        .pool = {.size = pool_size, .acquire_timeout_ms = 60000},
    };
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    return odbox_registry_open(&cfg, &g_registry, err);
}

/* --setup: migrations, a fresh wallet table, empty events, N wallets. */
static int setup(const char *table, const char *eventlog, long clients)
{
    odbox_error err;
    odbox_error_clear(&err);
    odbox_migrate_options mo = {0};
    if (odbox_migrate_registry(g_registry, &mo, &err) != ODBOX_OK)
        return report("migrate", &err);
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(g_registry));
    odbox_conn *c = NULL;
    if (odbox_pool_acquire(pool, &c, &err) != ODBOX_OK)
        return report("connect", &err);
    const odbox_dialect *d = odbox_conn_dialect(c);
    char sql[1024];
    int rc = ODBOX_OK;
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", table);
    rc = odbox_conn_exec(c, sql, &err);
    if (rc == ODBOX_OK) {
        snprintf(sql, sizeof sql,
                 "CREATE TABLE %s (id %s NOT NULL PRIMARY KEY, version BIGINT NOT NULL, "
                 "state VARCHAR(24) NOT NULL, created_date %s NOT NULL, updated_date %s NOT NULL, "
                 "owner VARCHAR(200) NOT NULL, balance BIGINT NOT NULL)",
                 table, d->uuid_type, d->timestamp_type, d->timestamp_type);
        rc = odbox_conn_exec(c, sql, &err);
    }
    if (rc == ODBOX_OK) {
        snprintf(sql, sizeof sql, "TRUNCATE TABLE %s.events", eventlog);
        rc = odbox_conn_exec(c, sql, &err);
    }
    odbox_model **ms = calloc((size_t)clients, sizeof *ms);
    if (!ms)
        rc = fail_msg(&err, ODBOX_ENOMEM, "out of memory");
    for (long k = 0; k < clients && rc == ODBOX_OK; k++) {
        char id[40], owner[64];
        wallet_id_of((int)k, id);
        snprintf(owner, sizeof owner, "bench-client-%ld", k);
        if ((rc = odbox_model_new(&g_wallet_type, id, &ms[k], &err)) == ODBOX_OK &&
            (rc = odbox_model_set_text(ms[k], "owner", owner, &err)) == ODBOX_OK)
            rc = odbox_model_set_int64(ms[k], "balance", 0, &err);
    }
    if (rc == ODBOX_OK)
        rc = odbox_repo_insert(c, &g_wallet_type, ms, (size_t)clients, &err);
    for (long k = 0; ms && k < clients; k++)
        odbox_model_free(&ms[k]);
    free(ms);
    odbox_pool_release(pool, &c);
    if (rc != ODBOX_OK)
        return report("setup", &err);
    printf("odbox-bench-deposit: setup done: %s (%ld wallets, balance 0), %s.events empty\n", table, clients,
           eventlog);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dsn = NULL, *table = "bench_wallets", *eventlog = "eventlog", *payload = DEFAULT_PAYLOAD;
    const char *dialect_name = NULL;
    long clients = 0, seconds = 0;
    int json = 0, print_sql = 0, do_setup = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--print-sql")) {
            print_sql = 1;
        } else if (!strcmp(a, "--owntx")) {
            g_owntx = 1;
        } else if (!strcmp(a, "--setup")) {
            do_setup = 1;
        } else if (!strcmp(a, "--keys")) {
            g_keys = 1;
        } else if (!strcmp(a, "--claim-keys-first")) {
            g_claim_first = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(NULL);
        } else if (!v) {
            usage("missing value after an option");
        } else if (!strcmp(a, "--dsn")) {
            dsn = v, i++;
        } else if (!strcmp(a, "--dialect")) {
            dialect_name = v, i++;
        } else if (!strcmp(a, "--clients")) {
            clients = parse_long("odbox-bench-deposit", "--clients", v, 1, 1000), i++;
        } else if (!strcmp(a, "--seconds")) {
            seconds = parse_long("odbox-bench-deposit", "--seconds", v, 1, 86400), i++;
        } else if (!strcmp(a, "--table")) {
            table = v, i++;
        } else if (!strcmp(a, "--eventlog")) {
            eventlog = v, i++;
        } else if (!strcmp(a, "--payload")) {
            payload = v, i++;
        } else {
            usage("unknown option");
        }
    }
    if (!odbox_name_is_valid(table))
        usage("--table must match [a-z_][a-z0-9_]*");
    if (!odbox_name_is_valid(eventlog))
        usage("--eventlog must match [a-z_][a-z0-9_]*");
    g_wallet_type.table = table;

    /* The payload as the executor writes it (json-c, plain). */
    json_object *pl = json_tokener_parse(payload);
    if (!pl || !json_object_is_type(pl, json_type_object))
        usage("--payload must be a JSON object");
    if (g_claim_first && (!g_keys || g_owntx))
        usage("--claim-keys-first goes with --keys, without --owntx (an own transaction claims its key first anyway)");
    char *payload_text = strdup(json_object_to_json_string_ext(pl, JSON_C_TO_STRING_PLAIN));
    json_object_put(pl);
    if (!payload_text) {
        fprintf(stderr, "odbox-bench-deposit: out of memory\n");
        return 1;
    }

    if (!dsn || !*dsn)
        dsn = getenv("ODBOX_BENCH_DSN");
    odbox_error err;
    odbox_error_clear(&err);

    if (print_sql) {
        const odbox_dialect *d = NULL;
        if (dialect_name) {
            if (!(d = odbox_dialect_find(dialect_name)))
                usage("--dialect: unknown dialect");
        } else if (dsn && *dsn) {
            odbox_pool *p = NULL;
            if (odbox_pool_open(dsn, NULL, &p, &err) != ODBOX_OK)
                return report("DSN", &err);
            d = odbox_pool_dialect(p); /* from the URL scheme; NULL for raw ODBC strings */
            if (!d) {
                odbox_conn *c = NULL;
                if (odbox_pool_acquire(p, &c, &err) != ODBOX_OK) {
                    odbox_pool_free(&p);
                    return report("connect", &err);
                }
                d = odbox_conn_dialect(c);
                odbox_pool_release(p, &c);
            }
            odbox_pool_free(&p);
        } else {
            usage("--print-sql needs --dialect NAME or a DSN");
        }
        sqls q;
        build_sql(d, table, eventlog, &q);
        /* key=value lines; the value is the rest of the line. */
        printf("dialect=%s\n", d->name);
        printf("select=%s\n", q.select);
        printf("update=%s\n", q.update);
        printf("insert=%s\n", q.insert);
        printf("write=%s\n", q.write);
        printf("namespace=%s\n", NAMESPACE);
        printf("action_name=%s\n", ACTION_NAME);
        printf("model_type=%s\n", MODEL_TYPE_NAME);
        printf("event_type=%s\n", EVENT_TYPE_NAME);
        printf("payload=%s\n", payload_text);
        for (long k = 0; k < clients; k++) {
            char id[40];
            char *pt = params_text((int)k);
            wallet_id_of((int)k, id);
            printf("wallet.%ld=%s\n", k, id);
            printf("params.%ld=%s\n", k, pt ? pt : "");
            free(pt);
        }
        free(payload_text);
        return 0;
    }

    if (!dsn || !*dsn)
        usage("no DSN: pass --dsn or set ODBOX_BENCH_DSN");
    if (!clients || (!seconds && !do_setup))
        usage(do_setup ? "--setup needs --clients" : "--clients and --seconds are required");

    if (open_registry(dsn, eventlog, (int)clients, &err) != ODBOX_OK) {
        free(payload_text);
        return report("registry", &err);
    }
    if (do_setup) {
        int rc = setup(table, eventlog, clients);
        odbox_registry_free(&g_registry);
        free(payload_text);
        return rc;
    }

    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(g_registry));
    snprintf(g_own_update, sizeof g_own_update, "UPDATE %s SET balance = balance + ? WHERE id = %s", table,
             odbox_pool_dialect(pool)->uuid_param);
    if (odbox_executor_open(NAMESPACE, g_registry, NULL, &g_exe, &err) != ODBOX_OK ||
        odbox_executor_register_model(g_exe, &g_wallet_type, &err) != ODBOX_OK ||
        odbox_executor_register_event(g_exe, &g_deposited, &err) != ODBOX_OK) {
        report("executor", &err);
        odbox_executor_free(&g_exe);
        odbox_registry_free(&g_registry);
        return 1;
    }
    odbox_executor_claim_keys_first(g_exe, g_claim_first);

    /* Open the pool's N connections before the clock starts (pgbench
     * connects first too), and report the server. */
    char server[160] = "";
    const char *dname = "";
    {
        odbox_conn **cs = calloc((size_t)clients, sizeof *cs);
        int rc = cs ? ODBOX_OK : fail_msg(&err, ODBOX_ENOMEM, "out of memory");
        for (long i = 0; i < clients && rc == ODBOX_OK; i++)
            rc = odbox_pool_acquire(pool, &cs[i], &err);
        if (rc == ODBOX_OK) {
            snprintf(server, sizeof server, "%s %s", odbox_conn_server_name(cs[0]),
                     odbox_conn_server_version(cs[0]));
            dname = odbox_conn_dialect(cs[0])->name;
        }
        for (long i = 0; cs && i < clients; i++)
            if (cs[i])
                odbox_pool_release(pool, &cs[i]);
        free(cs);
        if (rc != ODBOX_OK) {
            report("connect", &err);
            odbox_executor_free(&g_exe);
            odbox_registry_free(&g_registry);
            return 1;
        }
    }

    worker *ws = calloc((size_t)clients, sizeof *ws);
    if (!ws) {
        fprintf(stderr, "odbox-bench-deposit: out of memory\n");
        return 1;
    }
    for (long i = 0; i < clients; i++) {
        ws[i].id = (int)i;
        wallet_id_of((int)i, ws[i].wallet_id);
        ws[i].payload = json_tokener_parse(payload_text);
        ws[i].action = (odbox_action){.name = ACTION_NAME, .perform = perform_deposit, .user = &ws[i]};
        ws[i].hist = calloc(HIST_BUCKETS, sizeof *ws[i].hist);
        if (!ws[i].hist || !ws[i].payload) {
            fprintf(stderr, "odbox-bench-deposit: out of memory\n");
            return 1;
        }
    }
    pthread_barrier_init(&g_ready, NULL, (unsigned)clients + 1);
    pthread_barrier_init(&g_go, NULL, (unsigned)clients + 1);
    for (long i = 0; i < clients; i++) {
        int e = pthread_create(&ws[i].th, NULL, run_worker, &ws[i]);
        if (e) {
            fprintf(stderr, "odbox-bench-deposit: pthread_create: %s\n", strerror(e));
            return 1; /* threads already started wait on the barrier forever; exit ends them */
        }
    }
    pthread_barrier_wait(&g_ready);
    double user0, sys0; /* connecting is not counted */
    cpu_seconds(&user0, &sys0);
    g_start_ns = now_ns();
    g_deadline_ns = g_start_ns + (uint64_t)seconds * 1000000000u;
    pthread_barrier_wait(&g_go);
    for (long i = 0; i < clients; i++)
        pthread_join(ws[i].th, NULL);
    double user1, sys1;
    cpu_seconds(&user1, &sys1);
    double cpu_user = user1 - user0, cpu_sys = sys1 - sys0;

    int failed = 0;
    for (long i = 0; i < clients; i++) {
        if (ws[i].failed) {
            fprintf(stderr, "odbox-bench-deposit: client %ld: %s [%s] %s\n", i, odbox_errname(ws[i].err.code),
                    ws[i].err.sqlstate, ws[i].err.message);
            failed = 1;
        }
    }

    /* Merge. */
    uint64_t total = 0, retries = 0, sum_ns = 0, max_ns = 0, end_ns = g_start_ns;
    uint64_t *hist = calloc(HIST_BUCKETS, sizeof *hist);
    if (!hist) {
        fprintf(stderr, "odbox-bench-deposit: out of memory\n");
        return 1;
    }
    for (long i = 0; i < clients; i++) {
        total += ws[i].count;
        retries += ws[i].retries;
        sum_ns += ws[i].lat_sum_ns;
        if (ws[i].lat_max_ns > max_ns)
            max_ns = ws[i].lat_max_ns;
        if (ws[i].end_ns > end_ns)
            end_ns = ws[i].end_ns;
        for (int b = 0; b < HIST_BUCKETS; b++)
            hist[b] += ws[i].hist[b];
    }
    double elapsed = (double)(end_ns - g_start_ns) / 1e9;
    double tps = elapsed > 0 ? (double)total / elapsed : 0;
    double pct[2] = {0, 0};
    const double want[2] = {0.50, 0.99};
    for (int k = 0; k < 2; k++) {
        uint64_t rank = (uint64_t)(want[k] * (double)total + 0.5), seen = 0;
        if (rank < 1)
            rank = 1;
        for (int b = 0; b < HIST_BUCKETS; b++) {
            seen += hist[b];
            if (seen >= rank) {
                pct[k] = hist_value(b);
                break;
            }
        }
    }
    double cpu_us = total ? (cpu_user + cpu_sys) * 1e6 / (double)total : 0;
    double user_us = total ? cpu_user * 1e6 / (double)total : 0;
    double sys_us = total ? cpu_sys * 1e6 / (double)total : 0;
    double avg_ms = total ? (double)sum_ns / (double)total / 1e6 : 0;
    double p50_ms = pct[0] / 1e6, p99_ms = pct[1] / 1e6, max_ms = (double)max_ns / 1e6;
    double tmin = 0, tmax = 0;
    for (long i = 0; i < clients; i++) {
        double el = (double)(ws[i].end_ns - g_start_ns) / 1e9;
        double t = el > 0 ? (double)ws[i].count / el : 0;
        if (i == 0 || t < tmin)
            tmin = t;
        if (i == 0 || t > tmax)
            tmax = t;
    }

    if (failed) {
        /* What did commit is in the database: say how much, for the checks. */
        fprintf(stderr, "odbox-bench-deposit: %" PRIu64 " actions committed before the error\n", total);
    } else if (json) {
        printf("{\"tool\":\"odbox-bench-deposit\",\"server\":");
        json_string(stdout, server);
        printf(",\"dialect\":");
        json_string(stdout, dname);
        printf(",\"table\":");
        json_string(stdout, table);
        printf(",\"eventlog\":");
        json_string(stdout, eventlog);
        printf(",\"keys\":%s,\"claim_keys_first\":%s", g_keys ? "true" : "false", g_claim_first ? "true" : "false");
        printf(",\"clients\":%ld,\"threads\":%ld,\"pool_size\":%ld,\"events_per_action\":1,"
               "\"seconds\":%.3f,\"actions\":%" PRIu64 ",\"errors\":0,\"retries\":%" PRIu64 ",\"tps\":%.3f,"
               "\"actions_per_client\":[",
               clients, clients, clients, elapsed, total, retries, tps);
        for (long i = 0; i < clients; i++)
            printf("%s%" PRIu64, i ? "," : "", ws[i].count);
        printf("],\"tps_per_client\":[");
        for (long i = 0; i < clients; i++) {
            double el = (double)(ws[i].end_ns - g_start_ns) / 1e9;
            printf("%s%.3f", i ? "," : "", el > 0 ? (double)ws[i].count / el : 0.0);
        }
        printf("],\"latency_ms\":{\"avg\":%.4f,\"p50\":%.4f,\"p99\":%.4f,\"max\":%.4f},"
               "\"cpu_us_per_action\":%.2f,\"cpu_user_us_per_action\":%.2f,\"cpu_sys_us_per_action\":%.2f}\n",
               avg_ms, p50_ms, p99_ms, max_ms, cpu_us, user_us, sys_us);
    } else {
        sqls q;
        build_sql(odbox_pool_dialect(pool), table, eventlog, &q);
        printf("odbox-bench-deposit: %s (%s dialect)\n", server, dname);
        if (g_owntx)
            printf("per transaction:  (odbox_tx, the caller's own SQL) %s\n", g_own_update);
        else
            printf("per action:       %s\n", q.select);
        printf("                  then in one transaction:\n");
        printf("                  %s\n", q.update);
        printf("                  %s\n", q.insert);
        if (g_keys)
            printf("idempotency keys: one per deposit (%s)\n",
                   g_owntx || g_claim_first ? "the transaction's first statement, an INSERT"
                                            : "a SELECT before perform, an INSERT with the writes");
        printf("clients:          %ld (threads %ld, pool size %ld), one wallet each, 1 event per action\n", clients,
               clients, clients);
        printf("duration:         %.3f s\n", elapsed);
        printf("actions:          %" PRIu64 " (0 errors, %" PRIu64 " retries)\n", total, retries);
        printf("actions/s:        %.1f total, %.1f per client (min %.1f, max %.1f)\n", tps, tps / (double)clients,
               tmin, tmax);
        printf("latency ms:       avg %.3f  p50 %.3f  p99 %.3f  max %.3f\n", avg_ms, p50_ms, p99_ms, max_ms);
        printf("client CPU:       %.1f us per action (user %.1f + system %.1f, all threads)\n", cpu_us, user_us,
               sys_us);
    }

    for (long i = 0; i < clients; i++) {
        free(ws[i].hist);
        json_object_put(ws[i].payload);
    }
    free(ws);
    free(hist);
    free(payload_text);
    pthread_barrier_destroy(&g_ready);
    pthread_barrier_destroy(&g_go);
    odbox_executor_free(&g_exe);
    odbox_registry_free(&g_registry);
    return failed ? 1 : 0;
}
