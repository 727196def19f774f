/* odbox — the libpq driver (driver.h): PostgreSQL without ODBC, for a
 * postgresql:// URL with driver=libpq.
 *
 * Why a second client: per transaction, psqlODBC and unixODBC cost about
 * as much client CPU as libpq itself and odbox together (callgrind:
 * 60,600 instructions a transaction, of which libc 21,300 mostly for
 * psqlODBC's formatting, psqlODBC 14,300, libpq 9,600), which at 8
 * clients on shared cores is the gap to pgbench (docs/benchmarks.md).
 *
 * What it sends: statements are prepared by name (PQprepare) and run
 * with text parameters (PQexecPrepared), their results read as text, as
 * psqlODBC does with UseServerSidePrepare=1. BEGIN waits for the
 * transaction's first statement and goes in the same round trip (libpq's
 * pipeline, or one simple query), as psqlODBC sends it; COMMIT and
 * ROLLBACK are simple queries, and end a transaction that sent nothing
 * without a round trip. Every value travels as text with no type (OID 0),
 * so the server types each parameter from where it stands, as the
 * dialect's CAST(? AS ...) forms expect. A freed statement is
 * deallocated without waiting for the answer (libpq reads it before the
 * next query): at once outside a transaction, after its end inside one.
 * COPY is refused (odbox reads results, not data streams). Timeouts come
 * from the connection string the dialect builds (libpq_conninfo). */
#include "config.h"
#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stmt.h"
#include "dialects.h"
#include "sqlsplit.h"

#define BOOLOID 16

typedef struct pq_stmt {
    char name[32];     /* the prepared statement's, unique in the process; "" when not prepared */
    char *text;        /* the SQL with $1, $2, ... for its '?' */
    PGresult *res;     /* the last execute's result */
    int row, nrows;
    int64_t affected;  /* the last execute's row count, -1: none */
    int nparams;       /* its '?' */
    const char **vals; /* the parameters' values at execute */
    int nvals;
} pq_stmt;

/* The session: odbox_conn's native. */
typedef struct pq_conn {
    PGconn *pg;
    int begin_pending; /* begun, and BEGIN not sent yet */
    /* Freed statements still prepared on the server: "DEALLOCATE a;
     * DEALLOCATE b; ...", sent after the transaction's end (inside one it
     * could be refused, 25P02, and a refusal would end it) or at once
     * outside one, without waiting for the answer. */
    odbox_buf closing;
} pq_conn;

static pq_conn *pc_of(const odbox_conn *c) { return (pq_conn *)c->native; }
static PGconn *pg_of(const odbox_conn *c) { return c->native ? pc_of(c)->pg : NULL; }

static int is_copy(ExecStatusType st)
{
    return st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH;
}

/* A result that is no error (a COPY is refused apart: copy_refused). */
static int succeeded(ExecStatusType st)
{
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY;
}

/* Reads and drops what is left of earlier queries (a DEALLOCATE sent
 * without waiting): a pipeline starts only on an idle session. A COPY
 * never ends this way: the caller refused it (copy_refused). */
static void drain(PGconn *pg)
{
    PGresult *r;
    while ((r = PQgetResult(pg)) != NULL) {
        int copy = is_copy(PQresultStatus(r));
        PQclear(r);
        if (copy)
            break;
    }
}

/* Sends the DEALLOCATEs of freed statements, without waiting: libpq reads
 * the answer before the next query's (drain, or PQexec's own). */
static void send_closing(pq_conn *pc)
{
    if (!pc->closing.len || PQstatus(pc->pg) != CONNECTION_OK)
        return;
    drain(pc->pg);
    char *sql = odbox_buf_take(&pc->closing);
    if (sql)
        PQsendQuery(pc->pg, sql);
    free(sql);
}

/* libpq prints notices to stderr by default; a library must not. */
static void notice(void *arg, const char *message)
{
    (void)arg;
    odbox_log(ODBOX_LOG_DEBUG, "postgresql says: %.*s", (int)strcspn(message, "\n"), message);
}

/* The error of res (or of the session when res has none). */
static int fail(odbox_conn *c, const PGresult *res, odbox_error *err, const char *what)
{
    PGconn *pg = pg_of(c);
    int lost = !pg || PQstatus(pg) == CONNECTION_BAD;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *text = res ? PQresultErrorMessage(res) : NULL;
    if (!text || !*text)
        text = pg ? PQerrorMessage(pg) : "no session";
    if (!state)
        state = lost ? "08006" : "HY000";
    return odbox_db_fail(c, err, what, lost, state, text);
}

/* odbox reads results, not COPY's data stream: a session left in COPY
 * cannot go on, so it is closed and the statement refused. */
static int copy_refused(odbox_conn *c, const PGresult *r, odbox_error *err, const char *what)
{
    if (!is_copy(PQresultStatus(r)))
        return ODBOX_OK;
    c->dead = 1;
    return odbox_fail(err, ODBOX_EUNSUPPORTED,
                      "%s: COPY is not run through odbox's statements (driver=libpq): the session is closed", what);
}

static int pq_connect(odbox_conn *c, const char *dsn_text, const odbox_dialect **named, char **conn_string,
                      odbox_error *err)
{
    odbox_dsn *dsn = NULL;
    char *info = NULL;
    *conn_string = NULL;
    int rc = odbox_dsn_parse(dsn_text, &dsn, err);
    if (rc != ODBOX_OK)
        return rc;
    const odbox_dialect *d = odbox_dialect_find(dsn->dialect ? dsn->dialect : dsn->scheme);
    odbox_free_secret(c->secret);
    c->secret = dsn->password ? odbox_strdup(dsn->password) : NULL;
    if (dsn->password && !c->secret)
        rc = odbox_fail(err, ODBOX_ENOMEM, "connect: out of memory");
    else
        rc = d->libpq_conninfo(dsn, &info, err);
    odbox_dsn_free(&dsn);
    if (rc != ODBOX_OK)
        return rc;
    *named = d;
    if (!c->dialect)
        c->dialect = d;
    pq_conn *pc = calloc(1, sizeof *pc);
    PGconn *pg = pc ? PQconnectdb(info) : NULL;
    odbox_free_secret(info);
    if (!pg) {
        free(pc);
        return odbox_fail(err, ODBOX_ENOMEM, "connect: out of memory");
    }
    pc->pg = pg;
    c->native = pc;
    if (PQstatus(pg) != CONNECTION_OK) {
        odbox_db_fail(c, err, "connect", 0, "08001", PQerrorMessage(pg));
        if (err)
            err->code = ODBOX_ECONNECT;
        PQfinish(pg);
        free(pc);
        c->native = NULL;
        return ODBOX_ECONNECT;
    }
    PQsetNoticeProcessor(pg, notice, NULL);
    c->cache_ok = 1; /* prepared statements outlive transactions */
    c->bind_columns = 0;
    snprintf(c->server_name, sizeof c->server_name, "PostgreSQL");
    const char *v = PQparameterStatus(pg, "server_version");
    snprintf(c->server_version, sizeof c->server_version, "%s", v ? v : "");
    return ODBOX_OK;
}

/* The server rolls back what the session left open when it ends. */
static void pq_disconnect(odbox_conn *c)
{
    if (c->native) {
        PQfinish(pg_of(c));
        odbox_buf_reset(&pc_of(c)->closing);
        free(c->native);
    }
    c->native = NULL;
}

static int pq_is_dead(odbox_conn *c) { return !c->native || PQstatus(pg_of(c)) == CONNECTION_BAD; }

static int command(odbox_conn *c, const char *sql, const char *what, odbox_error *err)
{
    PGresult *r = PQexec(pg_of(c), sql);
    int rc = copy_refused(c, r, err, what);
    if (rc == ODBOX_OK && !succeeded(PQresultStatus(r)))
        rc = fail(c, r, err, what);
    else if (rc == ODBOX_OK && !strcmp(what, "commit") && !strcmp(PQcmdStatus(r), "ROLLBACK"))
        /* a COMMIT of a transaction that failed rolls it back, and says
         * so only in its tag */
        rc = odbox_db_fail(c, err, what, 0, "25P02",
                           "the transaction was rolled back: a statement in it had failed");
    PQclear(r);
    return rc;
}

/* A pending BEGIN is sent first, on its own: in one simple query with
 * sql, a syntax error in sql would stop the BEGIN too (the server parses
 * the whole text first), and the statements after it would each commit. */
static int pq_exec(odbox_conn *c, const char *sql, odbox_error *err)
{
    pq_conn *pc = pc_of(c);
    if (pc->begin_pending) {
        int rc = command(c, "BEGIN", "begin", err);
        if (rc != ODBOX_OK)
            return rc;
        pc->begin_pending = 0;
    }
    return command(c, sql, "exec", err);
}

/* Nothing is sent at BEGIN: it goes with the first statement. */
static int pq_autocommit(odbox_conn *c, int on, odbox_error *err)
{
    (void)err;
    pc_of(c)->begin_pending = !on;
    return ODBOX_OK;
}

static int pq_end_tran(odbox_conn *c, int commit, odbox_error *err)
{
    pq_conn *pc = pc_of(c);
    int rc = ODBOX_OK;
    if (pc->begin_pending) /* the server saw no transaction: nothing to end */
        pc->begin_pending = 0;
    else
        rc = command(c, commit ? "COMMIT" : "ROLLBACK", commit ? "commit" : "rollback", err);
    send_closing(pc);
    return rc;
}

/* ---- statements ---------------------------------------------------------- */

static int pq_prepare(odbox_stmt *s, odbox_error *err)
{
    static atomic_ullong seq;
    odbox_conn *c = s->conn;
    pq_stmt *q = s->native;
    if (!q && !(q = s->native = calloc(1, sizeof *q)))
        return odbox_fail(err, ODBOX_ENOMEM, "prepare: out of memory");
    if (!q->text && !(q->text = odbox_sql_number_params(s->sql, &q->nparams)))
        return odbox_fail(err, ODBOX_ENOMEM, "prepare: out of memory");
    char name[32];
    snprintf(name, sizeof name, "odbox_%llu", (unsigned long long)atomic_fetch_add(&seq, 1) + 1);
    PGresult *r = PQprepare(pg_of(c), name, q->text, 0, NULL);
    int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? ODBOX_OK : fail(c, r, err, "prepare");
    PQclear(r);
    if (rc != ODBOX_OK)
        return rc;
    memcpy(q->name, name, sizeof name);
    s->nparams = q->nparams;
    return ODBOX_OK;
}

static int pq_prepared(const odbox_stmt *s)
{
    const pq_stmt *q = s->native;
    return q && q->name[0];
}

static void pq_unprepare(odbox_stmt *s, int send)
{
    pq_stmt *q = s->native;
    odbox_stmt_free_columns(s);
    if (!q)
        return;
    PQclear(q->res);
    q->res = NULL;
    odbox_conn *c = s->conn;
    if (send && q->name[0] && c && c->native && !c->dead) {
        pq_conn *pc = pc_of(c);
        odbox_buf_cat(&pc->closing, "DEALLOCATE ", q->name, "; ", (char *)NULL);
        if (!c->in_tx)
            send_closing(pc);
    }
    free(q->text);
    free(q->vals);
    free(q);
    s->native = NULL;
}

/* BEGIN and q in one round trip (a pipeline): q's result, or BEGIN's
 * error in its place when BEGIN failed; NULL when nothing came (the
 * session is gone: the caller reads PQstatus). */
static PGresult *begin_and_execute(PGconn *pg, const pq_stmt *q, int n)
{
    drain(pg);
    if (!PQenterPipelineMode(pg))
        return NULL;
    PGresult *results[2] = {NULL, NULL};
    if (PQsendQueryParams(pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) &&
        PQsendQueryPrepared(pg, q->name, n, q->vals, NULL, NULL, 0) && PQpipelineSync(pg)) {
        /* each query's results end with a NULL; then the sync's */
        int copy = 0;
        for (int i = 0; i < 2 && !copy; i++) {
            PGresult *r = PQgetResult(pg);
            if (!r)
                break;
            results[i] = r;
            /* a COPY's results never end: its caller refuses it and closes the session */
            copy = is_copy(PQresultStatus(r));
            while (!copy && (r = PQgetResult(pg)) != NULL)
                PQclear(r);
        }
        if (copy)
            return results[1] ? (PQclear(results[0]), results[1]) : results[0];
        PGresult *sync = PQgetResult(pg);
        PQclear(sync);
    }
    PQexitPipelineMode(pg);
    if (results[0] && PQresultStatus(results[0]) != PGRES_COMMAND_OK) {
        PQclear(results[1]);
        return results[0];
    }
    PQclear(results[0]);
    return results[1];
}

static int pq_execute(odbox_stmt *s, odbox_error *err)
{
    pq_stmt *q = s->native;
    int n = s->nparams;
    if (n > q->nvals) {
        const char **v = realloc(q->vals, (size_t)n * sizeof *v);
        if (!v)
            return odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
        q->vals = v;
        q->nvals = n;
    }
    for (int i = 0; i < n && i < s->nbinds; i++) {
        bind *b = &s->binds[i];
        const char *v = b->text_form;
        if (b->ind == SQL_NULL_DATA)
            v = NULL;
        else if (b->type == ODBOX_TYPE_TEXT || b->type == ODBOX_TYPE_UUID || b->type == ODBOX_TYPE_JSON)
            v = b->text;
        else if (b->type == ODBOX_TYPE_DOUBLE) {
            snprintf(b->text_form, sizeof b->text_form, "%.17g", b->v.d);
            char *comma = strchr(b->text_form, ','); /* a locale's decimal comma */
            if (comma)
                *comma = '.';
        }
        else if (b->type == ODBOX_TYPE_INT64 && !s->conn->dialect->numbers_as_text)
            snprintf(b->text_form, sizeof b->text_form, "%lld", (long long)b->v.i);
        else if (b->type == ODBOX_TYPE_BOOL && !s->conn->dialect->numbers_as_text)
            snprintf(b->text_form, sizeof b->text_form, "%d", b->v.b);
        q->vals[i] = v;
    }
    PQclear(q->res);
    pq_conn *pc = pc_of(s->conn);
    if (pc->begin_pending) {
        q->res = begin_and_execute(pc->pg, q, n);
        /* BEGIN ran unless the server is still outside a transaction */
        pc->begin_pending = PQstatus(pc->pg) == CONNECTION_OK && PQtransactionStatus(pc->pg) == PQTRANS_IDLE;
    } else {
        q->res = PQexecPrepared(pc->pg, q->name, n, q->vals, NULL, NULL, 0);
    }
    ExecStatusType st = PQresultStatus(q->res);
    int rc = copy_refused(s->conn, q->res, err, "execute");
    if (rc == ODBOX_OK && !succeeded(st))
        rc = fail(s->conn, q->res, err, "execute");
    if (rc != ODBOX_OK) {
        PQclear(q->res);
        q->res = NULL;
        return rc;
    }
    const char *t = PQcmdTuples(q->res);
    q->affected = *t ? strtoll(t, NULL, 10) : -1;
    q->row = -1;
    q->nrows = st == PGRES_TUPLES_OK ? PQntuples(q->res) : 0;
    return ODBOX_OK;
}

static int pq_columns(odbox_stmt *s, odbox_error *err)
{
    pq_stmt *q = s->native;
    int n = q && q->res && PQresultStatus(q->res) == PGRES_TUPLES_OK ? PQnfields(q->res) : 0;
    if (n <= 0)
        return ODBOX_OK;
    s->result_cols = n;
    s->open_cursor = 1;
    if (n == s->ncols)
        return ODBOX_OK;
    odbox_stmt_free_columns(s);
    if (!(s->cols = calloc((size_t)n, sizeof *s->cols)))
        return odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
    s->ncols = n;
    return ODBOX_OK;
}

static int pq_fetch(odbox_stmt *s, odbox_error *err)
{
    pq_stmt *q = s->native;
    if (!q || !q->res || ++q->row >= q->nrows)
        return 0;
    for (int i = 0; i < s->ncols; i++) {
        column *col = &s->cols[i];
        int null = PQgetisnull(q->res, q->row, i);
        const char *v = null ? "" : PQgetvalue(q->res, q->row, i);
        size_t len = null ? 0 : (size_t)PQgetlength(q->res, q->row, i);
        if (!null && PQftype(q->res, i) == BOOLOID) /* 't' and 'f', as psqlODBC gives them */
            v = *v == 't' ? "1" : "0", len = 1;
        if (len + 1 > col->cap) {
            size_t cap = len + 1 < 64 ? 64 : len + 1;
            char *p = realloc(col->data, cap);
            if (!p)
                return odbox_fail(err, ODBOX_ENOMEM, "fetch: out of memory");
            col->data = p;
            col->cap = cap;
        }
        memcpy(col->data, v, len);
        col->data[len] = '\0';
        col->is_null = null;
    }
    return 1;
}

/* The rows go: a cached statement keeps no result (ODBC's SQL_CLOSE
 * frees the driver's too). */
static void pq_close_cursor(odbox_stmt *s)
{
    pq_stmt *q = s->native;
    if (q) {
        PQclear(q->res);
        q->res = NULL;
        q->nrows = 0;
    }
}

static int64_t pq_rows_affected(odbox_stmt *s)
{
    pq_stmt *q = s->native;
    return q ? q->affected : -1;
}

static int pq_column_label(odbox_stmt *s, int i, char *buf, size_t cap)
{
    pq_stmt *q = s->native;
    const char *name = q && q->res ? PQfname(q->res, i - 1) : NULL;
    if (!name)
        return 0;
    snprintf(buf, cap, "%s", name);
    return 1;
}

const odbox_db_driver odbox_db_libpq = {
    .version = ODBOX_DB_DRIVER_VERSION,
    .name = "libpq",
    .prepares_on_server = 1,
    .connect = pq_connect,
    .disconnect = pq_disconnect,
    .is_dead = pq_is_dead,
    .exec = pq_exec,
    .autocommit = pq_autocommit,
    .end_tran = pq_end_tran,
    .prepare = pq_prepare,
    .prepared = pq_prepared,
    .unprepare = pq_unprepare,
    .execute = pq_execute,
    .columns = pq_columns,
    .fetch = pq_fetch,
    .close_cursor = pq_close_cursor,
    .rows_affected = pq_rows_affected,
    .column_label = pq_column_label,
};
