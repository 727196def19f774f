/* odbox — operations on the outbox's tables: what waits in
 * event_notifications and how it fares (counts, rows, metrics in the
 * Prometheus text format), putting failed or expired notifications back
 * in line (requeue), and retention (purge of what is done with).
 *
 * Everything here reads and writes the tables of a registry's shards
 * (all of them, or one), on each shard's primary, so it works beside the
 * fan-out and handling jobs of any process. Every value is a bound
 * parameter. All functions are thread-safe (a registry is).
 *
 * A notification is in one of four states: PENDING (due at next_retry_at),
 * FAILED (its handler failed; due again at next_retry_at), SUCCEEDED and
 * EXPIRED (its retention passed; never retried unless requeued). */
#ifndef ODBOX_NOTIFICATIONS_H
#define ODBOX_NOTIFICATIONS_H

#include <stddef.h>
#include <stdint.h>
#include "clock.h"
#include "jobs.h"
#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which notifications a call looks at. Zeros: every one of every shard. */
typedef struct odbox_notification_filter {
    const odbox_shard *shard; /* NULL: every shard of the registry */
    /* "PENDING", "FAILED", "SUCCEEDED" or "EXPIRED" (any case); NULL: any.
     * Another text is ODBOX_EINVAL. */
    const char *state;
    const char *handler;      /* handler_name; NULL: any ("" is ODBOX_EINVAL) */
    const char *event_type;   /* NULL: any ("" is ODBOX_EINVAL) */
    /* "now" for due times and ages; NULL: each shard's database's time,
     * read once per shard (the rows' times are the database's and those
     * of processes whose clocks may disagree with this one's) */
    const odbox_clock *clock;
} odbox_notification_filter;

/* One handler's notifications on one shard. */
typedef struct odbox_notification_stats {
    odbox_shard_id shard;
    char *handler;
    /* rows by state */
    int64_t pending, failed, succeeded, expired;
    int64_t backlog;           /* pending + failed */
    int64_t due;               /* PENDING and FAILED rows whose next_retry_at <= now */
    int64_t oldest_due_age_us; /* now - the oldest due next_retry_at; 0 when none is due */
    /* Delivery lag (updated_date - completion_date: from the action's
     * commit, by the database's clock, to the handler's success, by the
     * delivering process's clock) of the SUCCEEDED rows updated in
     * the lag window, now - lag_window_s .. now (odbox_notifications_metrics
     * only; zeros otherwise and when there were none). Quantiles are
     * nearest-rank: the smallest lag that at least 50 % (99 %) of them do
     * not exceed. */
    int64_t lag_count;
    int64_t lag_sum_us, lag_p50_us, lag_p99_us, lag_max_us;
} odbox_notification_stats;

/* Counts by handler and state, and the due rows and their oldest age, of
 * the notifications f selects (f may be NULL: all), per shard and
 * handler: *out (freed with odbox_notification_stats_free) holds *n entries
 * in the registry's shard order, then by handler name; a handler appears
 * when it has a selected row. ODBOX_EINVAL for an unknown state.
 * The counts read every selected row (a count must: purge keeps the
 * table small); the due rows are found through the due index. */
int odbox_notifications_count(const odbox_registry *r, const odbox_notification_filter *f,
                              odbox_notification_stats **out, size_t *n, odbox_error *err);

typedef struct odbox_notification_metrics_options {
    const odbox_shard *shard; /* NULL: every shard */
    const odbox_clock *clock; /* NULL: each shard's database's time (as the filter's) */
    int lag_window_s;         /* delivery lag of the successes of the last lag_window_s; 0: 600 */
} odbox_notification_metrics_options;

/* What odbox_notifications_count gives for every notification, and the
 * delivery lag of recent successes (found through the finished index:
 * only the window's rows are read). o may be NULL for the defaults. */
int odbox_notifications_metrics(const odbox_registry *r, const odbox_notification_metrics_options *o,
                                odbox_notification_stats **out, size_t *n, odbox_error *err);

/* Frees the n entries count and metrics hand out. NULL-safe; sets *p = NULL. */
void odbox_notification_stats_free(odbox_notification_stats **p, size_t n);

/* The Prometheus text exposition (format 0.0.4) of stats, in *text
 * (malloc'd), every sample labelled with its shard ("G.M") and handler:
 *   odbox_notifications{shard,handler,state}             gauge
 *   odbox_notifications_backlog{shard,handler}           gauge
 *   odbox_notifications_due{shard,handler}               gauge
 *   odbox_notifications_oldest_due_age_seconds{shard,handler} gauge
 *   odbox_delivery_lag_seconds{shard,handler,quantile}   summary (0.5, 0.99;
 *       _sum and _count cover the lag window, so they may go down)
 *   odbox_delivery_lag_max_seconds{shard,handler}        gauge
 * Per shard, not summed: quantiles of shards cannot be added up, while
 * Prometheus sums the others (sum by (handler)). */
int odbox_notifications_prometheus(const odbox_notification_stats *stats, size_t n, char **text, odbox_error *err);

/* ---- rows ------------------------------------------------------------ */

typedef struct odbox_notification_row {
    odbox_shard_id shard;
    char id[37];
    char event_id[37];
    char *handler;
    char state[16];
    int attempts;
    int64_t next_retry_us;
    char *event_type;
} odbox_notification_row;

/* At most limit (1..100000) of the notifications f selects, over all
 * its shards, ordered by next_retry_at (then shard and id): *rows (freed
 * with odbox_notification_rows_free) holds *n. */
int odbox_notifications_list(const odbox_registry *r, const odbox_notification_filter *f, size_t limit,
                             odbox_notification_row **rows, size_t *n, odbox_error *err);
/* NULL-safe; sets *rows = NULL. */
void odbox_notification_rows_free(odbox_notification_row **rows, size_t n);

/* ---- requeue --------------------------------------------------------- */

typedef struct odbox_requeue_spec {
    const odbox_shard *shard; /* NULL: every shard */
    const char *state;        /* "FAILED" or "EXPIRED" (any case); NULL: both */
    const char *handler;      /* only this handler's rows; NULL: every handler's */
    const char *id;           /* only this notification (a UUID); NULL: every one */
    /* "now"; NULL: the database's time, written by the database itself
     * (now_sql), so that "due now" is now for the handling jobs of every
     * process, whatever this process's clock says */
    const odbox_clock *clock;
} odbox_requeue_spec;

/* What a requeue did, summed over its shards. */
typedef struct odbox_requeue_result {
    int64_t moved;     /* back to PENDING */
    /* left as they were: a handling round holds them (lease_until after
     * now, the call is running), and its outcome decides them */
    int64_t in_flight;
} odbox_requeue_result;

/* Moves FAILED and EXPIRED notifications (s may be NULL: all of them)
 * back to PENDING, due now, as if just created: attempts = 0 (the backoff
 * starts over and the handler sees attempt 1 again), next_retry_at,
 * updated_date and created_date = now (so the handling job's retention,
 * counted from the later of event_date and created_date, starts again).
 * A row a handling round holds (its lease has not ended: its handler is
 * being called) is left and counted in res->in_flight: requeued, its
 * call's outcome would be lost (the round writes it guarded by the
 * attempts it read) and the row called again after the lease; requeue
 * it after the round, if it failed. res (may be NULL) gets the counts.
 * One UPDATE per shard, guarded by the state and the lease: a row the
 * handling job finishes or claims meanwhile is not moved; one that loses
 * a deadlock (rolled back whole) goes again, up to 5 times. ODBOX_EINVAL:
 * another state, an id that is not a UUID, or both a handler and an id;
 * ODBOX_ENOTFOUND: the id names no FAILED or EXPIRED notification (the
 * message says its state when it has one); an id that is in flight is
 * no error (moved 0, in_flight 1). */
int odbox_notifications_requeue_run(const odbox_registry *r, const odbox_requeue_spec *s, odbox_requeue_result *res,
                                    odbox_error *err);

/* odbox_notifications_requeue_run that tells only how many moved
 * (*moved, may be NULL). */
int odbox_notifications_requeue(const odbox_registry *r, const odbox_requeue_spec *s, int64_t *moved,
                                odbox_error *err);

/* ---- retention ------------------------------------------------------- */

/* "30d", "12h", "90m", "3600s": a positive whole number and one unit
 * (d, h, m, s) -> microseconds. ODBOX_EINVAL for anything else, 0, or
 * more than 100 years. */
int odbox_duration_parse(const char *text, int64_t *us, odbox_error *err);

typedef struct odbox_purge_options {
    int64_t older_than_us;    /* required, > 0: what is older than now - this goes */
    int batch_size;           /* rows per DELETE, 1..100000; 0: 1000 */
    const odbox_shard *shard; /* NULL: every shard */
    const odbox_clock *clock; /* NULL: each shard's database's time (the purge job: see odbox_purge_job) */
    /* idempotency keys (odbox_execute_keyed) older than now - this go,
     * by created_date; 0: ODBOX_PURGE_KEYS_DEFAULT_US (7 days) */
    int64_t keys_older_than_us;
} odbox_purge_options;

#define ODBOX_PURGE_KEYS_DEFAULT_US (INT64_C(7) * 86400 * 1000000)

/* What a purge removed from one shard. */
typedef struct odbox_purge_result {
    odbox_shard_id shard;
    int64_t notifications; /* SUCCEEDED and EXPIRED, by updated_date */
    int64_t events;        /* delivered events, by event_date */
    int64_t sentinels;     /* sentinel rows (event_type NULL), by event_date */
    int64_t batches;       /* DELETE statements run */
    int64_t keys;          /* idempotency keys, by created_date */
    int64_t processes;     /* subscription_processes rows of processes gone, by last_seen */
} odbox_purge_result;

/* Deletes, from each shard, the finished notifications (SUCCEEDED and
 * EXPIRED) whose updated_date, the delivered events whose event_date,
 * and the sentinel rows (event_type NULL: never delivered, as no handler
 * takes them, so they would pile up forever) whose event_date is older
 * than now - o->older_than_us, the rows of subscription_processes whose
 * last_seen is older than that too (a delivery writes one per handler
 * and shard and refreshes them at every heartbeat, a third of its live
 * window: such a row is a process long gone; one of a live process
 * removed by a window shorter than that is written again at its next
 * heartbeat), and the idempotency keys older than now -
 * o->keys_older_than_us (a key forgotten so executes again). "now" is
 * each shard's database's time, read on its connection, unless o->clock
 * is given: the rows are written by processes whose clocks may disagree
 * (a key's created_date is the database's time at its INSERT). Never an undelivered event with a type
 * (it waits for a handler, or for one to appear and backfill it), never
 * a PENDING or FAILED notification. Each DELETE removes at most
 * batch_size rows, oldest first, and is its own transaction, so no lock
 * is held long; a shard is done when a DELETE removes fewer.
 * *results (freed with odbox_purge_results_free) gets one entry per shard
 * purged, *n of them: also on failure, when it tells what was removed
 * before the error (then NULL when nothing ran). */
int odbox_purge_run(const odbox_registry *r, const odbox_purge_options *o, odbox_purge_result **results,
                    size_t *n, odbox_error *err);
void odbox_purge_results_free(odbox_purge_result **results);

/* For an outbox read by CDC (Debezium reads the inserts from the WAL or
 * binlog, not the rows later), where no handler takes some event types:
 * nothing flips their events to delivered, so odbox_purge_run never
 * deletes them and the table grows. This deletes, from each shard, the
 * undelivered events whose event_date is older than now -
 * o->older_than_us and whose type no subscription takes (none, or only
 * retired ones: the types the fan-out reads), in batches of
 * o->batch_size, oldest first per type; "now" as for odbox_purge_run.
 * Nothing else (o->keys_older_than_us is not used). Opt-in, as a handler
 * subscribed to such a type later finds none of the deleted events to
 * backfill; an event of a type a subscription takes waits for its
 * fan-out. results[i].events counts the events removed (the other
 * counts are 0); *results as for odbox_purge_run, and the same
 * ODBOX_EINVAL checks. */
int odbox_purge_unsubscribed_run(const odbox_registry *r, const odbox_purge_options *o,
                                 odbox_purge_result **results, size_t *n, odbox_error *err);

#define ODBOX_PURGE_JOB_NAME "odbox-purge"

/* Fills *job with a job for a job registry (odbox/jobs.h) that runs
 * odbox_purge_run(r, o) on schedule, named ODBOX_PURGE_JOB_NAME (followed
 * by "@" and the eventlog's name unless r's default shard's eventlog is
 * the default "eventlog"; job->name lives as long as job->user), with
 * "now" from the job registry's clock when it has one, else from each
 * shard's database's time (o->clock is not used). It stops
 * between batches when the job registry stops or its run is about to be
 * taken for dead (the next run goes on), and logs what it removed. Nothing
 * purges unless a service adds this job (or runs odbox_purge_run or
 * `odbox purge`). r must outlive the job registry; job->user is
 * allocated: free it with odbox_purge_job_free after the job registry.
 * Same ODBOX_EINVAL checks as odbox_purge_run, and the schedule's. */
int odbox_purge_job(const odbox_registry *r, const odbox_purge_options *o, odbox_schedule schedule,
                    odbox_job *job, odbox_error *err);
/* Makes each run of a job odbox_purge_job filled also delete what
 * odbox_purge_unsubscribed_run would with older_than_us (0: not, the
 * default), besides the rest; it logs how many. Before the job is added to
 * a job registry. ODBOX_EINVAL: job NULL or not odbox_purge_job's, a
 * negative age or one over 100 years. */
int odbox_purge_job_unsubscribed(odbox_job *job, int64_t older_than_us, odbox_error *err);
/* Frees what odbox_purge_job allocated and clears *job. NULL-safe. */
void odbox_purge_job_free(odbox_job *job);

#ifdef __cplusplus
}
#endif
#endif
