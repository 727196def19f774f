/* odbox — integration tests of events in the caller's own transaction
 * (odbox/tx.h), on every dialect: the caller's rows and the events land
 * together on commit, and neither on a rollback, after a failed statement
 * (rolled back), or when the process dies before its commit (kill -9 of a
 * real process); a commit whose connection is lost is in doubt and
 * odbox_action_committed answers; bad input is refused and writes
 * nothing. Races (a deadlock, eight processes on one key) are in
 * test_owntx_races.c, the SQL it refuses in test_owntx_sql.c. Every check counts rows. */
#include "config.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "action_internal.h"
#include "jobs_fx.h"
#include "owntx_fx.h"

START_TEST(rows_and_events_land_together_on_commit)
{
    txf o;
    txf_open(&o);
    json_object *params = json_tokener_parse("{\"request\":\"r-1\"}");
    odbox_tx_config cfg = {.action_name = "orders.Pay", .params = params};
    int64_t t0 = dfx_now_us();
    odbox_tx *tx = txf_begin(&o, &cfg);
    char action_id[37];
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    ck_assert(odbox_uuid_is_valid(action_id));
    txf_insert_row(&o, tx, "o-1", 10);
    txf_insert_row(&o, tx, "o-2", 20);
    /* an UPDATE and a read inside the transaction: its own rows are seen */
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE %s SET amount = amount + ? WHERE id = ?", o.table);
    int64_t n = -1;
    ck_assert_int_eq(txf_run_sql(tx, sql, "o-1", 5, &n), ODBOX_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(itest_count(odbox_tx_conn(tx), "SELECT SUM(amount) FROM %s", o.table), 35);
    txf_emit(tx, "o-1", "{\"amount\":15}");
    txf_emit(tx, "o-2", "{\"amount\":20}");
    /* nothing visible outside before the commit */
    ck_assert_int_eq(txf_events(&o), 0);
    odbox_error e;
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_ptr_null(tx);
    int64_t t1 = dfx_now_us();
    ck_assert_int_eq(txf_rows(&o), 2);
    ck_assert_int_eq(txf_events(&o), 2);
    evrow r[4];
    ck_assert_int_eq(read_events(&o.f, 0, r, 4), 2);
    check_rows(r, 2, action_id, "orders.Pay", "{\"request\":\"r-1\"}", t0, t1);
    ck_assert_str_eq(r[0].model_type, "Order");
    ck_assert_str_eq(r[0].model_id, "o-1");
    ck_assert_str_eq(r[0].event_type, "OwnTxPaid");
    ck_assert(dfx_json_same(r[0].payload, "{\"amount\":15}"));
    ck_assert_str_eq(r[1].model_id, "o-2");
    ck_assert_int_eq(txf_committed(&o, action_id), 1);
    /* the wake-up after commit: the executor's listeners, with the count */
    ck_assert_int_eq(o.commits, 1);
    ck_assert_uint_eq(o.nevents, 2);

    /* no event: the sentinel row, so that the commit can be asked about;
     * a caller's action id is used as given */
    odbox_tx_config mine = {.action_id = "0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6b"};
    tx = txf_begin(&o, &mine);
    ck_assert_str_eq(odbox_tx_action_id(tx), mine.action_id);
    txf_insert_row(&o, tx, "o-3", 30);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_rows(&o), 3);
    ck_assert_int_eq(txf_events(&o), 3);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND event_type IS NULL "
                                           "AND model_id IS NULL AND action_name = 'Transaction'",
                                 itest_evt(o.f.ev[0], "events"), mine.action_id),
                     1);
    ck_assert_int_eq(txf_committed(&o, mine.action_id), 1);
    ck_assert_int_eq(o.commits, 2);
    ck_assert_uint_eq(o.nevents, 2);
    json_object_put(params);
    txf_close(&o);
}
END_TEST

/* A delayed event in the caller's own transaction, as odbox_plan_emit_after
 * for actions: its deliver_after is written, the other event's is not; a
 * negative time is refused and leaves the transaction unchanged. */
START_TEST(a_delayed_event_carries_its_deliver_after)
{
    txf o;
    txf_open(&o);
    odbox_tx *tx = txf_begin(&o, NULL);
    txf_insert_row(&o, tx, "o-1", 10);
    odbox_error e;
    json_object *payload = json_tokener_parse("{\"amount\":10}");
    int64_t at = dfx_now_us() + INT64_C(3600) * 1000000;
    ck_assert_int_eq(odbox_tx_emit_after(tx, "Order", "o-1", &PAID, payload, -1, &e), ODBOX_EINVAL);
    ck_assert_msg(odbox_tx_emit_after(tx, "Order", "o-1", &PAID, payload, at, &e) == ODBOX_OK, "%s", e.message);
    txf_emit(tx, "o-1", "{\"amount\":11}");
    json_object_put(payload);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_events(&o), 2);
    const char *events = itest_evt(o.f.ev[0], "events");
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE deliver_after IS NOT NULL", events), 1);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE deliver_after IS NULL", events), 1);
    txf_close(&o);
}
END_TEST

START_TEST(rollback_and_failed_statement_write_nothing)
{
    txf o;
    txf_open(&o);
    odbox_tx *tx = txf_begin(&o, NULL);
    char action_id[37];
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "r-1", 1);
    txf_emit(tx, "r-1", "{}");
    odbox_tx_rollback(&tx);
    ck_assert_ptr_null(tx);
    txf_nothing_landed(&o, action_id);

    /* a statement fails (a duplicate key) after one succeeded: the
     * caller rolls back, nothing lands */
    tx = txf_begin(&o, NULL);
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "dup", 1);
    txf_emit(tx, "dup", "{}");
    char sql[160];
    snprintf(sql, sizeof sql, "INSERT INTO %s (amount, id) VALUES (?, ?)", o.table);
    ck_assert_int_eq(txf_run_sql(tx, sql, "dup", 2, NULL), ODBOX_EUNIQUE);
    odbox_tx_rollback(&tx);
    txf_nothing_landed(&o, action_id);

    /* a commit after a failed statement is refused on every database
     * (PostgreSQL has aborted the transaction, and psqlODBC rolled it
     * back, so that later statements would run in a new one): rolled
     * back, nothing lands, not even the events added after the failure */
    tx = txf_begin(&o, NULL);
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "dup", 1);
    ck_assert_int_eq(txf_run_sql(tx, sql, "dup", 2, NULL), ODBOX_EUNIQUE);
    /* a statement after the failure is not sent (MySQL's and MariaDB's
     * deadlock has rolled the transaction back, and it would autocommit) */
    odbox_error e3;
    ck_assert_int_eq(txf_run_sql(tx, sql, "after", 3, NULL), ODBOX_ESTATE);
    int rc = odbox_conn_exec(odbox_tx_conn(tx), "SELECT 1", &e3);
    ck_assert_msg(rc == ODBOX_ESTATE && strstr(e3.message, "a statement failed") &&
                      strstr(e3.message, "nothing was sent"), "%s: %s", odbox_errname(rc), e3.message);
    txf_emit(tx, "dup", "{}");
    odbox_error e2;
    rc = odbox_tx_commit(&tx, &e2);
    ck_assert_msg(rc == ODBOX_ESTATE, "%s: %s", odbox_errname(rc), e2.message);
    ck_assert_ptr_null(tx);
    ck_assert_msg(strstr(e2.message, "rolled back") && strstr(e2.message, "a statement failed"), "message: %s",
                  e2.message);
    txf_nothing_landed(&o, action_id);

    /* the hook fails the transaction after its events were written:
     * rolled back, nothing lands, no wake-up */
    hookrec h = {.fail_at = ODBOX_HOOK_EVENTS_WRITTEN, .fail_group = -1, .fail_member = -1, .fail_code = ODBOX_EDB};
    odbox_executor_set_hook(o.exe, record_hook, &h);
    tx = txf_begin(&o, NULL);
    txf_insert_row(&o, tx, "h-1", 1);
    txf_emit(tx, "h-1", "{}");
    odbox_error e;
    ck_assert_int_eq(odbox_tx_commit(&tx, &e), ODBOX_EDB);
    ck_assert_ptr_null(tx);
    ck_assert_msg(strstr(e.message, "rolled back"), "message: %s", e.message);
    odbox_executor_set_hook(o.exe, NULL, NULL);
    ck_assert_int_eq(txf_rows(&o), 0);
    ck_assert_int_eq(txf_events(&o), 0);
    ck_assert_int_eq(o.commits, 0);
    txf_close(&o);
}
END_TEST

/* The caller tries to end or restart the transaction on the tx's
 * connection itself (odbox_conn_commit, odbox_conn_rollback or
 * odbox_conn_begin on odbox_tx_conn), or to release or close that
 * connection: refused with ODBOX_ESTATE (the last three do nothing), the
 * transaction stays open, and its rows and events then land together or
 * not at all. Before, the caller's commit went through: its rows landed
 * alone and a keyed transaction's key was spent while odbox_tx_commit
 * said "nothing written" (the next begin replayed an action that
 * odbox_action_committed said never committed). */
START_TEST(a_transaction_ended_by_the_caller_is_refused)
{
    txf o;
    txf_open(&o);
    for (int commit = 0; commit < 2; commit++) {
        odbox_tx_config keyed = {.idempotency_key = "ended-by-caller"};
        odbox_tx *tx = txf_begin(&o, commit ? &keyed : NULL);
        ck_assert_int_eq(odbox_tx_replayed(tx), 0);
        char action_id[37];
        memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
        txf_insert_row(&o, tx, commit ? "e-commit" : "e-rollback", 1);
        txf_emit(tx, "e-1", "{}");
        odbox_error e;
        int rc = odbox_conn_commit(odbox_tx_conn(tx), &e);
        ck_assert_msg(rc == ODBOX_ESTATE && strstr(e.message, "odbox_tx_commit"), "%s: %s", odbox_errname(rc),
                      e.message);
        rc = odbox_conn_rollback(odbox_tx_conn(tx), &e);
        ck_assert_msg(rc == ODBOX_ESTATE, "%s: %s", odbox_errname(rc), e.message);
        rc = odbox_conn_begin(odbox_tx_conn(tx), &e);
        ck_assert_msg(rc == ODBOX_ESTATE, "%s: %s", odbox_errname(rc), e.message);
        /* nor is its connection given back or closed under it (before, a
         * release put it in the pool for the next caller, and the tx's
         * own release later put it there twice; a close freed it) */
        odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(o.f.r));
        odbox_conn *mine = odbox_tx_conn(tx);
        odbox_pool_release(pool, &mine);
        ck_assert_ptr_null(mine);
        mine = odbox_tx_conn(tx);
        odbox_pool_discard(pool, &mine);
        mine = odbox_tx_conn(tx);
        odbox_conn_close(&mine);
        ck_assert_ptr_null(mine);
        ck_assert_int_eq(odbox_conn_in_transaction(odbox_tx_conn(tx)), 1);
        txf_insert_row(&o, tx, commit ? "e-commit-2" : "e-rollback-2", 2);
        ck_assert_int_eq(txf_rows(&o), 0);
        if (commit) {
            rc = odbox_tx_commit(&tx, &e);
            ck_assert_msg(rc == ODBOX_OK, "commit: %s: %s", odbox_errname(rc), e.message);
            ck_assert_int_eq(txf_committed(&o, action_id), 1);
            ck_assert_int_eq(txf_rows(&o), 2);
            ck_assert_int_eq(txf_events(&o), 1);
        } else {
            odbox_tx_rollback(&tx);
            txf_nothing_landed(&o, action_id);
        }
        ck_assert_ptr_null(tx);
    }
    /* the committed key replays; the connection went back to the pool
     * as any other (a plain transaction on it is the caller's again) */
    odbox_tx_config keyed = {.idempotency_key = "ended-by-caller"};
    odbox_tx *tx = txf_begin(&o, &keyed);
    ck_assert_int_eq(odbox_tx_replayed(tx), 1);
    odbox_tx_rollback(&tx);
    odbox_conn *c = NULL;
    odbox_error e;
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(o.f.r));
    ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_rollback(c, &e), ODBOX_OK);
    odbox_pool_release(pool, &c);
    txf_close(&o);
}
END_TEST

/* The test's ready line: "ready <action_id>" in the worker's output file,
 * within the jobs fixture's bound. */
typedef struct ready {
    const char *path;
    char action_id[64];
} ready;

static int is_ready(void *arg)
{
    ready *r = arg;
    FILE *fp = fopen(r->path, "r");
    int ok = fp && fscanf(fp, "ready %63s", r->action_id) == 1;
    if (fp)
        fclose(fp);
    return ok;
}

static pid_t spawn_worker(txf *o, const char *mode, const char *out)
{
    char extra[128];
    snprintf(extra, sizeof extra, "eventlog=%s", o->f.ev[0]);
    char *dsn = itest_dsn_with(1, extra);
    const char *args[] = {dsn, o->table, mode, "3", NULL};
    pid_t pid = jt_spawn("tests/integration/owntx-worker", args, out);
    free(dsn);
    return pid;
}

START_TEST(killed_before_commit_nothing_lands)
{
    txf o;
    txf_open(&o);
    char out[128];
    snprintf(out, sizeof out, "/tmp/owntx-worker-%ld.out", (long)getpid());
    ready r = {out, ""};
    unlink(out);
    pid_t pid = spawn_worker(&o, "hold", out);
    ck_assert_msg(jt_wait_for(is_ready, &r), "the worker never wrote its rows (see %s)", out);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    txf_nothing_landed(&o, r.action_id);

    /* the same worker left to commit: its 3 rows and 3 events land */
    unlink(out);
    pid = spawn_worker(&o, "commit", out);
    ck_assert_int_eq(jt_reap(pid, 0), 0);
    ck_assert(is_ready(&r));
    ck_assert_int_eq(txf_rows(&o), 3);
    ck_assert_int_eq(txf_events(&o), 3);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND action_name = "
                                           "'OwnTxWorker' AND event_type = 'OwnTxWorked'",
                                 itest_evt(o.f.ev[0], "events"), r.action_id),
                     3);
    ck_assert_int_eq(txf_committed(&o, r.action_id), 1);
    unlink(out);
    txf_close(&o);
}
END_TEST

/* The session ends between the events and the COMMIT: the COMMIT meets a
 * lost connection, in doubt; odbox_action_committed says it did not
 * commit, and says so the other way for the next transaction, which
 * does. */
START_TEST(commit_on_a_lost_connection_is_in_doubt_tx)
{
    txf o;
    txf_open(&o);
    odbox_executor_set_hook(o.exe, kill_before_commit, &o.f);
    odbox_tx *tx = txf_begin(&o, NULL);
    char action_id[37];
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "lost", 1);
    txf_emit(tx, "lost", "{}");
    odbox_error e;
    int rc = odbox_tx_commit(&tx, &e);
    ck_assert_msg(rc == ODBOX_EINDOUBT && e.code == ODBOX_EINDOUBT, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_ptr_null(tx);
    ck_assert_msg(strstr(e.message, "IN DOUBT") && strstr(e.message, action_id), "message: %s", e.message);
    ck_assert_int_eq(txf_committed(&o, action_id), 0);
    ck_assert_int_eq(txf_rows(&o), 0);
    ck_assert_int_eq(txf_events(&o), 0);
    ck_assert_int_eq(o.commits, 0);

    odbox_executor_set_hook(o.exe, NULL, NULL);
    tx = txf_begin(&o, NULL);
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "landed", 1);
    txf_emit(tx, "landed", "{}");
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_committed(&o, action_id), 1);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    txf_close(&o);
}
END_TEST

/* A pooled session that died while idle is found lost at the
 * transaction's first statement, before the server answered anything on
 * this hand-out: the pool replaces it under the transaction, which begins
 * again and goes on; that lost statement does not spoil it. */
START_TEST(a_session_lost_while_idle_is_replaced_under_the_transaction)
{
    txf o;
    txf_open(&o);
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(o.f.r));
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
    int64_t id = itest_session_id(c);
    odbox_pool_release(pool, &c);
    itest_kill_session(o.f.c[0], id); /* well within the pool's 1 s without a ping */
    odbox_tx *tx = txf_begin(&o, NULL);
    char action_id[37];
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    ck_assert_int_ne(itest_session_id(odbox_tx_conn(tx)), id);
    txf_insert_row(&o, tx, "replaced", 1);
    txf_emit(tx, "replaced", "{}");
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(txf_committed(&o, action_id), 1);
    txf_close(&o);
}
END_TEST

static void refused_begin(txf *o, odbox_executor *exe, odbox_shard_id id, const odbox_tx_config *cfg, int want,
                          const char *words)
{
    odbox_tx *tx = (odbox_tx *)o; /* any non-NULL: begin sets it NULL */
    odbox_error e;
    int rc = odbox_tx_begin(exe, id, cfg, &tx, &e);
    ck_assert_msg(rc == want, "%s, want %s: %s", odbox_errname(rc), odbox_errname(want), e.message);
    ck_assert_ptr_null(tx);
    ck_assert_msg(strstr(e.message, words), "message '%s' lacks '%s'", e.message, words);
}

static void refused_emit(odbox_tx *tx, const char *type, const char *id, const odbox_event_type *et,
                         json_object *payload, const char *words)
{
    odbox_error e;
    int rc = odbox_tx_emit(tx, type, id, et, payload, &e);
    ck_assert_msg(rc == ODBOX_EINVAL, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, words), "message '%s' lacks '%s'", e.message, words);
}

/* A keyed transaction: committed once; a second begin with the key
 * replays it (the first action id, no connection, nothing written);
 * other params are refused; a rolled-back key stays unspent. */
START_TEST(a_keyed_transaction_commits_once_and_replays)
{
    txf o;
    txf_open(&o);
    json_object *params = json_tokener_parse("{\"order\": \"k-1\"}");
    odbox_tx_config cfg = {.action_name = "PayOrder", .params = params, .idempotency_key = "request-k-1"};
    odbox_tx *tx = txf_begin(&o, &cfg);
    ck_assert_int_eq(odbox_tx_replayed(tx), 0);
    char first[37];
    snprintf(first, sizeof first, "%s", odbox_tx_action_id(tx));
    txf_insert_row(&o, tx, "k-1", 10);
    txf_emit(tx, "k-1", "{\"amount\": 10}");
    odbox_error e;
    ck_assert_int_eq(odbox_tx_commit(&tx, &e), ODBOX_OK);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);

    tx = txf_begin(&o, &cfg); /* the retried request */
    ck_assert_int_eq(odbox_tx_replayed(tx), 1);
    ck_assert_str_eq(odbox_tx_action_id(tx), first);
    ck_assert_ptr_null(odbox_tx_conn(tx));
    json_object *p = json_object_new_object();
    ck_assert_int_eq(odbox_tx_emit(tx, "Order", "k-1", &PAID, p, &e), ODBOX_ESTATE);
    json_object_put(p);
    ck_assert_int_eq(odbox_tx_commit(&tx, &e), ODBOX_OK);
    ck_assert_ptr_null(tx);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(o.commits, 1);

    /* the same action with other params, and other params under
     * another action's name: both refused, naming the first */
    json_object *other = json_tokener_parse("{\"order\": \"k-2\"}");
    odbox_tx_config changed = {.action_name = "PayOrder", .params = other, .idempotency_key = "request-k-1"};
    refused_begin(&o, o.exe, (odbox_shard_id){0, 0}, &changed, ODBOX_EUNIQUE, first);
    changed.action_name = NULL;
    refused_begin(&o, o.exe, (odbox_shard_id){0, 0}, &changed, ODBOX_EUNIQUE, first);
    ck_assert_int_eq(txf_events(&o), 1);
    /* the replayed transaction has no connection: a statement on it is
     * refused, not sent */
    tx = txf_begin(&o, &cfg);
    odbox_stmt *st = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(odbox_tx_conn(tx), "SELECT 1", &st, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(st);
    odbox_tx_rollback(&tx);

    odbox_tx_config fresh = {.params = other, .idempotency_key = "request-k-2"};
    tx = txf_begin(&o, &fresh);
    txf_insert_row(&o, tx, "k-2", 20);
    odbox_tx_rollback(&tx); /* the key stays unspent */
    tx = txf_begin(&o, &fresh);
    ck_assert_int_eq(odbox_tx_replayed(tx), 0);
    txf_insert_row(&o, tx, "k-2", 20);
    txf_emit(tx, "k-2", "{\"amount\": 20}");
    ck_assert_int_eq(odbox_tx_commit(&tx, &e), ODBOX_OK);
    ck_assert_int_eq(txf_rows(&o), 2);
    ck_assert_int_eq(txf_events(&o), 2);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE idem_key LIKE 'request-k-%%'",
                                 itest_evt(o.f.ev[0], "idempotency_keys")),
                     2);
    json_object_put(params);
    json_object_put(other);
    txf_close(&o);
}
END_TEST

/* A caller's action_id used before by a keyed transaction: the keys
 * table's primary key is the action id, so the claim fails on it while
 * the key itself is free. Begin says so (ODBOX_EUNIQUE, the action id is
 * used), not that a concurrent transaction released the key, and writes
 * nothing. */
START_TEST(a_reused_action_id_is_refused)
{
    txf o;
    txf_open(&o);
    const char *id = "0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6c";
    odbox_tx_config first = {.action_id = id, .idempotency_key = "reuse-1"};
    odbox_tx *tx = txf_begin(&o, &first);
    txf_insert_row(&o, tx, "u-1", 1);
    txf_emit(tx, "u-1", "{}");
    odbox_error e;
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    odbox_tx_config again = {.action_id = id, .idempotency_key = "reuse-2"};
    for (int i = 0; i < 2; i++) /* the same answer every time: nothing to retry */
        refused_begin(&o, o.exe, (odbox_shard_id){0, 0}, &again, ODBOX_EUNIQUE, "action_id");
    odbox_tx *t2 = (odbox_tx *)&o;
    ck_assert_int_eq(odbox_tx_begin(o.exe, (odbox_shard_id){0, 0}, &again, &t2, &e), ODBOX_EUNIQUE);
    ck_assert_msg(strstr(e.message, id) && strstr(e.message, "already used"), "message: %s", e.message);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s", itest_evt(o.f.ev[0], "idempotency_keys")), 1);
    /* the same key and params with the used id is the first one's replay */
    first.action_id = NULL;
    tx = txf_begin(&o, &first);
    ck_assert_int_eq(odbox_tx_replayed(tx), 1);
    ck_assert_str_eq(odbox_tx_action_id(tx), id);
    odbox_tx_rollback(&tx);
    txf_close(&o);
}
END_TEST

/* An action id is a UUID, whatever the case of its hex digits: the same
 * id in upper case is the id used before, refused at a keyed begin on
 * every dialect (the keys table's id is text, compared byte by byte on
 * PostgreSQL and SQLite and without case on MySQL/MariaDB, so before it
 * was refused on two of them only, and two commits could carry one
 * action id, which odbox_action_committed cannot tell apart). The
 * transaction carries the id in lower case, as its event rows do. */
START_TEST(a_reused_action_id_in_upper_case_is_refused)
{
    txf o;
    txf_open(&o);
    const char *upper = "0190A5B2-3C4D-7E8F-9A0B-1C2D3E4F5A6D", *lower = "0190a5b2-3c4d-7e8f-9a0b-1c2d3e4f5a6d";
    odbox_tx_config first = {.action_id = upper, .idempotency_key = "case-1"};
    odbox_tx *tx = txf_begin(&o, &first);
    char id[37];
    snprintf(id, sizeof id, "%s", odbox_tx_action_id(tx));
    txf_emit(tx, "c-1", "{}");
    odbox_error e;
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_committed(&o, upper), 1);
    ck_assert_int_eq(txf_committed(&o, lower), 1);
    odbox_tx_config again = {.action_id = lower, .idempotency_key = "case-2"};
    refused_begin(&o, o.exe, (odbox_shard_id){0, 0}, &again, ODBOX_EUNIQUE, "already used");
    again.action_id = "0190a5B2-3C4D-7E8F-9A0B-1C2D3E4F5a6d";
    refused_begin(&o, o.exe, (odbox_shard_id){0, 0}, &again, ODBOX_EUNIQUE, "already used");
    ck_assert_str_eq(id, lower);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s", itest_evt(o.f.ev[0], "idempotency_keys")), 1);
    /* the first key's replay answers with the id as its rows carry it */
    first.action_id = NULL;
    tx = txf_begin(&o, &first);
    ck_assert_int_eq(odbox_tx_replayed(tx), 1);
    ck_assert_str_eq(odbox_tx_action_id(tx), lower);
    odbox_tx_rollback(&tx);
    txf_close(&o);
}
END_TEST

/* A keyed begin whose key an open transaction holds waits on the key
 * row, with a bound: PostgreSQL's sessions of odbox have a lock_timeout of
 * 50 s, InnoDB's default innodb_lock_wait_timeout. Past it, begin is
 * ODBOX_ETIMEDOUT saying another transaction holds the key, and writes
 * nothing; once the holder commits, a begin replays it. The test
 * shortens the bound to 1 s on the pool's sessions, as a service may. */
START_TEST(a_keyed_begin_behind_an_open_holder_times_out)
{
    txf o;
    txf_open(&o);
    odbox_error e;
    dfx_short_lock_waits(&o.f, 1000);
    odbox_tx_config keyed = {.idempotency_key = "held-open"};
    odbox_tx *holder = txf_begin(&o, &keyed);
    txf_insert_row(&o, holder, "held", 1);
    txf_emit(holder, "held", "{}");
    int64_t t0 = jt_mono_ms();
    refused_begin(&o, o.exe, (odbox_shard_id){0, 0}, &keyed, ODBOX_ETIMEDOUT, "another transaction");
    int64_t waited = jt_mono_ms() - t0;
    ck_assert_msg(waited >= 900 && waited < 20000, "waited %lld ms", (long long)waited);
    ck_assert_int_eq(txf_events(&o), 0);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s", itest_evt(o.f.ev[0], "idempotency_keys")), 0);
    ck_assert_msg(odbox_tx_commit(&holder, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    odbox_tx *tx = txf_begin(&o, &keyed);
    ck_assert_int_eq(odbox_tx_replayed(tx), 1);
    odbox_tx_rollback(&tx);
    txf_close(&o);
}
END_TEST

START_TEST(bad_input_is_refused_and_writes_nothing)
{
    txf o;
    txf_open(&o);
    odbox_shard_id s0 = {0, 0};
    odbox_error e;
    ck_assert_int_eq(odbox_tx_begin(o.exe, s0, NULL, NULL, &e), ODBOX_EINVAL);
    refused_begin(&o, NULL, s0, NULL, ODBOX_EINVAL, "executor is NULL");
    refused_begin(&o, o.exe, (odbox_shard_id){9, 9}, NULL, ODBOX_ENOTFOUND, "no shard 9.9");
    odbox_tx_config bad_name = {.action_name = "no spaces"};
    refused_begin(&o, o.exe, s0, &bad_name, ODBOX_EINVAL, "action name");
    odbox_tx_config bad_id = {.action_id = "not-a-uuid"};
    refused_begin(&o, o.exe, s0, &bad_id, ODBOX_EINVAL, "not a UUID");
    json_object *arr = json_object_new_array();
    odbox_tx_config bad_params = {.params = arr};
    refused_begin(&o, o.exe, s0, &bad_params, ODBOX_EINVAL, "JSON object");
    json_object *nul_obj = json_tokener_parse("{\"note\": \"a\\u0000b\"}");
    odbox_tx_config nul_params = {.params = nul_obj};
    refused_begin(&o, o.exe, s0, &nul_params, ODBOX_EINVAL, "U+0000");
    /* text that is not UTF-8, which PostgreSQL and MySQL/MariaDB refuse
     * at the events' INSERT (losing the caller's transaction at its
     * commit) and SQLite stores: refused alike, before any write */
    json_object *bad_utf8 = json_object_new_object();
    json_object_object_add(bad_utf8, "note", json_object_new_string("a\xff" "b"));
    odbox_tx_config utf8_params = {.params = bad_utf8};
    refused_begin(&o, o.exe, s0, &utf8_params, ODBOX_EINVAL, "UTF-8");
    odbox_tx_config empty_key = {.idempotency_key = ""};
    refused_begin(&o, o.exe, s0, &empty_key, ODBOX_EINVAL, "key");
    char long_key[300];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    odbox_tx_config too_long = {.idempotency_key = long_key};
    refused_begin(&o, o.exe, s0, &too_long, ODBOX_EINVAL, "key");
    char long_name[300];
    memset(long_name, 'n', 256);
    long_name[256] = '\0';
    odbox_tx_config long_action = {.action_name = long_name};
    refused_begin(&o, o.exe, s0, &long_action, ODBOX_EINVAL, "action name");

    odbox_tx *tx = txf_begin(&o, NULL);
    ck_assert_int_eq(odbox_tx_shard(tx).group, 0);
    ck_assert_int_eq(odbox_tx_shard(tx).member, 0);
    txf_insert_row(&o, tx, "b-1", 1);
    json_object *obj = json_object_new_object();
    static const odbox_event_type EMPTY = {""}, SPACED = {"bad name"};
    refused_emit(NULL, "Order", "b-1", &PAID, obj, "tx is NULL");
    refused_emit(tx, NULL, "b-1", &PAID, obj, "model_type is NULL");
    refused_emit(tx, "Order", NULL, &PAID, obj, "model_id is NULL");
    refused_emit(tx, "Order", "b-1", NULL, obj, "event type is NULL");
    refused_emit(tx, "Order", "b-1", &PAID, NULL, "payload is NULL");
    refused_emit(tx, "Order", "b-1", &PAID, arr, "JSON object");
    refused_emit(tx, "Order", "b-1", &EMPTY, obj, "event type name");
    refused_emit(tx, "Order", "b-1", &SPACED, obj, "event type name");
    refused_emit(tx, "Or der", "b-1", &PAID, obj, "model type");
    refused_emit(tx, long_name, "b-1", &PAID, obj, "model type");
    refused_emit(tx, "Order", "", &PAID, obj, "1 to 255 bytes");
    char longid[300];
    memset(longid, 'x', 256);
    longid[256] = 0;
    refused_emit(tx, "Order", longid, &PAID, obj, "1 to 255 bytes");
    refused_emit(tx, "Order", "b-1", &PAID, nul_obj, "U+0000");
    refused_emit(tx, "Order", "b-1", &PAID, bad_utf8, "UTF-8");
    refused_emit(tx, "Order", "b-\xe2\x82", &PAID, obj, "UTF-8"); /* a sequence cut short */
    json_object *escaped = json_tokener_parse("{\"note\": \"a\\\\u0000b\"}"); /* a backslash, then text */
    ck_assert_msg(odbox_tx_emit(tx, "Order", "b-1", &PAID, escaped, &e) == ODBOX_OK, "%s", e.message);
    json_object_put(escaped);
    static const odbox_event_type PAID_TOO = {"OwnTxPaid"}; /* another descriptor, PAID's name */
    refused_emit(tx, "Order", "b-1", &PAID_TOO, obj, "two different event types are named OwnTxPaid");
    ck_assert_ptr_nonnull(odbox_tx_conn(tx));
    /* the refused events left nothing staged: the commit writes the row
     * and the one event that was taken */
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE model_type = 'Order' AND model_id = 'b-1' "
                                           "AND event_type = 'OwnTxPaid'",
                                 itest_evt(o.f.ev[0], "events")),
                     1);

    /* a transaction after its commit or rollback: the pointer is NULL */
    tx = txf_begin(&o, NULL);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_tx_commit(&tx, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "NULL"), "message: %s", e.message);
    ck_assert_int_eq(odbox_tx_commit(NULL, &e), ODBOX_EINVAL);
    refused_emit(tx, "Order", "b-1", &PAID, obj, "tx is NULL");
    odbox_tx_rollback(&tx);
    odbox_tx_rollback(NULL);
    ck_assert_ptr_null(odbox_tx_conn(tx));
    ck_assert_ptr_null(odbox_tx_action_id(tx));
    ck_assert_int_eq(txf_events(&o), 2); /* and the empty commit's sentinel */
    ck_assert_int_eq(txf_rows(&o), 1);
    json_object_put(obj);
    json_object_put(arr);
    json_object_put(nul_obj);
    json_object_put(bad_utf8);
    txf_close(&o);
}
END_TEST

/* Keys are kept on the default shard: a keyed transaction elsewhere is
 * refused before it takes a connection, and writes nothing on either. */
START_TEST(a_key_off_the_default_shard_is_refused)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_tx *tx = (odbox_tx *)&f;
    odbox_error e;
    odbox_tx_config keyed = {.idempotency_key = "request-1"};
    int rc = odbox_tx_begin(exe, (odbox_shard_id){0, 1}, &keyed, &tx, &e);
    ck_assert_msg(rc == ODBOX_ECROSSSHARD, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_ptr_null(tx);
    ck_assert_msg(strstr(e.message, "default shard"), "%s", e.message);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(dfx_events(&f, i), 0);
        ck_assert_int_eq(itest_count(f.c[i], "SELECT COUNT(*) FROM %s", itest_evt(f.ev[i], "idempotency_keys")), 0);
    }
    /* without the key, the same shard takes it */
    ck_assert_int_eq(odbox_tx_begin(exe, (odbox_shard_id){0, 1}, NULL, &tx, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_tx_shard(tx).member, 1);
    odbox_tx_rollback(&tx);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

Suite *owntx_suite(void)
{
    Suite *s = suite_create("owntx");
    TCase *t = tcase_create("owntx");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, rows_and_events_land_together_on_commit);
    tcase_add_test(t, a_delayed_event_carries_its_deliver_after);
    tcase_add_test(t, a_key_off_the_default_shard_is_refused);
    tcase_add_test(t, rollback_and_failed_statement_write_nothing);
    tcase_add_test(t, a_transaction_ended_by_the_caller_is_refused);
    tcase_add_test(t, killed_before_commit_nothing_lands);
    tcase_add_test(t, commit_on_a_lost_connection_is_in_doubt_tx);
    tcase_add_test(t, a_session_lost_while_idle_is_replaced_under_the_transaction);
    tcase_add_test(t, bad_input_is_refused_and_writes_nothing);
    tcase_add_test(t, a_keyed_transaction_commits_once_and_replays);
    tcase_add_test(t, a_reused_action_id_is_refused);
    tcase_add_test(t, a_reused_action_id_in_upper_case_is_refused);
    tcase_add_test(t, a_keyed_begin_behind_an_open_holder_times_out);
    owntx_add_race_tests(t);
    owntx_add_sql_tests(t);
    suite_add_tcase(s, t);
    return s;
}
