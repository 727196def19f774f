/* odbox — the subscriptions' list (see odbox/handlers.h):
 * odbox_subscriptions_list reads each shard's subscriptions with their
 * types, live processes and last error. Dialect-neutral but for the
 * dialect's fields it takes: interval_us_fmt and now_sql. */
#include <stdlib.h>
#include <string.h>
#include "delivery_internal.h"
#include "notifications_internal.h"
#include "registry_internal.h"

#define T_SUBS "subscriptions"
#define T_TYPES "subscription_types"
#define T_PROCS "subscription_processes"
#define DEFAULT_LIVE_MS 30000

int odbox_subs_strv_add(char ***v, size_t *n, const char *s)
{
    char **g = realloc(*v, (*n + 1) * sizeof *g);
    if (!g)
        return ODBOX_ENOMEM;
    *v = g;
    if (!(g[*n] = strdup(s)))
        return ODBOX_ENOMEM;
    (*n)++;
    return ODBOX_OK;
}

void odbox_subscriptions_free(odbox_subscription **p, size_t n)
{
    if (!p || !*p)
        return;
    for (size_t i = 0; i < n; i++) {
        odbox_subscription *s = &(*p)[i];
        free(s->name);
        free(s->former_names);
        for (size_t k = 0; k < s->ntypes; k++)
            free(s->types[k]);
        free(s->types);
        for (size_t k = 0; k < s->nprocesses; k++)
            free(s->processes[k]);
        free(s->processes);
        free(s->last_error);
    }
    free(*p);
    *p = NULL;
}

static odbox_subscription *find_sub(odbox_subscription *v, size_t from, size_t n, const char *name)
{
    for (size_t i = from; i < n; i++)
        if (!strcmp(v[i].name, name))
            return &v[i];
    return NULL;
}

/* name, x pairs of a two-column query into field (types or processes) of
 * the subscriptions [from, *n). */
static int read_pairs(odbox_conn *c, char *sql, int64_t live_us, odbox_subscription *v, size_t from, size_t n,
                      int procs, odbox_error *err)
{
    odbox_stmt *s = NULL;
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    free(sql);
    if (rc == ODBOX_OK && procs)
        rc = odbox_stmt_bind_int64(s, 1, live_us, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *name = NULL, *x = NULL;
        int n1 = 0, n2 = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &name, &n1, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &x, &n2, err)) != ODBOX_OK)
            break;
        odbox_subscription *sub = n1 || n2 ? NULL : find_sub(v, from, n, name);
        if (sub && odbox_subs_strv_add(procs ? &sub->processes : &sub->types,
                                       procs ? &sub->nprocesses : &sub->ntypes, x))
            rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

static int list_shard(const odbox_shard *sh, int64_t live_us, odbox_subscription **v, size_t *n, size_t *cap,
                      odbox_error *err)
{
    odbox_conn *c = NULL;
    char subs[ODBOX_NAME_MAX * 2 + 32], types[ODBOX_NAME_MAX * 2 + 32], procs[ODBOX_NAME_MAX * 2 + 32];
    int rc = odbox_ops_connect(sh, T_SUBS, &c, subs, sizeof subs, err);
    if (rc != ODBOX_OK)
        return rc;
    const odbox_dialect *dl = odbox_conn_dialect(c);
    const char *ev = odbox_shard_eventlog(sh);
    odbox_subs_table(c, ev, T_TYPES, types, sizeof types);
    odbox_subs_table(c, ev, T_PROCS, procs, sizeof procs);
    size_t from = *n;
    odbox_buf b = {0};
    odbox_buf_append(&b, "SELECT name, former_names, ");
    odbox_ops_ts_col(&b, dl, "created_date");
    odbox_buf_append(&b, ", ");
    odbox_ops_ts_col(&b, dl, "retired_date");
    odbox_buf_append(&b, ", last_error, ");
    odbox_ops_ts_col(&b, dl, "last_error_date");
    odbox_buf_cat(&b, " FROM ", subs, " ORDER BY name", (char *)NULL);
    odbox_stmt *s = NULL;
    rc = odbox_subs_run(c, odbox_buf_take(&b), NULL, 0, &s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 8;
            odbox_subscription *g = realloc(*v, nc * sizeof *g);
            if (!g) {
                rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
                break;
            }
            *v = g, *cap = nc;
        }
        odbox_subscription *e = &(*v)[*n];
        memset(e, 0, sizeof *e);
        e->shard = odbox_shard_get_id(sh);
        const char *name = NULL, *former = NULL, *last = NULL;
        int nn = 0, nf = 0, nc = 0, nr = 0, nl = 0, nd = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &name, &nn, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &former, &nf, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_timestamp(s, 3, &e->created_us, &nc, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_timestamp(s, 4, &e->retired_us, &nr, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 5, &last, &nl, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_timestamp(s, 6, &e->last_error_us, &nd, err)) != ODBOX_OK)
            break;
        if (nr)
            e->retired_us = 0;
        if (nd)
            e->last_error_us = 0;
        (*n)++;
        if (!(e->name = strdup(nn ? "" : name)) || (!nf && !(e->former_names = strdup(former))) ||
            (!nl && !(e->last_error = strdup(last))))
            rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    }
    odbox_stmt_free(&s);
    rc = rc < 0 ? rc : ODBOX_OK;
    if (rc == ODBOX_OK) {
        odbox_buf_cat(&b, "SELECT name, event_type FROM ", types, " ORDER BY name, event_type", (char *)NULL);
        rc = read_pairs(c, odbox_buf_take(&b), 0, *v, from, *n, 0, err);
    }
    if (rc == ODBOX_OK) {
        odbox_buf_cat(&b, "SELECT name, process FROM ", procs, " WHERE ", (char *)NULL);
        odbox_buf_appendf(&b, dl->interval_us_fmt, dl->now_sql, "last_seen");
        odbox_buf_append(&b, " <= ? ORDER BY name, process");
        rc = read_pairs(c, odbox_buf_take(&b), live_us, *v, from, *n, 1, err);
    }
    odbox_ops_release(sh, &c);
    return rc == ODBOX_OK ? rc : odbox_ops_shard_error(sh, rc, err);
}

int odbox_subscriptions_list(const odbox_registry *r, const odbox_shard *shard, int live_ms,
                             odbox_subscription **out, size_t *n, odbox_error *err)
{
    if (!r || !out || !n)
        return odbox_fail(err, ODBOX_EINVAL, "subscriptions: registry, out or n is NULL");
    if (live_ms < 0)
        return odbox_fail(err, ODBOX_EINVAL, "subscriptions: live_ms %d is negative", live_ms);
    *out = NULL;
    *n = 0;
    odbox_subscription *v = NULL;
    size_t nv = 0, cap = 0;
    int rc = ODBOX_OK;
    int64_t live_us = (int64_t)(live_ms ? live_ms : DEFAULT_LIVE_MS) * 1000;
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_ops_shard_count(r, shard); i++)
        rc = list_shard(odbox_ops_shard_at(r, shard, i), live_us, &v, &nv, &cap, err);
    if (rc != ODBOX_OK) {
        odbox_subscriptions_free(&v, nv);
        return rc;
    }
    *out = v;
    *n = nv;
    return ODBOX_OK;
}

