/* odbox — kept claims: a call of an ordered subscription still running at
 * handler_timeout_ms, or at a stop's stop_wait_ms, is abandoned (its
 * thread left running) but its row is not given up. Written as failed
 * (or given back at the stop), the row would be due again after
 * its backoff and called a second time while the first call runs, and
 * once that second call succeeded the model's next row would go too: two
 * calls of one model at once, in this process or another, which the
 * order promises never happen (for a relay, a late confirm of the first
 * publish after the next message's). So the row stays claimed: its lease
 * and order lease are renewed by the shard's handling rounds in this
 * process while the call runs, and when it returns its outcome is
 * written under the same claim, as its round would have written it. If
 * this process dies or its rounds stop, the lease runs out and another
 * process claims the row, as for any claim. A call that never returns
 * holds its model until the row's retention ends: then the renewals
 * stop, and the first claim after the lease expires the row, as any row
 * past its retention.
 *
 * The list is per shard, under the delivery's mu; each entry holds a
 * reference to its call (the abandoned thread holds another). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "delivery_round.h"
#include "odbox/log.h"

enum { SQL_KEPT_RENEW = 131, SQL_KEPT_HELD };

/* how many times a renewal that lost a deadlock is tried in all */
#define RENEW_TRIES 3

int64_t odbox_kept_now(const odbox_delivery *d, const call *c)
{
    return d->db_time ? c->claimed_at_us + (odbox_mono_us() - c->claim_mono_us) : d->clock.now_us(d->clock.ud);
}

/* The shard's whole list, taken off it: rounds of several loops do not
 * renew or write one entry twice. */
static call *take_all(odbox_delivery *d, odbox_dshard *ds)
{
    pthread_mutex_lock(&d->mu);
    call *list = ds->kept;
    ds->kept = NULL;
    pthread_mutex_unlock(&d->mu);
    return list;
}

void odbox_kept_put_back(odbox_delivery *d, odbox_dshard *ds, call *list)
{
    if (!list)
        return;
    call *last = list;
    while (last->kept_next)
        last = last->kept_next;
    pthread_mutex_lock(&d->mu);
    last->kept_next = ds->kept;
    ds->kept = list;
    pthread_mutex_unlock(&d->mu);
}

call *odbox_kept_returned(odbox_delivery *d, odbox_dshard *ds)
{
    call *list = take_all(d, ds), *returned = NULL, *running = NULL;
    while (list) {
        call *c = list;
        list = c->kept_next;
        call **to = atomic_load(&c->finished) ? &returned : &running;
        c->kept_next = *to;
        *to = c;
    }
    odbox_kept_put_back(d, ds, running);
    return returned;
}

void odbox_kept_drop(odbox_dshard *ds)
{
    call *list = ds->kept;
    ds->kept = NULL;
    while (list) {
        call *c = list;
        list = c->kept_next;
        odbox_hcall_release(&c->w);
    }
}

/* Runs op's statement on c's row (head, the table, tail, then "<id> AND
 * lease_owner = ?"; cached per connection): binds, when renewing, the
 * lease's new end three times, then the row's id and c's claim token.
 * *out: the statement, run (NULL on failure). */
static int run_on_row(odbox_conn *conn, int op, const char *table, const char *head, const char *tail, const call *c,
                      int64_t until, odbox_stmt **out, odbox_error *err)
{
    odbox_sql_key key;
    odbox_sql_key_init(&key, op, 1);
    odbox_sql_key_add(&key, 0, table);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(conn, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        odbox_buf b = {0};
        odbox_buf_cat(&b, head, table, tail, odbox_conn_dialect(conn)->uuid_param, " AND lease_owner = ?",
                      (char *)NULL);
        char *sql = odbox_buf_take(&b);
        rc = sql ? odbox_stmt_prepare_keyed(conn, sql, &key, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    int idx = 1, runs = 0;
    for (int t = 0; t < 3 && op == SQL_KEPT_RENEW && rc == ODBOX_OK; t++)
        rc = odbox_stmt_bind_timestamp(s, idx++, until, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_valid_uuid(s, idx++, c->env.notification_id, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, idx++, c->claim_token, err);
    if (rc == ODBOX_OK)
        rc = op == SQL_KEPT_RENEW ? odbox_stmt_execute_autocommit(s, RENEW_TRIES, &runs, err)
                                  : odbox_stmt_execute(s, err);
    if (rc != ODBOX_OK)
        odbox_stmt_free(&s);
    *out = s;
    return rc;
}

/* Moves c's lease (and next_retry_at with it, as a claim does) and its
 * order lease to now + lease_ms; its limit lease ends, as an abandoned
 * call's does (its handler's hung calls count against the limit here).
 * *lost: the row is no longer this claim's. A renewal that changed
 * nothing (the same end: MySQL and MariaDB count no such row) is told
 * from a lost claim by a look at the row. */
static int renew(odbox_delivery *d, odbox_conn *conn, const char *table, call *c, int64_t now, int *lost,
                 odbox_error *err)
{
    odbox_stmt *s = NULL;
    int rc = run_on_row(conn, SQL_KEPT_RENEW, table, "UPDATE ",
                        " SET lease_until = ?, next_retry_at = ?, order_lease_until = ?, limit_lease_until = NULL "
                        "WHERE id = ",
                        c, now + d->cfg.lease_us, &s, err);
    if (rc != ODBOX_OK)
        return rc;
    *lost = odbox_stmt_rows_affected(s) == 0;
    odbox_stmt_free(&s);
    if (*lost && (rc = run_on_row(conn, SQL_KEPT_HELD, table, "SELECT 1 FROM ", " WHERE id = ", c, 0, &s, err)) ==
                     ODBOX_OK) {
        rc = odbox_stmt_fetch(s, err);
        *lost = rc == 0;
        rc = rc < 0 ? rc : ODBOX_OK;
        odbox_stmt_free(&s);
    }
    if (rc == ODBOX_OK && !*lost)
        c->renewed_us = now;
    return rc;
}

/* Drops c from the kept calls, saying why. */
static void let_go(call *c, const char *why)
{
    odbox_log(ODBOX_LOG_WARN, "delivery: the claim of notification %s (handler %s, event %s), kept while its "
                              "abandoned call runs, %s", c->env.notification_id, c->env.handler_name,
              c->env.event_id, why);
    odbox_hcall_release(&c->w);
}

int odbox_kept_renew(const hround *h, odbox_conn *conn, odbox_error *err)
{
    odbox_delivery *d = h->d;
    odbox_dshard *ds = h->ds;
    call *list = take_all(d, ds), *kept = NULL;
    int rc = ODBOX_OK;
    while (list) {
        call *c = list;
        list = c->kept_next;
        int64_t now = odbox_kept_now(d, c);
        int lost = 0;
        if (now > c->deadline_us) {
            let_go(c, "is no longer renewed: the row's retention ended; it expires when its lease ends, and its "
                      "model's later rows go on");
            continue;
        }
        if (rc == ODBOX_OK && now - c->renewed_us >= d->cfg.lease_us / 4 &&
            (rc = renew(d, conn, h->table, c, now, &lost, err)) == ODBOX_OK && lost) {
            let_go(c, "was lost (its lease ran out and another round claimed the row): its model's order no longer "
                      "waits for that call");
            continue;
        }
        c->kept_next = kept;
        kept = c;
    }
    odbox_kept_put_back(d, ds, kept);
    return rc;
}

void odbox_kept_add(hround *h, odbox_conn *conn)
{
    odbox_delivery *d = h->d;
    call *list = NULL;
    for (size_t i = 0; i < h->n; i++) {
        call *c = h->calls[i];
        if (c->bucket != B_KEEP)
            continue;
        atomic_fetch_add(&c->w.refs, 1);
        snprintf(c->claim_token, sizeof c->claim_token, "%s", h->token);
        c->claimed_at_us = c->renewed_us = h->claimed_at_us;
        c->claim_mono_us = h->lease_end_mono_us - d->cfg.lease_us;
        c->kept_next = list;
        list = c;
        if (c->w.state == ODBOX_WORK_CUT_OFF)
            odbox_log(ODBOX_LOG_WARN, "delivery: handler %s on notification %s (event %s) still runs %d ms into a "
                                      "stop (stop_wait_ms); its subscription is ordered, so the row stays claimed "
                                      "and its model's later rows wait until its lease (lease_ms) ends, or until "
                                      "this delivery's next round after the call returns",
                      c->env.handler_name, c->env.notification_id, c->env.event_id, d->cfg.stop_wait_ms);
        else
            odbox_log(ODBOX_LOG_WARN, "delivery: handler %s on notification %s (event %s) still runs after %d ms "
                                      "(handler_timeout_ms); its subscription is ordered, so the row stays claimed "
                                      "(its lease renewed) and its model's later rows wait until the call returns",
                      c->env.handler_name, c->env.notification_id, c->env.event_id, d->cfg.handler_timeout_ms);
    }
    odbox_kept_put_back(d, h->ds, list);
    odbox_error e = {0};
    if (list && conn && odbox_kept_renew(h, conn, &e) != ODBOX_OK)
        odbox_log(ODBOX_LOG_WARN, "delivery: kept claims on shard %d.%d not renewed (tried again next round): %s",
                  h->ds->id.group, h->ds->id.member, e.message);
}
