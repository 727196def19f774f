/* odbox — a subscription's replay (see odbox/handlers.h): notifications
 * of the subscription for the retained events of its types since a time,
 * written as the fan-out writes them, skipping the rows that exist (also
 * under the subscription's former names, whose rows reach it).
 * Dialect-neutral but for the dialect's fields it takes: uuid_param,
 * max_params and those of odbox_notifications_insert_sql. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "delivery_internal.h"
#include "notifications_internal.h"
#include "odbox/uuid.h"

#define T_SUBS "subscriptions"
#define T_TYPES "subscription_types"
/* events per statement of a replay */
#define REPLAY_PAGE 500
/* 10000-01-01 00:00:00 UTC */
#define NO_DATABASE_TIME_AFTER_US INT64_C(253402300800000000)

typedef struct replay {
    odbox_conn *c;
    const odbox_dialect *dl;
    odbox_shard_id shard;
    char events[ODBOX_NAME_MAX * 2 + 32], notifications[ODBOX_NAME_MAX * 2 + 32], subs[ODBOX_NAME_MAX * 2 + 32];
    const char *name;
    /* the subscription's former names (a renamed handler): their rows
     * reach it, so an event with a row under one of them is not replayed */
    char **former;
    size_t nformer;
    int64_t now_us, created;
    char (*ids)[ODBOX_UUID_LEN + 1];
} replay;

/* Notifications of the subscription for the n events ids, skipping those
 * that exist (the unique key on event_id, handler_name). */
static int replay_insert(replay *p, size_t n, odbox_error *err)
{
    char *sql = odbox_notifications_insert_sql(p->dl, p->events, p->notifications, p->subs, n, "e.id IS NOT NULL", 0);
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(p->c, sql, &s, err);
    free(sql);
    int idx = 1;
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_timestamp(s, idx++, p->now_us, err)) == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, idx++, p->now_us, err);
    for (size_t i = 0; rc == ODBOX_OK && i < n; i++) {
        char nid[ODBOX_UUID_LEN + 1];
        if ((rc = odbox_uuid_v7_sharded(p->shard, nid, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_valid_uuid(s, idx++, nid, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_valid_uuid(s, idx++, p->ids[i], err)) == ODBOX_OK)
            rc = odbox_stmt_bind_text(s, idx++, p->name, err);
    }
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK) {
        int64_t changed = odbox_stmt_rows_affected(s);
        p->created += changed > 0 ? changed : 0;
    }
    odbox_stmt_free(&s);
    return rc;
}

/* The delivered events of type since since_us, page after page in
 * (event_date, id) order. Those the fan-out has not flipped yet get their
 * row from it, as every subscription of their type does; and delivered
 * ones are those an index orders by date (PostgreSQL and SQLite: partial,
 * WHERE delivered = TRUE; MySQL/MariaDB: (delivered, event_type,
 * event_date)), where without that term each page read the whole table
 * (400,000 events: 67 ms a page on PostgreSQL, 144 on MariaDB; 0.7 and
 * 0.3 ms with it). */
static int replay_type(replay *p, const char *type, int64_t since_us, size_t page, odbox_error *err)
{
    const odbox_dialect *d = p->dl;
    odbox_buf b = {0};
    odbox_buf_cat(&b, "SELECT id, ", (char *)NULL);
    odbox_ops_ts_col(&b, d, "event_date");
    odbox_buf_cat(&b, " FROM ", p->events,
                  " WHERE delivered = TRUE AND event_type = ? AND event_date >= ? AND (event_date > ? OR "
                  "(event_date = ? AND id > ",
                  d->uuid_param, "))", (char *)NULL);
    if (p->nformer) {
        odbox_buf_cat(&b, " AND NOT EXISTS (SELECT 1 FROM ", p->notifications, " o WHERE o.event_id = ", p->events,
                      ".id AND o.handler_name IN (", (char *)NULL);
        odbox_buf_list(&b, "?", p->nformer);
        odbox_buf_append(&b, "))");
    }
    odbox_buf_cat(&b, " ORDER BY ", p->events, ".event_date, ", p->events, ".id", (char *)NULL);
    odbox_buf_appendf(&b, " LIMIT %zu", page);
    char *sql = odbox_buf_take(&b);
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    int64_t at = since_us;
    char after[ODBOX_UUID_LEN + 1] = "00000000-0000-0000-0000-000000000000";
    int rc = ODBOX_OK;
    for (;;) {
        odbox_stmt *s = NULL;
        size_t n = 0;
        if ((rc = odbox_stmt_prepare(p->c, sql, &s, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_text(s, 1, type, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_timestamp(s, 2, since_us, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_timestamp(s, 3, at, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_timestamp(s, 4, at, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_uuid(s, 5, after, err)) == ODBOX_OK)
            for (size_t f = 0; f < p->nformer && rc == ODBOX_OK; f++)
                rc = odbox_stmt_bind_text(s, 6 + (int)f, p->former[f], err);
        if (rc == ODBOX_OK)
            rc = odbox_stmt_execute(s, err);
        while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
            const char *id = NULL;
            int n1 = 0, n2 = 0;
            if ((rc = odbox_stmt_get_text(s, 1, &id, &n1, err)) != ODBOX_OK ||
                (rc = odbox_stmt_get_timestamp(s, 2, &at, &n2, err)) != ODBOX_OK)
                break;
            snprintf(p->ids[n], sizeof p->ids[n], "%s", n1 ? "" : id);
            snprintf(after, sizeof after, "%s", p->ids[n]);
            n++;
        }
        odbox_stmt_free(&s);
        rc = rc < 0 ? rc : ODBOX_OK;
        if (rc == ODBOX_OK && n)
            rc = replay_insert(p, n, err);
        if (rc != ODBOX_OK || n < page)
            break;
    }
    free(sql);
    return rc;
}

/* now: the clock's, or ODBOX_OPS_DB_NOW: the shard's database's time,
 * read once, is what "the future" is and the rows' created_date (the
 * handling job's retention counts from it, in the database's time). */
static int replay_shard(const odbox_shard *sh, const char *name, int64_t since_us, int64_t now,
                        int64_t *found, int64_t *created, odbox_error *err)
{
    replay p = {.name = name, .shard = odbox_shard_get_id(sh)};
    char subs[ODBOX_NAME_MAX * 2 + 32], types[ODBOX_NAME_MAX * 2 + 32];
    int rc = odbox_ops_connect(sh, T_SUBS, &p.c, subs, sizeof subs, err);
    if (rc != ODBOX_OK)
        return rc;
    if ((rc = odbox_ops_now(p.c, now, &p.now_us, err)) == ODBOX_OK && since_us > p.now_us)
        rc = odbox_fail(err, ODBOX_EINVAL, "subscription replay: since is in the future");
    if (rc != ODBOX_OK) {
        odbox_ops_release(sh, &p.c);
        return rc;
    }
    p.dl = odbox_conn_dialect(p.c);
    const char *ev = odbox_shard_eventlog(sh);
    odbox_subs_table(p.c, ev, T_TYPES, types, sizeof types);
    odbox_subs_table(p.c, ev, "events", p.events, sizeof p.events);
    odbox_subs_table(p.c, ev, "event_notifications", p.notifications, sizeof p.notifications);
    odbox_subs_table(p.c, ev, T_SUBS, p.subs, sizeof p.subs);
    /* found? retired? */
    odbox_buf b = {0};
    odbox_buf_cat(&b, "SELECT CASE WHEN retired_date IS NULL THEN 0 ELSE 1 END, former_names FROM ", subs,
                  " WHERE name = ?", (char *)NULL);
    const char *args[] = {name};
    odbox_stmt *s = NULL;
    int64_t retired = -1;
    rc = odbox_subs_run(p.c, odbox_buf_take(&b), args, 1, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        int null = 0;
        const char *former = NULL;
        if ((rc = odbox_stmt_get_int64(s, 1, &retired, &null, err)) == ODBOX_OK &&
            (rc = odbox_stmt_get_text(s, 2, &former, &null, err)) == ODBOX_OK && !null) {
            /* recorded separated by spaces (names hold none) */
            for (const char *f = former; rc == ODBOX_OK && *f;) {
                size_t len = strcspn(f, " ");
                char one[ODBOX_HANDLER_NAME_MAX + 1];
                snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), f);
                if (len && odbox_subs_strv_add(&p.former, &p.nformer, one))
                    rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
                f += len + (f[len] == ' ');
            }
        }
    }
    odbox_stmt_free(&s);
    rc = rc < 0 ? rc : ODBOX_OK;
    if (rc == ODBOX_OK && retired == 1)
        rc = odbox_fail(err, ODBOX_ESTATE, "subscription '%s' is retired: it is not replayed", name);
    char **tv = NULL;
    size_t nt = 0;
    if (rc == ODBOX_OK && retired == 0) {
        (*found)++;
        odbox_buf_cat(&b, "SELECT event_type FROM ", types, " WHERE name = ? ORDER BY event_type", (char *)NULL);
        if ((rc = odbox_subs_run(p.c, odbox_buf_take(&b), args, 1, &s, err)) == ODBOX_OK) {
            while ((rc = odbox_stmt_fetch(s, err)) == 1) {
                const char *t = NULL;
                int null = 0;
                if ((rc = odbox_stmt_get_text(s, 1, &t, &null, err)) != ODBOX_OK)
                    break;
                if (!null && odbox_subs_strv_add(&tv, &nt, t)) {
                    rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
                    break;
                }
            }
            odbox_stmt_free(&s);
            rc = rc < 0 ? rc : ODBOX_OK;
        }
    }
    size_t page = REPLAY_PAGE;
    if (p.dl->max_params > 0 && (size_t)(p.dl->max_params - 2) / 3 < page)
        page = (size_t)(p.dl->max_params - 2) / 3;
    if (rc == ODBOX_OK && nt && !(p.ids = calloc(page, sizeof *p.ids)))
        rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    for (size_t i = 0; rc == ODBOX_OK && i < nt; i++)
        rc = replay_type(&p, tv[i], since_us, page, err);
    for (size_t i = 0; i < nt; i++)
        free(tv[i]);
    free(tv);
    for (size_t i = 0; i < p.nformer; i++)
        free(p.former[i]);
    free(p.former);
    free(p.ids);
    *created += p.created;
    odbox_ops_release(sh, &p.c);
    return rc == ODBOX_OK ? rc : odbox_ops_shard_error(sh, rc, err);
}

int odbox_subscription_replay(const odbox_registry *r, const char *name, int64_t since_us, const odbox_clock *clock,
                              int64_t *created, odbox_error *err)
{
    if (created)
        *created = 0;
    if (!r || !name || !*name)
        return odbox_fail(err, ODBOX_EINVAL, "subscription replay: registry or name is missing");
    int64_t now = odbox_ops_given_now(clock); /* the future: checked per shard */
    if (since_us < 0)
        return odbox_fail(err, ODBOX_EINVAL, "subscription replay: since is before 1970");
    /* no database's time is after 9999 (MySQL's DATETIME ends there): no
     * need to ask one */
    if (since_us >= NO_DATABASE_TIME_AFTER_US || (now != ODBOX_OPS_DB_NOW && since_us > now))
        return odbox_fail(err, ODBOX_EINVAL, "subscription replay: since is in the future");
    int64_t found = 0, n = 0;
    int rc = ODBOX_OK;
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_registry_shard_count(r); i++)
        rc = replay_shard(odbox_registry_shard_at(r, i), name, since_us, now, &found, &n, err);
    if (created)
        *created = n;
    if (rc == ODBOX_OK && !found)
        return odbox_fail(err, ODBOX_ENOTFOUND, "no subscription named '%s'", name);
    return rc;
}
