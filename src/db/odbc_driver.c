/* odbox — the ODBC driver (driver.h): sessions and statements through
 * unixODBC, for every dialect.
 *
 * Rows are read whole at fetch as text, which every driver can produce for
 * every type (values.c parses it). Columns are bound to their buffers once
 * per statement, so a fetch copies every value in one driver call; a value
 * that did not fit is read again whole with SQLGetData. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "stmt.h"
#include "dialects.h"

/* Connects run in parallel, so that a server that does not answer holds
 * up no connect to another (each waits at most its login timeout). What
 * the drivers share, evidence from their sources:
 *  - psqlODBC 13 calls setlocale(LC_CTYPE, "") at every connect
 *    (connection.c:1153 -> multibyte.c:497), which is not thread-safe,
 *    unless the connection string's ConnSettings names the client
 *    encoding (connection.c:1043); the PostgreSQL dialect's connection
 *    string does (dialects/postgresql.c).
 *  - MariaDB Connector/ODBC 3.1 sets its global state up when the ODBC
 *    environment is allocated (ma_environment.c, MADB_EnvInit), which
 *    odbc.c does once; libmariadb initialises under pthread_once
 *    (mariadb_lib.c, mysql_server_init).
 *  - unixODBC 2.3 reads odbcinst.ini under its own mutex
 *    (SQLGetPrivateProfileString.c) and, with the default Threading=0,
 *    holds no lock of its own across the driver's connect
 *    (SQLConnect.c, dbc_change_thread_support).
 * A raw ODBC string is the user's: its driver is unknown and it may lack
 * ConnSettings, so raw-string connects are serialised with each other. */
static pthread_mutex_t raw_connect_mu = PTHREAD_MUTEX_INITIALIZER;

static void get_info_text(SQLHDBC dbc, SQLUSMALLINT what, char *buf, size_t cap)
{
    SQLSMALLINT len = 0;
    buf[0] = '\0';
    if (!ODBOX_SQL_OK(SQLGetInfo(dbc, what, buf, (SQLSMALLINT)cap, &len)))
        buf[0] = '\0';
    buf[cap - 1] = '\0';
}

static int odbc_connect(odbox_conn *c, const char *dsn_text, const odbox_dialect **named, char **conn_string,
                        odbox_error *err)
{
    SQLHENV env;
    const odbox_dialect *dialect = NULL;
    char *odbc = NULL, *secret = NULL;
    int login_timeout_s = 0, raw = 0, rc;
    if ((rc = odbox_odbc_env(&env, err)) != ODBOX_OK ||
        (rc = odbox_dsn_connect_options(dsn_text, &login_timeout_s, &raw, err)) != ODBOX_OK ||
        (rc = odbox_dsn_resolve_as(dsn_text, c->never_create, &dialect, &odbc, &secret, err)) != ODBOX_OK)
        return rc;
    odbox_free_secret(c->secret);
    c->secret = secret;
    *named = dialect;
    if (!c->dialect)
        c->dialect = dialect; /* NULL for a raw string until detected by conn.c */
    if (!ODBOX_SQL_OK(SQLAllocHandle(SQL_HANDLE_DBC, env, &c->dbc))) {
        c->dbc = SQL_NULL_HDBC;
        odbox_free_secret(odbc);
        return odbox_fail(err, ODBOX_ENOMEM, "connect: cannot allocate an ODBC connection handle");
    }
    /* psqlODBC: libpq's connect_timeout. MariaDB's driver ignores it and
     * reads CONN_TIMEOUT from the string instead. */
    SQLSetConnectAttr(c->dbc, SQL_ATTR_LOGIN_TIMEOUT, (SQLPOINTER)(uintptr_t)login_timeout_s, 0);
    if (raw)
        pthread_mutex_lock(&raw_connect_mu);
    SQLRETURN r = SQLDriverConnect(c->dbc, NULL, (SQLCHAR *)odbc, SQL_NTS, NULL, 0, NULL, SQL_DRIVER_NOPROMPT);
    if (raw)
        pthread_mutex_unlock(&raw_connect_mu);
    if (!ODBOX_SQL_OK(r)) {
        odbox_free_secret(odbc);
        odbox_odbc_fail(SQL_HANDLE_DBC, c->dbc, r, c, err, "connect");
        if (err)
            err->code = ODBOX_ECONNECT;
        SQLFreeHandle(SQL_HANDLE_DBC, c->dbc);
        c->dbc = SQL_NULL_HDBC;
        return ODBOX_ECONNECT;
    }
    SQLUSMALLINT commit_cb = SQL_CB_DELETE, rollback_cb = SQL_CB_DELETE;
    SQLGetInfo(c->dbc, SQL_CURSOR_COMMIT_BEHAVIOR, &commit_cb, sizeof commit_cb, NULL);
    SQLGetInfo(c->dbc, SQL_CURSOR_ROLLBACK_BEHAVIOR, &rollback_cb, sizeof rollback_cb, NULL);
    c->cache_ok = commit_cb != SQL_CB_DELETE && rollback_cb != SQL_CB_DELETE;
    SQLUINTEGER getdata = 0;
    SQLGetInfo(c->dbc, SQL_GETDATA_EXTENSIONS, &getdata, sizeof getdata, NULL);
    c->bind_columns = (getdata & (SQL_GD_BOUND | SQL_GD_ANY_COLUMN)) == (SQL_GD_BOUND | SQL_GD_ANY_COLUMN);
    get_info_text(c->dbc, SQL_DBMS_NAME, c->server_name, sizeof c->server_name);
    get_info_text(c->dbc, SQL_DBMS_VER, c->server_version, sizeof c->server_version);
    *conn_string = odbc;
    return ODBOX_OK;
}

static void odbc_disconnect(odbox_conn *c)
{
    if (c->dbc == SQL_NULL_HDBC)
        return;
    if (c->in_tx && !c->dead)
        SQLEndTran(SQL_HANDLE_DBC, c->dbc, SQL_ROLLBACK);
    SQLDisconnect(c->dbc);
    SQLFreeHandle(SQL_HANDLE_DBC, c->dbc);
    c->dbc = SQL_NULL_HDBC;
}

static int odbc_is_dead(odbox_conn *c)
{
    SQLUINTEGER dead = SQL_CD_FALSE;
    return ODBOX_SQL_OK(SQLGetConnectAttr(c->dbc, SQL_ATTR_CONNECTION_DEAD, &dead, 0, NULL)) && dead == SQL_CD_TRUE;
}

static int odbc_exec(odbox_conn *c, const char *sql, odbox_error *err)
{
    SQLHSTMT h;
    SQLRETURN r = SQLAllocHandle(SQL_HANDLE_STMT, c->dbc, &h);
    if (!ODBOX_SQL_OK(r))
        return odbox_odbc_fail(SQL_HANDLE_DBC, c->dbc, r, c, err, "exec");
    r = SQLExecDirect(h, (SQLCHAR *)sql, SQL_NTS);
    int rc = ODBOX_OK;
    if (!ODBOX_SQL_OK(r) && r != SQL_NO_DATA)
        rc = odbox_odbc_fail(SQL_HANDLE_STMT, h, r, c, err, "exec");
    else
        while (ODBOX_SQL_OK(SQLMoreResults(h)))
            ;
    SQLFreeHandle(SQL_HANDLE_STMT, h);
    return rc;
}

static int odbc_autocommit(odbox_conn *c, int on, odbox_error *err)
{
    SQLRETURN r = SQLSetConnectAttr(c->dbc, SQL_ATTR_AUTOCOMMIT,
                                    (SQLPOINTER)(uintptr_t)(on ? SQL_AUTOCOMMIT_ON : SQL_AUTOCOMMIT_OFF),
                                    SQL_IS_UINTEGER);
    if (!ODBOX_SQL_OK(r))
        return odbox_odbc_fail(SQL_HANDLE_DBC, c->dbc, r, c, err, on ? "autocommit on" : "begin");
    return ODBOX_OK;
}

static int odbc_end_tran(odbox_conn *c, int commit, odbox_error *err)
{
    SQLRETURN r = SQLEndTran(SQL_HANDLE_DBC, c->dbc, commit ? SQL_COMMIT : SQL_ROLLBACK);
    return ODBOX_SQL_OK(r) ? ODBOX_OK : odbox_odbc_fail(SQL_HANDLE_DBC, c->dbc, r, c, err, commit ? "commit" : "rollback");
}

/* ---- statements ---------------------------------------------------------- */

static void free_columns(odbox_stmt *s)
{
    if (s->ncols && s->h != SQL_NULL_HSTMT)
        SQLFreeStmt(s->h, SQL_UNBIND);
    odbox_stmt_free_columns(s);
}

static int odbc_prepare(odbox_stmt *s, odbox_error *err)
{
    odbox_conn *c = s->conn;
    SQLRETURN r = SQLAllocHandle(SQL_HANDLE_STMT, c->dbc, &s->h);
    if (!ODBOX_SQL_OK(r)) {
        s->h = SQL_NULL_HSTMT;
        return odbox_odbc_fail(SQL_HANDLE_DBC, c->dbc, r, c, err, "prepare");
    }
    r = SQLPrepare(s->h, (SQLCHAR *)s->sql, SQL_NTS);
    if (!ODBOX_SQL_OK(r)) {
        int rc = odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, c, err, "prepare");
        SQLFreeHandle(SQL_HANDLE_STMT, s->h);
        s->h = SQL_NULL_HSTMT;
        return rc;
    }
    /* so that a parameter left unbound at the end is refused as one in
     * the middle is, not sent for the driver to refuse in its words */
    SQLSMALLINT n = 0;
    s->nparams = ODBOX_SQL_OK(SQLNumParams(s->h, &n)) ? n : 0;
    return ODBOX_OK;
}

static int odbc_prepared(const odbox_stmt *s) { return s->h != SQL_NULL_HSTMT; }

static void odbc_unprepare(odbox_stmt *s, int send)
{
    (void)send; /* freeing the handle is a local call: the driver closes it lazily */
    free_columns(s);
    if (s->h != SQL_NULL_HSTMT)
        SQLFreeHandle(SQL_HANDLE_STMT, s->h);
    s->h = SQL_NULL_HSTMT;
}

/* Hands parameter i (from 0) to the driver unless it already has this
 * buffer with this type and size. The value itself is read at execute. */
static SQLRETURN bind_param(odbox_stmt *s, int i)
{
    bind *b = &s->binds[i];
    SQLUSMALLINT no = (SQLUSMALLINT)(i + 1);
    SQLSMALLINT ctype, sqltype, digits = 0;
    SQLULEN size = 0;
    void *buf;
    SQLLEN buflen = 0;
    switch (b->type) {
    case ODBOX_TYPE_TEXT:
    case ODBOX_TYPE_UUID:
    case ODBOX_TYPE_JSON:
        /* the size is the buffer's, so a longer value in the same buffer
         * needs no new bind */
        size = b->cap > 1 ? b->cap - 1 : 1;
        ctype = SQL_C_CHAR;
        sqltype = size > 4000 ? SQL_LONGVARCHAR : SQL_VARCHAR;
        buf = b->text;
        buflen = (SQLLEN)b->cap;
        break;
    case ODBOX_TYPE_INT64:
    case ODBOX_TYPE_BOOL:
        if (s->conn->dialect->numbers_as_text) {
            ctype = SQL_C_CHAR, sqltype = SQL_VARCHAR, size = 20, buf = b->text_form, buflen = sizeof b->text_form;
        } else if (b->type == ODBOX_TYPE_INT64) {
            ctype = SQL_C_SBIGINT, sqltype = SQL_BIGINT, buf = &b->v.i;
        } else {
            ctype = SQL_C_BIT, sqltype = SQL_BIT, size = 1, buf = &b->v.b;
        }
        break;
    case ODBOX_TYPE_DOUBLE: ctype = SQL_C_DOUBLE, sqltype = SQL_DOUBLE, buf = &b->v.d; break;
    case ODBOX_TYPE_TIMESTAMP:
        /* text, see odbox_stmt_bind_timestamp */
        ctype = SQL_C_CHAR, sqltype = SQL_VARCHAR, size = 26, buf = b->text_form, buflen = sizeof b->text_form;
        break;
    default: return SQL_ERROR;
    }
    if (b->drv_bound && b->drv_type == b->type && b->drv_buf == buf && b->drv_size == size)
        return SQL_SUCCESS;
    SQLRETURN r = SQLBindParameter(s->h, no, SQL_PARAM_INPUT, ctype, sqltype, size, digits, buf, buflen, &b->ind);
    b->drv_bound = ODBOX_SQL_OK(r);
    b->drv_type = b->type;
    b->drv_buf = buf;
    b->drv_size = size;
    return r;
}

static int odbc_execute(odbox_stmt *s, odbox_error *err)
{
    if (s->drv_nbinds > s->nbinds) {
        SQLFreeStmt(s->h, SQL_RESET_PARAMS);
        for (int i = 0; i < s->cap; i++)
            s->binds[i].drv_bound = 0;
    }
    /* Last first: a driver that grows its parameter array to each number
     * it is given (sqliteodbc reallocs per parameter) then grows it once,
     * not once per parameter of a 30000-parameter INSERT. */
    for (int i = s->nbinds - 1; i >= 0; i--) {
        SQLRETURN r = bind_param(s, i);
        if (!ODBOX_SQL_OK(r))
            return odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, s->conn, err, "bind");
    }
    s->drv_nbinds = s->nbinds;
    SQLRETURN r = SQLExecute(s->h);
    if (!ODBOX_SQL_OK(r) && r != SQL_NO_DATA)
        return odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, s->conn, err, "execute");
    return ODBOX_OK;
}

/* (Re)binds column i to its buffer; on failure no column stays bound,
 * so the driver never holds a buffer odbox may move. */
static int bind_column(odbox_stmt *s, int i)
{
    column *col = &s->cols[i];
    if (ODBOX_SQL_OK(SQLBindCol(s->h, (SQLUSMALLINT)(i + 1), SQL_C_CHAR, col->data, (SQLLEN)col->cap, &col->ind)))
        return ODBOX_OK;
    SQLFreeStmt(s->h, SQL_UNBIND);
    for (int k = 0; k < s->ncols; k++)
        s->cols[k].bound = 0;
    return ODBOX_EDB;
}

static int odbc_columns(odbox_stmt *s, odbox_error *err)
{
    SQLSMALLINT ncols = 0;
    if (s->shape_fixed && s->shape_cols >= 0)
        ncols = (SQLSMALLINT)s->shape_cols;
    else if (!ODBOX_SQL_OK(SQLNumResultCols(s->h, &ncols)))
        return ODBOX_OK;
    else if (s->shape_fixed)
        s->shape_cols = ncols > 0 ? ncols : 0;
    if (ncols <= 0)
        return ODBOX_OK;
    s->result_cols = ncols;
    s->open_cursor = 1;
    if (ncols == s->ncols)
        return ODBOX_OK; /* a reused statement: same SQL, same columns */
    free_columns(s);
    if (!(s->cols = calloc((size_t)ncols, sizeof *s->cols)))
        return odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
    s->ncols = ncols;
    for (SQLSMALLINT i = 0; i < ncols; i++) {
        column *col = &s->cols[i];
        SQLLEN type = 0;
        if (ODBOX_SQL_OK(SQLColAttribute(s->h, (SQLUSMALLINT)(i + 1), SQL_DESC_CONCISE_TYPE, NULL, 0, NULL, &type)))
            col->is_guid = type == SQL_GUID;
        col->cap = 128;
        if (!(col->data = malloc(col->cap))) {
            free_columns(s);
            return odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
        }
        col->bound = s->conn->bind_columns && bind_column(s, i) == ODBOX_OK;
    }
    return ODBOX_OK;
}

/* A column's buffer grown to at least need bytes, bound again when it
 * was bound. */
static int grow_column(odbox_stmt *s, int i, size_t need, odbox_error *err)
{
    column *col = &s->cols[i];
    char *p = realloc(col->data, need);
    if (!p)
        return odbox_fail(err, ODBOX_ENOMEM, "fetch: out of memory");
    col->data = p;
    col->cap = need;
    if (col->bound)
        bind_column(s, i); /* failing, nothing stays bound */
    return ODBOX_OK;
}

/* Reads column i of the current row whole as text with SQLGetData; size
 * (0: unknown) is its length in bytes when the bound fetch told it. The
 * buffer is made large enough for the first call to return the whole
 * value: after a bound fetch psqlODBC starts every SQLGetData call on a
 * bound column at its first byte, so a second chunk would repeat it. */
static int read_column(odbox_stmt *s, int i, size_t size, odbox_error *err)
{
    column *col = &s->cols[i];
    size_t used = 0;
    if (size + 1 > col->cap) {
        int rc = grow_column(s, i, size + 1, err);
        if (rc != ODBOX_OK)
            return rc;
    }
    col->is_null = 0;
    col->data[0] = '\0';
    for (;;) {
        SQLLEN ind = 0;
        SQLRETURN r = SQLGetData(s->h, (SQLUSMALLINT)(i + 1), SQL_C_CHAR, col->data + used,
                                 (SQLLEN)(col->cap - used), &ind);
        if (r == SQL_NO_DATA)
            return ODBOX_OK;
        if (!ODBOX_SQL_OK(r))
            return odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, s->conn, err, "fetch");
        if (ind == SQL_NULL_DATA) {
            col->is_null = 1;
            col->data[0] = '\0';
            return ODBOX_OK;
        }
        if (r == SQL_SUCCESS)
            return ODBOX_OK;
        /* Truncated: the chunk filled the buffer minus its NUL. */
        used = col->cap - 1;
        size_t need = (ind != SQL_NO_TOTAL && ind >= 0) ? used + (size_t)ind + 1 : col->cap * 2;
        if (need <= col->cap)
            need = col->cap * 2;
        int rc = grow_column(s, i, need, err);
        if (rc != ODBOX_OK)
            return rc;
    }
}

static void odbc_close_cursor(odbox_stmt *s) { SQLFreeStmt(s->h, SQL_CLOSE); }

static int odbc_fetch(odbox_stmt *s, odbox_error *err)
{
    SQLRETURN r = SQLFetch(s->h);
    if (r == SQL_NO_DATA)
        return 0;
    if (!ODBOX_SQL_OK(r))
        return odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, s->conn, err, "fetch");
    for (int i = 0; i < s->ncols; i++) {
        column *col = &s->cols[i];
        int rc;
        if (col->bound && col->ind == SQL_NULL_DATA) {
            col->is_null = 1;
            col->data[0] = '\0';
        } else if (col->bound && col->ind >= 0 && (size_t)col->ind < col->cap) {
            col->is_null = 0;
        } else if ((rc = read_column(s, i, col->bound && col->ind > 0 ? (size_t)col->ind : 0, err)) != ODBOX_OK) {
            return rc; /* unbound, or longer than its buffer */
        }
        if (col->is_guid) /* drivers spell UUIDs in upper case; odbox uses lower */
            for (char *p = col->data; *p; p++)
                if (*p >= 'A' && *p <= 'F')
                    *p = (char)(*p - 'A' + 'a');
    }
    return 1;
}

static int64_t odbc_rows_affected(odbox_stmt *s)
{
    SQLLEN n = -1;
    return ODBOX_SQL_OK(SQLRowCount(s->h, &n)) ? n : -1;
}

static int odbc_column_label(odbox_stmt *s, int i, char *buf, size_t cap)
{
    SQLSMALLINT len = 0;
    return ODBOX_SQL_OK(SQLColAttribute(s->h, (SQLUSMALLINT)i, SQL_DESC_LABEL, buf, (SQLSMALLINT)cap, &len, NULL));
}

const odbox_db_driver odbox_db_odbc = {
    .version = ODBOX_DB_DRIVER_VERSION,
    .name = "odbc",
    .connect = odbc_connect,
    .disconnect = odbc_disconnect,
    .is_dead = odbc_is_dead,
    .exec = odbc_exec,
    .autocommit = odbc_autocommit,
    .end_tran = odbc_end_tran,
    .prepare = odbc_prepare,
    .prepared = odbc_prepared,
    .unprepare = odbc_unprepare,
    .execute = odbc_execute,
    .columns = odbc_columns,
    .fetch = odbc_fetch,
    .close_cursor = odbc_close_cursor,
    .rows_affected = odbc_rows_affected,
    .column_label = odbc_column_label,
};
