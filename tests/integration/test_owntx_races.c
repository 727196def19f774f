/* odbox — own transactions that race (the owntx suite, with
 * test_owntx.c): two transactions that deadlock, each with its rows and
 * events, eight processes that begin one idempotency key at once, a
 * transaction whose session another connection ends while new sessions
 * are refused, and a COMMIT whose answer a proxy drops. Real threads,
 * processes, sessions and sockets; every check counts rows. */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "jobs_fx.h"
#include "netfault.h"
#include "owntx_fx.h"

/* One of two transactions that update the rows first and second, in
 * that order, each by amount, and add an event; the other takes them the
 * other way round. Nothing here asserts: the test's thread checks. */
typedef struct crosser {
    txf *o;
    pthread_barrier_t *both_hold; /* both hold their first row */
    const char *first, *second;
    int64_t amount;
    int begin_rc, first_rc, second_rc, after_rc, commit_rc;
    char action_id[37];
    odbox_error commit_err;
} crosser;

static void *cross(void *arg)
{
    crosser *x = arg;
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE %s SET amount = amount + ? WHERE id = ?", x->o->table);
    odbox_tx *tx = NULL;
    odbox_error e;
    x->begin_rc = odbox_tx_begin(x->o->exe, (odbox_shard_id){0, 0}, NULL, &tx, &e);
    if (x->begin_rc == ODBOX_OK) {
        memcpy(x->action_id, odbox_tx_action_id(tx), sizeof x->action_id);
        x->first_rc = txf_run_sql(tx, sql, x->first, x->amount, NULL);
    }
    pthread_barrier_wait(x->both_hold);
    if (x->begin_rc != ODBOX_OK || x->first_rc != ODBOX_OK)
        return NULL;
    x->second_rc = txf_run_sql(tx, sql, x->second, x->amount, NULL);
    if (x->second_rc != ODBOX_OK) /* not sent: the database rolled the transaction back */
        x->after_rc = txf_run_sql(tx, sql, x->first, x->amount, NULL);
    json_object *p = json_object_new_object();
    if (odbox_tx_emit(tx, "Order", x->first, &PAID, p, &e) == ODBOX_OK)
        x->commit_rc = odbox_tx_commit(&tx, &x->commit_err);
    json_object_put(p);
    odbox_tx_rollback(&tx);
    return NULL;
}

static int64_t amount_of_row(txf *o, const char *id)
{
    return itest_count(o->f.c[0], "SELECT amount FROM %s WHERE id = '%s'", o->table, id);
}

/* Two own transactions take two rows in opposite orders: the database
 * rolls one back (ODBOX_EDEADLOCK at its second UPDATE). Its statement
 * after that is not sent (MySQL and MariaDB have ended the transaction
 * and would autocommit it) and its commit is refused: its UPDATE and its
 * event write nothing. The other commits both rows and its event. The
 * loser's retry, on a session from the same pool, commits too. */
START_TEST(a_deadlocked_transaction_writes_nothing)
{
    txf o;
    txf_open(&o);
    itest_exec(o.f.c[0], "INSERT INTO %s (id, amount) VALUES ('a', 0), ('b', 0)", o.table);
    pthread_barrier_t both_hold;
    pthread_barrier_init(&both_hold, NULL, 2);
    crosser x[2] = {{&o, &both_hold, "a", "b", 1, 0, 0, 0, 0, 0, "", {0}},
                    {&o, &both_hold, "b", "a", 10, 0, 0, 0, 0, 0, "", {0}}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, cross, &x[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&both_hold);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(x[i].begin_rc, ODBOX_OK);
        ck_assert_int_eq(x[i].first_rc, ODBOX_OK);
    }
    ck_assert_msg((x[0].second_rc == ODBOX_EDEADLOCK) != (x[1].second_rc == ODBOX_EDEADLOCK),
                  "second UPDATEs: %s and %s, want one ODBOX_EDEADLOCK", odbox_errname(x[0].second_rc),
                  odbox_errname(x[1].second_rc));
    crosser *lost = x[0].second_rc == ODBOX_EDEADLOCK ? &x[0] : &x[1], *won = lost == &x[0] ? &x[1] : &x[0];
    ck_assert_int_eq(won->second_rc, ODBOX_OK);
    ck_assert_msg(won->commit_rc == ODBOX_OK, "the winner's commit: %s", won->commit_err.message);
    ck_assert_int_eq(lost->after_rc, ODBOX_ESTATE);
    ck_assert_msg(lost->commit_rc == ODBOX_ESTATE && strstr(lost->commit_err.message, "rolled back"),
                  "the loser's commit: %s: %s", odbox_errname(lost->commit_rc), lost->commit_err.message);
    ck_assert_int_eq(amount_of_row(&o, "a"), won->amount);
    ck_assert_int_eq(amount_of_row(&o, "b"), won->amount);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(txf_committed(&o, won->action_id), 1);
    ck_assert_int_eq(txf_committed(&o, lost->action_id), 0);
    ck_assert_int_eq(o.commits, 1);

    /* the retry the error invites */
    odbox_tx *tx = txf_begin(&o, NULL);
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE %s SET amount = amount + ? WHERE id = ?", o.table);
    ck_assert_int_eq(txf_run_sql(tx, sql, lost->first, lost->amount, NULL), ODBOX_OK);
    ck_assert_int_eq(txf_run_sql(tx, sql, lost->second, lost->amount, NULL), ODBOX_OK);
    txf_emit(tx, lost->first, "{}");
    odbox_error e;
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(amount_of_row(&o, "a"), 11);
    ck_assert_int_eq(amount_of_row(&o, "b"), 11);
    ck_assert_int_eq(txf_events(&o), 2);
    txf_close(&o);
}
END_TEST

/* Eight processes begin one key at once: one commits (its rows, its
 * event, its key row), seven replay it, all with its action id. */
#define KEYED_WORKERS 8
START_TEST(eight_processes_one_key_one_transaction)
{
    txf o;
    txf_open(&o);
    char extra[128], barrier[64], key[80], cmd[4096];
    snprintf(extra, sizeof extra, "eventlog=%s", o.f.ev[0]);
    itest_barrier_name(barrier, sizeof barrier, "owntx");
    snprintf(key, sizeof key, "req-%s", o.table);
    char *dsn = itest_dsn_with(1, extra);
    const char *build = getenv("ODBOX_BUILDDIR");
    snprintf(cmd, sizeof cmd, "'%s/tests/integration/owntx-worker' '%s' '%s' keyed 1 '%s' '%s'",
             build ? build : ".", dsn, o.table, key, barrier);
    free(dsn);
    FILE *p[KEYED_WORKERS];
    itest_start_together(p, KEYED_WORKERS, cmd, barrier);
    char what[KEYED_WORKERS][16], id[KEYED_WORKERS][40];
    int commits = 0;
    for (int k = 0; k < KEYED_WORKERS; k++) {
        ck_assert_int_eq(fscanf(p[k], "%15s %39s", what[k], id[k]), 2);
        ck_assert_int_eq(pclose(p[k]), 0);
        commits += !strcmp(what[k], "committed");
        ck_assert_str_eq(id[k], id[0]);
    }
    unlink(barrier);
    ck_assert_int_eq(commits, 1);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE idem_key = '%s'",
                                 itest_evt(o.f.ev[0], "idempotency_keys"), key),
                     1);
    ck_assert_int_eq(txf_committed(&o, id[0]), 1);
    txf_close(&o);
}
END_TEST

/* One of the callers that begin a key another transaction holds: it
 * either replays the key's transaction or, when the holder rolled back,
 * commits its own. Nothing here asserts. */
typedef struct waiter {
    txf *o;
    const odbox_tx_config *cfg;
    int begin_rc, replayed, commit_rc;
    char action_id[37];
    odbox_error err;
} waiter;

static void *wait_on_key(void *arg)
{
    waiter *w = arg;
    odbox_tx *tx = NULL;
    w->begin_rc = odbox_tx_begin(w->o->exe, (odbox_shard_id){0, 0}, w->cfg, &tx, &w->err);
    if (w->begin_rc != ODBOX_OK)
        return NULL;
    memcpy(w->action_id, odbox_tx_action_id(tx), sizeof w->action_id);
    w->replayed = odbox_tx_replayed(tx);
    json_object *p = json_object_new_object();
    if (!w->replayed) {
        char sql[160];
        snprintf(sql, sizeof sql, "INSERT INTO %s (amount, id) VALUES (?, ?)", w->o->table);
        w->commit_rc = txf_run_sql(tx, sql, "won", 1, NULL);
        if (w->commit_rc == ODBOX_OK)
            w->commit_rc = odbox_tx_emit(tx, "Order", "won", &PAID, p, &w->err);
    }
    if (w->commit_rc == ODBOX_OK)
        w->commit_rc = odbox_tx_commit(&tx, &w->err);
    json_object_put(p);
    odbox_tx_rollback(&tx);
    return NULL;
}

/* Four callers wait on a key whose holder then rolls back: one of them
 * commits its own transaction, the three others wait for it and replay
 * it. Before, on MySQL and MariaDB three of the four failed with
 * ODBOX_EDEADLOCK (InnoDB's duplicate-key checks of the waiters deadlock
 * one another) and a message that blamed the migrations. */
#define KEY_WAITERS 4
START_TEST(waiters_on_a_rolled_back_key_replay_the_next_holder)
{
    txf o;
    txf_open(&o);
    odbox_tx_config cfg = {.action_name = "PayOrder", .idempotency_key = "rolled-back"};
    odbox_tx *holder = txf_begin(&o, &cfg);
    txf_insert_row(&o, holder, "holder", 1);
    waiter w[KEY_WAITERS];
    pthread_t t[KEY_WAITERS];
    for (int i = 0; i < KEY_WAITERS; i++) {
        w[i] = (waiter){.o = &o, .cfg = &cfg};
        ck_assert_int_eq(pthread_create(&t[i], NULL, wait_on_key, &w[i]), 0);
    }
    jt_sleep_ms(700); /* the waiters reach the key's row lock */
    odbox_tx_rollback(&holder);
    for (int i = 0; i < KEY_WAITERS; i++)
        pthread_join(t[i], NULL);
    int commits = 0, replays = 0;
    const char *first = NULL;
    for (int i = 0; i < KEY_WAITERS; i++) {
        ck_assert_msg(w[i].begin_rc == ODBOX_OK, "waiter %d: %s: %s", i, odbox_errname(w[i].begin_rc),
                      w[i].err.message);
        ck_assert_msg(w[i].commit_rc == ODBOX_OK, "waiter %d's commit: %s", i, w[i].err.message);
        commits += !w[i].replayed;
        replays += w[i].replayed;
        if (!w[i].replayed)
            first = w[i].action_id;
    }
    ck_assert_int_eq(commits, 1);
    ck_assert_int_eq(replays, KEY_WAITERS - 1);
    for (int i = 0; i < KEY_WAITERS; i++)
        ck_assert_str_eq(w[i].action_id, first);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(txf_committed(&o, first), 1);
    txf_close(&o);
}
END_TEST

/* itest_dsn(1) with its database replaced by db (a URL DSN: the path
 * after the host is the database). */
static void dsn_of_database(const char *db, char *out, size_t cap)
{
    const char *base = itest_dsn(1), *q = strchr(base, '?');
    size_t end = q ? (size_t)(q - base) : strlen(base), slash = end;
    while (slash > 0 && base[slash - 1] != '/')
        slash--;
    ck_assert_int_gt(slash, 0);
    snprintf(out, cap, "%.*s%s%s", (int)slash, base, db, q ? q : "");
}

/* The session an own transaction gets is ended while it idles, and no
 * new one can be had: nothing lands, and once sessions can be had again
 * the pool serves the next transaction. PostgreSQL only: begin sends
 * nothing there, so the caller's first statement sees the loss and
 * tries a new session, which fails, and the transaction has none left;
 * emit and commit then refuse with ODBOX_ESTATE rather than write into
 * a session without it. (MySQL and MariaDB cannot get there: begin
 * sends START TRANSACTION, which sees a loss, and fails.) New sessions
 * are refused by turning off the connections to a database of the
 * test's own (ALLOW_CONNECTIONS), not the account's logins: the other
 * tests running at the same time use the same account. */
START_TEST(a_lost_session_that_cannot_be_replaced_writes_nothing)
{
    odbox_conn *admin = itest_connect(1);
    char db[64], dsn[512], var[] = "ODBOX_TEST_PG_DSN";
    snprintf(db, sizeof db, "odbox_lost_%ld", (long)getpid());
    itest_exec(admin, "DROP DATABASE IF EXISTS %s", db);
    itest_exec(admin, "CREATE DATABASE %s", db);
    dsn_of_database(db, dsn, sizeof dsn);
    ck_assert_int_eq(setenv(var, dsn, 1), 0); /* this test's process only (Check forks each test) */
    txf o;
    txf_open(&o);
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(o.f.r));
    odbox_conn *c = NULL, *was;
    odbox_error e, insert_err = {0}, emit_err = {0}, commit_err = {0}, off_err = {0}, on_err = {0};
    ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
    int64_t id = itest_session_id(c);
    was = c;
    odbox_pool_release(pool, &c);
    odbox_tx *tx = txf_begin(&o, NULL);
    ck_assert_ptr_eq(odbox_tx_conn(tx), was); /* the session just given back, idle under 1 s: not pinged */
    char action_id[37], sql[160], off_sql[128], on_sql[128];
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    snprintf(sql, sizeof sql, "INSERT INTO %s (amount, id) VALUES (?, ?)", o.table);
    snprintf(off_sql, sizeof off_sql, "ALTER DATABASE %s ALLOW_CONNECTIONS false", db);
    snprintf(on_sql, sizeof on_sql, "ALTER DATABASE %s ALLOW_CONNECTIONS true", db);

    int off_rc = odbox_conn_exec(admin, off_sql, &off_err), insert_rc = -1, emit_rc = -1, commit_rc = -1;
    if (off_rc == ODBOX_OK) {
        itest_kill_session(admin, id);
        odbox_stmt *s = NULL;
        insert_rc = odbox_stmt_prepare(odbox_tx_conn(tx), sql, &s, &insert_err);
        if (insert_rc == ODBOX_OK && (insert_rc = odbox_stmt_bind_int64(s, 1, 1, &insert_err)) == ODBOX_OK &&
            (insert_rc = odbox_stmt_bind_text(s, 2, "lost", &insert_err)) == ODBOX_OK)
            insert_rc = odbox_stmt_execute(s, &insert_err);
        odbox_stmt_free(&s);
        json_object *p = json_object_new_object();
        emit_rc = odbox_tx_emit(tx, "Order", "lost", &PAID, p, &emit_err);
        json_object_put(p);
        commit_rc = odbox_tx_commit(&tx, &commit_err);
    }
    int on_rc = odbox_conn_exec(admin, on_sql, &on_err); /* before anything asserts */
    odbox_tx_rollback(&tx);
    ck_assert_msg(off_rc == ODBOX_OK, "connections off: %s", off_err.message);
    ck_assert_msg(on_rc == ODBOX_OK, "connections back on: %s", on_err.message);

    ck_assert_msg(insert_rc == ODBOX_ECONNLOST && strstr(insert_err.message, "reconnecting failed too"),
                  "insert: %s: %s", odbox_errname(insert_rc), insert_err.message);
    ck_assert_msg(emit_rc == ODBOX_ESTATE, "emit: %s: %s", odbox_errname(emit_rc), emit_err.message);
    ck_assert_msg(strstr(emit_err.message, "tx emit: no open transaction on the transaction's connection (its "
                                           "session was lost and no new one could be begun)"),
                  "%s", emit_err.message);
    ck_assert_msg(commit_rc == ODBOX_ESTATE, "commit: %s: %s", odbox_errname(commit_rc), commit_err.message);
    ck_assert_msg(strstr(commit_err.message, "tx commit: no open transaction on the transaction's connection"), "%s",
                  commit_err.message);
    ck_assert_msg(strstr(commit_err.message, action_id), "%s", commit_err.message);
    ck_assert_msg(!strstr(commit_err.message, "rolled back"), "nothing was there to roll back: %s",
                  commit_err.message);
    ck_assert_ptr_null(tx);
    txf_nothing_landed(&o, action_id);
    ck_assert_int_eq(txf_rows(&o), 0);
    ck_assert_int_eq(txf_events(&o), 0);
    ck_assert_int_eq(o.commits, 0);

    tx = txf_begin(&o, NULL); /* the dead session was closed at its release, not pooled */
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "after", 2);
    txf_emit(tx, "after", "{}");
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);
    ck_assert_int_eq(txf_committed(&o, action_id), 1);
    ck_assert_int_eq(o.commits, 1);
    txf_close(&o);
    itest_exec(admin, "DROP DATABASE %s WITH (FORCE)", db);
    odbox_conn_close(&admin);
}
END_TEST

static int cut_the_commits_answer(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
{
    (void)shard;
    (void)conn;
    if (at == ODBOX_HOOK_EVENTS_WRITTEN)
        netfault_cut_next_answer(ud);
    return 0;
}

/* The COMMIT reaches the server, which commits, and its answer is lost
 * on the way back (a proxy drops it and closes the connection): in
 * doubt, and odbox_action_committed says it committed, as the rows and
 * the event show. The other half of commit_on_a_lost_connection_is_in_
 * doubt_tx, where the session ends before its COMMIT. */
START_TEST(a_commit_whose_answer_is_lost_is_in_doubt_and_landed)
{
    txf o;
    txf_open(&o);
    netfault *px = netfault_proxy_to(itest_dsn(1));
    char *dsn = netfault_dsn(itest_dsn(1), netfault_port(px), NULL);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = dsn, .eventlog = o.f.ev[0]};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1, .has_default = 1, .default_shard = {0, 0}};
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_registry_open(&cfg, &r, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_executor_open(NS, r, NULL, &exe, &e) == ODBOX_OK, "%s", e.message);
    odbox_executor_set_hook(exe, cut_the_commits_answer, px);

    odbox_tx *tx = NULL;
    ck_assert_msg(odbox_tx_begin(exe, (odbox_shard_id){0, 0}, NULL, &tx, &e) == ODBOX_OK, "%s", e.message);
    char action_id[37];
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "answer-lost", 7);
    txf_emit(tx, "answer-lost", "{}");
    int rc = odbox_tx_commit(&tx, &e);
    ck_assert_msg(rc == ODBOX_EINDOUBT && e.code == ODBOX_EINDOUBT, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, "IN DOUBT") && strstr(e.message, action_id), "message: %s", e.message);
    ck_assert_ptr_null(tx);
    ck_assert_int_eq(txf_committed(&o, action_id), 1);
    ck_assert_int_eq(txf_rows(&o), 1);
    ck_assert_int_eq(txf_events(&o), 1);

    /* the lost session is not pooled: the next transaction, through the
     * same proxy, lands */
    odbox_executor_set_hook(exe, NULL, NULL);
    ck_assert_msg(odbox_tx_begin(exe, (odbox_shard_id){0, 0}, NULL, &tx, &e) == ODBOX_OK, "%s", e.message);
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    txf_insert_row(&o, tx, "after", 1);
    txf_emit(tx, "after", "{}");
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(txf_committed(&o, action_id), 1);
    ck_assert_int_eq(txf_rows(&o), 2);
    ck_assert_int_eq(txf_events(&o), 2);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    netfault_free(&px);
    free(dsn);
    txf_close(&o);
}
END_TEST

void owntx_add_race_tests(TCase *t)
{
    tcase_add_test(t, waiters_on_a_rolled_back_key_replay_the_next_holder);
    tcase_add_test(t, a_deadlocked_transaction_writes_nothing);
    tcase_add_test(t, eight_processes_one_key_one_transaction);
    tcase_add_test(t, a_lost_session_that_cannot_be_replaced_writes_nothing);
    tcase_add_test(t, a_commit_whose_answer_is_lost_is_in_doubt_and_landed);
}
