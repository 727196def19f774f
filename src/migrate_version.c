/* odbox — migration file names and versions, as Flyway has them:
 * V<version>__<description>.sql, the version's parts digits separated by
 * '.' or '_' (V1__, V1.1__, V2_0_3__), ordered part by part as numbers
 * (1.1 < 1.2 < 1.10 < 2), a missing part counting as 0 (1 = 1.0). */
#include <stdio.h>
#include <string.h>
#include "migrate_internal.h"

/* A part of up to 18 digits is a number an int64 holds, whatever its
 * digits; timestamps as versions (20240131120000) take 14. */
#define PART_DIGITS_MAX 18

static int is_digit(char c) { return c >= '0' && c <= '9'; }

int odbox_migration_name_parse(const char *name, char version[ODBOX_MIGRATION_VERSION_MAX], char *desc,
                               size_t dcap, odbox_error *err)
{
    size_t len = strlen(name);
    if (len < 4 || strcmp(name + len - 4, ".sql") || name[0] != 'V')
        return odbox_fail(err, ODBOX_EINVAL, "'%.200s' is not named V<version>__<description>.sql", name);
    const char *p = name + 1;
    if (!is_digit(*p))
        return odbox_fail(err, ODBOX_EINVAL,
                          "'%.200s': the version after 'V' must be digits, such as V1__ or V1.2__", name);
    size_t n = 0;
    int nonzero = 0;
    for (;;) {
        const char *part = p;
        while (is_digit(*p)) {
            nonzero |= *p != '0';
            p++;
        }
        if (p - part > PART_DIGITS_MAX)
            return odbox_fail(err, ODBOX_EINVAL, "'%.200s': version part %.*s has %d digits (at most %d)", name,
                              (int)(p - part), part, (int)(p - part), PART_DIGITS_MAX);
        if (n + (size_t)(p - part) + 1 >= ODBOX_MIGRATION_VERSION_MAX)
            return odbox_fail(err, ODBOX_EINVAL, "'%.200s': the version is longer than %d characters", name,
                              ODBOX_MIGRATION_VERSION_MAX - 1);
        memcpy(version + n, part, (size_t)(p - part));
        n += (size_t)(p - part);
        if (p[0] == '_' && p[1] == '_')
            break;
        if ((p[0] == '.' || p[0] == '_') && is_digit(p[1])) {
            version[n++] = '.';
            p++;
            continue;
        }
        return odbox_fail(err, ODBOX_EINVAL,
                          "'%.200s': expected '__' between the version and the description "
                          "(version parts are digits separated by '.' or '_')", name);
    }
    version[n] = '\0';
    if (!nonzero)
        return odbox_fail(err, ODBOX_EINVAL, "'%.200s': version %s is not allowed: versions start above 0", name,
                          version);
    p += 2;
    size_t dl = (size_t)(name + len - 4 - p);
    if (dl == 0)
        return odbox_fail(err, ODBOX_EINVAL, "'%.200s': no description after '__'", name);
    if (dl >= dcap)
        return odbox_fail(err, ODBOX_EINVAL, "'%.200s': the description is longer than %zu characters", name,
                          dcap - 1);
    for (size_t i = 0; i < dl; i++)
        desc[i] = p[i] == '_' ? ' ' : p[i];
    desc[dl] = '\0';
    return ODBOX_OK;
}

/* The next part of a version at *s (digits without leading zeros, as a
 * pointer and a length), advancing *s past it and its separator; an
 * exhausted version gives the part 0 (length 0). */
static void next_part(const char **s, const char **digits, size_t *n)
{
    const char *p = *s;
    while (*p == '0' && is_digit(p[1]))
        p++;
    if (*p == '0')
        p++; /* a zero part is the empty run of digits */
    *digits = p;
    while (is_digit(*p))
        p++;
    *n = (size_t)(p - *digits);
    while (*p && !is_digit(*p))
        p++;
    *s = p;
}

int odbox_server_version_check(const odbox_dialect *d, const char *server, odbox_error *err)
{
    if (!d->min_server_version || !server)
        return ODBOX_OK;
    char v[64];
    if (!strncmp(server, "5.5.5-", 6) && is_digit(server[6]))
        server += 6; /* MariaDB's replication-compatible prefix, where a client shows it */
    size_t n = strspn(server, "0123456789.");
    while (n > 0 && server[n - 1] == '.')
        n--;
    if (n == 0 || n >= sizeof v)
        return ODBOX_OK; /* no number to compare: the server will say */
    memcpy(v, server, n);
    v[n] = '\0';
    if (odbox_migration_version_cmp(v, d->min_server_version) >= 0)
        return ODBOX_OK;
    return odbox_fail(err, ODBOX_EUNSUPPORTED, "migrate: the server is %s %s, older than %s, which the %s dialect "
                                               "needs: %s",
                      d->name, v, d->min_server_version, d->name, d->too_old_hint ? d->too_old_hint : "upgrade it");
}

int odbox_migration_version_cmp(const char *a, const char *b)
{
    while (*a || *b) {
        const char *da, *db;
        size_t na, nb;
        next_part(&a, &da, &na);
        next_part(&b, &db, &nb);
        if (na != nb)
            return na < nb ? -1 : 1;
        int c = memcmp(da, db, na);
        if (c)
            return c < 0 ? -1 : 1;
    }
    return 0;
}
