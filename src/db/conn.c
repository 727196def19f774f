/* odbox — connections and transactions. */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "odbc.h"
#include "dialects.h"

/* Finds the dialect (a raw string's from the server's answers) and runs
 * its session statements; conn_string is what the session was opened
 * with (the dialect's session_sql reads it). */
static int setup_session(odbox_conn *c, const odbox_dialect *dialect, const char *conn_string, odbox_error *err)
{
    int rc;
    const odbox_dialect *found = dialect ? dialect : odbox_dialect_detect(c->server_name, c->server_version);
    if (!found)
        return odbox_fail(err, ODBOX_EUNSUPPORTED,
                          "connect: server '%s' version '%s' matches no odbox dialect (set dialect= in the DSN)",
                          c->server_name, c->server_version);
    if (c->dialect && c->dialect != found)
        return odbox_fail(err, ODBOX_EUNSUPPORTED, "connect: the server is %s now, and was %s", found->name,
                          c->dialect->name);
    c->dialect = found;
    for (const char *const *q = found->session_setup; q && *q; q++) {
        if ((rc = odbox_conn_exec(c, *q, err)) != ODBOX_OK)
            return odbox_error_prefix(err, rc, "connect: session setup");
    }
    char sql[128];
    for (size_t i = 0; conn_string && found->session_sql && found->session_sql(conn_string, i, sql, sizeof sql); i++)
        if ((rc = odbox_conn_exec(c, sql, err)) != ODBOX_OK)
            return odbox_error_prefix(err, rc, "connect: session setup");
    c->session_changed = 0; /* odbox's own settings */
    return ODBOX_OK;
}

/* Connects c (no session yet) to dsn_text through the driver it asks
 * for, and sets the session up. A dialect c already has (a reconnect)
 * must be the server's. */
static int connect_dbc(odbox_conn *c, const char *dsn_text, odbox_error *err)
{
    char *conn_string = NULL;
    const odbox_dialect *named = NULL;
    int rc = odbox_db_driver_for(dsn_text, &c->drv, err);
    if (rc == ODBOX_OK)
        rc = c->drv->connect(c, dsn_text, &named, &conn_string, err);
    if (rc != ODBOX_OK)
        return rc;
    c->dead = 0;
    rc = setup_session(c, named, conn_string, err);
    odbox_free_secret(conn_string);
    return rc;
}

int odbox_conn_open(const char *dsn_text, odbox_conn **out, odbox_error *err)
{
    return odbox_conn_open_as(dsn_text, 0, out, err);
}

int odbox_conn_open_as(const char *dsn_text, int never_create, odbox_conn **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "odbox_conn_open: out is NULL");
    *out = NULL;
    odbox_conn *c = calloc(1, sizeof *c);
    if (!c)
        return odbox_fail(err, ODBOX_ENOMEM, "connect: out of memory");
    c->again = odbox_conn_again;
    c->never_create = never_create;
    int rc = connect_dbc(c, dsn_text, err);
    if (rc != ODBOX_OK) {
        odbox_conn_close(&c);
        return rc;
    }
    *out = c;
    return ODBOX_OK;
}

static void disconnect(odbox_conn *c)
{
    if (c->dialect && c->dialect->lock_key_form == ODBOX_LOCK_KEY_NONE && c->release_local_locks)
        c->release_local_locks(c); /* as a server does when a session ends */
    if (c->drv)
        c->drv->disconnect(c);
}

void odbox_conn_close(odbox_conn **cp)
{
    if (!cp || !*cp)
        return;
    odbox_conn *c = *cp;
    if (odbox_conn_tx_owned(c, "odbox_conn_close")) {
        *cp = NULL;
        return;
    }
    odbox_stmt_detach(c, 0, "odbox_conn_close");
    disconnect(c);
    odbox_free_secret(c->secret);
    free(c);
    *cp = NULL;
}

static int begin_tx(odbox_conn *c, odbox_error *err);

/* A new session for c, in place: the caller's pointer and the statements
 * it holds stay valid (they are prepared again at their next execute). */
static int reconnect(odbox_conn *c, odbox_error *err)
{
    int was_in_tx = c->in_tx;
    odbox_stmt_drop_handles(c);
    c->dead = 1; /* the session is gone: nothing to roll back */
    disconnect(c);
    c->in_tx = 0;
    int rc = connect_dbc(c, c->owner->dsn(c->pool), err);
    if (rc == ODBOX_OK && was_in_tx)
        rc = begin_tx(c, err); /* an own transaction's too: it holds c still */
    if (rc != ODBOX_OK)
        c->dead = 1;
    return rc;
}

int odbox_conn_again(odbox_conn *c, int rc, int repeatable, odbox_error *err)
{
    if (rc == ODBOX_EINVAL || rc == ODBOX_ENOMEM || rc == ODBOX_ESTATE)
        return 0; /* refused before anything reached the driver */
    int fresh = c->fresh;
    c->fresh = 0;
    if (rc != ODBOX_ECONNLOST || !fresh || !repeatable || !c->pool)
        return 0;
    uint64_t epoch = c->owner->note_lost(c->pool);
    odbox_error e2;
    if (reconnect(c, &e2) != ODBOX_OK) {
        odbox_log(ODBOX_LOG_WARN, "pool: a connection was found lost before the server had answered anything on "
                                  "it, and reconnecting failed: %s", e2.message);
        if (err)
            odbox_error_prefix(err, rc, "reconnecting failed too (%s)", e2.message);
        return 0;
    }
    c->epoch = epoch;
    odbox_log(ODBOX_LOG_INFO, "pool: a connection was found lost before the server had answered anything on it "
                              "(a server restart?); reconnected, and sending it again");
    odbox_error_clear(err); /* the loss is handled: the operation's own outcome is what the caller gets */
    return 1;
}

const odbox_dialect *odbox_conn_dialect(const odbox_conn *c) { return c ? c->dialect : NULL; }
const char *odbox_conn_server_name(const odbox_conn *c) { return c ? c->server_name : ""; }
const char *odbox_conn_server_version(const odbox_conn *c) { return c ? c->server_version : ""; }
int odbox_conn_in_transaction(const odbox_conn *c) { return c ? c->in_tx : 0; }

int odbox_conn_is_dead(odbox_conn *c)
{
    if (!c || c->dead)
        return 1;
    if (!c->drv || c->drv->is_dead(c))
        c->dead = 1;
    return c->dead;
}

static int exec_once(odbox_conn *c, const char *sql, odbox_error *err)
{
    if (c->dead)
        return odbox_fail(err, ODBOX_ECONNLOST, "exec: the connection is dead");
    return c->drv->exec(c, sql, err);
}

static int exec_sql(odbox_conn *c, const char *sql, int repeatable, odbox_error *err)
{
    int rc;
    while ((rc = exec_once(c, sql, err)) != ODBOX_OK && odbox_conn_again(c, rc, repeatable || c->in_tx, err))
        ;
    if (rc == ODBOX_OK)
        odbox_sql_sent(c, sql);
    return rc;
}

int odbox_conn_exec(odbox_conn *c, const char *sql, odbox_error *err)
{
    if (!c || !sql)
        return odbox_fail(err, ODBOX_EINVAL, "exec: connection or SQL is NULL");
    int rc = odbox_sql_refused_in_tx(c, sql, "exec", err);
    if (rc != ODBOX_OK)
        return rc;
    c->session_changed |= odbox_sql_changes_session(sql, odbox_conn_mysql_rules(c)) != 0;
    return exec_sql(c, sql, odbox_sql_is_read(sql), err);
}

static int set_autocommit(odbox_conn *c, int on, odbox_error *err)
{
    return c->drv->autocommit(c, on, err);
}

void odbox_conn_own_tx(odbox_conn *c, int on)
{
    if (c)
        c->tx_owned = on;
}

int odbox_conn_tx_owned(const odbox_conn *c, const char *who)
{
    if (!c || !c->tx_owned)
        return 0;
    odbox_log(ODBOX_LOG_ERROR, "%s: the connection belongs to an odbox_tx and stays with it: end the transaction "
                               "with odbox_tx_commit or odbox_tx_rollback, which release it",
              who);
    return 1;
}

#define TX_OWNED_MSG "%s: the transaction belongs to an odbox_tx: end it with odbox_tx_commit or odbox_tx_rollback"

int odbox_conn_begin(odbox_conn *c, odbox_error *err)
{
    if (!c)
        return odbox_fail(err, ODBOX_EINVAL, "begin: connection is NULL");
    if (c->tx_owned)
        return odbox_fail(err, ODBOX_ESTATE, TX_OWNED_MSG, "begin");
    return begin_tx(c, err);
}

static int begin_tx(odbox_conn *c, odbox_error *err)
{
    if (c->in_tx)
        return odbox_fail(err, ODBOX_ESTATE, "begin: a transaction is already open");
    if (c->dead)
        return odbox_fail(err, ODBOX_ECONNLOST, "begin: the connection is dead");
    int rc;
    if (c->dialect->begin_sql)
        rc = exec_sql(c, c->dialect->begin_sql, 1, err);
    else /* psqlODBC sends nothing now: BEGIN goes with the next statement */
        while ((rc = set_autocommit(c, 0, err)) != ODBOX_OK && odbox_conn_again(c, rc, 1, err))
            ;
    if (rc == ODBOX_OK)
        c->in_tx = 1;
    c->tx_failed = 0;
    return rc;
}

int odbox_conn_tx_failed(const odbox_conn *c) { return c && c->in_tx && c->tx_failed; }

int odbox_conn_end(odbox_conn *c, int rc, odbox_error *err)
{
    if (rc == ODBOX_OK)
        return odbox_conn_commit(c, err);
    if (c && c->in_tx) {
        odbox_error e2;
        odbox_conn_rollback(c, &e2);
    }
    return rc;
}

/* Ends the transaction and restores autocommit. A connection whose
 * rollback or autocommit restore failed is marked dead: re-enabling
 * autocommit on top of an unknown transaction state could commit it. */
static int end_tran(odbox_conn *c, int commit, odbox_error *err)
{
    const char *what = commit ? "commit" : "rollback";
    if (!c)
        return odbox_fail(err, ODBOX_EINVAL, "%s: connection is NULL", what);
    if (!c->in_tx)
        return odbox_fail(err, ODBOX_ESTATE, "%s: no transaction is open", what);
    c->fresh = 0; /* never sent twice */
    if (c->dead) {
        /* The server ended the session: whatever was pending is gone. */
        c->in_tx = 0;
        if (!commit)
            return ODBOX_OK;
        return odbox_fail(err, ODBOX_ECONNLOST,
                          "commit: the connection was lost; the transaction did not commit");
    }
    int rc = ODBOX_OK;
    if (commit && c->tx_failed && c->dialect->failed_statement_aborts_tx) {
        odbox_error e2;
        if (end_tran(c, 0, &e2) != ODBOX_OK)
            odbox_log(ODBOX_LOG_WARN, "commit: the rollback of an aborted transaction failed too: %s", e2.message);
        return odbox_fail(err, ODBOX_EDB,
                          "commit: a statement failed in this transaction and the server aborted it: it was "
                          "rolled back, nothing of it committed");
    }
    const char *sql = commit ? c->dialect->commit_sql : c->dialect->rollback_sql;
    if (sql) {
        /* autocommit stayed on: the statement ends the transaction */
        c->in_tx = 0;
        rc = odbox_conn_exec(c, sql, err);
        if (rc != ODBOX_OK && commit && !c->dead) {
            odbox_error e2;
            if (odbox_conn_exec(c, c->dialect->rollback_sql, &e2) != ODBOX_OK)
                c->dead = 1;
        } else if (rc != ODBOX_OK) {
            c->dead = 1;
        }
        if (rc != ODBOX_OK && commit)
            rc = odbox_commit_failed(rc, err);
        if (rc != ODBOX_OK)
            odbox_error_prefix(err, rc, "%s", what);
        return rc;
    }
    if ((rc = c->drv->end_tran(c, commit, err)) != ODBOX_OK) {
        if (commit)
            rc = odbox_commit_failed(rc, err);
        if (commit && !c->dead) {
            odbox_error e2;
            if (c->drv->end_tran(c, 0, &e2) != ODBOX_OK)
                c->dead = 1;
        } else {
            c->dead = 1;
        }
    }
    c->in_tx = 0;
    if (!c->dead) {
        /* The transaction has ended either way; a connection that cannot
         * return to autocommit is not used again, but the outcome stands
         * (reporting a done commit as failed would invite a retry). */
        odbox_error e2;
        if (set_autocommit(c, 1, &e2) != ODBOX_OK) {
            c->dead = 1;
            odbox_log(ODBOX_LOG_WARN, "%s: done, but autocommit could not be restored; the connection is "
                                      "closed: %s", what, e2.message);
        }
    }
    return rc;
}

int odbox_conn_commit(odbox_conn *c, odbox_error *err)
{
    return c && c->tx_owned ? odbox_fail(err, ODBOX_ESTATE, TX_OWNED_MSG, "commit") : end_tran(c, 1, err);
}

int odbox_conn_rollback(odbox_conn *c, odbox_error *err)
{
    return c && c->tx_owned ? odbox_fail(err, ODBOX_ESTATE, TX_OWNED_MSG, "rollback")
                            : end_tran(c, 0, err);
}

int odbox_conn_query_int64(odbox_conn *c, const char *sql, int64_t *v, odbox_error *err)
{
    /* refused before the SQL is sent: its answer would have nowhere to go */
    if (!v)
        return odbox_fail(err, ODBOX_EINVAL, "query: out is NULL");
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_query_int64(s, v, err);
    odbox_stmt_free(&s);
    return rc;
}

int odbox_conn_table_exists(odbox_conn *c, const char *container, const char *table, int *exists,
                            odbox_error *err)
{
    odbox_stmt *s = NULL;
    int64_t n = 0;
    /* checked before *exists is written: a NULL one is the caller's
     * mistake, refused rather than a crash */
    if (!exists)
        return odbox_fail(err, ODBOX_EINVAL, "table exists: exists is NULL");
    *exists = 0;
    if (!c || !table)
        return odbox_fail(err, ODBOX_EINVAL, "table exists: connection or table missing");
    int rc = odbox_stmt_prepare(c, c->dialect->table_exists_sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, container, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, table, err)) == ODBOX_OK &&
        (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
        rc = odbox_stmt_get_int64(s, 1, &n, NULL, err);
    odbox_stmt_free(&s);
    *exists = n > 0;
    return rc < 0 ? rc : ODBOX_OK;
}

int odbox_db_driver_for(const char *dsn_text, const odbox_db_driver **out, odbox_error *err)
{
    odbox_dsn *dsn = NULL;
    int rc = odbox_dsn_parse(dsn_text, &dsn, err);
    if (rc != ODBOX_OK)
        return rc;
    *out = &odbox_db_odbc;
    if (dsn->driver && odbox_strcaseeq(dsn->driver, "libpq")) {
        const odbox_dialect *d = odbox_dialect_find(dsn->dialect ? dsn->dialect : dsn->scheme ? dsn->scheme : "");
        if (!d || !d->libpq_conninfo) /* a raw string's Driver= is ODBC's: never "libpq" here */
            rc = odbox_fail(err, ODBOX_EUNSUPPORTED,
                            "DSN: driver=libpq takes a postgresql:// URL%s",
#ifdef HAVE_LIBPQ
                            ""
#else
                            ", and odbox was built without libpq (install libpq-dev and configure again)"
#endif
            );
#ifdef HAVE_LIBPQ
        else
            *out = &odbox_db_libpq;
#endif
    }
    odbox_dsn_free(&dsn);
    return rc;
}
