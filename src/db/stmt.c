/* odbox — prepared statements, typed binds and typed getters.
 *
 * Binds are kept in an array owned by the statement and handed to the
 * driver at execute, so any number of parameters can be bound (multi-row
 * statements) and the caller's buffers are never referenced. A bind slot
 * keeps its buffer, and a parameter is re-bound with the driver only when
 * its type or buffer changed: executing again costs no ODBC bind calls.
 * A freed statement goes back to its connection's cache and the next
 * prepare of the same SQL reuses it (no new server-side prepare).
 * Rows are read whole at fetch as text, which every driver can produce for
 * every type; typed getters parse that text. Columns are bound to their
 * buffers once per statement, so a fetch copies every value in one driver
 * call; a value that did not fit is read again whole with SQLGetData. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "odbc.h"
#include "odbox/uuid.h"

typedef struct bind {
    odbox_type type;
    int set;
    SQLLEN ind;
    union {
        SQLBIGINT i;
        double d;
        unsigned char b;
    } v;
    /* a timestamp "YYYY-MM-DD HH:MM:SS.ffffff"; an integer or boolean
     * when the dialect binds numbers as text */
    char text_form[32];
    char *text;      /* kept across binds, grown when needed */
    size_t cap;
    /* what the driver was last given for this parameter */
    int drv_bound;
    odbox_type drv_type;
    void *drv_buf;
    SQLULEN drv_size;
} bind;

typedef struct column {
    char *data;
    size_t cap;
    SQLLEN ind;  /* the bound column's length or SQL_NULL_DATA */
    int bound;   /* bound to data/cap */
    int is_null;
    int is_guid; /* drivers spell UUIDs in upper case; odbox uses lower */
} column;

struct odbox_stmt {
    odbox_conn *conn;
    SQLHSTMT h;
    char *key;          /* the cache key: SQL text, or a caller's key */
    size_t keylen;
    int in_use;
    uint64_t last_used;
    bind *binds;
    int nbinds;
    int cap;
    int drv_nbinds;     /* parameters bound with the driver */
    int executed;
    int cols_known;     /* SQLNumResultCols asked since the last execute */
    int open_cursor;
    int ncols;
    column *cols;
    int have_row;
    int64_t affected;
    int affected_known;
    int result_cols;    /* columns of the current result (0: none) */
    /* Generated SQL (a caller's key) has one result shape: its column
     * count, once asked, is not asked again at every execute. */
    int shape_fixed;
    int shape_cols;     /* -1: not asked yet */
};

static void stmt_destroy(odbox_stmt *s);

static void close_cursor(odbox_stmt *s);

static void free_columns(odbox_stmt *s)
{
    if (s->ncols && s->h != SQL_NULL_HSTMT)
        SQLFreeStmt(s->h, SQL_UNBIND);
    for (int i = 0; i < s->ncols; i++)
        free(s->cols[i].data);
    free(s->cols);
    s->cols = NULL;
    s->ncols = 0;
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
        stmt_destroy(c->cache[victim]);
        c->cache[victim] = c->cache[--c->ncache];
    }
    c->cache[c->ncache++] = s;
    return 1;
}

void odbox_stmt_cache_clear(odbox_conn *c)
{
    for (int i = 0; i < c->ncache; i++)
        stmt_destroy(c->cache[i]);
    c->ncache = 0;
}

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
    s = calloc(1, sizeof *s);
    if (!s || !(s->key = malloc(keylen))) {
        free(s);
        return odbox_fail(err, ODBOX_ENOMEM, "prepare: out of memory");
    }
    memcpy(s->key, key, keylen);
    s->keylen = keylen;
    s->shape_fixed = shape_fixed;
    s->shape_cols = -1;
    s->conn = c;
    s->affected = -1;
    s->in_use = 1;
    s->last_used = ++c->cache_clock;
    SQLRETURN r = SQLAllocHandle(SQL_HANDLE_STMT, c->dbc, &s->h);
    if (!ODBOX_SQL_OK(r)) {
        int rc = odbox_odbc_fail(SQL_HANDLE_DBC, c->dbc, r, c, err, "prepare");
        s->h = SQL_NULL_HSTMT;
        stmt_destroy(s);
        return rc;
    }
    r = SQLPrepare(s->h, (SQLCHAR *)sql, SQL_NTS);
    if (!ODBOX_SQL_OK(r)) {
        int rc = odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, c, err, "prepare");
        stmt_destroy(s);
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

static void stmt_destroy(odbox_stmt *s)
{
    free_columns(s);
    if (s->h != SQL_NULL_HSTMT)
        SQLFreeHandle(SQL_HANDLE_STMT, s->h);
    for (int i = 0; i < s->cap; i++)
        free(s->binds[i].text);
    free(s->binds);
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
    if (c->cache_ok && !c->dead) {
        close_cursor(s);
        s->in_use = 0;
        if (cache_put(c, s))
            return;
    }
    for (int i = 0; i < c->ncache; i++)
        if (c->cache[i] == s) {
            c->cache[i] = c->cache[--c->ncache];
            break;
        }
    stmt_destroy(s);
}

static bind *slot(odbox_stmt *s, int idx, odbox_type t, odbox_error *err)
{
    if (!s) {
        odbox_fail(err, ODBOX_EINVAL, "bind: statement is NULL");
        return NULL;
    }
    if (idx < 1 || idx > 32767) {
        odbox_fail(err, ODBOX_EINVAL, "bind: parameter index %d out of range 1..32767", idx);
        return NULL;
    }
    if (idx > s->cap) {
        int cap = s->cap ? s->cap : 16;
        while (cap < idx)
            cap *= 2;
        bind *b = realloc(s->binds, (size_t)cap * sizeof *b);
        if (!b) {
            odbox_fail(err, ODBOX_ENOMEM, "bind: out of memory");
            return NULL;
        }
        memset(b + s->cap, 0, (size_t)(cap - s->cap) * sizeof *b);
        /* every buffer moved: the driver must be told again */
        for (int i = 0; i < s->cap; i++)
            b[i].drv_bound = 0;
        s->binds = b;
        s->cap = cap;
    }
    if (idx > s->nbinds)
        s->nbinds = idx;
    bind *b = &s->binds[idx - 1];
    b->type = t;
    b->set = 1;
    b->ind = 0;
    return b;
}

static int bind_string(odbox_stmt *s, int idx, odbox_type t, const char *v, odbox_error *err)
{
    if (!v)
        return odbox_stmt_bind_null(s, idx, t, err);
    bind *b = slot(s, idx, t, err);
    if (!b)
        return err ? err->code : ODBOX_EINVAL;
    size_t n = strlen(v);
    if (n + 1 > b->cap) {
        size_t cap = n + 1 < 64 ? 64 : n + 1;
        char *p = realloc(b->text, cap);
        if (!p) {
            b->set = 0;
            return odbox_fail(err, ODBOX_ENOMEM, "bind: out of memory");
        }
        b->text = p;
        b->cap = cap;
    }
    memcpy(b->text, v, n + 1);
    b->ind = (SQLLEN)n;
    return ODBOX_OK;
}

int odbox_stmt_bind_text(odbox_stmt *s, int idx, const char *v, odbox_error *err)
{
    return bind_string(s, idx, ODBOX_TYPE_TEXT, v, err);
}

int odbox_stmt_bind_json(odbox_stmt *s, int idx, const char *v, odbox_error *err)
{
    return bind_string(s, idx, ODBOX_TYPE_JSON, v, err);
}

int odbox_stmt_bind_uuid(odbox_stmt *s, int idx, const char *v, odbox_error *err)
{
    if (v && !odbox_uuid_is_valid(v))
        return odbox_fail(err, ODBOX_EINVAL, "bind: parameter %d is not a UUID in 8-4-4-4-12 form", idx);
    return bind_string(s, idx, ODBOX_TYPE_UUID, v, err);
}

int odbox_stmt_bind_valid_uuid(odbox_stmt *s, int idx, const char *v, odbox_error *err)
{
    return bind_string(s, idx, ODBOX_TYPE_UUID, v, err);
}

/* v in decimal into out (at least 21 bytes); returns its length. */
static size_t int64_text(int64_t v, char *out)
{
    char tmp[20];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0, len = 0;
    do
        tmp[n++] = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    out[len] = '\0';
    return len;
}

int odbox_stmt_bind_int64(odbox_stmt *s, int idx, int64_t v, odbox_error *err)
{
    bind *b = slot(s, idx, ODBOX_TYPE_INT64, err);
    if (!b)
        return err ? err->code : ODBOX_EINVAL;
    b->v.i = (SQLBIGINT)v;
    if (s->conn->dialect->numbers_as_text) {
        size_t n = int64_text(v, b->text_form);
        b->ind = (SQLLEN)n;
    }
    return ODBOX_OK;
}

int odbox_stmt_bind_double(odbox_stmt *s, int idx, double v, odbox_error *err)
{
    if (!isfinite(v))
        return odbox_fail(err, ODBOX_EINVAL, "bind: parameter %d is not a finite number", idx);
    bind *b = slot(s, idx, ODBOX_TYPE_DOUBLE, err);
    if (!b)
        return err ? err->code : ODBOX_EINVAL;
    b->v.d = v;
    return ODBOX_OK;
}

int odbox_stmt_bind_bool(odbox_stmt *s, int idx, int v, odbox_error *err)
{
    bind *b = slot(s, idx, ODBOX_TYPE_BOOL, err);
    if (!b)
        return err ? err->code : ODBOX_EINVAL;
    b->v.b = v ? 1 : 0;
    if (s->conn->dialect->numbers_as_text) {
        memcpy(b->text_form, v ? "1" : "0", 2);
        b->ind = 1;
    }
    return ODBOX_OK;
}

/* The proleptic Gregorian date of a day count since 1970-01-01 (Howard
 * Hinnant's civil_from_days). */
static void civil_from_days(int64_t z, int *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

static char *put_digits(char *p, int64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v /= 10)
        p[i] = (char)('0' + v % 10);
    return p + n;
}

/* Timestamps travel as text in UTC with microseconds, which every
 * dialect's server parses. Drivers given an SQL_TIMESTAMP_STRUCT format
 * it themselves (psqlODBC: several snprintf calls per value, the largest
 * cost of an INSERT's parameters). */
int odbox_stmt_bind_timestamp(odbox_stmt *s, int idx, int64_t us, odbox_error *err)
{
    /* 0001-01-01 .. 9999-12-31, the range every dialect stores. */
    if (us < -62135596800000000LL || us > 253402300799999999LL)
        return odbox_fail(err, ODBOX_EINVAL, "bind: parameter %d timestamp out of range", idx);
    bind *b = slot(s, idx, ODBOX_TYPE_TIMESTAMP, err);
    if (!b)
        return err ? err->code : ODBOX_EINVAL;
    int64_t secs = us / 1000000, frac = us % 1000000;
    if (frac < 0) {
        frac += 1000000;
        secs -= 1;
    }
    int64_t days = secs / 86400, sod = secs % 86400;
    if (sod < 0) {
        sod += 86400;
        days -= 1;
    }
    int y, m, d;
    civil_from_days(days, &y, &m, &d);
    char *p = b->text_form;
    p = put_digits(p, y, 4), *p++ = '-';
    p = put_digits(p, m, 2), *p++ = '-';
    p = put_digits(p, d, 2), *p++ = ' ';
    p = put_digits(p, sod / 3600, 2), *p++ = ':';
    p = put_digits(p, sod / 60 % 60, 2), *p++ = ':';
    p = put_digits(p, sod % 60, 2), *p++ = '.';
    p = put_digits(p, frac, 6);
    *p = '\0';
    b->ind = (SQLLEN)(p - b->text_form);
    return ODBOX_OK;
}

int odbox_stmt_bind_null(odbox_stmt *s, int idx, odbox_type t, odbox_error *err)
{
    if (t < ODBOX_TYPE_TEXT || t > ODBOX_TYPE_TIMESTAMP)
        return odbox_fail(err, ODBOX_EINVAL, "bind: unknown type %d for NULL parameter %d", (int)t, idx);
    bind *b = slot(s, idx, t, err);
    if (!b)
        return err ? err->code : ODBOX_EINVAL;
    b->ind = SQL_NULL_DATA;
    return ODBOX_OK;
}

/* Hands parameter i to the driver unless it already has this buffer with
 * this type and size (the value itself is read at execute). */
static SQLRETURN bind_to_driver(odbox_stmt *s, int i)
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

static int know_columns(odbox_stmt *s, odbox_error *err);

static void close_cursor(odbox_stmt *s)
{
    /* An UPDATE or INSERT opens no cursor, and closing costs a driver call:
     * ask (a local call) before closing. */
    if (s->executed && !s->cols_known)
        know_columns(s, NULL);
    if (s->open_cursor)
        SQLFreeStmt(s->h, SQL_CLOSE);
    s->open_cursor = 0;
    s->have_row = 0;
}

int odbox_stmt_execute(odbox_stmt *s, odbox_error *err)
{
    if (!s)
        return odbox_fail(err, ODBOX_EINVAL, "execute: statement is NULL");
    if (s->conn->dead)
        return odbox_fail(err, ODBOX_ECONNLOST, "execute: the connection is dead");
    close_cursor(s);
    s->affected = -1;
    s->affected_known = 0;
    s->cols_known = 0;
    s->executed = 0;
    if (s->drv_nbinds > s->nbinds) {
        SQLFreeStmt(s->h, SQL_RESET_PARAMS);
        for (int i = 0; i < s->cap; i++)
            s->binds[i].drv_bound = 0;
    }
    for (int i = 0; i < s->nbinds; i++)
        if (!s->binds[i].set)
            return odbox_fail(err, ODBOX_EINVAL, "execute: parameter %d is not bound", i + 1);
    /* Last first: a driver that grows its parameter array to each number
     * it is given (sqliteodbc reallocs per parameter) then grows it once,
     * not once per parameter of a 30000-parameter INSERT. */
    for (int i = s->nbinds - 1; i >= 0; i--) {
        SQLRETURN r = bind_to_driver(s, i);
        if (!ODBOX_SQL_OK(r))
            return odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, s->conn, err, "bind");
    }
    s->drv_nbinds = s->nbinds;
    SQLRETURN r = SQLExecute(s->h);
    if (!ODBOX_SQL_OK(r) && r != SQL_NO_DATA)
        return odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, s->conn, err, "execute");
    s->executed = 1;
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

/* Asks the driver for the result's columns once per execute. */
static int know_columns(odbox_stmt *s, odbox_error *err)
{
    if (s->cols_known)
        return ODBOX_OK;
    s->cols_known = 1;
    s->result_cols = 0;
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
    if (!(s->cols = calloc((size_t)ncols, sizeof *s->cols))) {
        s->cols_known = 0;
        return odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
    }
    s->ncols = ncols;
    for (SQLSMALLINT i = 0; i < ncols; i++) {
        column *col = &s->cols[i];
        SQLLEN type = 0;
        if (ODBOX_SQL_OK(SQLColAttribute(s->h, (SQLUSMALLINT)(i + 1), SQL_DESC_CONCISE_TYPE, NULL, 0, NULL, &type)))
            col->is_guid = type == SQL_GUID;
        col->cap = 128;
        if (!(col->data = malloc(col->cap))) {
            free_columns(s);
            s->cols_known = 0;
            return odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
        }
        col->bound = s->conn->bind_columns && bind_column(s, i) == ODBOX_OK;
    }
    return ODBOX_OK;
}

int64_t odbox_stmt_rows_affected(odbox_stmt *s)
{
    if (!s || !s->executed)
        return -1;
    if (!s->affected_known) {
        SQLLEN n = -1;
        s->affected = ODBOX_SQL_OK(SQLRowCount(s->h, &n)) ? n : -1;
        s->affected_known = 1;
    }
    return s->affected;
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
    if (!s || !s->executed)
        return 0;
    know_columns(s, NULL);
    return s->result_cols;
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

int odbox_stmt_fetch(odbox_stmt *s, odbox_error *err)
{
    if (!s)
        return odbox_fail(err, ODBOX_EINVAL, "fetch: statement is NULL");
    if (!s->executed)
        return 0;
    int rc = know_columns(s, err);
    if (rc != ODBOX_OK)
        return rc;
    if (!s->open_cursor)
        return 0;
    SQLRETURN r = SQLFetch(s->h);
    if (r == SQL_NO_DATA) {
        close_cursor(s);
        return 0;
    }
    if (!ODBOX_SQL_OK(r))
        return odbox_odbc_fail(SQL_HANDLE_STMT, s->h, r, s->conn, err, "fetch");
    for (int i = 0; i < s->ncols; i++) {
        column *col = &s->cols[i];
        if (col->bound && col->ind == SQL_NULL_DATA) {
            col->is_null = 1;
            col->data[0] = '\0';
        } else if (col->bound && col->ind >= 0 && (size_t)col->ind < col->cap) {
            col->is_null = 0;
        } else if ((rc = read_column(s, i, col->bound && col->ind > 0 ? (size_t)col->ind : 0, err)) != ODBOX_OK) {
            return rc; /* unbound, or longer than its buffer */
        }
        if (col->is_guid)
            for (char *p = col->data; *p; p++)
                if (*p >= 'A' && *p <= 'F')
                    *p = (char)(*p - 'A' + 'a');
    }
    s->have_row = 1;
    return 1;
}

static column *get_col(odbox_stmt *s, int col, int *is_null, odbox_error *err)
{
    if (!s || !s->have_row) {
        odbox_fail(err, ODBOX_ESTATE, "get: no current row");
        return NULL;
    }
    if (col < 1 || col > s->ncols) {
        odbox_fail(err, ODBOX_EINVAL, "get: column %d out of range 1..%d", col, s->ncols);
        return NULL;
    }
    column *c = &s->cols[col - 1];
    if (is_null)
        *is_null = c->is_null;
    return c;
}

int odbox_stmt_get_text(odbox_stmt *s, int col, const char **v, int *is_null, odbox_error *err)
{
    column *c = get_col(s, col, is_null, err);
    if (!c)
        return err ? err->code : ODBOX_EINVAL;
    *v = c->data;
    return ODBOX_OK;
}

int odbox_stmt_get_int64(odbox_stmt *s, int col, int64_t *v, int *is_null, odbox_error *err)
{
    column *c = get_col(s, col, is_null, err);
    if (!c)
        return err ? err->code : ODBOX_EINVAL;
    *v = 0;
    if (c->is_null)
        return ODBOX_OK;
    char *end;
    errno = 0;
    long long x = strtoll(c->data, &end, 10);
    if (errno || end == c->data || (*end && *end != '.'))
        return odbox_fail(err, ODBOX_EINVAL, "get: column %d ('%.40s') is not an integer", col, c->data);
    *v = (int64_t)x;
    return ODBOX_OK;
}

int odbox_stmt_get_double(odbox_stmt *s, int col, double *v, int *is_null, odbox_error *err)
{
    column *c = get_col(s, col, is_null, err);
    if (!c)
        return err ? err->code : ODBOX_EINVAL;
    *v = 0;
    if (c->is_null)
        return ODBOX_OK;
    char *end;
    errno = 0;
    double x = strtod(c->data, &end);
    if (errno || end == c->data || *end)
        return odbox_fail(err, ODBOX_EINVAL, "get: column %d ('%.40s') is not a number", col, c->data);
    *v = x;
    return ODBOX_OK;
}

int odbox_stmt_get_bool(odbox_stmt *s, int col, int *v, int *is_null, odbox_error *err)
{
    column *c = get_col(s, col, is_null, err);
    if (!c)
        return err ? err->code : ODBOX_EINVAL;
    *v = 0;
    if (c->is_null)
        return ODBOX_OK;
    const char *t = c->data;
    if (!strcmp(t, "1") || odbox_strcaseeq(t, "t") || odbox_strcaseeq(t, "true")) {
        *v = 1;
        return ODBOX_OK;
    }
    if (!strcmp(t, "0") || odbox_strcaseeq(t, "f") || odbox_strcaseeq(t, "false"))
        return ODBOX_OK;
    return odbox_fail(err, ODBOX_EINVAL, "get: column %d ('%.40s') is not a boolean", col, t);
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* The value of n decimal digits at p, or -1. */
static int digits(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

int odbox_stmt_get_timestamp(odbox_stmt *s, int col, int64_t *us, int *is_null, odbox_error *err)
{
    column *c = get_col(s, col, is_null, err);
    if (!c)
        return err ? err->code : ODBOX_EINVAL;
    *us = 0;
    if (c->is_null)
        return ODBOX_OK;
    int y, mo, d, h = 0, mi = 0, se = 0;
    const char *t = c->data;
    /* fixed-width fields; sscanf cost more than the rest of a read */
    if ((y = digits(t, 4)) < 0 || t[4] != '-' || (mo = digits(t + 5, 2)) < 0 || t[7] != '-' ||
        (d = digits(t + 8, 2)) < 0)
        goto bad;
    t += 10;
    if (*t == ' ' || *t == 'T') {
        if ((h = digits(t + 1, 2)) < 0 || t[3] != ':' || (mi = digits(t + 4, 2)) < 0 || t[6] != ':' ||
            (se = digits(t + 7, 2)) < 0)
            goto bad;
        t += 9;
    }
    int64_t frac = 0;
    if (*t == '.') {
        int nd = 0;
        for (t++; *t >= '0' && *t <= '9'; t++, nd++)
            if (nd < 6)
                frac = frac * 10 + (*t - '0');
        for (; nd < 6; nd++)
            frac *= 10;
    }
    if (*t == 'Z' || !strcmp(t, "+00") || !strcmp(t, "+00:00"))
        t += strlen(t);
    if (*t || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
        goto bad;
    *us = (days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + se) * 1000000 + frac;
    return ODBOX_OK;
bad:
    return odbox_fail(err, ODBOX_EINVAL, "get: column %d ('%.40s') is not a timestamp", col, c->data);
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
