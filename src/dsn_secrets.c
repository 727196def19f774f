/* odbox — passwords in DSNs: the exact ranges the parser found, a
 * best-effort search that works on any text (also what does not parse),
 * and the parsers' messages, which withhold whatever may hold a password,
 * with the value checks the URL and the raw parser share. The parsers
 * (dsn.c, dsn_raw.c) and odbox_dsn_redact (dsn.c) use these; nothing here
 * calls them back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "odbox/registry.h"
#include "dsn_internal.h"
#include "internal.h"

void odbox_dsn_spans_add(spanlist *sl, size_t off, size_t len)
{
    if (sl->oom)
        return;
    if (sl->n == sl->cap) {
        size_t cap = sl->cap ? sl->cap * 2 : 8;
        span *v = realloc(sl->v, cap * sizeof *v);
        if (!v) {
            sl->oom = 1;
            return;
        }
        sl->v = v;
        sl->cap = cap;
    }
    sl->v[sl->n].off = off;
    sl->v[sl->n].len = len;
    sl->n++;
}

void odbox_dsn_spans_reset(spanlist *sl)
{
    free(sl->v);
    memset(sl, 0, sizeof *sl);
}

/* A ":port" after the host starting at s that is not all digits: it may be
 * a password whose "@host" is missing or hidden behind an unencoded '/'. */
static void heur_port(spanlist *sl, const char *t, size_t s, size_t hi)
{
    if (s < hi && t[s] == '[') {
        size_t close = find_any(t, s, hi, "]/?#@");
        if (close < hi && t[close] == ']')
            s = close + 1;
    }
    size_t stop = find_any(t, s, hi, "/?#@");
    size_t colon = find_char(t, s, stop, ':');
    if (colon == stop)
        return;
    size_t e = find_any(t, colon + 1, hi, "/?#@");
    for (size_t k = colon + 1; k < e; k++)
        if (!is_digit((unsigned char)t[k])) {
            odbox_dsn_spans_add(sl, colon + 1, e - colon - 1);
            return;
        }
}

/* URL userinfo passwords inside t[lo, hi):
 *  - after each "//": the text between the first ':' and the last '@' of
 *    the range, or, without such an '@', a ":port" that is not a number;
 *  - before the last '@': from the first ':' of the run that ends there
 *    (runs are delimited by space ; / ? &) — catches "user:pw@" even when
 *    the "//" is mangled;
 *  - with port_after_at, also after the last '@': a ":port" that is not a
 *    number (for redaction only: a message may quote such a port, since
 *    it is checked against the decoded password anyway). */
void odbox_dsn_find_userinfo(spanlist *sl, const char *t, size_t lo, size_t hi, int port_after_at)
{
    size_t last_at = hi;
    for (size_t j = hi; j > lo; j--)
        if (t[j - 1] == '@') {
            last_at = j - 1;
            break;
        }
    size_t colon = lo; /* the first ':' at or after the last r (cached: r only grows) */
    for (size_t i = lo; i + 2 <= hi; i++) {
        if (t[i] != '/' || t[i + 1] != '/')
            continue;
        size_t r = i + 2;
        if (colon < r)
            colon = find_char(t, r, hi, ':');
        if (last_at < hi && last_at >= r && colon < last_at)
            odbox_dsn_spans_add(sl, colon + 1, last_at - colon - 1);
        else
            heur_port(sl, t, r, hi);
        i = r - 1;
    }
    if (last_at < hi) {
        size_t s = last_at;
        while (s > lo && !strchr(" ;/?&", t[s - 1]))
            s--;
        size_t c = find_char(t, s, last_at, ':');
        if (c < last_at)
            odbox_dsn_spans_add(sl, c + 1, last_at - c - 1);
        if (port_after_at)
            heur_port(sl, t, last_at + 1, hi);
    }
}

/* Values of keys that end in pwd, password or passwd, anywhere in t[0, n):
 * every '=' whose left side (back to a space, ; & ? = { or }) ends so, after
 * lenient percent-decoding. A braced value runs to its closing brace (or the
 * end), others to the next ';', or '&' when the key follows '?' or '&'. */
void odbox_dsn_find_secret_values(spanlist *sl, const char *t, size_t n)
{
    char sep = ';'; /* the last of ; & ? seen, '&' standing for both & and ? */
    for (size_t i = 0; i < n; i++) {
        if (t[i] == ';' || t[i] == '&' || t[i] == '?')
            sep = t[i] == ';' ? ';' : '&';
        if (t[i] != '=')
            continue;
        size_t ke = i;
        while (ke > 0 && t[ke - 1] == ' ')
            ke--;
        size_t ks = ke;
        while (ks > 0 && ke - ks < 64 && !strchr(";&?= {}", t[ks - 1]))
            ks--;
        char key[64];
        size_t kn = 0;
        for (size_t j = ks; j < ke && kn < sizeof key; j++) {
            if (t[j] == '%' && j + 2 < ke && odbox_hex_value((unsigned char)t[j + 1]) >= 0 &&
                odbox_hex_value((unsigned char)t[j + 2]) >= 0) {
                key[kn++] = (char)(odbox_hex_value((unsigned char)t[j + 1]) * 16 +
                                   odbox_hex_value((unsigned char)t[j + 2]));
                j += 2;
            } else {
                key[kn++] = t[j];
            }
        }
        if (!is_secret_key(key, kn))
            continue;
        size_t v = i + 1, e;
        while (v < n && t[v] == ' ')
            v++;
        if (v < n && t[v] == '{') {
            e = v + 1;
            while (e < n) {
                if (t[e] == '}') {
                    if (e + 1 < n && t[e + 1] == '}') {
                        e += 2;
                        continue;
                    }
                    e++;
                    break;
                }
                e++;
            }
        } else {
            e = find_char(t, v, n, sep);
            while (e > v && t[e - 1] == ' ')
                e--;
        }
        odbox_dsn_spans_add(sl, v, e - v);
        for (; i + 1 < e; i++) /* skip the value, still tracking separators */
            if (t[i + 1] == ';' || t[i + 1] == '&' || t[i + 1] == '?')
                sep = t[i + 1] == ';' ? ';' : '&';
    }
}

void odbox_dsn_find_secrets(spanlist *sl, const char *t, size_t n, int port_after_at)
{
    odbox_dsn_find_userinfo(sl, t, 0, n, port_after_at);
    odbox_dsn_find_secret_values(sl, t, n);
}

/* ---- the parsers' messages and shared checks ---------------------------------- */

static int touches(const spanlist *sl, const char *t, size_t off, size_t len)
{
    for (size_t i = 0; i < sl->n; i++) {
        const span *s = &sl->v[i];
        if (s->len == 0)
            continue;
        if (off < s->off + s->len && s->off < off + len)
            return 1;
        if (mem_contains(t + off, len, t + s->off, s->len))
            return 1;
    }
    return 0;
}

const char *odbox_dsn_echo(const ctx *c, size_t off, size_t len, echobuf *b)
{
    int hide = c->heur.oom || c->secrets->oom || touches(&c->heur, c->t, off, len) ||
               touches(c->secrets, c->t, off, len);
    if (!hide && c->password && c->password[0] &&
        mem_contains(c->t + off, len, c->password, strlen(c->password)))
        hide = 1;
    if (hide)
        snprintf(b->s, sizeof b->s, "%s", WITHHELD);
    else if (len > ECHO_MAX)
        snprintf(b->s, sizeof b->s, "'%.*s...'", ECHO_MAX, c->t + off);
    else
        snprintf(b->s, sizeof b->s, "'%.*s'", (int)len, c->t + off);
    return b->s;
}

int odbox_dsn_oom(ctx *c)
{
    return odbox_fail(c->err, ODBOX_ENOMEM, "DSN: out of memory");
}

/* An eventlog= value (t[off, off+len) as written) must be a name that may
 * reach SQL text. */
int odbox_dsn_check_eventlog(ctx *c, size_t off, size_t len, const char *value)
{
    if (odbox_name_is_valid(value))
        return 0;
    echobuf b;
    return odbox_fail(c->err, ODBOX_EINVAL,
                      "DSN: eventlog= %s is not a valid name ([a-z_][a-z0-9_]*, at most %d characters)",
                      odbox_dsn_echo(c, off, len, &b), ODBOX_NAME_MAX - 1);
}

/* A notify= value must be on or off, a notify_interval_ms= value a whole
 * number of milliseconds 1..ODBOX_NOTIFY_INTERVAL_MAX_MS. */
int odbox_dsn_check_notify(ctx *c, int interval, size_t off, size_t len, const char *value)
{
    echobuf b;
    if (!interval) {
        if (odbox_strcaseeq(value, "on") || odbox_strcaseeq(value, "off"))
            return 0;
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: notify= %s must be on or off", odbox_dsn_echo(c, off, len, &b));
    }
    long ms = 0;
    const char *p = value;
    for (; *p >= '0' && *p <= '9' && ms <= ODBOX_NOTIFY_INTERVAL_MAX_MS; p++)
        ms = ms * 10 + (*p - '0');
    if (p > value && !*p && ms >= 1 && ms <= ODBOX_NOTIFY_INTERVAL_MAX_MS)
        return 0;
    return odbox_fail(c->err, ODBOX_EINVAL, "DSN: notify_interval_ms= %s must be a whole number of milliseconds 1..%d",
                      odbox_dsn_echo(c, off, len, &b), ODBOX_NOTIFY_INTERVAL_MAX_MS);
}
