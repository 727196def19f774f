/* odbox — the delivery's loops of rounds: one thread per shard for a
 * fan-out execution, handling_loops threads per shard for the handling.
 * A loop runs a round, goes again at once when the round found work, and
 * otherwise waits for a wake-up (the shard's pending flag, which one loop
 * takes) or its poll, which the handling loops of a shard share. */
#include <string.h>
#include <time.h>
#include "delivery_internal.h"

/* how soon a round that lost a deadlock runs again (poll_ms when shorter) */
#define DEADLOCK_RETRY_MS 20
/* A round that failed otherwise (a lock wait, a lost connection) runs again
 * after this, doubled per failure in a row up to poll_ms: one failure costs
 * a blink, not a whole poll interval, and a server that stays down is not
 * hammered. */
#define FAILED_RETRY_MS 100

/* Whether a round found work, so that the next one starts at once. A
 * fan-out that flipped nothing (events a lagging replica still shows as
 * undelivered) waits, as does a handling round that wrote nothing. So
 * does one that read a hand-off: its rows were the fan-out round's, and
 * those it left to a claim (ordered, not yet due) start one through
 * claimed_full; going again at once was a claim that found nothing,
 * after every hand-off. After a claim, order and concurrency limits may
 * have held rows back that its outcomes released. */
static int found_work(int job, const odbox_delivery_round *rd, int took_handoff)
{
    if (job == JOB_FANOUT)
        return rd->delivered > 0;
    return !took_handoff && rd->succeeded + rd->failed + rd->expired_preflight + rd->expired_postfailure > 0;
}

/* A handling round whose claim filled its batch: more rows may be due, so
 * another loop of the shard claims the next batch while this one calls. */
static void claimed_full(const odbox_round_ctx *rx)
{
    odbox_delivery *d = rx->d;
    pthread_mutex_lock(&d->mu);
    rx->ds->pending[JOB_HANDLING] = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* How long a loop waits before its next round when no wake-up comes. */
static int64_t retry_after(int64_t poll_ms, int rc, int streak)
{
    int64_t ms = poll_ms;
    if (rc == ODBOX_EDEADLOCK) /* rolled back whole: again soon */
        ms = DEADLOCK_RETRY_MS;
    else if (rc != ODBOX_OK)
        ms = (int64_t)FAILED_RETRY_MS << (streak < 16 ? streak - 1 : 15);
    return ms < poll_ms ? ms : poll_ms;
}

/* Under mu: a waiting loop's wait, until a stop, a wake-up or its poll.
 * One loop answers a wake-up: it takes the flag, and a round that fills
 * its batch raises it again for the next (claimed_full), so that an idle
 * process sends one claim per wake-up, not one per loop. A poll is shared
 * the same way (poll_ms, 0 after a failed round: each loop retries on its
 * own): a loop whose poll falls within poll_ms of another loop's round
 * start waits on for the rest of that, so idle loops poll the database
 * about once per poll_ms between them, and still each wait is bounded. */
static void wait_turn(odbox_delivery *d, odbox_dshard *ds, const execution *x, int64_t poll_ms,
                      struct timespec until)
{
    for (;;) {
        while (!atomic_load(&x->stop) && !ds->pending[x->job] && !odbox_mono_passed(&until))
            pthread_cond_timedwait(&d->cv, &d->mu, &until);
        if (atomic_load(&x->stop))
            return;
        int64_t now = odbox_mono_us(), left_ms = (ds->polled_us[x->job] + poll_ms * 1000 - now) / 1000;
        if (ds->pending[x->job] || left_ms <= 0) {
            ds->pending[x->job] = 0;
            ds->polled_us[x->job] = now; /* before mu is let go: a loop timing out with this one waits on */
            return;
        }
        until = odbox_mono_after(left_ms);
    }
}

void *odbox_shard_loop_main(void *arg)
{
    shard_loop *sl = arg;
    execution *x = sl->x;
    odbox_delivery *d = x->d;
    odbox_dshard *ds = sl->ds;
    int streak = 0; /* this loop's failed rounds in a row */
    pthread_mutex_lock(&d->mu);
    ds->running[x->job]++;
    pthread_mutex_unlock(&d->mu);
    while (!atomic_load(&x->stop)) {
        pthread_mutex_lock(&d->mu);
        ds->pending[x->job] = 0;
        ds->polled_us[x->job] = odbox_mono_us();
        pthread_mutex_unlock(&d->mu);
        odbox_delivery_round rd;
        memset(&rd, 0, sizeof rd);
        odbox_error e = {0};
        int took_handoff = 0;
        odbox_round_ctx rx = {.d = d, .ds = ds, .stop = &x->stop, .clock = d->clock, .claimed_full = claimed_full,
                              .took_handoff = &took_handoff};
        int rc;
        if (x->job == JOB_FANOUT) {
            rc = odbox_fanout_round(&rx, &rd, &e);
        } else {
            atomic_store(&ds->round_since_us[sl->slot], odbox_mono_us());
            rc = odbox_handling_round(&rx, &rd, &e);
            atomic_store(&ds->round_since_us[sl->slot], 0);
        }
        streak = rc == ODBOX_OK ? 0 : streak + 1;
        int64_t wait_ms = retry_after(d->cfg.poll_ms[x->job], rc, streak);
        pthread_mutex_lock(&d->mu);
        int was_failing = ds->failing[x->job];
        ds->failing[x->job] = rc != ODBOX_OK;
        pthread_mutex_unlock(&d->mu);
        if (rc != ODBOX_OK) {
            odbox_dmetrics_round_error(d->metrics);
            /* one line per streak of failures, and one when it ends */
            if (!was_failing)
                odbox_log(ODBOX_LOG_WARN, "delivery: %s round failed: %s; retrying in %lld ms", d->job_name[x->job],
                          e.message, (long long)wait_ms);
        } else if (was_failing) {
            odbox_log(ODBOX_LOG_INFO, "delivery: %s rounds on shard %d.%d work again", d->job_name[x->job],
                      ds->id.group, ds->id.member);
        }
        if (rc == ODBOX_OK && found_work(x->job, &rd, took_handoff))
            continue;
        pthread_mutex_lock(&d->mu);
        ds->idle[x->job]++;
        wait_turn(d, ds, x, rc == ODBOX_OK ? wait_ms : 0, odbox_mono_after(wait_ms));
        ds->idle[x->job]--;
        pthread_mutex_unlock(&d->mu);
    }
    pthread_mutex_lock(&d->mu);
    ds->running[x->job]--;
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

