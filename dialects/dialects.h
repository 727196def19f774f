/* odbox — the dialect table and helpers the dialect modules share; not
 * installed. */
#ifndef ODBOX_DIALECTS_H
#define ODBOX_DIALECTS_H

#include "odbox/dialect.h"
#include "internal.h"

extern const odbox_dialect odbox_dialect_postgresql;
extern const odbox_dialect odbox_dialect_mysql;
extern const odbox_dialect odbox_dialect_mariadb;
extern const odbox_dialect odbox_dialect_sqlite;

/* Parses dsn_text, picks its dialect (dialect= override, else the URL
 * scheme; NULL for a raw ODBC string, detected after connecting) and,
 * when odbc is not NULL, builds the ODBC connection string (*odbc, malloc'd,
 * holds the password) and hands back a copy of the password (*secret, may
 * be NULL) so messages can be scrubbed. */
int odbox_dsn_resolve(const char *dsn_text, const odbox_dialect **dialect, char **odbc,
                      char **secret, odbox_error *err);
/* odbox_dsn_resolve whose connection string, with never_create, does not
 * create the database (the dialect's never_create). */
int odbox_dsn_resolve_as(const char *dsn_text, int never_create, const odbox_dialect **dialect, char **odbc,
                         char **secret, odbox_error *err);

/* Connect and read timeouts, in seconds (0: no limit), from a URL DSN's
 * connect_timeout= and read_timeout= options; the defaults otherwise.
 * Each dialect turns them into its driver's options (connection_string);
 * odbox_odbc_options_take does not pass these two keys on. */
#define ODBOX_CONNECT_TIMEOUT_S 10
#define ODBOX_READ_TIMEOUT_S 300
#define ODBOX_TIMEOUT_MAX_S 86400

typedef struct odbox_timeouts {
    int connect_s;
    int read_s;
} odbox_timeouts;

int odbox_dsn_timeouts(const odbox_dsn *dsn, odbox_timeouts *t, odbox_error *err);

/* What connecting with dsn_text needs besides the connection string: the
 * login timeout for SQL_ATTR_LOGIN_TIMEOUT, and whether the text is a raw
 * ODBC string, built by nobody who knows its driver (*raw = 1). */
int odbox_dsn_connect_options(const char *dsn_text, int *login_timeout_s, int *raw, odbox_error *err);

/* Appends "key=value;" to b, bracing value when it holds ; { } = or blanks
 * (a '}' inside braces is doubled, per the ODBC grammar). */
void odbox_odbc_kv(odbox_buf *b, const char *key, const char *value);

/* The connection string every network dialect builds: driver, server,
 * port, database, user, password, then extra (a NULL-terminated key/value
 * list of driver options), then the DSN's own options. */
int odbox_network_connection_string(const odbox_dsn *dsn, const char *driver, int default_port,
                                    const char *const *extra, char **out, odbox_error *err);

/* Appends extra (a NULL-terminated key/value list of driver options, each
 * unless the DSN sets it too), then the DSN's own options but the timeout
 * keys (odbox_dsn_timeouts reads those), to b with put (odbox_odbc_kv, or
 * a driver's own spelling) and hands the string out (*out, malloc'd; b is
 * reset). */
int odbox_odbc_options_take(odbox_buf *b, const odbox_dsn *dsn, const char *const *extra,
                            void (*put)(odbox_buf *b, const char *key, const char *value), char **out,
                            odbox_error *err);

/* The SQLSTATEs that mean the same to every ODBC driver (the SQL
 * standard's and ODBC's own: 08xxx connection, 28000 authorization,
 * 40001 serialization, HYT00 timeout, IM002 no driver, ...) as ODBOX_E*
 * codes; ODBOX_EDB for the rest. Dialects' map_error fall back to it, and
 * the ODBC core uses it while a raw connection string's dialect is not
 * known yet. */
int odbox_map_standard_sqlstate(const char *sqlstate);

/* batch_update_sql for dialects with UPDATE ... FROM, through their
 * bound_rows_sql. */
int odbox_update_from_rows_sql(const odbox_dialect *d, const char *table, const char *const *cols, const int *types,
                               size_t ncols, size_t nrows, char **out, odbox_error *err);

/* ASCII case-insensitive substring test. */
int odbox_contains_nocase(const char *haystack, const char *needle);

#endif
