/* odbox — own transactions that race (the owntx suite, with
 * test_owntx.c): two transactions that deadlock, each with its rows and
 * events, eight processes that begin one idempotency key at once, and a
 * transaction whose session another connection ends while new logins are
 * refused. Real threads, processes and sessions; every check counts rows. */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "jobs_fx.h"
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

/* Turns the logins of c's own account off (off = 1) or on again. The
 * account stays the same for the sessions already open, c's included,
 * so c can turn them back on. CONNECTION LIMIT and max_user_connections
 * would not do: PostgreSQL exempts superusers from the first, and the
 * second counts sessions that come and go. */
static int logins(odbox_conn *c, int off, odbox_error *e)
{
    if (itest_is("pg"))
        return odbox_conn_exec(c, off ? "ALTER ROLE CURRENT_USER NOLOGIN" : "ALTER ROLE CURRENT_USER LOGIN", e);
    odbox_stmt *s = NULL;
    const char *who = NULL;
    int is_null = 1, rc = odbox_stmt_prepare(c, "SELECT CURRENT_USER()", &s, e);
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, e)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, e)) == 1)
        rc = odbox_stmt_get_text(s, 1, &who, &is_null, e);
    const char *at = rc == ODBOX_OK && !is_null ? strrchr(who, '@') : NULL;
    char sql[300];
    if (at)
        snprintf(sql, sizeof sql, "ALTER USER '%.*s'@'%s' ACCOUNT %s", (int)(at - who), who, at + 1,
                 off ? "LOCK" : "UNLOCK");
    odbox_stmt_free(&s);
    if (rc >= ODBOX_OK && !at) {
        snprintf(e->message, sizeof e->message, "CURRENT_USER() gave no user@host");
        rc = ODBOX_EDB;
    }
    return rc == ODBOX_OK ? odbox_conn_exec(c, sql, e) : rc;
}

/* The session an own transaction gets is ended while it idles, and no
 * new one can be had (the account's logins are off): nothing lands, and
 * once logins are back the pool serves the next transaction. The pool
 * hands out the session it was just given back (idle under its 1 s, so
 * not pinged); where the loss is first seen decides the error. On
 * PostgreSQL begin sends nothing: the caller's first statement sees it
 * and tries a new session, which fails, so the transaction has none
 * left, and emit and commit refuse with ODBOX_ESTATE rather than write
 * into a session without it. MySQL and MariaDB cannot get there: begin
 * sends START TRANSACTION, which sees the loss, and odbox_tx_begin fails
 * (a session lost after it is not replaced: the caller's statement then
 * fails and commit refuses as after any failed statement). The logins
 * are turned back on before anything asserts, so that a failure here
 * leaves the account usable for the tests after it. */
START_TEST(a_lost_session_that_cannot_be_replaced_writes_nothing)
{
    txf o;
    txf_open(&o);
    int pg = itest_is("pg");
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(o.f.r));
    odbox_conn *c = NULL, *was;
    odbox_error e, begin_err = {0}, insert_err = {0}, emit_err = {0}, commit_err = {0}, off_err = {0}, on_err = {0};
    ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
    int64_t id = itest_session_id(c);
    was = c;
    odbox_pool_release(pool, &c);
    odbox_tx *tx = pg ? txf_begin(&o, NULL) : NULL;
    char action_id[37] = "", sql[160];
    if (tx) {
        ck_assert_ptr_eq(odbox_tx_conn(tx), was);
        memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    }
    snprintf(sql, sizeof sql, "INSERT INTO %s (amount, id) VALUES (?, ?)", o.table);

    int off_rc = logins(o.f.c[0], 1, &off_err), begin_rc = -1, insert_rc = -1, emit_rc = -1, commit_rc = -1;
    if (off_rc == ODBOX_OK) {
        itest_kill_session(o.f.c[0], id);
        if (!tx)
            begin_rc = odbox_tx_begin(o.exe, (odbox_shard_id){0, 0}, NULL, &tx, &begin_err);
        else {
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
    }
    int on_rc = logins(o.f.c[0], 0, &on_err);
    odbox_tx_rollback(&tx);
    ck_assert_msg(off_rc == ODBOX_OK, "logins off: %s", off_err.message);
    ck_assert_msg(on_rc == ODBOX_OK, "logins back on: %s", on_err.message);

    if (pg) {
        ck_assert_msg(insert_rc == ODBOX_ECONNLOST && strstr(insert_err.message, "reconnecting failed too"),
                      "insert: %s: %s", odbox_errname(insert_rc), insert_err.message);
        ck_assert_msg(emit_rc == ODBOX_ESTATE, "emit: %s: %s", odbox_errname(emit_rc), emit_err.message);
        ck_assert_msg(strstr(emit_err.message, "tx emit: no open transaction on the transaction's connection (its "
                                               "session was lost and no new one could be begun)"),
                      "%s", emit_err.message);
        ck_assert_msg(commit_rc == ODBOX_ESTATE, "commit: %s: %s", odbox_errname(commit_rc), commit_err.message);
        ck_assert_msg(strstr(commit_err.message, "tx commit: no open transaction on the transaction's connection"),
                      "%s", commit_err.message);
        ck_assert_msg(strstr(commit_err.message, action_id), "%s", commit_err.message);
        ck_assert_msg(!strstr(commit_err.message, "rolled back"), "nothing was there to roll back: %s",
                      commit_err.message);
    } else {
        ck_assert_msg(begin_rc == ODBOX_ECONNLOST && strstr(begin_err.message, "reconnecting failed too"),
                      "begin: %s: %s", odbox_errname(begin_rc), begin_err.message);
    }
    ck_assert_ptr_null(tx);
    if (pg)
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
}
END_TEST

void owntx_add_race_tests(TCase *t)
{
    tcase_add_test(t, waiters_on_a_rolled_back_key_replay_the_next_holder);
    tcase_add_test(t, a_deadlocked_transaction_writes_nothing);
    tcase_add_test(t, eight_processes_one_key_one_transaction);
    tcase_add_test(t, a_lost_session_that_cannot_be_replaced_writes_nothing);
}
