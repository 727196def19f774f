/* odbox — in-process event handlers: the outbox's events delivered, at
 * least once, to callbacks in the same process (Ekbatan's local event
 * handler).
 *
 * Delivery is a fan-out job (odbox/jobs.h: one process of a cluster runs
 * it) and handling, which every process that adds it runs:
 *  - fan-out (ODBOX_FANOUT_JOB_NAME): per shard, in parallel, reads
 *    undelivered events whose type has a handler, oldest first (from the
 *    shard's replica when it has one), writes one event_notifications row
 *    per (event x handler) with the event's context copied in (state
 *    PENDING, attempts 0, next_retry_at = event_date) by ONE multi-row
 *    insert that skips rows already there, and flips the events'
 *    delivered = TRUE (only those still FALSE), in one transaction on the
 *    primary. Events without a handler and sentinel rows stay undelivered:
 *    a handler added later backfills them.
 *  - handling: per shard, in parallel, claims a batch of due
 *    notifications of the handlers it serves (names and former names) on
 *    the primary (PENDING or FAILED, next_retry_at <= now, not claimed or
 *    their claim's lease past; each handler's oldest first, the handlers
 *    taking turns at going first; rows of handlers no process serves
 *    wait, they do not fail; locked
 *    with FOR UPDATE SKIP LOCKED where the server has it), marking each
 *    with the round's token (lease_owner) and lease_until = the database's
 *    now + lease_ms (next_retry_at too: a row in flight is not due), in
 *    one short transaction; expires those past their
 *    retention without a call, calls the handlers of the rest on a pool
 *    of worker threads, and writes the outcomes with one UPDATE per
 *    bucket, each guarded by the state and attempts the rows were read
 *    with and by the token: an outcome that comes after another round
 *    claimed the row (the lease ran out) writes nothing. Any number of
 *    processes handle at once; a row whose claim expired (its process
 *    died, its call outlived the lease: logged) is claimed again.
 * The fan-out job's execution runs rounds on every shard (a shard with work
 * starts its next round at once, one without waits its poll delay, or
 * less when woken) while it holds its claim, and returns when the job
 * registry stops, when its heartbeats fall behind (fraction_dead > 0.5)
 * or after execution_max_ms, so that the claim is given back regularly.
 * The handling loops run the same way from odbox_jobs_start to
 * odbox_jobs_stop (or odbox_delivery_free), without an end by length: a
 * call is never cut off but by handler_timeout_ms or a stop.
 *
 * Wake-ups: a commit of an attached executor wakes the fan-out of that
 * shard at once, and a fan-out round that wrote notifications wakes the
 * handling of that shard at once. On PostgreSQL, also across processes
 * (NOTIFY after the commit, LISTEN through libpq): executors of other
 * processes wake this process's fan-out, and this fan-out wakes other
 * processes' handling, unless this process's own handling loops take
 * every row of the round (each row's handler served here without
 * max_in_flight): then the fan-out claims the rows as it writes them
 * and hands them to its loops (docs/handlers.md, "Hand-offs"). Elsewhere,
 * and when a wake-up is lost, the poll delay bounds the wait.
 *
 * At-least-once: a handler may be called more than once for one event
 * (a crash between its success and the write of its outcome, a lease that
 * ran out while its call still ran, a handler that failed after its
 * effect, a call cut off by its timeout or by a stop). Handlers must be idempotent: key what they write
 * on env->event_id. There is no order between events, nor between the
 * handlers of one event.
 *
 * Threads: handlers are called on worker threads, several at once. The
 * registry of handlers is built by one thread before the delivery opens
 * and is read-only after. A delivery's functions are thread-safe unless
 * said otherwise. */
#ifndef ODBOX_HANDLERS_H
#define ODBOX_HANDLERS_H

#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>
#include "action.h"
#include "clock.h"
#include "jobs.h"
#include "notifications.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODBOX_HANDLER_NAME_MAX 255 /* handler_name VARCHAR(255) */
/* The delivery's jobs for the default eventlog; see odbox_delivery_job_name.
 * The handling has no row in scheduled_tasks any more: its name stays. */
#define ODBOX_FANOUT_JOB_NAME "odbox-event-fanout"
#define ODBOX_HANDLING_JOB_NAME "odbox-event-handling"

/* What a handler gets: the notification row, with the event's context
 * copied in by the fan-out. Every pointer is valid during the call only
 * (take a reference to keep a JSON object). */
typedef struct odbox_envelope {
    const char *notification_id;
    const char *event_id;          /* the idempotency key */
    const char *ns;                /* the action's namespace */
    const char *action_id;
    const char *action_name;
    json_object *action_params;    /* parsed; borrowed */
    json_object *payload;          /* parsed; borrowed; NULL when the row has none */
    int64_t started_us, completion_us, event_us; /* UTC microseconds */
    const char *model_id;          /* NULL when none */
    const char *model_type;        /* NULL when none */
    const char *event_type;
    const char *handler_name;      /* as on the row: the handler's name or a former name */
    odbox_shard_id shard;
    int attempt;                   /* 1 on the first call (the row's attempts + 1) */
} odbox_envelope;

/* 0: handled (SUCCEEDED). A negative ODBOX_E* code: failed, retried with
 * backoff until the retention runs out or the handler's max attempts
 * are spent (err's message is logged). ODBOX_EDISCARD: failed for good
 * (a request the receiver refuses as invalid, a message no broker takes):
 * the row is given up on now, EXPIRED, as after its last attempt. Called
 * on a worker thread; it may run actions (odbox_execute): chaining. */
typedef int (*odbox_handler_fn)(const odbox_envelope *env, void *user, odbox_error *err);

/* Called by a handler during its call, on its thread, before it returns
 * a failure: the row is due again delay_ms after the round's calls
 * instead of after the backoff, for a receiver that says when to come
 * back (HTTP 429 or 503 with Retry-After). The failure counts as any:
 * attempts + 1, and the handler's max attempts and the retention still
 * apply (a delay past the retention expires the row). The last delay
 * asked for counts; ignored when the call succeeds or returns
 * ODBOX_EDISCARD. ODBOX_EINVAL: delay_ms negative or over 366 days;
 * ODBOX_ESTATE: not during a handler's call on its thread (a batch
 * handler's, as a relay's, included). */
int odbox_handler_retry_after(int64_t delay_ms, odbox_error *err);

typedef struct odbox_handler {
    /* Durable: written to handler_name, so part of the schema (renaming
     * orphans the rows queued under the old name: list it in
     * former_names). [A-Za-z0-9][A-Za-z0-9_.:-]*, at most 255 (copied). */
    const char *name;
    /* NULL-terminated, or NULL: rows under these names reach this handler
     * too (the fan-out writes name only). Same rule as name (copied). */
    const char *const *former_names;
    /* The event type it takes: an odbox_event_type's name (copied). */
    const char *event_type;
    odbox_handler_fn handle;
    void *user;                    /* handed to handle; must outlive the calls */
    /* Instead of event_type (then NULL), the event types it takes when there
     * are several: NULL-terminated, each at most once (copied). Each event
     * of these types gets one row under name; env->event_type tells them
     * apart. */
    const char *const *event_types;
} odbox_handler;

typedef struct odbox_handlers odbox_handlers;

int odbox_handlers_new(odbox_handlers **out, odbox_error *err);

/* Adds a handler. Several handlers may take one event type, and one
 * handler several types. ODBOX_EINVAL: a bad or duplicate name (names and
 * former names are one namespace), a bad event type name, both or neither
 * of event_type and event_types, an empty or repeating event_types, no
 * callback; ODBOX_ESTATE once a delivery uses h. */
int odbox_handlers_add(odbox_handlers *h, const odbox_handler *handler, odbox_error *err);

/* How a handler's rows are claimed, across every process on a shard.
 * Zeroed: no limit, no order (the default). */
typedef struct odbox_handler_options {
    /* At most this many of its calls in flight at once on a shard, across
     * the cluster: claimed rows whose lease holds count, counted under the
     * subscription's row lock (so its claims queue behind each other).
     * 0: no limit. A call that outlives its lease (lease_ms), or that
     * was abandoned at handler_timeout_ms, counts only in its own
     * process, until it returns (a hung call). Each process applies its own value to the claims it makes:
     * give every process serving the handler the same one. */
    int max_in_flight;
    /* Nonzero: per model_id, a row is claimed only when every older row
     * of the handler for that model_id is SUCCEEDED or EXPIRED, so
     * retries keep the order and a failing model_id holds back only its
     * own rows. Older: an earlier event_date, then emission order within
     * an action. event_date is the shard database's clock at the events
     * INSERT (not the writing process's), so an action that read
     * another's committed result (an optimistic update of the same
     * model) is delivered after it, whatever the clocks of the writing
     * processes say. A row that becomes visible only after a newer row
     * of its model was claimed (its action committed late; a replay; a
     * requeue) is called after that row, once its call has ended: two
     * calls of one model never run at once (a claim's order lease,
     * order_lease_until, V18). Rows without a model_id are not ordered.
     * Costs two index probes per row claimed. The order is the subscription's: the
     * process that registers the handler last records it in the
     * database, its unfinished rows take (or leave) it at once, and every
     * process fans out and claims by the recorded value. */
    int ordered;
} odbox_handler_options;

/* Sets the options of the handler added as name. ODBOX_EINVAL: no such
 * handler, a negative max_in_flight; ODBOX_ESTATE once a delivery uses h. */
int odbox_handlers_set_options(odbox_handlers *h, const char *name, const odbox_handler_options *options,
                               odbox_error *err);

/* Gives up on a row of the handler added as name after max_attempts
 * failed calls: the last failure writes it EXPIRED, as one whose next try
 * would be past its retention, so a message that can never be handled
 * (a broker refusing it, a payload the handler cannot read) no longer
 * waits the retention out, nor holds back a model_id's later rows of an
 * ordered handler. The failure is the subscription's last error and is
 * logged as DISCARDED. A row read with at least max_attempts attempts
 * already (the limit lowered by a new deploy) expires without a call.
 * `odbox notifications requeue` puts an EXPIRED row back, attempts 0.
 * 0: no limit (the default: only the retention, as Ekbatan). The limit
 * is the subscription's: recorded in the database (V16) by the process
 * that registers the handler last, as its order is, and followed by every
 * process from its next heartbeat on (live_ms / 3), whatever its own
 * value; a process of a build before it judges by its own. ODBOX_EINVAL: a NULL
 * argument, no such handler (or a former name), a negative value;
 * ODBOX_ESTATE once a delivery uses h. */
int odbox_handlers_set_max_attempts(odbox_handlers *h, const char *name, int max_attempts, odbox_error *err);

size_t odbox_handlers_count(const odbox_handlers *h);

/* After every delivery using h is freed. NULL-safe; sets *h = NULL. */
void odbox_handlers_free(odbox_handlers **h);

/* ---- delivery ---------------------------------------------------------- */

enum { ODBOX_DELIVERY_FANOUT = 1, ODBOX_DELIVERY_HANDLING = 2 };

/* What one round did on one shard. */
typedef struct odbox_delivery_round {
    int job;                    /* ODBOX_DELIVERY_FANOUT or ODBOX_DELIVERY_HANDLING */
    odbox_shard_id shard;
    size_t read;                /* events (fan-out) or due notifications (handling) read */
    /* fan-out */
    size_t delivered;           /* events this round flipped to delivered */
    size_t notifications;       /* notification rows sent to the insert (rows already
                                   there are skipped by the database, and counted) */
    /* handling: outcomes by bucket (stale counts those that found their
     * row changed, so were not written) */
    size_t succeeded;
    size_t failed;              /* failed, to be retried (a timed-out call included) */
    size_t expired_preflight;   /* past retention when read: no call */
    size_t expired_postfailure; /* failed, and the next try would be past retention */
    size_t timed_out;           /* calls still running at handler_timeout_ms (in failed; an ordered
                                   handler's: not written, its row claimed until the call returns) */
    size_t unwritten;           /* rows left as they were (not called before a stop,
                                   or their outcomes not written: refused by the
                                   hook, or the database failed): due again */
    size_t stale;               /* outcomes whose row had changed meanwhile */
    int statements;             /* statements sent to the database in the round */
    int updates;                /* handling: outcome UPDATE statements among them */
    int from_replica;           /* fan-out: 1 when the events were read on the shard's replica */
} odbox_delivery_round;

typedef enum odbox_delivery_point {
    /* A handling round's calls are over and its outcomes not yet written;
     * conn is the primary connection they will be written on. A non-zero
     * return leaves every row as it was (all are due again: re-delivery)
     * and fails the round with that code. */
    ODBOX_DELIVERY_CALLS_DONE = 1,
    /* A round ended, successfully or not (round says what it did); conn
     * is its primary connection, NULL when it wrote nothing. The return
     * is ignored. */
    ODBOX_DELIVERY_ROUND_DONE
} odbox_delivery_point;

/* Test and tracing hook, called on the round's thread. */
typedef int (*odbox_delivery_hook_fn)(void *ud, odbox_delivery_point at, odbox_shard *shard, odbox_conn *conn,
                                      const odbox_delivery_round *round);

typedef struct odbox_delivery_config {
    int fanout_batch;          /* events per fan-out round; 0: 200 */
    int handling_batch;        /* notifications per handling round; 0: 100 */
    int fanout_poll_ms;        /* wait after a round that found nothing; 0: 1000 */
    /* 0: 1000 (after a failed round: 100 ms, doubling up to it). The
     * handling loops of a shard share it: idle, they poll about once per
     * handling_poll_ms between them. */
    int handling_poll_ms;
    int64_t backoff_base_ms;   /* a failure waits base x 2^(attempts-1); 0: 30000 */
    int64_t backoff_cap_ms;    /* ... at most this (below the base: always this); 0: 300000 */
    /* A notification expires once now passes max(event_date, created_date)
     * + retention (created_date: when the fan-out wrote it or a requeue
     * put it back); 0: 7 days */
    int64_t retention_ms;
    int workers;               /* handler threads; 0: 8 */
    /* A call still running this long counts as failed (an ordered
     * handler's keeps its row claimed, renewed, until it returns): its
     * thread is abandoned (left running, not waited for) and replaced, up to a cap
     * of such hung calls per handler (its max_in_flight below the
     * workers, else the workers: then none of its calls start here until
     * one returns); 0: 300000 */
    int handler_timeout_ms;
    /* At a stop, running calls get this long before they are abandoned
     * (their rows stay due: re-delivered later; an ordered
     * subscription's stay claimed until their lease ends); 0: 5000 */
    int stop_wait_ms;
    /* The fan-out job's execution loops at most this long; 0: 60000. The
     * handling is no job and has no executions: this cuts no call off. */
    int execution_max_ms;
    /* Cross-process wake-ups (PostgreSQL LISTEN, one session per shard):
     * 0 on, -1 off (a pooler in transaction mode drops LISTEN). */
    int cross_process_wakeup;
    /* now for due times, leases, retention, backoff and the dates
     * written; NULL: the database's time (read by each claim and fan-out
     * round, plus the time passed since by this process's monotonic
     * clock), so that processes whose clocks disagree agree. Must outlive
     * the delivery. Waits use real time. */
    const odbox_clock *clock;
    odbox_delivery_hook_fn hook; /* NULL: none */
    void *hook_ud;
    /* A shard's replica more than this far behind its primary, as the
     * replica measures it (odbox_dialect.replica_lag_sql: stopped
     * replication is over any bound), is not read: the fan-out reads the
     * primary. 0: 1000 */
    int replica_max_lag_ms;
    /* A process serving a subscription is live while its last heartbeat
     * (in the database's time) is at most this old; it heartbeats every
     * third of it. 0: 30000 */
    int subscription_live_ms;
    /* How long a handling round's claim on the rows it calls holds (in
     * the database's time, or the clock's when one is given): another
     * round, in this process or another, claims such a row again only
     * once it has passed. 0: handler_timeout_ms + 30000. Shorter than
     * handler_timeout_ms lets a slow call's row be called again while the
     * call still runs. A call queued for a worker thread starts only
     * while its handler_timeout_ms fits in the lease (with a lease under
     * twice the timeout, in its first half); else its row is due again. */
    int lease_ms;
    /* Handling loops per shard in this process, each claiming and
     * calling its own batch (up to handling_batch rows) on the shared
     * worker threads: while one calls and writes its outcomes, another
     * claims. A wake-up starts one loop; a round that claimed a full
     * batch starts another. 0: 2 */
    int handling_loops;
} odbox_delivery_config;

typedef struct odbox_delivery odbox_delivery;

/* A delivery of handlers' event types on registry's shards. cfg may be
 * NULL (defaults); negative values are ODBOX_EINVAL, as is a registry of
 * handlers that is empty. Freezes handlers. registry and handlers are
 * borrowed and must outlive the delivery. Connects to nothing. */
int odbox_delivery_open(odbox_registry *registry, odbox_handlers *handlers, const odbox_delivery_config *cfg,
                        odbox_delivery **out, odbox_error *err);

/* Adds the fan-out job and/or the handling (which: a mask of
 * ODBOX_DELIVERY_FANOUT and ODBOX_DELIVERY_HANDLING) to jobs, before
 * odbox_jobs_start. The fan-out is a job, due again 1 ms after an
 * execution ends, so that the next one follows at once. The handling is
 * no job: its loops (handling_loops threads per shard) start with odbox_jobs_start in
 * every process that adds it, and stop with odbox_jobs_stop (running
 * calls get stop_wait_ms; the rows of calls cut off are given back,
 * an ordered subscription's at their lease's end). ODBOX_EINVAL for a bad mask, and
 * for a stop_wait_ms above half of jobs' shutdown_max_wait_ms (the rest
 * is for the round's statements: otherwise a stop gives up on
 * executions); ODBOX_ESTATE for a job added already. Not thread-safe. */
int odbox_delivery_add_jobs(odbox_delivery *d, odbox_jobs *jobs, int which, odbox_error *err);

/* The name of the fan-out or the handling (which: ODBOX_DELIVERY_FANOUT or
 * ODBOX_DELIVERY_HANDLING): ODBOX_FANOUT_JOB_NAME or ODBOX_HANDLING_JOB_NAME
 * for the default eventlog ("eventlog"), the same followed by "@" and the
 * eventlog's name for any other (the eventlog of the registry's default
 * shard), so that eventlogs sharing a database never compete for one row.
 * Only the fan-out has a row in scheduled_tasks (odbox jobs lists, pauses
 * and resumes it); the handling is a service of the job registry, without
 * a row, and its name is the one its log lines carry. NULL for a bad
 * which. Valid as long as d. */
const char *odbox_delivery_job_name(const odbox_delivery *d, int which);

/* Commits of exe in this process wake the fan-out of their shard at once
 * (exe must be on the delivery's registry). Detach, or free the delivery,
 * before freeing exe. attach: ODBOX_EINVAL when exe is attached already;
 * detach: ODBOX_ENOTFOUND when it is not. */
int odbox_delivery_attach(odbox_delivery *d, odbox_executor *exe, odbox_error *err);
int odbox_delivery_detach(odbox_delivery *d, odbox_executor *exe, odbox_error *err);

/* One round on one shard, on the calling thread, outside any job (tests,
 * tools); round (may be NULL) gets what it did. The database's errors
 * are returned with the shard named; a handler's failure is not an error
 * of the round. A handling round some of whose calls could not be started
 * (out of memory, or no worker thread) writes the others' outcomes and
 * returns ODBOX_ENOMEM: those rows are due again, and a job's loop waits
 * before its next round instead of claiming them again at once. */
int odbox_delivery_fanout_round(odbox_delivery *d, odbox_shard *s, odbox_delivery_round *round, odbox_error *err);
int odbox_delivery_handling_round(odbox_delivery *d, odbox_shard *s, odbox_delivery_round *round,
                                  odbox_error *err);

/* Stops listening, detaches the executors, and frees. Stop the job
 * registry first (odbox_jobs_stop). An execution still running then (the
 * stop gave up on it: ODBOX_ETIMEDOUT) is stopped, woken and waited for
 * until it has returned, so the handlers and the registry may be freed
 * right after this. That wait is bounded by the round's statements (the
 * pool's and the server's timeouts), stop_wait_ms for running calls and
 * the delivery hook; a warning is logged when it lasts more than
 * stop_wait_ms + 2 s. Rows a fan-out round handed to this process's
 * handling loops that none took are given back (two statements per
 * hand-off). A handler call still running (hung, or cut off by
 * a stop) is left running; its user data must outlive it. NULL-safe;
 * sets *d = NULL. Not thread-safe with the delivery's other functions. */
void odbox_delivery_free(odbox_delivery **d);

/* ---- subscriptions --------------------------------------------------------- */

/* Subscriptions are data: each handler's name, event types and former
 * names are recorded in <eventlog>.subscriptions (+ subscription_types),
 * and the processes serving it in subscription_processes, heartbeated in
 * the database's time. The fan-out writes one notification per event of a
 * type per subscription of that type that is not retired, whatever
 * handlers the process running it has. A delivery registers its handlers
 * on every shard at its first fan-out round, at odbox_delivery_add_jobs
 * (then heartbeats from a thread of its own) and at
 * odbox_delivery_register. A subscription gets the events that are still
 * undelivered when a fan-out round reads them: events fanned out before
 * it was registered reach it only by a replay. Its types are added to at
 * each registration, never removed. A process claims only the rows of
 * the types its own handler declares: when a newer version adds a type
 * to a handler, processes of the older one leave that type's rows to the
 * newer (they never see a type their code did not take); a type no
 * process's handler declares any more still gets rows, which wait
 * (PENDING): to stop taking a type, subscribe under a new name and retire
 * the old one. A handler registered with former
 * names retires the subscriptions of those names (its rows under them
 * still reach it). A retired subscription stays retired when a process
 * registers it again (a warning is logged): its existing rows are still
 * handled, it gets no new ones; subscribe again under a new name. */

/* Registers d's handlers and heartbeats this process on every shard of
 * its registry now. Thread-safe. */
int odbox_delivery_register(odbox_delivery *d, odbox_error *err);

typedef struct odbox_subscription {
    odbox_shard_id shard;
    char *name;
    char **types;          /* its event types */
    size_t ntypes;
    char *former_names;    /* separated by ' '; NULL: none */
    int64_t created_us;    /* registered (database time, UTC us) */
    int64_t retired_us;    /* 0: not retired */
    char **processes;      /* the live processes serving it ("host:pid:suffix") */
    size_t nprocesses;
    /* The message of the latest failed call a process recorded (a handler's
     * error, a relay's broker error, a timeout), at most once a second per
     * subscription and process, as UTF-8 (its first 1000 bytes; a byte
     * that is not UTF-8 becomes U+FFFD); NULL: none yet. A later success
     * leaves it. */
    char *last_error;
    int64_t last_error_us; /* when (database time, UTC us); 0: none */
} odbox_subscription;

/* The subscriptions of every shard (shard NULL) or one, by shard and
 * name; live_ms: the liveness window (0: 30000). Free with
 * odbox_subscriptions_free. Thread-safe. */
int odbox_subscriptions_list(const odbox_registry *r, const odbox_shard *shard, int live_ms,
                             odbox_subscription **out, size_t *n, odbox_error *err);
void odbox_subscriptions_free(odbox_subscription **p, size_t n);

#define ODBOX_SUBSCRIPTION_SETTINGS_VERSION 1
/* A subscription's settings as its shard records them: those of the
 * process that registered it last, which every process follows. The
 * caller allocates it and sets version; a later odbox adds fields only
 * at the end and writes only those of the caller's version. */
typedef struct odbox_subscription_settings {
    int version;      /* ODBOX_SUBSCRIPTION_SETTINGS_VERSION */
    int ordered;      /* 1: a model id's rows in order (odbox_handler_options.ordered) */
    int max_attempts; /* 0: no limit (odbox_handlers_set_max_attempts) */
} odbox_subscription_settings;

/* Reads into *out the settings of subscription name on shard (NULL: the
 * registry's default shard). ODBOX_EINVAL: a NULL registry, name or out,
 * an empty name, a version out of 1..ODBOX_SUBSCRIPTION_SETTINGS_VERSION;
 * ODBOX_ENOTFOUND: no subscription of that name on the shard. Thread-safe. */
int odbox_subscription_settings_get(const odbox_registry *r, const odbox_shard *shard, const char *name,
                                    odbox_subscription_settings *out, odbox_error *err);

/* Retires subscription name on every shard that has it: the fan-out
 * writes no more rows for it (the existing ones stay and are handled).
 * *retired (may be NULL) gets how many shards it was retired on now (0
 * when it was retired already). ODBOX_ENOTFOUND: "no subscription named
 * NAME". Thread-safe. */
int odbox_subscription_retire(const odbox_registry *r, const char *name, int64_t *retired, odbox_error *err);

/* Creates notifications of subscription name for the events of its types
 * still in the eventlog (retained) whose event_date >= since_us (UTC us),
 * skipping the rows that exist; *created (may be NULL) gets how many.
 * Events the fan-out has not reached yet are left to it (it writes their
 * rows, this subscription's included).
 * "Now" (the rows' created_date, and what the future is) is clock's, or
 * without one (NULL) each shard's database's time. ODBOX_EINVAL for a
 * since_us in the future or negative (the future is checked on each
 * shard before its rows are written); ODBOX_ENOTFOUND for no such
 * subscription; ODBOX_ESTATE for a retired one. Thread-safe. */
int odbox_subscription_replay(const odbox_registry *r, const char *name, int64_t since_us, const odbox_clock *clock,
                              int64_t *created, odbox_error *err);

/* ---- metrics ------------------------------------------------------------- */

#define ODBOX_HISTOGRAM_MAX_BOUNDS 16

/* Observations in seconds, as Prometheus histograms count them. */
typedef struct odbox_histogram {
    size_t nbounds;
    double bounds[ODBOX_HISTOGRAM_MAX_BOUNDS];      /* upper bounds, increasing */
    uint64_t counts[ODBOX_HISTOGRAM_MAX_BOUNDS + 1]; /* per bucket; [nbounds]: above them all */
    uint64_t count;
    double sum;
} odbox_histogram;

/* One handler in this process, since the delivery opened. */
typedef struct odbox_handler_metrics {
    char *handler;                 /* its name */
    char *event_type;              /* the types it takes, separated by ',' */
    uint64_t succeeded, failed_retry, expired_preflight, expired_postfailure;
    odbox_histogram duration_succeeded, duration_failed; /* handler calls */
    odbox_histogram lag;           /* completion_date (the action's commit, by the database's clock) to the success (this process's) */
} odbox_handler_metrics;

typedef struct odbox_delivery_metrics {
    odbox_handler_metrics *handlers; /* every handler, in the order added */
    size_t nhandlers;
    uint64_t events_fanned_out;      /* events flipped to delivered */
    uint64_t notifications_created;  /* rows sent to the fan-out's inserts */
    uint64_t unknown_handler;        /* failures of rows no handler answers to: 0, rounds claim only their own */
    uint64_t round_errors;           /* rounds that failed (database errors), both jobs */
    /* From the database at the time of the call (odbox_notifications_metrics
     * on the delivery's registry): per shard and handler name. */
    odbox_notification_stats *db;
    size_t ndb;
} odbox_delivery_metrics;

/* This process's numbers and the database's (db_options may be NULL: every
 * shard, the delivery's clock, the default lag window). out is filled
 * whole or not at all; free it with odbox_delivery_metrics_clear. */
int odbox_delivery_metrics_read(odbox_delivery *d, const odbox_notification_metrics_options *db_options,
                           odbox_delivery_metrics *out, odbox_error *err);
void odbox_delivery_metrics_clear(odbox_delivery_metrics *m);

/* Both in the Prometheus text format (*text malloc'd): the database's
 * families (odbox_notifications_prometheus) and this process's:
 *   odbox_handler_calls_total{handler,outcome}        counter (outcome: succeeded,
 *       failed_retry, expired_preflight, expired_postfailure)
 *   odbox_handler_duration_seconds{handler,outcome}   histogram (succeeded, failed)
 *   odbox_handler_lag_seconds{handler}                histogram (commit to success)
 *   odbox_handler_calls_hung{handler}                 gauge: calls abandoned at
 *       handler_timeout_ms that have not returned (at the handler's cap,
 *       its max_in_flight below the workers, else the workers, this
 *       process starts and claims none of its calls until one returns)
 *   odbox_fanout_events_total, odbox_fanout_notifications_total,
 *   odbox_handler_unknown_total, odbox_delivery_round_errors_total,
 *   odbox_handling_handed_off_total (rows this process's handling took
 *       from its own fan-out's writes, claimed as they were written),
 *   odbox_handling_given_back_total (rows of such hand-offs that no loop
 *       took in time, given back to every process)                     counters */
int odbox_delivery_prometheus(odbox_delivery *d, const odbox_notification_metrics_options *db_options, char **text,
                              odbox_error *err);

#ifdef __cplusplus
}
#endif
#endif
