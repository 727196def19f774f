/* odbox — what the dialect modules share: connection-string building and
 * SQL helpers (DSN resolution, which needs the dialect table, is in
 * dialects.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dialects.h"

int odbox_contains_nocase(const char *h, const char *n)
{
    if (!h || !n)
        return 0;
    size_t ln = strlen(n);
    for (; *h; h++) {
        size_t i = 0;
        while (i < ln && h[i]) {
            char a = h[i], b = n[i];
            if (a >= 'A' && a <= 'Z')
                a = (char)(a - 'A' + 'a');
            if (b >= 'A' && b <= 'Z')
                b = (char)(b - 'A' + 'a');
            if (a != b)
                break;
            i++;
        }
        if (i == ln)
            return 1;
    }
    return 0;
}

int odbox_map_standard_sqlstate(const char *st)
{
    if (!st || !st[0])
        return ODBOX_EDB;
    if (!strcmp(st, "40001"))
        return ODBOX_EDEADLOCK; /* serialization failure: retry the transaction */
    if (!strcmp(st, "HYT00") || !strcmp(st, "HYT01"))
        return ODBOX_ETIMEDOUT;
    /* could not connect, rejected the connection, bad credentials */
    if (!strcmp(st, "08001") || !strcmp(st, "08004") || !strcmp(st, "28000"))
        return ODBOX_ECONNECT;
    if (!strncmp(st, "08", 2))
        return ODBOX_ECONNLOST;
    if (!strcmp(st, "IM002") || !strcmp(st, "IM003"))
        return ODBOX_ECONNECT; /* driver or DSN not found, driver not loadable */
    if (!strcmp(st, "HY001"))
        return ODBOX_ENOMEM;
    return ODBOX_EDB;
}

void odbox_odbc_kv(odbox_buf *b, const char *key, const char *value)
{
    odbox_buf_append(b, key);
    odbox_buf_append(b, "=");
    if (strpbrk(value, ";{}= \t") || !*value) {
        odbox_buf_append(b, "{");
        for (const char *p = value; *p; p++)
            odbox_buf_append(b, *p == '}' ? "}}" : (char[]){*p, '\0'});
        odbox_buf_append(b, "}");
    } else {
        odbox_buf_append(b, value);
    }
    odbox_buf_append(b, ";");
}

static int is_timeout_key(const char *key)
{
    return odbox_strcaseeq(key, "connect_timeout") || odbox_strcaseeq(key, "read_timeout");
}

int odbox_dsn_timeouts(const odbox_dsn *dsn, odbox_timeouts *t, odbox_error *err)
{
    t->connect_s = ODBOX_CONNECT_TIMEOUT_S;
    t->read_s = ODBOX_READ_TIMEOUT_S;
    for (size_t i = 0; i < dsn->noptions; i++) {
        const char *k = dsn->options[i].key, *v = dsn->options[i].value;
        if (!is_timeout_key(k))
            continue;
        long n = 0;
        const char *p = v;
        for (; *p >= '0' && *p <= '9' && n <= ODBOX_TIMEOUT_MAX_S; p++)
            n = n * 10 + (*p - '0');
        int is_read = odbox_strcaseeq(k, "read_timeout");
        if (p == v || *p || n > ODBOX_TIMEOUT_MAX_S)
            return odbox_fail(err, ODBOX_EINVAL,
                              "DSN: %s must be a whole number of seconds 0..%d (0: no limit), not '%.32s'",
                              is_read ? "read_timeout" : "connect_timeout", ODBOX_TIMEOUT_MAX_S, v);
        *(is_read ? &t->read_s : &t->connect_s) = (int)n;
    }
    return ODBOX_OK;
}

int odbox_dsn_connect_options(const char *text, int *login_timeout_s, int *raw, odbox_error *err)
{
    odbox_dsn *dsn = NULL;
    int rc = odbox_dsn_parse(text, &dsn, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_timeouts t = {ODBOX_CONNECT_TIMEOUT_S, ODBOX_READ_TIMEOUT_S};
    *raw = dsn->raw != NULL;
    if (!*raw)
        rc = odbox_dsn_timeouts(dsn, &t, err);
    *login_timeout_s = t.connect_s;
    odbox_dsn_free(&dsn);
    return rc;
}

int odbox_network_connection_string(const odbox_dsn *dsn, const char *driver, int default_port,
                                    const char *const *extra, char **out, odbox_error *err)
{
    odbox_buf b = {0};
    char port[16];
    if (!dsn->host || !*dsn->host)
        return odbox_fail(err, ODBOX_EINVAL, "DSN: %s needs a host", dsn->scheme ? dsn->scheme : "URL");
    snprintf(port, sizeof port, "%d", dsn->port ? dsn->port : default_port);
    odbox_odbc_kv(&b, "Driver", driver);
    odbox_odbc_kv(&b, "Server", dsn->host);
    odbox_odbc_kv(&b, "Port", port);
    if (dsn->database && *dsn->database)
        odbox_odbc_kv(&b, "Database", dsn->database);
    if (dsn->user)
        odbox_odbc_kv(&b, "Uid", dsn->user);
    if (dsn->password)
        odbox_odbc_kv(&b, "Pwd", dsn->password);
    return odbox_odbc_options_take(&b, dsn, extra, odbox_odbc_kv, out, err);
}

int odbox_odbc_options_take(odbox_buf *b, const odbox_dsn *dsn, const char *const *extra,
                            void (*put)(odbox_buf *b, const char *key, const char *value), char **out,
                            odbox_error *err)
{
    for (const char *const *kv = extra; kv && kv[0]; kv += 2) {
        int overridden = 0;
        for (size_t i = 0; i < dsn->noptions; i++)
            overridden |= !is_timeout_key(dsn->options[i].key) && odbox_strcaseeq(dsn->options[i].key, kv[0]);
        if (!overridden)
            put(b, kv[0], kv[1]);
    }
    for (size_t i = 0; i < dsn->noptions; i++)
        if (!is_timeout_key(dsn->options[i].key))
            put(b, dsn->options[i].key, dsn->options[i].value);
    char *s = odbox_buf_take(b);
    if (!s)
        return odbox_fail(err, ODBOX_ENOMEM, "DSN: out of memory");
    *out = s;
    return ODBOX_OK;
}

/* UPDATE t AS t SET c = v.c, ..., version = v.version + 1 FROM <rows> AS v
 *  WHERE t.id = v.id AND t.version = v.version
 * with the dialect's bound rows (PostgreSQL: a VALUES list whose values
 * are cast, so that a column NULL in every row still has a type; SQLite
 * 3.33+: UPDATE ... FROM over a VALUES list, which the 500 terms of a
 * compound SELECT do not bound). */
int odbox_update_from_rows_sql(const odbox_dialect *d, const char *table, const char *const *cols, const int *types,
                               size_t ncols, size_t nrows, char **out, odbox_error *err)
{
    char *rows = NULL;
    int rc = d->bound_rows_sql(d, "v", cols, types, ncols, nrows, &rows, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_buf b = {0};
    odbox_buf_appendf(&b, "UPDATE %s AS t SET ", table);
    for (size_t c = 2; c < ncols; c++)
        odbox_buf_appendf(&b, "%s = v.%s, ", cols[c], cols[c]);
    odbox_buf_cat(&b, "version = v.version + 1 FROM ", rows, " WHERE t.id = v.id AND t.version = v.version",
                  (char *)NULL);
    free(rows);
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "batch update: out of memory");
    return ODBOX_OK;
}
