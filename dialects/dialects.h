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

/* Appends "key=value;" to b, bracing value when it holds ; { } = or blanks
 * (a '}' inside braces is doubled, per the ODBC grammar). */
void odbox_odbc_kv(odbox_buf *b, const char *key, const char *value);

/* The connection string every network dialect builds: driver, server,
 * port, database, user, password, then extra (a NULL-terminated key/value
 * list of driver options), then the DSN's own options. */
int odbox_network_connection_string(const odbox_dsn *dsn, const char *driver, int default_port,
                                    const char *const *extra, char **out, odbox_error *err);

/* Appends extra (a NULL-terminated key/value list of driver options, each
 * unless the DSN sets it too), then the DSN's own options, to b with put
 * (odbox_odbc_kv, or a driver's own spelling) and hands the string out
 * (*out, malloc'd; b is reset). */
int odbox_odbc_options_take(odbox_buf *b, const odbox_dsn *dsn, const char *const *extra,
                            void (*put)(odbox_buf *b, const char *key, const char *value), char **out,
                            odbox_error *err);

/* ASCII case-insensitive substring test. */
int odbox_contains_nocase(const char *haystack, const char *needle);

#endif
