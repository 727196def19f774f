/* odbox — typed binds and typed getters.
 *
 * Binds are kept in an array owned by the statement and handed to the
 * driver at execute, so any number of parameters can be bound (multi-row
 * statements) and the caller's buffers are never referenced. A bind slot
 * keeps its buffer, and a parameter is re-bound with the driver only when
 * its type or buffer changed: executing again costs no ODBC bind calls
 * (odbc_driver.c).
 * Rows are read as text (stmt.c), which every driver can produce for every
 * type; the typed getters parse that text. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "stmt.h"
#include "odbox/uuid.h"

/* The error of any use but free of a statement whose connection went away
 * (here, below stmt.c, which uses it too). */
int odbox_stmt_detached(odbox_error *err, const char *what)
{
    return odbox_fail(err, ODBOX_ESTATE,
                      "%s: the statement was detached: its connection was closed or returned to its pool while "
                      "the statement was held (free statements before that); only odbox_stmt_free may follow",
                      what);
}

void odbox_stmt_free_columns(odbox_stmt *s)
{
    for (int i = 0; i < s->ncols; i++)
        free(s->cols[i].data);
    free(s->cols);
    s->cols = NULL;
    s->ncols = 0;
}

/* The bind slot of parameter idx (from 1), typed t and marked set. */
static int slot(odbox_stmt *s, int idx, odbox_type t, bind **out, odbox_error *err)
{
    if (!s) {
        return odbox_fail(err, ODBOX_EINVAL, "bind: statement is NULL");
    }
    if (!s->conn) {
        return odbox_stmt_detached(err, "bind");
    }
    if (idx < 1 || idx > 32767) {
        return odbox_fail(err, ODBOX_EINVAL, "bind: parameter index %d out of range 1..32767", idx);
    }
    if (idx > s->cap) {
        int cap = s->cap ? s->cap : 16;
        while (cap < idx)
            cap *= 2;
        bind *b = realloc(s->binds, (size_t)cap * sizeof *b);
        if (!b) {
            return odbox_fail(err, ODBOX_ENOMEM, "bind: out of memory");
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
    *out = b;
    return ODBOX_OK;
}

static int bind_string(odbox_stmt *s, int idx, odbox_type t, const char *v, odbox_error *err)
{
    if (!v)
        return odbox_stmt_bind_null(s, idx, t, err);
    bind *b = NULL;
    int rc = slot(s, idx, t, &b, err);
    if (rc != ODBOX_OK)
        return rc;
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
    bind *b = NULL;
    int rc = slot(s, idx, ODBOX_TYPE_INT64, &b, err);
    if (rc != ODBOX_OK)
        return rc;
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
    bind *b = NULL;
    int rc = slot(s, idx, ODBOX_TYPE_DOUBLE, &b, err);
    if (rc != ODBOX_OK)
        return rc;
    b->v.d = v;
    return ODBOX_OK;
}

int odbox_stmt_bind_bool(odbox_stmt *s, int idx, int v, odbox_error *err)
{
    bind *b = NULL;
    int rc = slot(s, idx, ODBOX_TYPE_BOOL, &b, err);
    if (rc != ODBOX_OK)
        return rc;
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
    bind *b = NULL;
    int rc = slot(s, idx, ODBOX_TYPE_TIMESTAMP, &b, err);
    if (rc != ODBOX_OK)
        return rc;
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
    bind *b = NULL;
    int rc = slot(s, idx, t, &b, err);
    if (rc != ODBOX_OK)
        return rc;
    b->ind = SQL_NULL_DATA;
    return ODBOX_OK;
}

/* The column col of the current row, for a getter whose output is v.
 * A NULL statement or v is the caller's mistake, refused (EINVAL, as
 * binds, execute and fetch refuse them) before anything is written, so
 * a getter neither crashes nor sets *is_null for a value it cannot give. */
static int get_col(odbox_stmt *s, int col, const void *v, int *is_null, column **out, odbox_error *err)
{
    if (!s)
        return odbox_fail(err, ODBOX_EINVAL, "get: statement is NULL");
    if (!s->conn)
        return odbox_stmt_detached(err, "get");
    if (!v)
        return odbox_fail(err, ODBOX_EINVAL, "get: out is NULL");
    if (!s->have_row)
        return odbox_fail(err, ODBOX_ESTATE, "get: no current row");
    if (col < 1 || col > s->ncols)
        return odbox_fail(err, ODBOX_EINVAL, "get: column %d out of range 1..%d", col, s->ncols);
    column *c = &s->cols[col - 1];
    if (is_null)
        *is_null = c->is_null;
    *out = c;
    return ODBOX_OK;
}

int odbox_stmt_get_text(odbox_stmt *s, int col, const char **v, int *is_null, odbox_error *err)
{
    column *c = NULL;
    int rc = get_col(s, col, v, is_null, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    *v = c->data;
    return ODBOX_OK;
}

int odbox_stmt_get_int64(odbox_stmt *s, int col, int64_t *v, int *is_null, odbox_error *err)
{
    column *c = NULL;
    int rc = get_col(s, col, v, is_null, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    *v = 0;
    if (c->is_null)
        return ODBOX_OK;
    char *end;
    errno = 0;
    long long x = strtoll(c->data, &end, 10);
    int digits = end != c->data;
    if (digits && *end == '.') /* a DECIMAL's "12.000" is 12; "12.5" is no integer */
        for (end++; *end == '0'; end++)
            ;
    if (errno || !digits || *end)
        return odbox_fail(err, ODBOX_EINVAL, "get: column %d ('%.40s') is not an integer", col, c->data);
    *v = (int64_t)x;
    return ODBOX_OK;
}

int odbox_stmt_get_double(odbox_stmt *s, int col, double *v, int *is_null, odbox_error *err)
{
    column *c = NULL;
    int rc = get_col(s, col, v, is_null, &c, err);
    if (rc != ODBOX_OK)
        return rc;
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
    column *c = NULL;
    int rc = get_col(s, col, v, is_null, &c, err);
    if (rc != ODBOX_OK)
        return rc;
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
    column *c = NULL;
    int rc = get_col(s, col, us, is_null, &c, err);
    if (rc != ODBOX_OK)
        return rc;
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
