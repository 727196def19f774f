/* odbox — the dialect table: the one list a new dialect is added to; and
 * DSN resolution, which picks a dialect from it. */
#include <string.h>
#include "dialects.h"

/* Most specific first: a MariaDB server also calls itself MySQL. */
static const odbox_dialect *const table[] = {
    &odbox_dialect_mariadb,
    &odbox_dialect_mysql,
    &odbox_dialect_postgresql,
    &odbox_dialect_sqlite,
    NULL,
};

const odbox_dialect *const *odbox_dialects(void) { return table; }

const odbox_dialect *odbox_dialect_find(const char *name)
{
    if (!name)
        return NULL;
    for (const odbox_dialect *const *d = table; *d; d++) {
        if (odbox_strcaseeq(name, (*d)->name) || odbox_strcaseeq(name, (*d)->migrations_dir))
            return *d;
        for (const char *const *s = (*d)->schemes; s && *s; s++)
            if (odbox_strcaseeq(name, *s))
                return *d;
    }
    return NULL;
}

const odbox_dialect *odbox_dialect_detect(const char *name, const char *version)
{
    for (const odbox_dialect *const *d = table; *d; d++)
        if ((*d)->recognizes(name ? name : "", version ? version : ""))
            return *d;
    return NULL;
}

int odbox_dialect_eventlog_table(const odbox_dialect *d, const char *eventlog, const char *name, char *out,
                                 size_t cap)
{
    if (!d || !d->eventlog_separator || !eventlog || !name || !out || cap == 0)
        return ODBOX_EINVAL;
    size_t a = strlen(eventlog), s = strlen(d->eventlog_separator), t = strlen(name);
    if (a + s + t >= cap)
        return ODBOX_EINVAL;
    memcpy(out, eventlog, a);
    memcpy(out + a, d->eventlog_separator, s);
    memcpy(out + a + s, name, t + 1);
    return ODBOX_OK;
}

int odbox_dialect_eventlog_locate(const odbox_dialect *d, const char *eventlog, const char *name,
                                  const char **container, char *out, size_t cap)
{
    if (!container)
        return ODBOX_EINVAL;
    *container = NULL;
    if (!d || !d->create_eventlog_fmt) /* a name prefix: the whole name is the table's */
        return odbox_dialect_eventlog_table(d, eventlog, name, out, cap);
    if (!eventlog || !name || !out || strlen(name) >= cap)
        return ODBOX_EINVAL;
    *container = eventlog;
    memcpy(out, name, strlen(name) + 1);
    return ODBOX_OK;
}

int odbox_dsn_resolve(const char *text, const odbox_dialect **dialect, char **odbc, char **secret,
                      odbox_error *err)
{
    return odbox_dsn_resolve_as(text, 0, dialect, odbc, secret, err);
}

int odbox_dsn_resolve_as(const char *text, int never_create, const odbox_dialect **dialect, char **odbc,
                         char **secret, odbox_error *err)
{
    odbox_dsn *dsn = NULL;
    const odbox_dialect *d = NULL;
    int rc = odbox_dsn_parse(text, &dsn, err);
    if (rc != ODBOX_OK)
        return rc;
    if (dsn->dialect) {
        if (!(d = odbox_dialect_find(dsn->dialect))) {
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "DSN: unknown dialect '%.64s' (known: postgresql, mysql, mariadb, sqlite)",
                            dsn->dialect);
            goto out;
        }
        /* dialect= may choose among the dialects that read the URL the
         * same way (mysql:// or mariadb://): another one would read a
         * URL of a different server */
        const odbox_dialect *by_scheme = dsn->scheme ? odbox_dialect_find(dsn->scheme) : NULL;
        if (by_scheme && by_scheme->connection_string != d->connection_string) {
            rc = odbox_fail(err, ODBOX_EINVAL, "DSN: dialect=%s does not go with the scheme %s (the URL is for %s)",
                            d->name, dsn->scheme, by_scheme->name);
            goto out;
        }
    } else if (dsn->scheme) {
        if (!(d = odbox_dialect_find(dsn->scheme))) {
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "DSN: unknown scheme '%.64s' (known: postgresql, postgres, mysql, mariadb, sqlite)",
                            dsn->scheme);
            goto out;
        }
    }
    /* checked here, where a registry or pool is opened, not first at a
     * connect */
    odbox_timeouts timeouts;
    if (!dsn->raw && (rc = odbox_dsn_timeouts(dsn, &timeouts, err)) != ODBOX_OK)
        goto out;
    if (d && d->version != ODBOX_DIALECT_VERSION) {
        rc = odbox_fail(err, ODBOX_EUNSUPPORTED, "dialect %s has method table version %d, need %d",
                        d->name, d->version, ODBOX_DIALECT_VERSION);
        goto out;
    }
    if (odbc) {
        if (dsn->raw)
            rc = (*odbc = odbox_strdup(dsn->raw)) ? ODBOX_OK
                                                  : odbox_fail(err, ODBOX_ENOMEM, "DSN: out of memory");
        else
            rc = d->connection_string(dsn, dsn->driver ? dsn->driver : d->default_driver, odbc, err);
        /* a raw string without dialect= is known only after connecting:
         * what its driver creates is the string's business */
        if (rc == ODBOX_OK && never_create && d && d->never_create &&
            (rc = d->never_create(dsn, odbc, err)) != ODBOX_OK) {
            odbox_free_secret(*odbc);
            *odbc = NULL;
        }
        if (rc != ODBOX_OK)
            goto out;
    }
    if (secret) {
        *secret = NULL;
        if (dsn->password && !(*secret = odbox_strdup(dsn->password))) {
            if (odbc) {
                odbox_free_secret(*odbc);
                *odbc = NULL;
            }
            rc = odbox_fail(err, ODBOX_ENOMEM, "DSN: out of memory");
            goto out;
        }
    }
    *dialect = d;
out:
    odbox_dsn_free(&dsn);
    return rc;
}
