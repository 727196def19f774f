/* odbox — prepared statements: prepare, the per-connection cache, execute
 * and fetch.
 *
 * A freed statement goes back to its connection's cache and the next
 * prepare of the same SQL reuses it (no new server-side prepare).
 * What goes to the server goes through the connection's driver
 * (driver.h). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "stmt.h"

static void stmt_destroy(odbox_stmt *s, int send);

static void close_cursor(odbox_stmt *s);

static void link_stmt(odbox_conn *c, odbox_stmt *s)
{
    s->conn = c;
    s->prev = NULL;
    s->next = c->stmts;
    if (c->stmts)
        c->stmts->prev = s;
    c->stmts = s;
}

/* Takes s off its connection: its list, its cache and its held count. */
static void unlink_stmt(odbox_stmt *s)
{
    odbox_conn *c = s->conn;
    if (!c)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else
        c->stmts = s->next;
    if (s->next)
        s->next->prev = s->prev;
    for (int i = 0; i < c->ncache; i++)
        if (c->cache[i] == s) {
            c->cache[i] = c->cache[--c->ncache];
            break;
        }
    if (s->in_use)
        c->nheld--;
    s->prev = s->next = NULL;
    s->conn = NULL;
}

/* Frees what the driver holds for s (send: tell the server too; not
 * after a reconnect, whose old session is gone) and forgets what it knew
 * of it: bound parameters and columns, the open result. */
static void drop_handle(odbox_stmt *s, int send)
{
    if (s->conn)
        s->conn->drv->unprepare(s, send);
    for (int i = 0; i < s->cap; i++)
        s->binds[i].drv_bound = 0;
    s->drv_nbinds = 0;
    s->executed = s->cols_known = s->open_cursor = s->have_row = 0;
}

void odbox_stmt_detach(odbox_conn *c, int held_only, const char *what)
{
    odbox_stmt *s = c->stmts;
    while (s) {
        odbox_stmt *next = s->next;
        if (s->in_use) {
            odbox_log(ODBOX_LOG_WARN, "%s: a statement was still held (%.48s...); it is detached: using it "
                      "returns ODBOX_ESTATE, odbox_stmt_free frees it", what, s->sql);
            drop_handle(s, 1);
            unlink_stmt(s);
        } else if (!held_only) {
            stmt_destroy(s, 1);
        }
        s = next;
    }
}

void odbox_stmt_drop_handles(odbox_conn *c)
{
    odbox_stmt *s = c->stmts;
    while (s) {
        odbox_stmt *next = s->next;
        if (s->in_use)
            drop_handle(s, 0);
        else
            stmt_destroy(s, 0);
        s = next;
    }
}

int odbox_sql_refused_in_tx(const odbox_conn *c, const char *sql, const char *what, odbox_error *err)
{
    if (c->in_tx && c->tx_owned && c->tx_failed)
        return odbox_fail(err, ODBOX_ESTATE,
                          "%s: a statement failed in this transaction, which can only be rolled back "
                          "(odbox_tx_rollback): nothing was sent",
                          what);
    if (c->in_tx && c->tx_failed && c->dialect->failed_statement_aborts_tx && !odbox_sql_is_savepoint_rollback(sql))
        return odbox_fail(err, ODBOX_ESTATE,
                          "%s: a statement failed in this transaction and the server aborted it; nothing was "
                          "sent: end it with odbox_conn_rollback (or ROLLBACK TO a savepoint taken before)",
                          what);
    int ends = c->in_tx ? odbox_sql_ends_tx(sql, odbox_conn_mysql_rules(c)) : 0;
    if (ends == ODBOX_ENOMEM)
        return odbox_fail(err, ODBOX_ENOMEM, "%s: out of memory", what);
    if (!ends)
        return ODBOX_OK;
    if (ends == ODBOX_TX_IMPLICIT_COMMIT)
        return odbox_fail(err, ODBOX_EINVAL,
                          "%s: '%.40s' would commit the transaction implicitly (MySQL and MariaDB commit at DDL, "
                          "account and table-maintenance statements, SET autocommit and LOCK TABLES); nothing was "
                          "sent: run it outside the transaction",
                          what, odbox_sql_start(sql));
    return odbox_fail(err, ODBOX_EINVAL,
                      "%s: '%.40s' would end or restart the transaction; nothing was sent: end it with %s",
                      what, odbox_sql_start(sql),
                      c->tx_owned ? "odbox_tx_commit or odbox_tx_rollback" : "odbox_conn_commit or odbox_conn_rollback");
}

/* A cached, idle statement with this key on c, made ready for new binds;
 * or NULL. */
static odbox_stmt *cache_take(odbox_conn *c, const void *key, size_t keylen)
{
    if (!c->cache_ok || c->dead)
        return NULL;
    for (int i = 0; i < c->ncache; i++) {
        odbox_stmt *s = c->cache[i];
        if (!s->in_use && s->keylen == keylen && !memcmp(s->key, key, keylen)) {
            s->in_use = 1;
            c->nheld++;
            s->last_used = ++c->cache_clock;
            close_cursor(s);
            odbox_stmt_clear_binds(s);
            return s;
        }
    }
    return NULL;
}

/* Keeps s for reuse; returns 0 when the cache is full of busy statements. */
static int cache_put(odbox_conn *c, odbox_stmt *s)
{
    for (int i = 0; i < c->ncache; i++)
        if (c->cache[i] == s)
            return 1;
    if (c->ncache == ODBOX_STMT_CACHE) {
        int victim = -1;
        for (int i = 0; i < c->ncache; i++)
            if (!c->cache[i]->in_use && (victim < 0 || c->cache[i]->last_used < c->cache[victim]->last_used))
                victim = i;
        if (victim < 0)
            return 0;
        stmt_destroy(c->cache[victim], 1);
    }
    c->cache[c->ncache++] = s;
    return 1;
}

/* key is the SQL text itself (without its NUL) or a caller's key. */
static int prepare(odbox_conn *c, const char *sql, const void *key, size_t keylen, int shape_fixed,
                   odbox_stmt **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "prepare: out is NULL");
    *out = NULL;
    if (!c || !sql || !*sql || !key || !keylen)
        return odbox_fail(err, ODBOX_EINVAL, "prepare: connection or SQL missing");
    if (c->dead)
        return odbox_fail(err, ODBOX_ECONNLOST, "prepare: the connection is dead");
    odbox_stmt *s = cache_take(c, key, keylen);
    if (s) {
        *out = s;
        return ODBOX_OK;
    }
    int text_key = key == sql;
    s = calloc(1, sizeof *s);
    if (!s || !(s->key = malloc(keylen + 1)) || !(s->sql = text_key ? s->key : odbox_strdup(sql))) {
        if (s)
            free(s->key);
        free(s);
        return odbox_fail(err, ODBOX_ENOMEM, "prepare: out of memory");
    }
    memcpy(s->key, key, keylen);
    s->key[keylen] = '\0';
    s->keylen = keylen;
    s->repeatable = odbox_sql_is_read(s->sql);
    int mysql_rules = odbox_conn_mysql_rules(c);
    s->changes_session = odbox_sql_changes_session(s->sql, mysql_rules) != 0; /* ENOMEM: closed at release */
    s->ends_tx = odbox_sql_ends_tx(s->sql, mysql_rules) != 0; /* ENOMEM: looked at again */
    s->shape_fixed = shape_fixed;
    s->shape_cols = -1;
    s->affected = -1;
    s->in_use = 1;
    s->last_used = ++c->cache_clock;
    link_stmt(c, s);
    c->nheld++;
    int rc = ODBOX_OK;
    /* SQL that would end a transaction is prepared at its execute, where
     * inside one it is refused unsent, by a driver that would send it now */
    int defer = s->ends_tx && c->drv->prepares_on_server;
    while (!defer && (rc = c->drv->prepare(s, err)) != ODBOX_OK && c->again(c, rc, 1, err))
        ;
    if (rc != ODBOX_OK) {
        stmt_destroy(s, 1);
        return rc;
    }
    *out = s;
    return ODBOX_OK;
}

int odbox_stmt_prepare(odbox_conn *c, const char *sql, odbox_stmt **out, odbox_error *err)
{
    return prepare(c, sql, sql, sql ? strlen(sql) : 0, 0, out, err);
}

void odbox_sql_key_init(odbox_sql_key *k, int op, size_t count)
{
    /* a first byte no SQL text starts with: never equal to a text key */
    k->b[0] = 1;
    k->b[1] = (unsigned char)op;
    memcpy(k->b + 2, &count, sizeof count);
    k->n = 2 + sizeof count;
    k->too_long = 0;
}

void odbox_sql_key_add(odbox_sql_key *k, int tag, const char *name)
{
    /* the tag, the name and its NUL, so that ("ab", "c") and ("a", "bc")
     * differ; a NULL name as a byte no name holds */
    size_t n = name ? strlen(name) + 1 : 1;
    if (k->too_long || n + 1 > sizeof k->b - k->n) {
        k->too_long = 1;
        return;
    }
    k->b[k->n++] = (unsigned char)tag;
    if (name)
        memcpy(k->b + k->n, name, n);
    else
        k->b[k->n] = 0xFF;
    k->n += n;
}

void odbox_sql_key_add_count(odbox_sql_key *k, int tag, size_t count)
{
    if (k->too_long || 1 + sizeof count > sizeof k->b - k->n) {
        k->too_long = 1;
        return;
    }
    k->b[k->n++] = (unsigned char)tag;
    memcpy(k->b + k->n, &count, sizeof count);
    k->n += sizeof count;
}

int odbox_stmt_prepare_keyed(odbox_conn *c, const char *sql, const odbox_sql_key *k, odbox_stmt **out,
                             odbox_error *err)
{
    if (k->too_long) {
        if (sql)
            return odbox_stmt_prepare(c, sql, out, err);
        *out = NULL;
        return ODBOX_OK;
    }
    if (!sql) {
        *out = c ? cache_take(c, k->b, k->n) : NULL;
        return ODBOX_OK;
    }
    return prepare(c, sql, k->b, k->n, 1, out, err);
}

void odbox_stmt_clear_binds(odbox_stmt *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nbinds; i++)
        s->binds[i].set = 0;
    s->nbinds = 0;
}

/* send: tell the server (not after a reconnect: the old session is
 * gone). */
static void stmt_destroy(odbox_stmt *s, int send)
{
    if (s->conn)
        s->conn->drv->unprepare(s, send);
    unlink_stmt(s);
    for (int i = 0; i < s->cap; i++)
        free(s->binds[i].text);
    free(s->binds);
    if (s->sql != s->key)
        free(s->sql);
    free(s->key);
    free(s);
}

void odbox_stmt_free(odbox_stmt **sp)
{
    if (!sp || !*sp)
        return;
    odbox_stmt *s = *sp;
    *sp = NULL;
    odbox_conn *c = s->conn;
    if (c && c->cache_ok && !c->dead && c->drv->prepared(s)) {
        close_cursor(s);
        s->in_use = 0;
        c->nheld--;
        if (cache_put(c, s))
            return;
        s->in_use = 1; /* as unlink_stmt counts it */
        c->nheld++;
    }
    stmt_destroy(s, 1);
}

static int know_columns(odbox_stmt *s, odbox_error *err);

static void close_cursor(odbox_stmt *s)
{
    /* An UPDATE or INSERT opens no cursor, and closing costs a driver call:
     * ask (a local call) before closing. */
    if (s->executed && !s->cols_known)
        know_columns(s, NULL);
    if (s->open_cursor)
        s->conn->drv->close_cursor(s);
    s->open_cursor = 0;
    s->have_row = 0;
}

/* *unsent: the failure came before the statement itself was sent (its
 * prepare), so it is safe to send again. */
static int execute_once(odbox_stmt *s, int *unsent, odbox_error *err)
{
    odbox_conn *c = s->conn;
    if (c->dead)
        return odbox_fail(err, ODBOX_ECONNLOST, "execute: the connection is dead");
    int rc;
    *unsent = 1;
    if (!c->drv->prepared(s) && (rc = c->drv->prepare(s, err)) != ODBOX_OK)
        return rc;
    *unsent = 0;
    close_cursor(s);
    s->affected = -1;
    s->affected_known = 0;
    s->cols_known = 0;
    s->executed = 0;
    for (int i = 0; i < s->nbinds; i++)
        if (!s->binds[i].set)
            return odbox_fail(err, ODBOX_EINVAL, "execute: parameter %d is not bound", i + 1);
    if (s->nbinds < s->nparams)
        return odbox_fail(err, ODBOX_EINVAL, "execute: parameter %d of %d is not bound", s->nbinds + 1, s->nparams);
    if ((rc = c->drv->execute(s, err)) != ODBOX_OK)
        return rc;
    s->executed = 1;
    return ODBOX_OK;
}

void odbox_sql_sent(odbox_conn *c, const char *sql)
{
    c->fresh = 0;
    if (c->tx_failed && odbox_sql_is_savepoint_rollback(sql))
        c->tx_failed = 0; /* back before the failure */
}

/* A read, or any statement of a transaction that has sent nothing yet,
 * is sent again on a new session when the hand-out's connection turns
 * out lost (odbox_conn_again); a write in autocommit never is. */
int odbox_stmt_execute(odbox_stmt *s, odbox_error *err)
{
    if (!s)
        return odbox_fail(err, ODBOX_EINVAL, "execute: statement is NULL");
    if (!s->conn)
        return odbox_stmt_detached(err, "execute");
    odbox_conn *c = s->conn;
    int rc = s->ends_tx || c->tx_failed ? odbox_sql_refused_in_tx(c, s->sql, "execute", err) : ODBOX_OK;
    if (rc != ODBOX_OK)
        return rc;
    c->session_changed |= s->changes_session;
    int unsent = 0;
    while ((rc = execute_once(s, &unsent, err)) != ODBOX_OK && c->again(c, rc, s->repeatable || c->in_tx || unsent, err))
        ;
    if (rc == ODBOX_OK)
        odbox_sql_sent(c, s->sql);
    return rc;
}

/* Asks the driver for the result's columns once per execute. */
static int know_columns(odbox_stmt *s, odbox_error *err)
{
    if (s->cols_known)
        return ODBOX_OK;
    s->cols_known = 1;
    s->result_cols = 0;
    int rc = s->conn->drv->columns(s, err);
    if (rc != ODBOX_OK)
        s->cols_known = 0;
    return rc;
}

int64_t odbox_stmt_rows_affected(odbox_stmt *s)
{
    if (!s || !s->conn || !s->executed)
        return -1;
    if (!s->affected_known) {
        s->affected = s->conn->drv->rows_affected(s);
        s->affected_known = 1;
    }
    return s->affected;
}

int odbox_stmt_execute_autocommit(odbox_stmt *s, int tries, int *runs, odbox_error *err)
{
    for (int attempt = 1;; attempt++) {
        int rc = odbox_stmt_execute(s, err);
        if (runs)
            *runs = attempt;
        if (rc != ODBOX_EDEADLOCK || attempt >= tries || !s->conn || s->conn->in_tx)
            return rc;
        odbox_sleep_ms(attempt * 10);
    }
}

int odbox_stmt_query_int64(odbox_stmt *s, int64_t *v, odbox_error *err)
{
    int rc = odbox_stmt_execute(s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
        rc = odbox_stmt_get_int64(s, 1, v, NULL, err);
    else if (rc == 0)
        rc = odbox_fail(err, ODBOX_ENOTFOUND, "query returned no row");
    return rc;
}

int odbox_stmt_column_count(odbox_stmt *s)
{
    if (!s || !s->conn || !s->executed)
        return 0;
    know_columns(s, NULL);
    return s->result_cols;
}

/* The 1-based index of the result column labelled name (case-insensitive),
 * or 0 when there is none. */
int odbox_stmt_column_index(odbox_stmt *s, const char *name)
{
    int n = odbox_stmt_column_count(s);
    for (int i = 1; name && i <= n; i++) {
        char label[256];
        if (s->conn->drv->column_label(s, i, label, sizeof label) && !strcasecmp(label, name))
            return i;
    }
    return 0;
}

int odbox_stmt_fetch(odbox_stmt *s, odbox_error *err)
{
    if (!s)
        return odbox_fail(err, ODBOX_EINVAL, "fetch: statement is NULL");
    if (!s->conn)
        return odbox_stmt_detached(err, "fetch");
    if (!s->executed)
        return 0;
    int rc = know_columns(s, err);
    if (rc != ODBOX_OK)
        return rc;
    if (!s->open_cursor)
        return 0;
    if ((rc = s->conn->drv->fetch(s, err)) == 0) {
        close_cursor(s);
        return 0;
    }
    if (rc < 0)
        return rc;
    s->have_row = 1;
    return 1;
}


char *odbox_sql_rows(int rows, const char *const *forms, int ncols)
{
    if (rows < 1 || ncols < 1 || !forms)
        return NULL;
    odbox_buf b = {0};
    for (int r = 0; r < rows; r++) {
        odbox_buf_append(&b, r ? ",(" : "(");
        for (int c = 0; c < ncols; c++) {
            if (c)
                odbox_buf_append(&b, ",");
            odbox_buf_append(&b, forms[c] ? forms[c] : "?");
        }
        odbox_buf_append(&b, ")");
    }
    return odbox_buf_take(&b);
}

char *odbox_sql_insert_source(int rows, const char *const *forms, int ncols, int select_form)
{
    if (select_form && rows != 1)
        return NULL;
    char *values = odbox_sql_rows(rows, forms, ncols);
    if (!values)
        return NULL;
    odbox_buf b = {0};
    if (select_form) {
        /* the row "(a,b)" without its parentheses */
        odbox_buf_append(&b, "SELECT ");
        odbox_buf_appendn(&b, values + 1, strlen(values) - 2);
    } else {
        odbox_buf_cat(&b, "VALUES ", values, (char *)NULL);
    }
    free(values);
    return odbox_buf_take(&b);
}
