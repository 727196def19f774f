/* odbox — data source names: the grammar, URLs and the entry points
 * (raw ODBC strings: dsn_raw.c; passwords found and redacted: dsn_secrets.c).
 *
 * Accepted input (at most 4096 characters; any byte below 0x20 and 0x7f is
 * rejected, also when percent-encoded; %00 is always rejected):
 *
 *   URL   = scheme "://" [user [":" password] "@"] host [":" port]
 *           ["/" database] ["?" query]
 *     scheme    letter *(letter / digit / "+" / "-" / "."), matched without
 *               regard to case and stored lower-case. Known network schemes:
 *               postgresql, postgres, mysql, mariadb (host required). Any
 *               other scheme is parsed with the same grammar but host is
 *               optional and the database may contain '/' (the caller decides
 *               whether such a dialect exists). Aliases are not normalized
 *               ("postgres" stays "postgres").
 *     user, password
 *               percent-decoded; any printable character except space and
 *               '@' (encode those as %20 / %40). The user is the text before
 *               the first ':'; the password may contain further ':'. The
 *               user must not be empty when '@' is present.
 *     host      a name of unreserved characters (A-Z a-z 0-9 - . _ ~) and
 *               %XX escapes (so a Unix socket directory can be given as
 *               %2Fvar%2Frun%2Fpostgresql), or an IPv6 address in brackets,
 *               optionally with a zone as "%25zone": [::1], [fe80::1%25eth0].
 *               Stored without brackets and decoded.
 *     port      decimal, 1..65535; 0 in the struct when absent.
 *     database  percent-decoded; for network schemes an unencoded '/' is an
 *               error; NULL when empty.
 *     query     key=value pairs separated by '&' (no empty pairs, no stray
 *               '&'); both sides percent-decoded; '+' is literal. Keys must
 *               be [A-Za-z0-9_ .-] after decoding and are compared without
 *               regard to case: duplicates are an error. "dialect",
 *               "driver", "eventlog", "notify" and "notify_interval_ms" fill
 *               those fields (non-empty values; an eventlog must be a valid
 *               name, notify on or off, notify_interval_ms a whole number
 *               1..60000), every other pair becomes
 *               an option, key kept as written, in input order.
 *     Fragments ('#') and unencoded spaces are not allowed anywhere.
 *
 *   SQLite (scheme "sqlite", case-insensitive); `database` gets the file path:
 *     sqlite:///abs/path.db        absolute path "/abs/path.db"
 *     sqlite://localhost/abs.db    absolute path "/abs.db"
 *     sqlite://rel/path.db         relative path "rel/path.db" (what stands
 *                                  where a host would, other than localhost,
 *                                  starts the path; "./rel.db", "../" too)
 *     sqlite:rel.db, sqlite:dir/x.db, sqlite:/abs.db
 *                                  opaque form: the path as written
 *     sqlite::memory:              ":memory:"
 *     all forms take an optional ?query as above and are percent-decoded.
 *     A user, password or port is an error, and so is an empty path
 *     ("sqlite:", "sqlite://", "sqlite:///").
 *
 *   Raw ODBC connection string: anything else that contains '=' (the URL
 *   check comes first: only a leading "scheme://" makes a URL, so
 *   "Url=http://x" inside a raw string is fine):
 *     entry *(";" entry) [";"]     entry = KEY "=" value
 *     KEY      [A-Za-z0-9_ .-], surrounding spaces ignored, not empty,
 *              unique without regard to case.
 *     value    either up to the next ';' (surrounding spaces ignored) or
 *              "{...}" which may contain ';' and writes '}' as "}}"; only
 *              spaces may follow the closing brace.
 *     Empty entries (";;", leading ';') are errors. `raw` is the input
 *     unchanged except that dialect=, eventlog=, notify= and
 *     notify_interval_ms= entries are removed (their values go to the
 *     fields of those names, checked as for a URL); `driver` stays NULL; UID/User/Username and
 *     PWD/Password/Passwd fill `user` and `password` (for redaction).
 *
 * Error messages never contain the password: parts that can hold it are
 * never quoted, and every quoted fragment is checked first against the
 * password (raw and decoded) and against everything the best-effort
 * redactor would hide; if it touches any of those it is withheld. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "odbox/dsn.h"
#include "dsn_internal.h"
#include "internal.h"

/* ---- parts: decoding, characters (messages and shared checks: dsn_secrets.c) */

/* Percent-decodes t[off, off+len) into *out. what names the part; secret:
 * nothing of the part may be quoted. */
static int decode(ctx *c, size_t off, size_t len, const char *what, int secret, char **out)
{
    *out = NULL;
    char *s = malloc(len + 1);
    if (!s)
        return odbox_dsn_oom(c);
    size_t k = 0, end = off + len;
    for (size_t i = off; i < end; i++) {
        unsigned char ch = (unsigned char)c->t[i];
        if (ch != '%') {
            s[k++] = (char)ch;
            continue;
        }
        int hi = i + 1 < end ? odbox_hex_value((unsigned char)c->t[i + 1]) : -1;
        int lo = i + 2 < end ? odbox_hex_value((unsigned char)c->t[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
            wipe_free(s, len + 1);
            if (secret)
                return odbox_fail(c->err, ODBOX_EINVAL,
                                  "DSN: bad percent-encoding in the %s "
                                  "('%%' must be followed by two hex digits)", what);
            echobuf b;
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: bad percent-encoding %s in the %s "
                              "('%%' must be followed by two hex digits)",
                              odbox_dsn_echo(c, i, end - i < 3 ? end - i : 3, &b), what);
        }
        int v = hi * 16 + lo;
        if (v == 0) {
            wipe_free(s, len + 1);
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: percent-encoded NUL (%%00) in the %s",
                              what);
        }
        if (v < 0x20 || v == 0x7f) {
            wipe_free(s, len + 1);
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: percent-encoded control character in the %s", what);
        }
        s[k++] = (char)v;
        i += 2;
    }
    s[k] = '\0';
    *out = s;
    return 0;
}

enum { CH_USERINFO, CH_HOST, CH_PATH, CH_PATH_SLASH, CH_QUERY };

static int char_ok(int cls, unsigned char ch)
{
    if (ch == '%')
        return 1; /* checked by decode() */
    switch (cls) {
    case CH_USERINFO:
        return ch > ' ' && ch != '@';
    case CH_HOST:
        return is_unreserved(ch);
    default:
        if (ch >= 0x80 || is_unreserved(ch) || strchr("!$&'()*+,;=:@", ch))
            return 1;
        if (ch == '/')
            return cls != CH_PATH;
        if (ch == '?')
            return cls == CH_QUERY;
        return 0;
    }
}

/* Checks the unencoded characters of t[off, off+len). */
static int check_chars(ctx *c, size_t off, size_t len, int cls, const char *what, int secret)
{
    for (size_t i = off; i < off + len; i++) {
        unsigned char ch = (unsigned char)c->t[i];
        if (char_ok(cls, ch))
            continue;
        if (ch == ' ')
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: space in the %s (percent-encode it as %%20)", what);
        if (ch == '/' && cls == CH_PATH)
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: unexpected '/' in the %s (percent-encode it as %%2F)", what);
        if (secret)
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: character not allowed in the %s (percent-encode it)", what);
        if (ch >= 0x80)
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: non-ASCII byte in the %s (percent-encode it)", what);
        echobuf b;
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: invalid character %s in the %s%s",
                          odbox_dsn_echo(c, i, 1, &b), what,
                          ch == ',' && cls == CH_HOST ? " (only one host is supported)" : "");
    }
    return 0;
}

/* ---- URL ------------------------------------------------------------------- */

enum { K_NET, K_SQLITE, K_OTHER };

static int parse_userinfo(ctx *c, odbox_dsn *d, size_t s, size_t e)
{
    const char *t = c->t;
    size_t colon = find_char(t, s, e, ':');
    int rc;
    if (s == e)
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: '@' without a user name");
    if (colon == s)
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: empty user name before ':' (a password needs a user)");
    if (colon < e)
        odbox_dsn_spans_add(c->secrets, colon + 1, e - colon - 1);
    if (find_char(t, s, e, '@') < e)
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: '@' in the user name or password must be percent-encoded as %%40");
    if ((rc = check_chars(c, s, colon - s, CH_USERINFO, "user name", 0)) != 0)
        return rc;
    if (colon < e && (rc = check_chars(c, colon + 1, e - colon - 1, CH_USERINFO, "password", 1)))
        return rc;
    if ((rc = decode(c, s, colon - s, "user name", 0, &d->user)) != 0)
        return rc;
    if (colon < e) {
        if ((rc = decode(c, colon + 1, e - colon - 1, "password", 1, &d->password)) != 0)
            return rc;
        c->password = d->password;
    }
    return 0;
}

/* A bracketed IPv6 address t[s, close] (brackets included). */
static int parse_ipv6(ctx *c, odbox_dsn *d, size_t s, size_t close)
{
    const char *t = c->t;
    size_t in = s + 1, ie = close;
    size_t zone = find_char(t, in, ie, '%');
    echobuf b;
    if (ie == in)
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty IPv6 address '[]' in host");
    int ok = zone - in < 46;
    for (size_t i = in; i < zone && ok; i++)
        if (odbox_hex_value((unsigned char)t[i]) < 0 && t[i] != ':' && t[i] != '.')
            ok = 0;
    if (ok) {
        char addr[46];
        unsigned char bin[16];
        memcpy(addr, t + in, zone - in);
        addr[zone - in] = '\0';
        ok = inet_pton(AF_INET6, addr, bin) == 1;
    }
    if (ok && zone < ie) {
        /* zone: "%25" then at least one unreserved character or escape */
        ok = ie - zone > 3 && t[zone + 1] == '2' && t[zone + 2] == '5';
        for (size_t i = zone + 3; i < ie && ok; i++)
            if (!is_unreserved((unsigned char)t[i]) && t[i] != '%')
                ok = 0;
    }
    if (!ok)
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: invalid IPv6 address %s in host",
                          odbox_dsn_echo(c, s, close + 1 - s, &b));
    return decode(c, in, ie - in, "host", 0, &d->host);
}

static int parse_hostport(ctx *c, odbox_dsn *d, size_t s, size_t e, int kind)
{
    const char *t = c->t;
    size_t pstart = 0;
    int has_port = 0, rc;
    echobuf b;

    if (kind == K_SQLITE) {
        if (s == e || ci_eqn(t + s, e - s, "localhost"))
            return 0;
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: a sqlite URL takes no port (use sqlite:///absolute/path.db, "
                          "sqlite://relative/path.db or sqlite:relative.db)");
    }
    if (s < e && t[s] == '[') {
        size_t close = find_char(t, s, e, ']');
        if (close == e)
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: unterminated '[' in host");
        if ((rc = parse_ipv6(c, d, s, close)) != 0)
            return rc;
        if (close + 1 < e) {
            if (t[close + 1] != ':')
                return odbox_fail(c->err, ODBOX_EINVAL,
                                  "DSN: unexpected character %s after ']' in host",
                                  odbox_dsn_echo(c, close + 1, 1, &b));
            has_port = 1;
            pstart = close + 2;
        }
    } else {
        size_t colon = find_char(t, s, e, ':');
        if (colon < e && find_char(t, colon + 1, e, ':') < e)
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: more than one ':' after the host (an IPv6 address goes in "
                              "brackets, e.g. [::1]:5432)");
        if ((rc = check_chars(c, s, colon - s, CH_HOST, "host", 0)) != 0)
            return rc;
        if (colon > s && (rc = decode(c, s, colon - s, "host", 0, &d->host)) != 0)
            return rc;
        if (colon < e) {
            has_port = 1;
            pstart = colon + 1;
        }
    }
    if (!d->host && (kind == K_NET || has_port))
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: missing host in the %s URL", d->scheme);
    if (!has_port)
        return 0;
    if (pstart == e)
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty port after ':'");
    long v = 0;
    for (size_t i = pstart; i < e; i++) {
        if (!is_digit((unsigned char)t[i])) {
            int at_later = find_char(t, e, c->n, '@') < c->n;
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: port %s is not a number%s",
                              odbox_dsn_echo(c, pstart, e - pstart, &b),
                              at_later ? " (if the URL holds a password, percent-encode any "
                                         "'/', '?', '#' or '@' in it)"
                                       : "");
        }
        if (v <= 65535)
            v = v * 10 + (t[i] - '0');
    }
    if (v < 1 || v > 65535)
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: port %s is out of range 1..65535",
                          odbox_dsn_echo(c, pstart, e - pstart, &b));
    d->port = (int)v;
    return 0;
}

static int add_option(ctx *c, odbox_dsn *d, char *key, char *value)
{
    odbox_dsn_option *o = realloc(d->options, (d->noptions + 1) * sizeof *o);
    if (!o)
        return odbox_dsn_oom(c);
    d->options = o;
    o[d->noptions].key = key;
    o[d->noptions].value = value;
    d->noptions++;
    return 0;
}

/* The query t[s, e) (after the '?'). */
static int parse_query(ctx *c, odbox_dsn *d, size_t s, size_t e)
{
    const char *t = c->t;
    size_t idx = 0, i = s;
    echobuf b;
    char what[128];
    int rc;

    if (s == e)
        return 0;
    for (;;) {
        idx++;
        size_t se = find_char(t, i, e, '&');
        if (se == i)
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: empty query parameter #%zu (stray '&')", idx);
        size_t eq = find_char(t, i, se, '=');
        if (eq == se)
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: query parameter #%zu has no '=' (expected key=value)", idx);
        if (eq == i)
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty name in query parameter #%zu",
                              idx);
        snprintf(what, sizeof what, "name of query parameter #%zu", idx);
        if ((rc = check_chars(c, i, eq - i, CH_QUERY, what, 0)) != 0)
            return rc;
        char *key, *value;
        if ((rc = decode(c, i, eq - i, what, 0, &key)) != 0)
            return rc;
        if (!valid_key(key, strlen(key))) {
            free(key);
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: invalid name in query parameter #%zu (allowed: letters, "
                              "digits, '_', '.', '-', inner spaces)", idx);
        }
        int secret = is_secret_key(key, strlen(key));
        if (secret)
            odbox_dsn_spans_add(c->secrets, eq + 1, se - eq - 1);
        else
            odbox_dsn_find_userinfo(c->secrets, t, eq + 1, se, 0);
        snprintf(what, sizeof what, "value of query parameter %s", odbox_dsn_echo(c, i, eq - i, &b));
        rc = check_chars(c, eq + 1, se - eq - 1, CH_QUERY, what, secret);
        if (rc == 0)
            rc = decode(c, eq + 1, se - eq - 1, what, secret, &value);
        if (rc != 0) {
            free(key);
            return rc;
        }
        int is_dialect = odbox_strcaseeq(key, "dialect");
        int is_driver = odbox_strcaseeq(key, "driver");
        int is_eventlog = odbox_strcaseeq(key, "eventlog");
        char **notify_slot = odbox_strcaseeq(key, "notify")               ? &d->notify
                             : odbox_strcaseeq(key, "notify_interval_ms") ? &d->notify_interval_ms
                                                                          : NULL;
        int dup = (is_dialect && d->dialect) || (is_driver && d->driver) || (is_eventlog && d->eventlog) ||
                  (notify_slot && *notify_slot);
        for (size_t k = 0; k < d->noptions && !dup; k++)
            dup = odbox_strcaseeq(d->options[k].key, key);
        if (dup || ((is_dialect || is_driver || is_eventlog) && !value[0])) {
            free(key);
            odbox_free_secret(value);
            if (dup)
                return odbox_fail(c->err, ODBOX_EINVAL, "DSN: duplicate query parameter %s",
                                  odbox_dsn_echo(c, i, eq - i, &b));
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty %s= value in the query",
                              is_dialect ? "dialect" : is_driver ? "driver" : "eventlog");
        }
        if ((is_eventlog && (rc = odbox_dsn_check_eventlog(c, eq + 1, se - eq - 1, value)) != 0) ||
            (notify_slot &&
             (rc = odbox_dsn_check_notify(c, notify_slot == &d->notify_interval_ms, eq + 1, se - eq - 1, value)) != 0)) {
            free(key);
            free(value);
            return rc;
        }
        if (is_dialect) {
            free(key);
            d->dialect = value;
        } else if (is_driver) {
            free(key);
            d->driver = value;
        } else if (is_eventlog) {
            free(key);
            d->eventlog = value;
        } else if (notify_slot) {
            free(key);
            *notify_slot = value;
        } else if ((rc = add_option(c, d, key, value)) != 0) {
            free(key);
            odbox_free_secret(value);
            return rc;
        }
        if (se == e)
            return 0;
        i = se + 1;
    }
}

/* Database (or sqlite path) t[s, q) and the query after q. */
static int parse_path_query(ctx *c, odbox_dsn *d, size_t s, size_t ps, int kind)
{
    const char *t = c->t;
    size_t q = find_char(t, s, c->n, '?');
    int rc;
    /* "x:///user:pw@host/db" (an unknown scheme, so no host needed) is a
     * valid URL whose path looks like userinfo: hide it when redacting */
    odbox_dsn_find_userinfo(c->secrets, t, ps, q, 0);
    if (ps < q) {
        const char *what = kind == K_SQLITE ? "database file path" : "database name";
        if ((rc = check_chars(c, ps, q - ps, kind == K_NET ? CH_PATH : CH_PATH_SLASH, what, 0)))
            return rc;
        if ((rc = decode(c, ps, q - ps, what, 0, &d->database)) != 0)
            return rc;
    }
    if (kind == K_SQLITE && (!d->database || strcmp(d->database, "/") == 0))
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: missing database file path (e.g. sqlite:///var/lib/app.db, "
                          "sqlite:app.db or sqlite::memory:)");
    if (q < c->n)
        return parse_query(c, d, q + 1, c->n);
    return 0;
}

static int scheme_kind(const char *scheme)
{
    if (!strcmp(scheme, "postgresql") || !strcmp(scheme, "postgres") ||
        !strcmp(scheme, "mysql") || !strcmp(scheme, "mariadb"))
        return K_NET;
    if (!strcmp(scheme, "sqlite"))
        return K_SQLITE;
    return K_OTHER;
}

static int set_scheme(ctx *c, odbox_dsn *d, size_t sl)
{
    d->scheme = odbox_strndup(c->t, sl);
    if (!d->scheme)
        return odbox_dsn_oom(c);
    for (char *p = d->scheme; *p; p++)
        *p = to_lower(*p);
    return 0;
}

/* t = scheme "://" ... with the scheme sl characters long. */
static int parse_url(ctx *c, odbox_dsn *d, size_t sl)
{
    const char *t = c->t;
    size_t n = c->n, p = sl + 3;
    int rc;
    if ((rc = set_scheme(c, d, sl)) != 0)
        return rc;
    int kind = scheme_kind(d->scheme);
    if (find_char(t, 0, n, '#') < n)
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: '#' is not allowed in a URL (percent-encode it as %%23)");
    size_t aend = find_any(t, p, n, "/?");
    size_t at = aend;
    for (size_t j = aend; j > p; j--)
        if (t[j - 1] == '@') {
            at = j - 1;
            break;
        }
    /* sqlite://rel/path.db, sqlite://./rel.db: what stands where a host
     * would is the first segment of a relative path (localhost, a user or
     * a port keep their URL meaning below) */
    if (kind == K_SQLITE && aend > p && at == aend && find_char(t, p, aend, ':') == aend &&
        !ci_eqn(t + p, aend - p, "localhost"))
        return parse_path_query(c, d, p, p, kind);
    size_t hs = p;
    if (at < aend) {
        if (kind == K_SQLITE) {
            size_t colon = find_char(t, p, at, ':');
            if (colon < at)
                odbox_dsn_spans_add(c->secrets, colon + 1, at - colon - 1);
            return odbox_fail(c->err, ODBOX_EINVAL,
                              "DSN: a sqlite URL takes no user name or password");
        }
        if ((rc = parse_userinfo(c, d, p, at)) != 0)
            return rc;
        hs = at + 1;
    }
    if ((rc = parse_hostport(c, d, hs, aend, kind)) != 0)
        return rc;
    /* sqlite keeps the leading '/': the path is absolute */
    return parse_path_query(c, d, aend, kind == K_SQLITE ? aend : aend + 1, kind);
}

/* sqlite:path[?query] without "//". */
static int parse_sqlite_opaque(ctx *c, odbox_dsn *d, size_t sl)
{
    int rc;
    if ((rc = set_scheme(c, d, sl)) != 0)
        return rc;
    if (find_char(c->t, 0, c->n, '#') < c->n)
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: '#' is not allowed in a URL (percent-encode it as %%23)");
    return parse_path_query(c, d, sl + 1, sl + 1, K_SQLITE);
}

/* ---- entry points ------------------------------------------------------------ */

static size_t scheme_len(const char *t, size_t n)
{
    if (n == 0 || !is_alpha((unsigned char)t[0]))
        return 0;
    size_t i = 1;
    while (i < n && (is_alpha((unsigned char)t[i]) || is_digit((unsigned char)t[i]) ||
                     t[i] == '+' || t[i] == '-' || t[i] == '.'))
        i++;
    return i;
}

int odbox_dsn_parse_spans(const char *text, odbox_dsn **out, odbox_error *err, spanlist *secrets)
{
    odbox_error_clear(err);
    if (out)
        *out = NULL;
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "DSN: no place to store the result (out is NULL)");
    if (!text)
        return odbox_fail(err, ODBOX_EINVAL, "DSN: no DSN given (NULL)");
    size_t n = 0;
    while (n <= DSN_MAX_LEN && text[n])
        n++;
    if (n == 0)
        return odbox_fail(err, ODBOX_EINVAL, "DSN: empty string");
    if (n > DSN_MAX_LEN)
        return odbox_fail(err, ODBOX_EINVAL, "DSN: longer than %d characters", DSN_MAX_LEN);
    int blank = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch < 0x20 || ch == 0x7f)
            return odbox_fail(err, ODBOX_EINVAL, "DSN: control character 0x%02x at offset %zu",
                              ch, i);
        if (ch != ' ')
            blank = 0;
    }
    if (blank)
        return odbox_fail(err, ODBOX_EINVAL, "DSN: only spaces");

    ctx c = {.t = text, .n = n, .err = err, .secrets = secrets};
    odbox_dsn_find_secrets(&c.heur, text, n, 0);
    odbox_dsn *d = calloc(1, sizeof *d);
    int rc;
    if (!d) {
        rc = odbox_dsn_oom(&c);
    } else {
        size_t sl = scheme_len(text, n);
        if (sl > 0 && sl + 2 < n && text[sl] == ':' && text[sl + 1] == '/' &&
            text[sl + 2] == '/') {
            rc = parse_url(&c, d, sl);
        } else if (sl > 0 && sl < n && text[sl] == ':' && ci_eqn(text, sl, "sqlite")) {
            rc = parse_sqlite_opaque(&c, d, sl);
        } else if (sl > 0 && sl < n && text[sl] == ':' &&
                   (ci_eqn(text, sl, "postgresql") || ci_eqn(text, sl, "postgres") ||
                    ci_eqn(text, sl, "mysql") || ci_eqn(text, sl, "mariadb"))) {
            rc = odbox_fail(err, ODBOX_EINVAL, "DSN: expected '//' after '%.*s:'", (int)sl,
                            text);
        } else if (strchr(text, '=')) {
            rc = odbox_dsn_parse_raw(&c, d);
        } else {
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "DSN: neither a URL (scheme://host/database) nor an ODBC "
                            "connection string (KEY=value;...)");
        }
    }
    if (rc == 0 && secrets->oom)
        rc = odbox_dsn_oom(&c);
    odbox_dsn_spans_reset(&c.heur);
    if (rc != 0) {
        odbox_dsn_free(&d);
        return rc;
    }
    *out = d;
    return 0;
}

int odbox_dsn_parse(const char *text, odbox_dsn **out, odbox_error *err)
{
    spanlist secrets = {0};
    int rc = odbox_dsn_parse_spans(text, out, err, &secrets);
    odbox_dsn_spans_reset(&secrets);
    return rc;
}

void odbox_dsn_free(odbox_dsn **dsn)
{
    if (!dsn || !*dsn)
        return;
    odbox_dsn *d = *dsn;
    free(d->scheme);
    free(d->user);
    odbox_free_secret(d->password);
    free(d->host);
    free(d->database);
    free(d->driver);
    free(d->dialect);
    free(d->eventlog);
    free(d->notify);
    free(d->notify_interval_ms);
    odbox_free_secret(d->raw); /* may hold PWD= */
    for (size_t i = 0; i < d->noptions; i++) {
        free(d->options[i].key);
        odbox_free_secret(d->options[i].value);
    }
    free(d->options);
    free(d);
    *dsn = NULL;
}

/* ---- redaction: the parser's exact ranges, else the best-effort search -------- */

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

char *odbox_dsn_redact(const char *text)
{
    if (!text)
        return NULL;
    size_t n = strlen(text);
    spanlist sl = {0};
    odbox_dsn *d = NULL;
    int rc = odbox_dsn_parse_spans(text, &d, NULL, &sl);
    if (rc == 0) /* "password=" where the parser saw none, e.g. in a path */
        odbox_dsn_find_secret_values(&sl, text, n);
    odbox_dsn_free(&d);
    if (rc != 0) {
        /* Unparseable (or out of memory): hide everything that could be a
         * password, generously. */
        odbox_dsn_spans_reset(&sl);
        odbox_dsn_find_secrets(&sl, text, n, 1);
    }
    if (sl.oom) {
        odbox_dsn_spans_reset(&sl);
        return NULL;
    }
    if (sl.n > 1)
        qsort(sl.v, sl.n, sizeof *sl.v, span_cmp);

    odbox_buf b = {0};
    size_t pos = 0;
    for (size_t i = 0; i < sl.n;) {
        size_t s = sl.v[i].off, e = s + sl.v[i].len;
        /* merge overlapping and touching spans (this also absorbs an empty
         * span at the end of the previous one) */
        for (i++; i < sl.n && sl.v[i].off <= e; i++)
            if (sl.v[i].off + sl.v[i].len > e)
                e = sl.v[i].off + sl.v[i].len;
        odbox_buf_appendn(&b, text + pos, s - pos);
        odbox_buf_append(&b, "***");
        pos = e;
    }
    odbox_buf_append(&b, text + pos);
    odbox_dsn_spans_reset(&sl);
    return odbox_buf_take(&b);
}
