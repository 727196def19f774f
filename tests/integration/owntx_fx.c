/* odbox — the own-transaction suite's fixture (owntx_fx.h). */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "action_internal.h"
#include "owntx_fx.h"

const odbox_event_type PAID = {"OwnTxPaid"};

static void on_commit(void *ud, odbox_shard_id shard, size_t nevents)
{
    txf *o = ud;
    (void)shard;
    o->commits++;
    o->nevents += nevents;
}

void txf_open(txf *o)
{
    memset(o, 0, sizeof *o);
    dfx_open(&o->f, 1, 0);
    itest_name(o->table, sizeof o->table, "owntx");
    itest_exec(o->f.c[0], "CREATE TABLE %s (id VARCHAR(100) PRIMARY KEY, amount BIGINT NOT NULL)", o->table);
    o->exe = open_exe(&o->f);
    odbox_error e;
    ck_assert_int_eq(odbox_executor_add_commit_listener(o->exe, on_commit, o, &e), ODBOX_OK);
}

void txf_close(txf *o)
{
    odbox_executor_free(&o->exe);
    itest_exec(o->f.c[0], "DROP TABLE %s", o->table);
    dfx_close(&o->f);
}

int64_t txf_rows(txf *o) { return dfx_rows(&o->f, 0, o->table); }
int64_t txf_events(txf *o) { return dfx_events(&o->f, 0); }

int txf_committed(txf *o, const char *action_id)
{
    int yes = -1;
    odbox_error e;
    int rc = odbox_action_committed(o->f.r, (odbox_shard_id){0, 0}, action_id, &yes, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    return yes;
}

void txf_nothing_landed(txf *o, const char *action_id)
{
    ck_assert_int_eq(txf_rows(o), 0);
    ck_assert_int_eq(txf_events(o), 0);
    ck_assert_int_eq(txf_committed(o, action_id), 0);
}

odbox_tx *txf_begin(txf *o, const odbox_tx_config *cfg)
{
    odbox_tx *tx = NULL;
    odbox_error e = {0};
    int rc = odbox_tx_begin(o->exe, (odbox_shard_id){0, 0}, cfg, &tx, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_ptr_nonnull(tx);
    /* a success leaves no error behind (a replay's claim conflict did) */
    ck_assert_msg(e.code == 0 && !e.message[0], "OK, but %s: %s", odbox_errname(e.code), e.message);
    return tx;
}

int txf_run_sql(odbox_tx *tx, const char *sql, const char *id, int64_t amount, int64_t *affected)
{
    odbox_stmt *s = NULL;
    odbox_error e;
    int rc = odbox_stmt_prepare(odbox_tx_conn(tx), sql, &s, &e);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_int64(s, 1, amount, &e)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, id, &e)) == ODBOX_OK && (rc = odbox_stmt_execute(s, &e)) == ODBOX_OK &&
        affected)
        *affected = odbox_stmt_rows_affected(s);
    odbox_stmt_free(&s);
    return rc;
}

void txf_insert_row(txf *o, odbox_tx *tx, const char *id, int64_t amount)
{
    char sql[160];
    snprintf(sql, sizeof sql, "INSERT INTO %s (amount, id) VALUES (?, ?)", o->table);
    int64_t n = -1;
    ck_assert_int_eq(txf_run_sql(tx, sql, id, amount, &n), ODBOX_OK);
    ck_assert_int_eq(n, 1);
}

void txf_emit(odbox_tx *tx, const char *id, const char *payload_json)
{
    json_object *p = json_tokener_parse(payload_json);
    odbox_error e;
    int rc = odbox_tx_emit(tx, "Order", id, &PAID, p, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    json_object_put(p);
}

