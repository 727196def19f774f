/* odbox — a handling round on one shard: the due notifications read from
 * the primary, those past their retention expired without a call, the
 * others' handlers called on the worker threads, and the outcomes
 * written with one UPDATE per bucket (Ekbatan's EventHandlingJob):
 *   - expired before the call:  EXPIRED (attempts as they were)
 *   - succeeded:                SUCCEEDED, attempts + 1
 *   - failed, no time left:     EXPIRED, attempts + 1, when post +
 *                               backoff(attempts + 1) passes the deadline,
 *                               or attempts + 1 reaches the handler's
 *                               max attempts, or the call returned
 *                               ODBOX_EDISCARD
 *   - failed, to retry:         FAILED, attempts + 1, next_retry_at =
 *                               post + backoff(attempts + 1), or + the
 *                               delay the handler asked for: one bucket
 *                               per attempts value and due time
 * where post is the time after the calls and the deadline is
 * max(event_date, created_date) + retention. Every UPDATE is guarded by
 * the state and attempts each row was read with, so an outcome that
 * comes late (another process took the job over and handled the row
 * meanwhile, or a requeue moved it) never overwrites a newer one.
 *
 * The connection is given back while handlers run: a handler may run
 * actions on the same shard's pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "delivery_round.h"
#include "internal.h"
#include "notifications_internal.h"
#include "registry_internal.h"

/* an outcome UPDATE that loses a deadlock is run this many times at most */
#define OUTCOME_TRIES 5

/* ---- backoff ---------------------------------------------------------------------- */

int64_t odbox_delivery_backoff_us(const odbox_dcfg *c, int attempts)
{
    int shift = attempts - 1 < 0 ? 0 : attempts - 1 > 30 ? 30 : attempts - 1;
    /* base <= the cap's range: no overflow below 2^30 x base when base
     * stays under 2^33 us (more than a day), checked at open */
    int64_t b = c->backoff_base_us;
    for (int i = 0; i < shift && b < c->backoff_cap_us; i++)
        b *= 2;
    return b < c->backoff_cap_us ? b : c->backoff_cap_us;
}

/* ---- calling ---------------------------------------------------------------------- */

/* A batch handler's calls of the round as one work item: it holds a
 * reference to each of them, so that an abandoned batch's calls stay
 * alive until it returns. */
typedef struct hbatch {
    odbox_work w; /* first: the pool hands this back */
    odbox_hbatch_fn fn;
    void *user;
    call **calls;
    size_t n;
} hbatch;

static void hbatch_run(odbox_work *w)
{
    hbatch *b = (hbatch *)w;
    const odbox_envelope **envs = malloc(b->n * sizeof *envs);
    int *rcs = calloc(b->n, sizeof *rcs);
    odbox_error *errs = calloc(b->n, sizeof *errs);
    int64_t t0 = odbox_mono_us();
    if (envs && rcs && errs) {
        for (size_t i = 0; i < b->n; i++)
            envs[i] = &b->calls[i]->env;
        b->fn(b->user, b->n, envs, rcs, errs);
    }
    int64_t took = odbox_mono_us() - t0;
    for (size_t i = 0; i < b->n; i++)
        odbox_hcall_done(b->calls[i], rcs && envs && errs ? rcs[i] : ODBOX_ENOMEM, errs ? &errs[i] : NULL, took);
    free(envs);
    free(rcs);
    free(errs);
}

static void hbatch_release(odbox_work *w)
{
    hbatch *b = (hbatch *)w;
    if (atomic_fetch_sub(&b->w.refs, 1) != 1)
        return;
    for (size_t i = 0; i < b->n; i++)
        odbox_hcall_release(&b->calls[i]->w);
    free(b->calls);
    free(b);
}

/* Puts the calls of batch handler k into one work item; NULL when it has
 * none (or out of memory: they stay NOT_RUN, tried again next round). */
static hbatch *batch_of(hround *h, int k)
{
    const odbox_hentry *e = &h->d->h->v[k];
    size_t n = 0;
    for (size_t i = 0; i < h->n; i++)
        n += h->calls[i]->skip == CALL && h->calls[i]->handler == k;
    hbatch *b = n ? calloc(1, sizeof *b) : NULL;
    if (b && !(b->calls = malloc(n * sizeof *b->calls))) {
        free(b);
        b = NULL;
    }
    if (!b)
        return NULL;
    *b = (hbatch){.w = {.run = hbatch_run, .release = hbatch_release, .group = k,
                        .group_cap = odbox_delivery_thread_cap(h->d, (size_t)k)},
                  .fn = e->batch, .user = e->user, .calls = b->calls};
    atomic_init(&b->w.refs, 1);
    for (size_t i = 0; i < h->n; i++) {
        call *c = h->calls[i];
        if (c->skip == CALL && c->handler == k) {
            atomic_fetch_add(&c->w.refs, 1);
            b->calls[b->n++] = c;
        }
    }
    return b;
}

/* c's handler, or -1: a row never called (not JSON, say) has none
 * looked up yet. */
static int handler_of(const odbox_delivery *d, const call *c)
{
    return c->handler >= 0 ? c->handler : odbox_handlers_find(d->h, c->env.handler_name);
}

/* 1 when c's subscription gives up on its row after this many more
 * failed calls (odbox_handlers_set_max_attempts). */
static int attempts_spent(const hround *h, const call *c, int more)
{
    int k = handler_of(h->d, c);
    int max = k >= 0 ? odbox_subs_max_attempts(h->d, h->ds, k) : 0;
    return max > 0 && c->attempts + more >= max;
}

/* 1 when c's handler was called and returned: its rc, message and asks hold. */
static int returned(const call *c) { return c->skip == CALL && c->w.state == ODBOX_WORK_DONE; }

/* Expired rows and rows nobody handles get no call; the rest run on the
 * worker threads: a call each, or a batch handler's calls together. */
static void run_calls(hround *h, int64_t now, const atomic_int *stop)
{
    odbox_delivery *d = h->d;
    odbox_work **items = malloc((h->n ? h->n : 1) * sizeof *items);
    hbatch **batches = calloc(d->h->n ? d->h->n : 1, sizeof *batches);
    size_t ni = 0, nbatches = 0;
    for (size_t i = 0; i < h->n; i++) {
        call *c = h->calls[i];
        c->w.state = ODBOX_WORK_NOT_RUN; /* until an item runs it */
        if (c->skip != CALL)
            continue;
        if (now > c->deadline_us) { /* Ekbatan: now > event_date + retention */
            c->skip = NO_CALL_EXPIRED;
            continue;
        }
        c->handler = odbox_handlers_find(d->h, c->env.handler_name);
        if (c->handler < 0) {
            c->skip = NO_CALL_UNKNOWN;
            snprintf(c->why, sizeof c->why, "no handler answers to '%.100s'", c->env.handler_name);
            continue;
        }
        if (attempts_spent(h, c, 0)) { /* its limit lowered since its last try */
            c->skip = NO_CALL_EXPIRED;
            continue;
        }
        if (!odbox_handlers_takes(d->h, c->handler, c->env.event_type)) {
            c->skip = NO_CALL_NOT_TAKEN; /* given back for a process whose handler takes it */
            continue;
        }
        c->fn = d->h->v[c->handler].fn;
        c->user = d->h->v[c->handler].user;
        c->w.group = c->handler;
        c->w.group_cap = odbox_delivery_thread_cap(d, (size_t)c->handler);
        if (items && !d->h->v[c->handler].batch)
            items[ni++] = &c->w; /* out of memory: not run, tried again next round */
    }
    for (size_t k = 0; items && batches && k < d->h->n; k++)
        if (d->h->v[k].batch && (batches[nbatches] = batch_of(h, (int)k)) != NULL)
            items[ni++] = &batches[nbatches++]->w;
    /* a call starts only while its whole timeout fits in the claim's
     * lease (or, with a lease shorter than twice the timeout, within the
     * lease's first half): a call queued behind slow ones past that
     * would run on after the lease, and another round could claim and
     * call its row meanwhile, or an ordered handler's next row */
    int64_t timeout_us = (int64_t)d->cfg.handler_timeout_ms * 1000, room = d->cfg.lease_us / 2;
    int64_t start_by = h->lease_end_mono_us - (timeout_us < room ? timeout_us : room);
    if (ni)
        odbox_workers_run(d->workers, items, ni, d->cfg.handler_timeout_ms, start_by, stop, d->cfg.stop_wait_ms);
    for (size_t k = 0; k < nbatches; k++) {
        hbatch *b = batches[k];
        for (size_t i = 0; i < b->n; i++)
            b->calls[i]->w.state = b->w.state; /* an abandoned batch's calls timed out or were cut off with it */
        hbatch_release(&b->w);
    }
    free(batches);
    free(items);
}

/* The bucket of every row, from the calls' outcomes and post. */
static void classify(hround *h, int64_t post)
{
    const odbox_dcfg *cfg = &h->d->cfg;
    for (size_t i = 0; i < h->n; i++) {
        call *c = h->calls[i];
        int failed = 0;
        if (c->skip == NO_CALL_EXPIRED) {
            c->bucket = B_PREFLIGHT;
            continue;
        }
        if (c->skip == NO_CALL_NOT_TAKEN)
            continue; /* left as it was: due again */
        if (c->skip == CALL) {
            if (c->w.state == ODBOX_WORK_CUT_OFF && c->ordered) {
                c->bucket = B_KEEP; /* claimed while it may still run, as after a timeout */
                continue;
            }
            if (c->w.state == ODBOX_WORK_NOT_RUN || c->w.state == ODBOX_WORK_CUT_OFF ||
                c->w.state == ODBOX_WORK_LATE || c->w.state == ODBOX_WORK_HELD)
                continue; /* left as it was: due again */
            if (c->w.state == ODBOX_WORK_TIMED_OUT) {
                h->rd->timed_out++;
                if (c->ordered) { /* claimed until it returns (delivery_kept.c) */
                    c->bucket = B_KEEP;
                    continue;
                }
                snprintf(c->why, sizeof c->why, "still running after %d ms (handler_timeout_ms); its thread is "
                                                "abandoned", cfg->handler_timeout_ms);
                failed = 1;
            } else {
                failed = c->rc != 0;
            }
        } else {
            failed = 1;
        }
        if (!failed) {
            c->bucket = B_SUCCEEDED;
            continue;
        }
        int asked = returned(c) && c->retry_asked;
        int64_t next = post + (asked ? c->retry_after_us : odbox_delivery_backoff_us(cfg, c->attempts + 1));
        c->gave_up = returned(c) && c->rc == ODBOX_EDISCARD ? "its handler discarded it"
                     : attempts_spent(h, c, 1)             ? "its handler's max attempts"
                     : next > c->deadline_us               ? "its retention ends before a retry"
                                                           : NULL;
        c->bucket = c->gave_up ? B_POSTFAILURE : B_RETRY;
        c->next_retry_us = next;
    }
}

/* ---- writing ---------------------------------------------------------------------- */

/* Every outcome ends the claim; a finished row leaves its model_id's
 * order (order_key), and its next_retry_at becomes the finish time (the
 * same as updated_date: the purge and metrics find finished rows by it
 * where the due index serves them, see V13). Columns that are NULL
 * already (a handler without order or limit) stay NULL: the row's
 * entries in their indexes do not move. */
#define LEASE_ENDS "lease_owner = NULL, lease_until = NULL, limit_lease_until = NULL, order_lease_until = NULL"
#define FINISHED ", next_retry_at = ?, order_key = NULL, " LEASE_ENDS
static const char *const bucket_set[NBUCKETS + 1] = {
    "state = 'EXPIRED', updated_date = ?" FINISHED,
    "state = 'SUCCEEDED', attempts = attempts + 1, updated_date = ?" FINISHED,
    "state = 'EXPIRED', attempts = attempts + 1, updated_date = ?" FINISHED,
    "state = 'FAILED', attempts = attempts + 1, next_retry_at = ?, updated_date = ?, " LEASE_ENDS,
    "next_retry_at = ?, " LEASE_ENDS, /* B_RELEASE: due again at once (the claim moved it) */
};

/* UPDATE ... WHERE id IN (...) AND <not finished> AND <the attempts read>
 * AND lease_owner = <this round's token>: an outcome that comes after
 * another round claimed the row (this claim expired) writes nothing.
 * one value when the rows share it, else per row. Among unfinished rows
 * the attempts tell the state: PENDING has 0 (the fan-out writes 0, and
 * only a requeue sets it back, with PENDING), FAILED at least 1; so the
 * guard is the state and attempts each row was read with.
 * NOT IN, where IN ('PENDING', 'FAILED') would say the same: the due
 * index's predicate is not proven from it, so a planner whose statistics
 * predate a backlog finds the rows by id, not by a scan of every due row
 * (see delivery_fanout.c). */
static char *outcome_sql(const hround *h, int bucket, size_t n, int same_attempts)
{
    const odbox_dialect *d = h->dialect;
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", h->table, " SET ", bucket_set[bucket], " WHERE id IN (", (char *)NULL);
    odbox_buf_list(&b, d->uuid_param, n);
    odbox_buf_append(&b, ") AND state NOT IN ('SUCCEEDED', 'EXPIRED')");
    if (same_attempts) {
        odbox_buf_append(&b, " AND attempts = ?");
    } else {
        odbox_buf_append(&b, " AND attempts = CASE id");
        for (size_t i = 0; i < n; i++)
            odbox_buf_cat(&b, " WHEN ", d->uuid_param, " THEN ", d->typed_param[ODBOX_TYPE_INT64], (char *)NULL);
        odbox_buf_append(&b, " END");
    }
    odbox_buf_append(&b, " AND lease_owner = ?");
    return odbox_buf_take(&b);
}

/* Runs an outcome UPDATE, each run counted. One that loses a deadlock
 * (MariaDB: against a fan-out's INSERT into the same indexes) runs again
 * (odbox_stmt_execute_autocommit): alone, in autocommit, it rolled back
 * nothing else, and giving up would leave its rows claimed until the
 * lease ends (minutes). Inside a transaction (the outcomes' own, see
 * write_all, or a hook's) the whole transaction is gone: it runs once. */
static int execute_outcome(hround *h, odbox_stmt *s, odbox_error *err)
{
    int runs = 0;
    int rc = odbox_stmt_execute_autocommit(s, OUTCOME_TRIES, &runs, err);
    h->rd->statements += runs;
    return rc;
}

/* One UPDATE for rows[0..n-1] of a bucket; *changed gets its row count. */
static int write_bucket(hround *h, odbox_conn *conn, int bucket, call **rows, size_t n, int64_t post,
                        int64_t *changed, odbox_error *err)
{
    int same_attempts = 1;
    for (size_t i = 1; i < n; i++)
        same_attempts &= rows[i]->attempts == rows[0]->attempts;
    odbox_sql_key key;
    odbox_sql_key_init(&key, SQL_OUTCOME, n);
    odbox_sql_key_add_count(&key, bucket, (size_t)same_attempts);
    odbox_sql_key_add(&key, 0, h->table);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(conn, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        char *sql = outcome_sql(h, bucket, n, same_attempts);
        rc = sql ? odbox_stmt_prepare_keyed(conn, sql, &key, &s, err)
                 : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    int idx = 1;
    if (rc == ODBOX_OK && bucket == B_RETRY)
        rc = odbox_stmt_bind_timestamp(s, idx++, rows[0]->next_retry_us, err);
    if (rc == ODBOX_OK && bucket == B_RELEASE)
        rc = odbox_stmt_bind_timestamp(s, idx++, h->claimed_at_us, err);
    if (rc == ODBOX_OK && bucket != B_RELEASE)
        rc = odbox_stmt_bind_timestamp(s, idx++, post, err);
    if (rc == ODBOX_OK && bucket != B_RELEASE && bucket != B_RETRY) /* finished: next_retry_at */
        rc = odbox_stmt_bind_timestamp(s, idx++, post, err);
    for (size_t i = 0; i < n && rc == ODBOX_OK; i++)
        rc = odbox_stmt_bind_valid_uuid(s, idx++, rows[i]->env.notification_id, err);
    if (rc == ODBOX_OK && same_attempts)
        rc = odbox_stmt_bind_int64(s, idx++, rows[0]->attempts, err);
    for (size_t i = 0; i < n && rc == ODBOX_OK && !same_attempts; i++)
        if ((rc = odbox_stmt_bind_valid_uuid(s, idx++, rows[i]->env.notification_id, err)) == ODBOX_OK)
            rc = odbox_stmt_bind_int64(s, idx++, rows[i]->attempts, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, idx++, h->token, err);
    if (rc == ODBOX_OK) {
        rc = execute_outcome(h, s, err);
        h->rd->updates += bucket != B_RELEASE;
    }
    if (rc == ODBOX_OK)
        *changed = odbox_stmt_rows_affected(s);
    odbox_stmt_free(&s);
    return rc;
}

/* The rows of one bucket (and, for retries, one attempts value and due time), one
 * UPDATE unless they exceed the dialect's parameter limit. */
static int write_group(hround *h, odbox_conn *conn, int bucket, call **rows, size_t n, int64_t post,
                       odbox_error *err)
{
    size_t per = (size_t)(h->dialect->max_params - 5) / 3;
    int rc = ODBOX_OK;
    for (size_t at = 0; at < n && rc == ODBOX_OK;) {
        size_t k = n - at < per ? n - at : per;
        int64_t changed = 0;
        if ((rc = write_bucket(h, conn, bucket, rows + at, k, post, &changed, err)) == ODBOX_OK && changed >= 0 &&
            (size_t)changed < k && bucket != B_RELEASE)
            h->rd->stale += k - (size_t)changed;
        at += k;
    }
    return rc;
}

/* Rows left as they were (calls not made or cut off at a stop, or
 * outcomes refused by the hook): their claim is given back, so that they
 * are due again at once, not at the lease's end. */
static int release_claims(hround *h, odbox_conn *conn, odbox_error *err)
{
    call **rows = malloc((h->n ? h->n : 1) * sizeof *rows);
    if (!rows)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < h->n; i++)
        if (h->calls[i]->bucket < 0)
            rows[n++] = h->calls[i];
    int rc = n ? write_group(h, conn, B_RELEASE, rows, n, 0, err) : ODBOX_OK;
    free(rows);
    return rc;
}

/* Retries by attempts, then by due time (the same for an attempts value
 * unless a handler asked for its own, odbox_handler_retry_after). */
static int by_attempts(const void *a, const void *b)
{
    const call *x = *(call *const *)a, *y = *(call *const *)b;
    if (x->attempts != y->attempts)
        return (x->attempts > y->attempts) - (x->attempts < y->attempts);
    return (x->next_retry_us > y->next_retry_us) - (x->next_retry_us < y->next_retry_us);
}

static int write_outcomes(hround *h, odbox_conn *conn, int64_t post, odbox_error *err)
{
    call **rows = malloc((h->n ? h->n : 1) * sizeof *rows);
    if (!rows)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    int rc = ODBOX_OK;
    for (int b = 0; b < NBUCKETS && rc == ODBOX_OK; b++) {
        size_t n = 0;
        for (size_t i = 0; i < h->n; i++)
            if (h->calls[i]->bucket == b)
                rows[n++] = h->calls[i];
        if (b != B_RETRY) {
            if (n)
                rc = write_group(h, conn, b, rows, n, post, err);
            continue;
        }
        qsort(rows, n, sizeof *rows, by_attempts);
        for (size_t at = 0; at < n && rc == ODBOX_OK;) {
            size_t end = at;
            while (end < n && rows[end]->attempts == rows[at]->attempts &&
                   rows[end]->next_retry_us == rows[at]->next_retry_us)
                end++;
            rc = write_group(h, conn, b, rows + at, end - at, post, err);
            at = end;
        }
    }
    free(rows);
    if (rc == ODBOX_OK)
        rc = release_claims(h, conn, err);
    return rc;
}

/* The outcomes, in one transaction where the dialect has something to
 * begin it with: outcome_begin_sql (PostgreSQL: plans made for the rows
 * at hand, so that a table whose statistics, or none, predate its
 * backlog is still updated by id rather than scanned whole by a plan
 * cached while it was small), or the delivery's isolation (MySQL,
 * MariaDB: READ COMMITTED; a lone UPDATE would run under the session's
 * REPEATABLE READ, whose next-key locks on the rows it scans deadlocked
 * with the fan-out's INSERTs). A transaction that loses a deadlock runs
 * again whole, as a lone UPDATE does (execute_outcome). Inside a hook's
 * transaction, or with neither, the UPDATEs run as they are. */
static int write_all(hround *h, odbox_conn *conn, int64_t post, odbox_error *err)
{
    const char *begin = h->dialect->outcome_begin_sql;
    if ((!begin && !h->dialect->delivery_isolation_sql) || odbox_conn_in_transaction(conn))
        return write_outcomes(h, conn, post, err);
    odbox_delivery_round before = *h->rd;
    for (int attempt = 1;; attempt++) {
        int rc = odbox_delivery_begin(conn, begin, err);
        if (rc == ODBOX_OK)
            rc = write_outcomes(h, conn, post, err);
        if (rc == ODBOX_OK)
            rc = odbox_commit_failed(odbox_conn_commit(conn, err), err);
        else if (odbox_conn_in_transaction(conn))
            odbox_conn_rollback(conn, NULL);
        if (rc != ODBOX_EDEADLOCK || attempt == OUTCOME_TRIES)
            return rc;
        /* what the rolled-back try counted is undone; its statements ran */
        size_t statements = h->rd->statements;
        *h->rd = before;
        h->rd->statements = statements;
        odbox_sleep_ms(attempt * 10); /* 10, 20, 30 ms... */
    }
}

/* Calls that ran past the round's claim: another round may have claimed
 * and called their rows meanwhile; their outcomes are written only where
 * the row is still this round's. */
static void log_past_lease(hround *h)
{
    int64_t now = odbox_mono_us();
    if (now <= h->lease_end_mono_us)
        return;
    for (size_t i = 0; i < h->n; i++) {
        call *c = h->calls[i];
        if (c->skip != CALL || c->w.state == ODBOX_WORK_NOT_RUN || c->w.state == ODBOX_WORK_LATE ||
            c->w.state == ODBOX_WORK_HELD)
            continue;
        odbox_log(ODBOX_LOG_WARN, "delivery: handler %s on notification %s (event %s) outlived its lease of %lld ms "
                                  "(lease_ms): the row may have been claimed and called again; this call's outcome "
                                  "is written only if it was not", c->env.handler_name, c->env.notification_id,
                  c->env.event_id, (long long)(h->d->cfg.lease_us / 1000));
    }
}

/* Handlers whose hung calls reached their cap here in this round (some
 * of its calls were abandoned or held): this process starts none of their
 * calls and claims none of their rows until one of those returns. A
 * round with neither looks no further. */
static void log_hung(hround *h)
{
    odbox_delivery *d = h->d;
    size_t any = 0;
    for (size_t i = 0; i < h->n && !any; i++)
        any = h->calls[i]->w.state == ODBOX_WORK_HELD || h->calls[i]->w.state == ODBOX_WORK_TIMED_OUT;
    for (size_t k = 0; any && k < d->h->n; k++) {
        size_t held = 0, hit = 0;
        for (size_t i = 0; i < h->n; i++) {
            const call *c = h->calls[i];
            if (c->skip == CALL && c->handler == (int)k) {
                held += c->w.state == ODBOX_WORK_HELD;
                hit += c->w.state == ODBOX_WORK_HELD || c->w.state == ODBOX_WORK_TIMED_OUT;
            }
        }
        if (hit && odbox_delivery_hung_full(d, k))
            odbox_log(ODBOX_LOG_ERROR, "delivery: handler %s has %d calls still running past handler_timeout_ms (%d ms), "
                                       "their threads abandoned: this process starts no more of its calls and claims "
                                       "none of its rows until one returns (%zu of this round's rows are due again)",
                      d->h->v[k].name, odbox_workers_hung(d->workers, (int)k), d->cfg.handler_timeout_ms, held);
    }
}

/* ---- the round ----------------------------------------------------------------------- */

/* Counts, logs and metrics of what was written; a failed call's message
 * as its subscription's last error, on conn. */
static void report(hround *h, int64_t post, odbox_conn *conn)
{
    odbox_delivery_round *rd = h->rd;
    odbox_dm_outcome *o = calloc(h->n ? h->n : 1, sizeof *o);
    size_t no = 0;
    static const int outcome_of[NBUCKETS] = {ODBOX_DM_EXPIRED_PREFLIGHT, ODBOX_DM_SUCCEEDED,
                                             ODBOX_DM_EXPIRED_POSTFAILURE, ODBOX_DM_FAILED_RETRY};
    for (size_t i = 0; i < h->n; i++) {
        call *c = h->calls[i];
        odbox_envelope *e = &c->env;
        int called = returned(c);
        const char *why = called ? c->message : c->why;
        /* a row never called has its failure as its subscription's last error too */
        int handler = handler_of(h->d, c);
        switch (c->bucket) {
        case B_PREFLIGHT: rd->expired_preflight++; break;
        case B_SUCCEEDED: rd->succeeded++; break;
        case B_POSTFAILURE:
            rd->expired_postfailure++;
            odbox_subs_note_error(h->d, h->ds, conn, handler, why);
            odbox_log(ODBOX_LOG_ERROR, "delivery: DISCARDED notification %s (handler %s, event %s) on shard %d.%d "
                                       "after %d attempts (%s): %s", e->notification_id, e->handler_name, e->event_id,
                      e->shard.group, e->shard.member, e->attempt, c->gave_up, why);
            break;
        case B_RETRY:
            rd->failed++;
            odbox_subs_note_error(h->d, h->ds, conn, handler, why);
            odbox_log(ODBOX_LOG_WARN, "delivery: handler %s failed on notification %s (event %s, attempt %d): %s; "
                                      "retried in %lld ms", e->handler_name, e->notification_id, e->event_id,
                      e->attempt, why, (long long)(c->next_retry_us - post) / 1000);
            break;
        case B_KEEP: /* counted and logged when its call returns; one cut off is left as it was till then */
            rd->unwritten += c->w.state == ODBOX_WORK_CUT_OFF;
            continue;
        default: rd->unwritten++; continue;
        }
        int64_t duration = called                                  ? c->duration_us
                           : c->w.state == ODBOX_WORK_TIMED_OUT ? (int64_t)h->d->cfg.handler_timeout_ms * 1000
                                                                 : -1;
        if (o)
            o[no++] = (odbox_dm_outcome){handler, outcome_of[c->bucket], duration, post - e->completion_us};
    }
    if (o)
        odbox_dmetrics_record(h->d->metrics, o, no);
    free(o);
}

/* The round's dialect and notifications table, those of c's database. */
static void round_on(hround *h, odbox_conn *c)
{
    h->dialect = odbox_conn_dialect(c);
    odbox_dialect_eventlog_table(h->dialect, odbox_shard_eventlog(h->ds->shard), "event_notifications", h->table,
                                 sizeof h->table);
}

/* The outcomes of the shard's kept calls that have returned
 * (delivery_kept.c), written as their rounds would have written them,
 * under the claim each was made by (one pass per claim token), counted
 * in rd; those not written stay kept, for a later round. */
static int kept_outcomes(odbox_delivery *d, odbox_dshard *ds, odbox_conn *conn, odbox_delivery_round *rd,
                         odbox_error *err)
{
    call *left = odbox_kept_returned(d, ds);
    int rc = ODBOX_OK;
    while (left && rc == ODBOX_OK) {
        hround k = {.d = d, .ds = ds, .rd = rd};
        round_on(&k, conn);
        snprintf(k.token, sizeof k.token, "%s", left->claim_token);
        size_t n = 0;
        for (const call *c = left; c; c = c->kept_next)
            n += !strcmp(c->claim_token, k.token);
        if (!(k.calls = malloc(n * sizeof *k.calls))) {
            rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
            break;
        }
        for (call **at = &left; *at;) {
            call *c = *at;
            if (strcmp(c->claim_token, k.token)) {
                at = &c->kept_next;
                continue;
            }
            *at = c->kept_next;
            c->w.state = ODBOX_WORK_DONE;
            c->bucket = -1;
            k.calls[k.n++] = c;
        }
        odbox_log(ODBOX_LOG_INFO, "delivery: %zu call(s) of handler %s on shard %d.%d returned after "
                                  "handler_timeout_ms; their outcomes are written now", k.n,
                  k.calls[0]->env.handler_name, ds->id.group, ds->id.member);
        int64_t post = odbox_kept_now(d, k.calls[0]);
        classify(&k, post);
        if ((rc = write_all(&k, conn, post, err)) == ODBOX_OK)
            report(&k, post, conn);
        for (size_t i = 0; i < k.n; i++) {
            if (rc == ODBOX_OK) {
                odbox_hcall_release(&k.calls[i]->w);
            } else {
                k.calls[i]->kept_next = left;
                left = k.calls[i];
            }
        }
        free(k.calls);
    }
    odbox_kept_put_back(d, ds, left);
    return rc;
}

int odbox_handling_round(const odbox_round_ctx *x, odbox_delivery_round *rd, odbox_error *err)
{
    odbox_delivery *d = x->d;
    odbox_dshard *ds = x->ds;
    const atomic_int *stop = x->stop;
    rd->job = ODBOX_DELIVERY_HANDLING;
    rd->shard = ds->id;
    hround h = {.d = d, .ds = ds, .rd = rd};
    odbox_pool *pool = odbox_shard_primary(ds->shard);
    odbox_conn *c = NULL;
    int rc = odbox_shard_check_eventlog(ds->shard, err);
    if (rc == ODBOX_OK)
        rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK) {
        round_on(&h, c);
        if ((rc = kept_outcomes(d, ds, c, rd, err)) == ODBOX_OK)
            rc = odbox_kept_renew(&h, c, err);
    }
    if (rc == ODBOX_OK) {
        odbox_handoff *ho = odbox_handoff_pop(d, ds);
        rc = ho ? odbox_handling_take(&h, c, ho, err) : odbox_handling_claim(&h, c, odbox_round_now(x), err);
        if (ho && rc == ODBOX_OK) {
            odbox_dmetrics_handoff(d->metrics, h.n);
            if (x->took_handoff)
                *x->took_handoff = 1;
            /* rows of the round the fan-out did not claim (their
             * subscription is ordered, or they are not due by its clock)
             * may be due all the same: a claim next */
            if (h.n < ho->n && x->claimed_full)
                x->claimed_full(x);
            odbox_handoff_free(ho);
        } else if (ho) {
            odbox_handoff_requeue(d, ds, ho); /* its rows stay leased to it: taken again, next round */
        }
        rd->read = h.n;
        if (rc == ODBOX_OK && x->claimed_full && h.n >= (size_t)d->cfg.batch[JOB_HANDLING])
            x->claimed_full(x);
        /* handlers may take long and may use the pool themselves */
        odbox_pool_release(pool, &c);
    }
    if (rc == ODBOX_OK && h.n > 0) {
        run_calls(&h, odbox_hround_now(&h, x), stop);
        size_t unstarted = 0, late = 0;
        for (size_t i = 0; i < h.n; i++) {
            unstarted += h.calls[i]->skip == CALL && h.calls[i]->w.state == ODBOX_WORK_NOT_RUN &&
                         !(stop && atomic_load(stop));
            late += h.calls[i]->skip == CALL && h.calls[i]->w.state == ODBOX_WORK_LATE;
        }
        if (late)
            odbox_log(ODBOX_LOG_INFO, "delivery: %zu of the round's %zu calls on shard %d.%d found no free worker "
                                      "thread while their handler_timeout_ms still fitted in the claim's lease "
                                      "(lease_ms): their rows are due again", late, h.n, ds->id.group, ds->id.member);
        log_past_lease(&h);
        log_hung(&h);
        int64_t post = odbox_hround_now(&h, x);
        classify(&h, post);
        if ((rc = odbox_pool_acquire(pool, &c, err)) == ODBOX_OK && d->hook &&
            (rc = d->hook(d->hook_ud, ODBOX_DELIVERY_CALLS_DONE, ds->shard, c, rd)) != ODBOX_OK) {
            rc = odbox_fail(err, rc < 0 ? rc : ODBOX_EINVAL, "the delivery hook refused the outcomes (%s)",
                            odbox_errname(rc < 0 ? rc : ODBOX_EINVAL));
            for (size_t i = 0; i < h.n; i++)
                if (h.calls[i]->bucket != B_KEEP)
                    h.calls[i]->bucket = -1;
            odbox_error ignored = {0};
            release_claims(&h, c, &ignored);
        }
        if (rc == ODBOX_OK)
            rc = write_all(&h, c, post, err);
        if (rc == ODBOX_OK)
            report(&h, post, c);
        else
            rd->unwritten = h.n;
        odbox_kept_add(&h, c);
        /* not a stop: the loop waits before it claims them again */
        if (rc == ODBOX_OK && unstarted)
            rc = odbox_fail(err, ODBOX_ENOMEM, "%zu of the round's %zu calls could not be started (out of memory, or "
                                               "no worker thread could be started); their rows are due again",
                            unstarted, h.n);
    }
    if (d->hook)
        d->hook(d->hook_ud, ODBOX_DELIVERY_ROUND_DONE, ds->shard, c, rd);
    if (c)
        odbox_pool_release(pool, &c);
    /* an abandoned call's thread holds its own reference */
    for (size_t i = 0; i < h.n; i++)
        odbox_hcall_release(&h.calls[i]->w);
    free(h.calls);
    return rc == ODBOX_OK ? rc
                          : odbox_error_prefix(err, rc, "handling on shard %d.%d", ds->id.group, ds->id.member);
}

/* Gives back the claim of a hand-off's rows that no loop took: due again
 * at once; *given: how many (the rows the fan-out claimed). */
static int handoff_release(odbox_delivery *d, odbox_dshard *ds, const odbox_handoff *ho, size_t *given,
                           odbox_error *err)
{
    odbox_delivery_round rd = {0};
    hround h = {.d = d, .ds = ds, .rd = &rd};
    odbox_pool *pool = odbox_shard_primary(ds->shard);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK) {
        round_on(&h, c);
        if ((rc = odbox_handling_take(&h, c, ho, err)) == ODBOX_OK)
            rc = release_claims(&h, c, err);
        odbox_pool_release(pool, &c);
    }
    *given = rc == ODBOX_OK ? h.n : 0;
    for (size_t i = 0; i < h.n; i++)
        odbox_hcall_release(&h.calls[i]->w);
    free(h.calls);
    return rc;
}

/* Gives back ho's claim and frees it. */
static void give_back(odbox_delivery *d, odbox_dshard *ds, odbox_handoff *ho)
{
    odbox_error e = {0};
    size_t given = 0;
    if (handoff_release(d, ds, ho, &given, &e) == ODBOX_OK)
        odbox_dmetrics_given_back(d->metrics, given);
    else
        odbox_log(ODBOX_LOG_WARN,
                  "delivery: %zu notifications handed to the handling loops of shard %d.%d are due again when "
                  "their lease ends: %s",
                  ho->n, ds->id.group, ds->id.member, e.message);
    odbox_handoff_free(ho);
}

int odbox_handoff_expire(odbox_delivery *d, odbox_dshard *ds)
{
    int64_t now = odbox_mono_us();
    for (int n = 0;; n++) {
        pthread_mutex_lock(&d->mu);
        odbox_handoff *ho = ds->handoff;
        if (ho && now - ho->queued_mono_us > HANDOFF_WAIT_US) {
            if (!(ds->handoff = ho->next))
                ds->handoff_last = NULL;
        } else {
            ho = NULL;
        }
        pthread_mutex_unlock(&d->mu);
        if (!ho) {
            if (n)
                odbox_wake_raise(d->wake, ds->id, ODBOX_WAKE_NOTIFICATIONS, 1);
            return n;
        }
        give_back(d, ds, ho);
    }
}

void odbox_handoff_give_back(odbox_delivery *d)
{
    for (size_t i = 0; i < d->nshards; i++) {
        odbox_handoff *ho;
        while ((ho = odbox_handoff_pop(d, &d->shards[i])))
            give_back(d, &d->shards[i], ho);
    }
}
