/* odbox — the ODBC environment and the one place where a driver's
 * diagnostics become odbox errors. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "odbc.h"
#include "dialects.h"

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static SQLHENV env_handle = SQL_NULL_HENV;
static int env_rc = ODBOX_OK;

static void env_init(void)
{
    if (!ODBOX_SQL_OK(SQLAllocHandle(SQL_HANDLE_ENV, SQL_NULL_HANDLE, &env_handle))) {
        env_rc = ODBOX_ENOMEM;
        return;
    }
    if (!ODBOX_SQL_OK(SQLSetEnvAttr(env_handle, SQL_ATTR_ODBC_VERSION,
                                    (SQLPOINTER)SQL_OV_ODBC3, 0))) {
        env_rc = ODBOX_EUNSUPPORTED;
        return;
    }
    /* Connection pooling belongs to odbox_pool, not the driver manager. */
    SQLSetEnvAttr(env_handle, SQL_ATTR_CONNECTION_POOLING, (SQLPOINTER)SQL_CP_OFF, 0);
}

/* The environment lives until the process ends: drivers keep global state
 * and unloading them while another thread connects is unsafe. */
int odbox_odbc_env(SQLHENV *env, odbox_error *err)
{
    pthread_once(&env_once, env_init);
    if (env_rc != ODBOX_OK)
        return odbox_fail(err, env_rc, "ODBC: cannot set up the ODBC 3 environment (is unixODBC installed?)");
    *env = env_handle;
    return ODBOX_OK;
}

int odbox_odbc_map(const odbox_dialect *d, const char *sqlstate, long native, const char *message)
{
    if (d && d->map_error)
        return d->map_error(sqlstate, native, message);
    return odbox_map_standard_sqlstate(sqlstate);
}

static int is_word(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* Replaces each occurrence of secret in msg that stands as a token of its
 * own (not inside a longer word: a password "p" must not turn "port" into
 * "***ort") with "***". Scanning resumes after each replacement, so a
 * secret that matches "***" cannot loop. */
static void scrub(char *msg, size_t cap, const char *secret)
{
    size_t n = secret ? strlen(secret) : 0;
    if (n == 0)
        return;
    char *p = msg;
    while ((p = strstr(p, secret)) != NULL) {
        int starts = p == msg || !is_word(p[-1]) || !is_word(secret[0]);
        int ends = !is_word(p[n]) || !is_word(secret[n - 1]);
        if (!starts || !ends) {
            p++;
            continue;
        }
        size_t pos = (size_t)(p - msg), tail = strlen(p + n);
        if (pos + 3 + tail >= cap) { /* grows past the buffer: cut the tail */
            if (pos + 3 >= cap) {
                *p = '\0';
                break;
            }
            tail = cap - 1 - pos - 3;
        }
        memmove(p + 3, p + n, tail);
        p[3 + tail] = '\0';
        memcpy(p, "***", 3);
        p += 3;
    }
}

/* What every driver error does to its connection: a statement failed in
 * its transaction, a lost session leaves it dead, and the message loses
 * the password. */
static int settle(odbox_conn *conn, odbox_error *e, int code)
{
    if (conn && conn->in_tx)
        conn->tx_failed = 1;
    if (conn && code == ODBOX_ECONNLOST)
        conn->dead = 1;
    if (conn)
        scrub(e->message, sizeof e->message, conn->secret);
    e->code = code;
    return code;
}

int odbox_odbc_fail(SQLSMALLINT type, SQLHANDLE h, SQLRETURN rc, odbox_conn *conn,
                    odbox_error *err, const char *what)
{
    odbox_error local;
    odbox_error *e = err ? err : &local;
    memset(e, 0, sizeof *e);
    size_t used = (size_t)snprintf(e->message, sizeof e->message, "%s: ", what);
    int code = ODBOX_EDB, first = 1;

    if (rc == SQL_INVALID_HANDLE) {
        code = ODBOX_ESTATE;
        snprintf(e->message + used, sizeof e->message - used, "invalid ODBC handle");
    }
    for (SQLSMALLINT rec = 1; rc != SQL_INVALID_HANDLE && rec <= 8; rec++) {
        SQLCHAR state[6] = {0}, text[SQL_MAX_MESSAGE_LENGTH + 1] = {0};
        SQLINTEGER native = 0;
        SQLSMALLINT len = 0;
        SQLRETURN r = SQLGetDiagRec(type, h, rec, state, &native, text, sizeof text, &len);
        if (!ODBOX_SQL_OK(r))
            break;
        for (size_t n = strlen((char *)text); n > 0 && strchr(" \t\r\n", text[n - 1]); n--)
            text[n - 1] = '\0';
        if (first) {
            memcpy(e->sqlstate, state, 6);
            e->native = native;
            code = odbox_odbc_map(conn ? conn->dialect : NULL, (const char *)state, native, (const char *)text);
            first = 0;
        }
        if (used < sizeof e->message - 1) {
            int n = snprintf(e->message + used, sizeof e->message - used, "%s[%s] %s",
                             rec > 1 ? "; " : "", state, text);
            used = n < 0 ? used : used + (size_t)n;
            if (used >= sizeof e->message)
                used = sizeof e->message - 1;
        }
    }
    if (first && rc != SQL_INVALID_HANDLE)
        snprintf(e->message + used, sizeof e->message - used, "failed without diagnostics");

    SQLUINTEGER dead = SQL_CD_FALSE;
    if (conn && code != ODBOX_ECONNLOST && conn->dbc &&
        ODBOX_SQL_OK(SQLGetConnectAttr(conn->dbc, SQL_ATTR_CONNECTION_DEAD, &dead, 0, NULL)) && dead == SQL_CD_TRUE)
        code = ODBOX_ECONNLOST;
    return settle(conn, e, code);
}

int odbox_db_fail(odbox_conn *conn, odbox_error *err, const char *what, int lost, const char *sqlstate,
                  const char *text)
{
    odbox_error local;
    odbox_error *e = err ? err : &local;
    memset(e, 0, sizeof *e);
    snprintf(e->sqlstate, sizeof e->sqlstate, "%s", sqlstate);
    int code = lost ? ODBOX_ECONNLOST : odbox_odbc_map(conn->dialect, e->sqlstate, 0, text);
    /* libpq's messages end in a newline and may run over several lines
     * (DETAIL, HINT): one line, as ODBC's records are joined */
    size_t used = (size_t)snprintf(e->message, sizeof e->message, "%s: [%s] ", what, e->sqlstate);
    for (const char *t = text; used < sizeof e->message - 1 && *t; t++) {
        if (*t == '\n' && !t[1])
            break;
        e->message[used++] = *t == '\n' ? ' ' : *t;
    }
    e->message[used < sizeof e->message ? used : sizeof e->message - 1] = '\0';
    return settle(conn, e, code);
}
