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

int odbox_dsn_parse_raw(ctx *c, odbox_dsn *d)
{
    const char *t = c->t;
    size_t n = c->n, i = 0, idx = 0;
    spanlist keys = {0}, kept = {0};
    int removed = 0, trailing = 0, rc = 0;
    echobuf b;

    for (;;) {
        size_t k = i;
        while (k < n && t[k] == ' ')
            k++;
        if (k == n && i > 0) {
            trailing = 1;
            break;
        }
        idx++;
        if (k == n || t[k] == ';') {
            rc = odbox_fail(c->err, ODBOX_EINVAL,
                            "DSN: empty entry #%zu in the ODBC connection string", idx);
            goto done;
        }
        size_t eq = k;
        while (eq < n && t[eq] != '=' && t[eq] != ';')
            eq++;
        if (eq == n || t[eq] == ';') {
            rc = odbox_fail(c->err, ODBOX_EINVAL,
                            "DSN: entry #%zu of the ODBC connection string has no '=' "
                            "(expected KEY=value)", idx);
            goto done;
        }
        size_t ke = eq;
        while (ke > k && t[ke - 1] == ' ')
            ke--;
        if (ke == k) {
            rc = odbox_fail(c->err, ODBOX_EINVAL,
                            "DSN: empty key in entry #%zu of the ODBC connection string", idx);
            goto done;
        }
        if (!valid_key(t + k, ke - k)) {
            /* not quoted: an invalid key is arbitrary text */
            rc = odbox_fail(c->err, ODBOX_EINVAL,
                            "DSN: invalid key in entry #%zu of the ODBC connection string "
                            "(allowed: letters, digits, '_', '.', '-', inner spaces)", idx);
            goto done;
        }
        int secret = is_secret_key(t + k, ke - k);
        size_t v = eq + 1;
        while (v < n && t[v] == ' ')
            v++;
        size_t vs, ve, segend;
        int braced = 0;
        if (v < n && t[v] == '{') {
            size_t j = v + 1;
            for (;;) {
                if (j >= n) {
                    if (secret)
                        odbox_dsn_spans_add(c->secrets, v, n - v);
                    rc = odbox_fail(c->err, ODBOX_EINVAL,
                                    "DSN: unterminated '{' in the value of %s",
                                    odbox_dsn_echo(c, k, ke - k, &b));
                    goto done;
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
            braced = 1;
            vs = v + 1;
            ve = j;
            if (secret)
                odbox_dsn_spans_add(c->secrets, v, j + 1 - v);
            size_t a = j + 1;
            while (a < n && t[a] == ' ')
                a++;
            if (a < n && t[a] != ';') {
                rc = odbox_fail(c->err, ODBOX_EINVAL,
                                "DSN: unexpected text after '}' in the value of %s",
                                odbox_dsn_echo(c, k, ke - k, &b));
                goto done;
            }
            segend = a;
        } else {
            segend = find_char(t, v, n, ';');
            vs = v;
            ve = segend;
            while (ve > vs && t[ve - 1] == ' ')
                ve--;
            if (secret)
                odbox_dsn_spans_add(c->secrets, vs, ve - vs);
        }
        if (!secret)
            odbox_dsn_find_userinfo(c->secrets, t, vs, ve, 0);
        for (size_t j = 0; j < keys.n; j++)
            if (ci_eqnn(t + keys.v[j].off, keys.v[j].len, t + k, ke - k)) {
                rc = odbox_fail(c->err, ODBOX_EINVAL,
                                "DSN: duplicate key %s in the ODBC connection string",
                                odbox_dsn_echo(c, k, ke - k, &b));
                goto done;
            }
        odbox_dsn_spans_add(&keys, k, ke - k);
        char **slot = NULL;
        int is_eventlog = ci_eqn(t + k, ke - k, "eventlog");
        char **notify_slot = ci_eqn(t + k, ke - k, "notify")               ? &d->notify
                             : ci_eqn(t + k, ke - k, "notify_interval_ms") ? &d->notify_interval_ms
                                                                           : NULL;
        if (notify_slot) {
            slot = notify_slot;
            removed = 1;
        } else if (ci_eqn(t + k, ke - k, "dialect") || is_eventlog) {
            if (ve == vs) {
                rc = odbox_fail(c->err, ODBOX_EINVAL, "DSN: empty %s= value in the ODBC connection string",
                                is_eventlog ? "eventlog" : "dialect");
                goto done;
            }
            slot = is_eventlog ? &d->eventlog : &d->dialect;
            removed = 1;
        } else {
            odbox_dsn_spans_add(&kept, i, segend - i);
            if (!d->user && (ci_eqn(t + k, ke - k, "uid") || ci_eqn(t + k, ke - k, "user") ||
                             ci_eqn(t + k, ke - k, "username")))
                slot = &d->user;
            else if (!d->password &&
                     (ci_eqn(t + k, ke - k, "pwd") || ci_eqn(t + k, ke - k, "password") ||
                      ci_eqn(t + k, ke - k, "passwd")))
                slot = &d->password;
        }
        if (slot) {
            *slot = unbrace(t, vs, ve, braced);
            if (!*slot) {
                rc = odbox_dsn_oom(c);
                goto done;
            }
            if (slot == &d->password)
                c->password = d->password;
            if (slot == &d->eventlog && (rc = odbox_dsn_check_eventlog(c, vs, ve - vs, d->eventlog)) != 0)
                goto done;
            if (slot == notify_slot &&
                (rc = odbox_dsn_check_notify(c, slot == &d->notify_interval_ms, vs, ve - vs, *slot)) != 0)
                goto done;
        }
        if (keys.oom || kept.oom) {
            rc = odbox_dsn_oom(c);
            goto done;
        }
        if (segend == n)
            break;
        i = segend + 1;
    }

    if (!removed) {
        d->raw = odbox_strdup(t);
    } else if (kept.n == 0) {
        rc = odbox_fail(c->err, ODBOX_EINVAL,
                        "DSN: the ODBC connection string has no entries besides dialect=, eventlog= "
                        "and notify=");
        goto done;
    } else {
        odbox_buf buf = {0};
        for (size_t j = 0; j < kept.n; j++) {
            if (j)
                odbox_buf_append(&buf, ";");
            odbox_buf_appendn(&buf, t + kept.v[j].off, kept.v[j].len);
        }
        if (trailing)
            odbox_buf_append(&buf, ";");
        if (buf.oom && buf.data) /* odbox_buf_take frees it unwiped otherwise */
            memset(buf.data, 0, buf.cap);
        d->raw = odbox_buf_take(&buf);
    }
    if (!d->raw)
        rc = odbox_dsn_oom(c);
done:
    odbox_dsn_spans_reset(&keys);
    odbox_dsn_spans_reset(&kept);
    return rc;
}
