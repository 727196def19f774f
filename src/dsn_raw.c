/* odbox — raw ODBC connection strings (KEY=value;...) as DSNs: the
 * grammar is at the top of dsn.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dsn_internal.h"
#include "internal.h"

/* Copies t[s, e), turning "}}" into "}" when braced. */
static char *unbrace(const char *t, size_t s, size_t e, int braced)
{
    char *v = malloc(e - s + 1);
    if (!v)
        return NULL;
    size_t k = 0;
    for (size_t i = s; i < e; i++) {
        v[k++] = t[i];
        if (braced && t[i] == '}' && i + 1 < e && t[i + 1] == '}')
            i++;
    }
    v[k] = '\0';
    return v;
}

/* One KEY=value entry of the string, as scanned. */
typedef struct entry {
    size_t idx;    /* 1-based, for messages */
    size_t k, ke;  /* the key: t[k, ke) */
    size_t vs, ve; /* the value: t[vs, ve), without its braces */
    size_t segend; /* where the entry ends: its ';', or n */
    int braced, secret;
} entry;

/* The key of the entry starting at t[k] (its leading spaces skipped): up
 * to its '=', which must be there, trailing spaces trimmed, valid; the
 * '=' at t[*eq_out]. */
static int scan_key(ctx *c, size_t k, entry *en, size_t *eq_out)
{
    const char *t = c->t;
    size_t n = c->n, idx = en->idx;
    if (k == n || t[k] == ';')
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty entry #%zu in the ODBC connection string", idx);
    size_t eq = k;
    while (eq < n && t[eq] != '=' && t[eq] != ';')
        eq++;
    if (eq == n || t[eq] == ';')
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: entry #%zu of the ODBC connection string has no '=' "
                          "(expected KEY=value)", idx);
    size_t ke = eq;
    while (ke > k && t[ke - 1] == ' ')
        ke--;
    if (ke == k)
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty key in entry #%zu of the ODBC connection string", idx);
    if (!valid_key(t + k, ke - k)) {
        /* not quoted: an invalid key is arbitrary text */
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: invalid key in entry #%zu of the ODBC connection string "
                          "(allowed: letters, digits, '_', '.', '-', inner spaces)", idx);
    }
    en->k = k;
    en->ke = ke;
    en->secret = is_secret_key(t + k, ke - k);
    *eq_out = eq;
    return 0;
}

/* A value in braces, its '{' at t[v]: "}}" stands for '}', and only
 * spaces may follow the closing '}' before the ';'. A secret's range is
 * recorded, braces included, even when the value is refused. */
static int scan_braced_value(ctx *c, size_t v, entry *en)
{
    const char *t = c->t;
    size_t n = c->n, j = v + 1;
    echobuf b;
    for (;;) {
        if (j >= n) {
            if (en->secret)
                odbox_dsn_spans_add(c->secrets, v, n - v);
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: unterminated '{' in the value of %s",
                              odbox_dsn_echo(c, en->k, en->ke - en->k, &b));
        }
        if (t[j] == '}') {
            if (j + 1 < n && t[j + 1] == '}') {
                j += 2;
                continue;
            }
            break;
        }
        j++;
    }
    en->braced = 1;
    en->vs = v + 1;
    en->ve = j;
    if (en->secret)
        odbox_dsn_spans_add(c->secrets, v, j + 1 - v);
    size_t a = j + 1;
    while (a < n && t[a] == ' ')
        a++;
    if (a < n && t[a] != ';')
        return odbox_fail(c->err, ODBOX_EINVAL, "DSN: unexpected text after '}' in the value of %s",
                          odbox_dsn_echo(c, en->k, en->ke - en->k, &b));
    en->segend = a;
    return 0;
}

/* The value after the '=' at t[eq]: braced or plain (up to the next ';',
 * trailing spaces trimmed); a secret key's value is recorded as secret,
 * another value's user:password@ part too. */
static int scan_value(ctx *c, size_t eq, entry *en)
{
    const char *t = c->t;
    size_t n = c->n, v = eq + 1;
    while (v < n && t[v] == ' ')
        v++;
    en->braced = 0;
    if (v < n && t[v] == '{') {
        int rc = scan_braced_value(c, v, en);
        if (rc)
            return rc;
    } else {
        en->segend = find_char(t, v, n, ';');
        en->vs = v;
        en->ve = en->segend;
        while (en->ve > en->vs && t[en->ve - 1] == ' ')
            en->ve--;
        if (en->secret)
            odbox_dsn_spans_add(c->secrets, en->vs, en->ve - en->vs);
    }
    if (!en->secret)
        odbox_dsn_find_userinfo(c->secrets, t, en->vs, en->ve, 0);
    return 0;
}

/* Refuses a key already in keys (case-insensitive). */
static int check_duplicate(ctx *c, const spanlist *keys, const entry *en)
{
    const char *t = c->t;
    echobuf b;
    for (size_t j = 0; j < keys->n; j++)
        if (ci_eqnn(t + keys->v[j].off, keys->v[j].len, t + en->k, en->ke - en->k))
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: duplicate key %s in the ODBC connection string",
                              odbox_dsn_echo(c, en->k, en->ke - en->k, &b));
    return 0;
}

/* What the entry (starting at t[start]) sets in d: odbox's own keys
 * (dialect=, eventlog=, notify=, notify_interval_ms=) are taken out of
 * the string (*removed set); the others are kept, the first user and
 * password keys' values noted. */
static int take_entry(ctx *c, odbox_dsn *d, const entry *en, size_t start, spanlist *kept, int *removed)
{
    const char *t = c->t, *key = t + en->k;
    size_t klen = en->ke - en->k, vs = en->vs, ve = en->ve;
    char **slot = NULL;
    int is_eventlog = ci_eqn(key, klen, "eventlog");
    char **notify_slot = ci_eqn(key, klen, "notify")               ? &d->notify
                         : ci_eqn(key, klen, "notify_interval_ms") ? &d->notify_interval_ms
                                                                   : NULL;
    if (notify_slot) {
        slot = notify_slot;
        *removed = 1;
    } else if (ci_eqn(key, klen, "dialect") || is_eventlog) {
        if (ve == vs)
            return odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty %s= value in the ODBC connection string",
                              is_eventlog ? "eventlog" : "dialect");
        slot = is_eventlog ? &d->eventlog : &d->dialect;
        *removed = 1;
    } else {
        odbox_dsn_spans_add(kept, start, en->segend - start);
        if (!d->user && (ci_eqn(key, klen, "uid") || ci_eqn(key, klen, "user") || ci_eqn(key, klen, "username")))
            slot = &d->user;
        else if (!d->password &&
                 (ci_eqn(key, klen, "pwd") || ci_eqn(key, klen, "password") || ci_eqn(key, klen, "passwd")))
            slot = &d->password;
    }
    if (!slot)
        return 0;
    *slot = unbrace(t, vs, ve, en->braced);
    if (!*slot)
        return odbox_dsn_oom(c);
    if (slot == &d->password)
        c->password = d->password;
    if (slot == &d->eventlog)
        return odbox_dsn_check_eventlog(c, vs, ve - vs, d->eventlog);
    if (slot == notify_slot)
        return odbox_dsn_check_notify(c, slot == &d->notify_interval_ms, vs, ve - vs, *slot);
    return 0;
}

/* d->raw: the string as given, or, when odbox's own keys were taken out,
 * the kept entries joined by ';' (a trailing ';' kept). */
static int rebuild_raw(ctx *c, odbox_dsn *d, const spanlist *kept, int removed, int trailing)
{
    const char *t = c->t;
    if (!removed) {
        d->raw = odbox_strdup(t);
    } else if (kept->n == 0) {
        return odbox_fail(c->err, ODBOX_EINVAL,
                          "DSN: the ODBC connection string has no entries besides dialect=, eventlog= "
                          "and notify=");
    } else {
        odbox_buf buf = {0};
        for (size_t j = 0; j < kept->n; j++) {
            if (j)
                odbox_buf_append(&buf, ";");
            odbox_buf_appendn(&buf, t + kept->v[j].off, kept->v[j].len);
        }
        if (trailing)
            odbox_buf_append(&buf, ";");
        if (buf.oom && buf.data) /* odbox_buf_take frees it unwiped otherwise */
            memset(buf.data, 0, buf.cap);
        d->raw = odbox_buf_take(&buf);
    }
    return d->raw ? 0 : odbox_dsn_oom(c);
}

int odbox_dsn_parse_raw(ctx *c, odbox_dsn *d)
{
    const char *t = c->t;
    size_t n = c->n, i = 0;
    spanlist keys = {0}, kept = {0};
    int removed = 0, trailing = 0, rc = 0;
    entry en = {0};

    for (;;) {
        size_t k = i, eq = 0;
        while (k < n && t[k] == ' ')
            k++;
        if (k == n && i > 0) {
            trailing = 1;
            break;
        }
        en.idx++;
        if ((rc = scan_key(c, k, &en, &eq)) != 0 || (rc = scan_value(c, eq, &en)) != 0 ||
            (rc = check_duplicate(c, &keys, &en)) != 0)
            goto done;
        odbox_dsn_spans_add(&keys, en.k, en.ke - en.k);
        if ((rc = take_entry(c, d, &en, i, &kept, &removed)) != 0)
            goto done;
        if (keys.oom || kept.oom) {
            rc = odbox_dsn_oom(c);
            goto done;
        }
        if (en.segend == n)
            break;
        i = en.segend + 1;
    }
    rc = rebuild_raw(c, d, &kept, removed, trailing);
done:
    odbox_dsn_spans_reset(&keys);
    odbox_dsn_spans_reset(&kept);
    return rc;
}
