/* odbox — data source names.
 *
 * A DSN is either a URL (postgresql://user:pass@host:port/db?opt=v,
 * mysql://..., mariadb://..., sqlite:///path/file.db) or a raw ODBC
 * connection string ("DSN=name;..." or "Driver=...;..."), which passes
 * through unchanged. `dialect=` (URL query or raw key) forces the dialect;
 * `driver=` overrides the ODBC driver name (`driver=libpq` on a PostgreSQL
 * URL: libpq instead of ODBC, docs/dsn.md); `eventlog=` (URL query or raw
 * key, a name as odbox_name_is_valid wants it) names the shard's eventlog
 * container; `notify=off` turns off the shard's cross-process wake-ups
 * (PostgreSQL NOTIFY/LISTEN, see docs/wakeups.md) and `notify_interval_ms=` spaces
 * its NOTIFYs (at most one per channel per interval, default
 * ODBOX_NOTIFY_INTERVAL_MS). These are odbox's and never reach the driver. Other
 * URL query options are appended to the ODBC connection string as
 * KEY=VALUE.
 *
 * All functions are thread-safe (no shared state). */
#ifndef ODBOX_DSN_H
#define ODBOX_DSN_H

#include <stddef.h>
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_dsn_option {
    char *key;
    char *value;
} odbox_dsn_option;

/* A parsed DSN. Filled by odbox_dsn_parse, owned by the caller, freed by
 * odbox_dsn_free. Strings are percent-decoded; absent parts are NULL. */
typedef struct odbox_dsn {
    char *scheme;      /* lower-case URL scheme; NULL for a raw ODBC string */
    char *user;
    char *password;
    char *host;        /* without IPv6 brackets */
    int   port;        /* 0 when absent */
    char *database;    /* URL path without the leading '/'; a file path for sqlite */
    char *driver;      /* driver= override, or NULL */
    char *dialect;     /* dialect= override, or NULL */
    char *eventlog;    /* eventlog= (validated name), or NULL */
    char *raw;         /* the raw ODBC string (dialect=, eventlog=, notify=... removed); NULL for a URL */
    odbox_dsn_option *options;
    size_t noptions;
    char *notify;              /* notify= "on" or "off" (any case), or NULL */
    char *notify_interval_ms;  /* notify_interval_ms= 1..ODBOX_NOTIFY_INTERVAL_MAX_MS, or NULL */
} odbox_dsn;

#define ODBOX_NOTIFY_INTERVAL_MS 5
#define ODBOX_NOTIFY_INTERVAL_MAX_MS 60000

/* Parses text. On failure returns ODBOX_EINVAL (or ODBOX_ENOMEM) with a
 * message that never contains the password. */
int odbox_dsn_parse(const char *text, odbox_dsn **out, odbox_error *err);

void odbox_dsn_free(odbox_dsn **dsn);

/* Returns a malloc'd copy of text with any password replaced by "***"
 * (URL userinfo password, PWD=/Password= in raw strings, password= options).
 * Safe for logs. Returns NULL only when text is NULL or memory runs out. */
char *odbox_dsn_redact(const char *text);

#ifdef __cplusplus
}
#endif
#endif
