/* odbox — DSN parsing's internals, shared by dsn.c (URLs, the entry
 * points, redaction), dsn_raw.c (raw ODBC connection strings) and
 * dsn_secrets.c (finding passwords, messages that withhold them, shared
 * value checks). One way: dsn.c uses dsn_raw.c, both use dsn_secrets.c.
 * The grammar is at the top of dsn.c. */
#ifndef ODBOX_DSN_INTERNAL_H
#define ODBOX_DSN_INTERNAL_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "odbox/dsn.h"
#include "odbox/error.h"

#define DSN_MAX_LEN 4096
#define ECHO_MAX 48
#define WITHHELD "(withheld: may contain the password)"

/* Ranges of the input that hold (or may hold) a password. */
typedef struct span {
    size_t off, len;
} span;

typedef struct spanlist {
    span *v;
    size_t n, cap;
    int oom;
} spanlist;

void odbox_dsn_spans_add(spanlist *sl, size_t off, size_t len);
void odbox_dsn_spans_reset(spanlist *sl);

typedef struct ctx {
    const char *t;
    size_t n;
    odbox_error *err;
    spanlist heur;        /* what the best-effort redactor would hide */
    spanlist *secrets;    /* exact password ranges found while parsing */
    const char *password; /* the decoded password once known */
} ctx;

typedef struct echobuf {
    char s[ECHO_MAX + 16];
} echobuf;

/* Quotes t[off, off+len) for a message, or withholds it when it could
 * contain the password (dsn_secrets.c, as are the three below). */
const char *odbox_dsn_echo(const ctx *c, size_t off, size_t len, echobuf *b);
int odbox_dsn_oom(ctx *c);
int odbox_dsn_check_eventlog(ctx *c, size_t off, size_t len, const char *value);
int odbox_dsn_check_notify(ctx *c, int interval, size_t off, size_t len, const char *value);

/* Parses text; the exact password ranges found go to *secrets (which the
 * caller resets). */
int odbox_dsn_parse_spans(const char *text, odbox_dsn **out, odbox_error *err, spanlist *secrets);
/* The raw ODBC connection string c->t (dsn_raw.c). */
int odbox_dsn_parse_raw(ctx *c, odbox_dsn *d);

/* Best-effort secret finding on any text (dsn_secrets.c). */
void odbox_dsn_find_userinfo(spanlist *sl, const char *t, size_t lo, size_t hi, int port_after_at);
void odbox_dsn_find_secret_values(spanlist *sl, const char *t, size_t n);
void odbox_dsn_find_secrets(spanlist *sl, const char *t, size_t n, int port_after_at);

/* ---- small text helpers ---------------------------------------------------- */

static inline int is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static inline int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static inline char to_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static inline int is_unreserved(unsigned char c)
{
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* Case-insensitive: s[0, n) equals word. */
static inline int ci_eqn(const char *s, size_t n, const char *word)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!word[i] || to_lower(s[i]) != to_lower(word[i]))
            return 0;
    return word[i] == '\0';
}

static inline int ci_eqnn(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn)
        return 0;
    for (size_t i = 0; i < an; i++)
        if (to_lower(a[i]) != to_lower(b[i]))
            return 0;
    return 1;
}

/* Index of the first c in t[lo, hi), or hi. */
static inline size_t find_char(const char *t, size_t lo, size_t hi, char c)
{
    for (size_t i = lo; i < hi; i++)
        if (t[i] == c)
            return i;
    return hi;
}

/* Index of the first character of set in t[lo, hi), or hi. */
static inline size_t find_any(const char *t, size_t lo, size_t hi, const char *set)
{
    for (size_t i = lo; i < hi; i++)
        if (strchr(set, t[i]))
            return i;
    return hi;
}

static inline int mem_contains(const char *hay, size_t hn, const char *needle, size_t nn)
{
    if (nn == 0 || nn > hn)
        return 0;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(hay + i, needle, nn) == 0)
            return 1;
    return 0;
}

/* Zeroes and frees a buffer of known size (it may not be terminated yet). */
static inline void wipe_free(char *s, size_t n)
{
    if (!s)
        return;
    volatile char *p = s;
    for (size_t i = 0; i < n; i++)
        p[i] = 0;
    free(s);
}

/* Keys of query options and raw entries: [A-Za-z0-9_ .-], not empty, no
 * leading or trailing space. */
static inline int valid_key(const char *s, size_t n)
{
    if (n == 0 || s[0] == ' ' || s[n - 1] == ' ')
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_alpha(c) && !is_digit(c) && c != '_' && c != ' ' && c != '.' && c != '-')
            return 0;
    }
    return 1;
}

static inline int ends_with_ci(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    return n >= w && ci_eqn(s + n - w, w, word);
}

/* Keys whose value is a password: they end in pwd, password or passwd
 * (compared without regard to case), so "sslpassword" counts too. */
static inline int is_secret_key(const char *s, size_t n)
{
    return ends_with_ci(s, n, "pwd") || ends_with_ci(s, n, "password") ||
           ends_with_ci(s, n, "passwd");
}

#endif
