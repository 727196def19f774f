/* odbox — the statement's parts that stmt.c (lifecycle, cache, execute,
 * fetch) and values.c (typed binds and getters) share; not installed. */
#ifndef ODBOX_DB_STMT_H
#define ODBOX_DB_STMT_H

#include "odbc.h"

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
    odbox_conn *conn;   /* NULL once detached: its connection was closed or released while held */
    struct odbox_stmt *prev, *next; /* the connection's statements */
    SQLHSTMT h;         /* ODBC's; SQL_NULL_HSTMT after a reconnect, until the next execute */
    void *native;       /* another driver's statement (pq.c) */
    char *key;          /* the cache key: SQL text, or a caller's key */
    size_t keylen;
    char *sql;          /* the SQL text (key itself for text keys), to prepare it again */
    int repeatable;     /* odbox_sql_is_read(sql) */
    int ends_tx;        /* odbox_sql_ends_tx(sql) */
    int changes_session; /* odbox_sql_changes_session(sql) */
    int in_use;         /* held by a caller */
    uint64_t last_used;
    bind *binds;
    int nbinds;
    int cap;
    int drv_nbinds;     /* parameters bound with the driver */
    int nparams;        /* the statement's parameters, as the driver counts them (0: not known) */
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

/* Frees s's column buffers (values.c; a driver unbinds them first). */
void odbox_stmt_free_columns(odbox_stmt *s);

/* The error of using a detached statement (ODBOX_ESTATE); what names the
 * operation. */
int odbox_stmt_detached(odbox_error *err, const char *what);

#endif
