/* odbox — what the delivery's modules share: the handler registry
 * (handlers.c), the delivery and its job loops (delivery.c), the fan-out
 * round (delivery_fanout.c), the handling round (delivery_handling.c),
 * the worker threads (delivery_workers.c) and the in-process metrics
 * (delivery_metrics.c). Not installed. */
#ifndef ODBOX_DELIVERY_INTERNAL_H
#define ODBOX_DELIVERY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include "internal.h"
#include "wake.h"
#include "odbox/handlers.h"
#include "odbox/uuid.h"

/* ---- the registry of handlers ------------------------------------------- */

/* A handler's calls of one handling round made at once (a relay's
 * publishes, whose confirms are then awaited together): rcs[i] 0, or a
 * negative ODBOX_E* code with errs[i] set, for envs[i]. */
typedef void (*odbox_hbatch_fn)(void *user, size_t n, const odbox_envelope *const *envs, int *rcs,
                                odbox_error *errs);

typedef struct odbox_hentry {
    char *name;
    char **former;
    size_t nformer;
    char **types; /* the event types it takes */
    size_t ntypes;
    odbox_handler_fn fn;
    void *user;
    odbox_hbatch_fn batch; /* NULL: one call per row (relay.c sets it) */
    odbox_handler_options options;
    int max_attempts; /* 0: none (odbox_handlers_set_max_attempts) */
} odbox_hentry;

struct odbox_handlers {
    odbox_hentry *v;
    size_t n, cap;
    atomic_int frozen; /* a delivery opened on it: read-only from then on */
};

/* The index of the handler that answers to name (its name or one of its
 * former names), or -1. */
int odbox_handlers_find(const odbox_handlers *h, const char *name);

/* 1 when handler k of h declares event_type (the claims take only the
 * rows of the types a process's handler declares). */
int odbox_handlers_takes(const odbox_handlers *h, int k, const char *event_type);

/* ---- worker threads ------------------------------------------------------ */

typedef struct odbox_workers odbox_workers;

enum {
    ODBOX_WORK_QUEUED = 1,
    ODBOX_WORK_RUNNING,
    ODBOX_WORK_DONE,      /* run returned */
    ODBOX_WORK_NOT_RUN,   /* never started: a stop came first, or no thread was left */
    ODBOX_WORK_TIMED_OUT, /* still running at the timeout: abandoned */
    ODBOX_WORK_CUT_OFF,   /* still running at a stop's bound: abandoned */
    ODBOX_WORK_LATE,      /* never started: no thread was free before its start_by */
    ODBOX_WORK_HELD       /* never started: its group's hung calls reached its group_cap */
};

/* A call to run: embed it first in a struct of one's own. Its submitter
 * holds one reference (refs = 1); abandoning it adds one for the thread
 * still running it, which drops it (release) once run returns, so that
 * the item lives as long as either needs it. */
typedef struct odbox_work {
    void (*run)(struct odbox_work *w);     /* on a worker thread */
    void (*release)(struct odbox_work *w); /* drops a reference; the last one frees */
    atomic_int refs;
    /* the pool's, under its lock while the batch runs */
    int state;
    int64_t started_us;                    /* monotonic */
    int64_t start_by_us;                   /* monotonic; 0: any time */
    struct odbox_work *next;
    void *runner;
    /* the submitter's: at most group_cap items of one group (a handler)
     * run at once, abandoned ones that have not returned (hung) included:
     * an item waits in the queue for one of them to end, and is not
     * started at all (HELD) while all of them are hung, so a handler that
     * never returns costs a bounded number of threads. group_cap <= 0, or
     * a group out of the pool's range: no bound */
    int group, group_cap;
} odbox_work;

/* A pool of up to n threads, started when a batch first needs them, and
 * the counts of hung calls of groups 0..ngroups-1. */
int odbox_workers_open(int n, size_t ngroups, odbox_workers **out, odbox_error *err);

/* Runs batch[0..n-1] on the pool and returns once none is queued or
 * running: each ends DONE, TIMED_OUT (ran timeout_ms; its thread was
 * abandoned and replaced), NOT_RUN, CUT_OFF, LATE (no thread was free
 * before start_by_us, monotonic; 0: any time) or HELD (its group's hung
 * calls reached its group_cap while it waited). Once *stop (may be NULL)
 * is set, queued items are not started and running ones get stop_wait_ms
 * more. Several batches may run at once, from several threads. */
void odbox_workers_run(odbox_workers *p, odbox_work **batch, size_t n, int timeout_ms, int64_t start_by_us,
                       const atomic_int *stop, int stop_wait_ms);

/* The calls of group abandoned (TIMED_OUT or CUT_OFF) that have not
 * returned yet: each holds a thread of its own. */
int odbox_workers_hung(odbox_workers *p, int group);

/* Makes waiting batches look at their stop flags now. */
void odbox_workers_poke(odbox_workers *p);

/* Joins the idle threads; abandoned ones keep running and free what is
 * left when the last one ends. No batch may be running. NULL-safe. */
void odbox_workers_free(odbox_workers **p);

/* ---- the delivery --------------------------------------------------------- */

/* The jobs, as indexes: fan-out 0, handling 1. */
enum { JOB_FANOUT = 0, JOB_HANDLING = 1, NJOBS = 2 };

/* An event type with handlers. */
typedef struct odbox_dtype {
    const char *name;   /* the handlers' string */
    size_t *handlers;   /* indexes into the registry of handlers */
    size_t n;
} odbox_dtype;

/* Notification rows a fan-out round of this process claimed as it wrote
 * them, for its own handling loops (delivery_handoff.c). */
typedef struct odbox_handoff {
    struct odbox_handoff *next;
    char token[ODBOX_UUID_LEN + 1]; /* their lease_owner */
    int64_t claimed_at_us;          /* the database's now when they were written */
    int64_t lease_end_mono_us;      /* when the lease ends, by this process's clock */
    int64_t queued_mono_us;         /* when the fan-out queued it */
    size_t n;
    char (*ids)[ODBOX_UUID_LEN + 1];
} odbox_handoff;

typedef struct odbox_dshard {
    odbox_shard *shard;
    odbox_shard_id id;
    int pending[NJOBS];   /* under the delivery's mu: woken since its last round */
    int64_t polled_us[NJOBS]; /* under mu: when a loop of the job last began a round (monotonic) */
    int failing[NJOBS];   /* under mu: its last round failed (logged once per streak) */
    int idle[NJOBS];      /* under mu: the job's loops waiting for a wake-up or their poll */
    int running[NJOBS];   /* under mu: the job's loops in this process */
    /* per handling loop (handling_loops): the monotonic time its round
     * began, 0 between rounds */
    _Atomic int64_t *round_since_us;
    odbox_handoff *handoff, *handoff_last; /* under mu: for the handling loops, oldest first */
    /* Under mu: what the fan-out's last flips wait for on the replica.
     * The primary's position after them (malloc'd): the primary is read
     * until the replica has applied it; or, flips without a position
     * (unknown = 1): the primary is read until a round there flips
     * nothing. */
    char *replica_wait;
    int replica_wait_unknown;
    /* Under mu: subscriptions (subscriptions.c). registered: the
     * handlers were recorded on this shard; beat_us: the monotonic time
     * of the last heartbeat begun (0: none); warned: retired ones logged. */
    int subs_registered, subs_warned;
    int64_t subs_beat_us;
    /* per handler: the monotonic time its last error was recorded on this
     * shard (subscription_errors.c) */
    _Atomic int64_t *error_noted_us;
    /* per handler: its subscription's max attempts as this process last
     * read them on this shard (0: none), -1 before the first read */
    atomic_int *max_attempts;
    /* the claims on this shard so far: which handler a claim reads first
     * (per shard: one count for all would give a shard the same turns
     * whenever the shards' claims alternate) */
    atomic_uint claim_turn;
    /* under mu: calls of ordered subscriptions that outlived their
     * timeout, whose claims are kept until they return (delivery_kept.c) */
    struct call *kept;
} odbox_dshard;

typedef struct odbox_djob {
    odbox_delivery *d;
    int kind;             /* JOB_FANOUT or JOB_HANDLING */
    odbox_jobs *jobs;     /* where it was added; NULL before */
} odbox_djob;

/* Resolved configuration. */
typedef struct odbox_dcfg {
    int batch[NJOBS], poll_ms[NJOBS];
    int64_t backoff_base_us, backoff_cap_us, retention_us;
    int workers, handler_timeout_ms, stop_wait_ms, execution_max_ms, listen;
    int replica_max_lag_ms;
    int live_ms;          /* subscription_live_ms */
    int64_t lease_us;
    int loops;            /* handling_loops */
} odbox_dcfg;

typedef struct odbox_dmetrics odbox_dmetrics;

/* One execution of a job (delivery.c), or the handling loops' run
 * (own): the state its shard threads share. */
typedef struct execution {
    odbox_delivery *d;
    int job;
    int own;                /* the handling loops: started by the delivery, not a job's execution */
    atomic_int stop;
    struct execution *next; /* the delivery's running list, under its mu */
} execution;

struct odbox_delivery {
    odbox_registry *r;
    odbox_handlers *h;
    odbox_dcfg cfg;
    odbox_clock clock;
    odbox_delivery_hook_fn hook;
    void *hook_ud;
    odbox_dtype *types;
    size_t ntypes;
    odbox_dshard *shards;
    size_t nshards;
    odbox_djob jobs[NJOBS];
    char job_name[NJOBS][ODBOX_JOB_NAME_MAX + 1]; /* per eventlog: odbox_job_name_for */
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* CLOCK_MONOTONIC: a shard is woken, an execution stops or returns */
    odbox_wake *wake;
    int listening;        /* under mu: odbox_wake_start was called */
    pthread_mutex_t attach_mu;
    odbox_executor **attached; /* under attach_mu */
    size_t nattached;
    odbox_workers *workers;
    odbox_dmetrics *metrics;
    execution *running;   /* under mu: the executions between their start and return */
    /* the handling loops' link with the job registry that starts and stops
     * them (delivery.c); NULL before odbox_delivery_add_jobs */
    struct hservice *svc;
    int db_time;          /* no clock given: leases are in the database's time */
    int closing;          /* under mu: odbox_delivery_free began; no execution starts */
    char process[128];    /* this process in subscription_processes: host:pid:suffix */
    pthread_t beat;       /* the heartbeat thread, from odbox_delivery_add_jobs */
    int beat_started;
};

/* The shard's entry; NULL when s is not the delivery's registry's. */
odbox_dshard *odbox_delivery_shard(odbox_delivery *d, const odbox_shard *s);

/* Lets go of ds's kept calls (delivery_kept.c): their claims are no
 * longer renewed and end with their lease. */
void odbox_kept_drop(odbox_dshard *ds);

/* The threads handler k's calls may hold at once in this process, hung
 * ones (abandoned, still running) included: its max_in_flight when below
 * the workers, else the workers. With that many hung, none of its calls
 * start here and none of its rows are claimed here. */
static inline int odbox_delivery_thread_cap(const odbox_delivery *d, size_t k)
{
    int limit = d->h->v[k].options.max_in_flight;
    return limit > 0 && limit < d->cfg.workers ? limit : d->cfg.workers;
}

/* 1 when handler k's hung calls here reached its cap. */
static inline int odbox_delivery_hung_full(const odbox_delivery *d, size_t k)
{
    return odbox_workers_hung(d->workers, (int)k) >= odbox_delivery_thread_cap(d, k);
}

/* ---- rounds --------------------------------------------------------------- */

/* What a round gets from the delivery that runs it (delivery.c: the public
 * round functions and the job loops), so that the rounds
 * (delivery_fanout.c, delivery_handling.c, delivery_claim.c) never call
 * back into delivery.c (one-way layers, docs/architecture.md): the
 * delivery's shared state (its configuration, handlers, metrics, hook and
 * wake-ups, and mu for the shard's fields), the shard, the stop flag and
 * the clock. */
typedef struct odbox_round_ctx {
    odbox_delivery *d;
    odbox_dshard *ds;
    const atomic_int *stop; /* may be NULL: cuts a handling round's waits for calls short */
    odbox_clock clock;      /* the delivery's time */
    /* may be NULL: called by a handling round whose claim filled its
     * batch, before its calls run */
    void (*claimed_full)(const struct odbox_round_ctx *x);
    int *took_handoff; /* may be NULL: set to 1 by a handling round that read a hand-off */
} odbox_round_ctx;

static inline int64_t odbox_round_now(const odbox_round_ctx *x) { return x->clock.now_us(x->clock.ud); }

int odbox_fanout_round(const odbox_round_ctx *x, odbox_delivery_round *rd, odbox_error *err);
int odbox_handling_round(const odbox_round_ctx *x, odbox_delivery_round *rd, odbox_error *err);

/* One thread's loop of rounds on one shard (delivery_loop.c), for an
 * execution: rounds until x->stop, waiting between them for a wake-up or
 * the poll. */
typedef struct shard_loop {
    execution *x;
    odbox_dshard *ds;
    int slot; /* a handling loop's in the shard's round_since_us */
    pthread_t thread;
    int started;
} shard_loop;
void *odbox_shard_loop_main(void *arg); /* arg: a shard_loop */

/* ---- hand-offs (delivery_handoff.c; giving back: delivery_handling.c) ---------- */

/* Whether the handling loops of this process can take nrows at once: no
 * earlier wake-up or hand-off still waits for a loop, and the loops that
 * wait claim nrows in their first round. Takes mu. */
int odbox_handling_free_for(odbox_delivery *d, odbox_dshard *ds, size_t nrows);

/* Whether a fan-out round may hand its rows to this process's handling
 * loops: they run, none has been in its round longer than busy_us (in a
 * long call: the rows would wait for it), and no hand-off waits for
 * them. Takes mu. */
int odbox_handoff_room(odbox_delivery *d, odbox_dshard *ds, int64_t busy_us);

/* A hand-off that waits longer than this for a loop (the loops went into
 * long calls after it was made) is given back, to any process's claims:
 * by the next fan-out round here, or by the handling's supervisor, which
 * looks every HANDOFF_CHECK_MS (the fan-out job may have moved to another
 * process). */
#define HANDOFF_WAIT_US 200000
#define HANDOFF_CHECK_MS 100

/* Gives back the hand-offs that waited longer than HANDOFF_WAIT_US, and
 * wakes other processes for their rows. Answers how many it gave back. */
int odbox_handoff_expire(odbox_delivery *d, odbox_dshard *ds);

/* Queues ho for ds's handling loops (taking it) and wakes one. */
void odbox_handoff_push(odbox_delivery *d, odbox_dshard *ds, odbox_handoff *ho);

/* The oldest hand-off of ds (NULL: none), a loop woken for the next. */
odbox_handoff *odbox_handoff_pop(odbox_delivery *d, odbox_dshard *ds);

/* Puts back a hand-off whose take failed, first in line, unless its
 * lease has ended (then its rows are due to anyone: it is freed). */
void odbox_handoff_requeue(odbox_delivery *d, odbox_dshard *ds, odbox_handoff *ho);

void odbox_handoff_free(odbox_handoff *ho);

/* Gives back the claims of every hand-off still queued (the handling
 * loops stopped before taking them): due again at once. */
void odbox_handoff_give_back(odbox_delivery *d);

/* The backoff before try attempts + 1 after attempts failures: base x
 * 2^(attempts-1), at most cap (Ekbatan's Backoff, microseconds;
 * delivery_handling.c). */
int64_t odbox_delivery_backoff_us(const odbox_dcfg *c, int attempts);

/* ---- subscriptions (subscriptions.c) ------------------------------------------ */

/* Records the handlers on ds's eventlog (once) and heartbeats this
 * process there, when force or a heartbeat is due. */
int odbox_subs_beat(odbox_delivery *d, odbox_dshard *ds, int force, odbox_error *err);

/* The max attempts of handler k's subscription on ds (0: none): as the
 * database records them, read at the heartbeat; the handler's own until
 * the first read. */
int odbox_subs_max_attempts(const odbox_delivery *d, const odbox_dshard *ds, int k);
/* A subscriptions.max_attempts value read (null: SQL NULL) as a limit:
 * 0 (none) for NULL or a value odbox never writes. */
int odbox_subs_limit_of(int64_t max, int null);

/* Prepares sql (malloc'd or NULL: out of memory, freed here), binds the
 * texts args[0..n-1], runs it (subscriptions.c, subscription_replay.c). */
int odbox_subs_run(odbox_conn *c, char *sql, const char *const *args, size_t n, odbox_stmt **s, odbox_error *err);
/* The eventlog's table name, quoted as c's dialect writes it, into out. */
void odbox_subs_table(const odbox_conn *c, const char *eventlog, const char *name, char *out, size_t cap);
/* Appends a copy of s to *v (*n of them); ODBOX_ENOMEM. */
int odbox_subs_strv_add(char ***v, size_t *n, const char *s);

/* An event type with the subscriptions (not retired) that take it. */
typedef struct odbox_subtype {
    char *name;
    char **subs;
    size_t n;
} odbox_subtype;

/* Every event type with subscriptions on eventlog, on c (one statement);
 * *db_now gets the database's time (0 when there are none). */
int odbox_subs_read_types(odbox_conn *c, const char *eventlog, odbox_subtype **out, size_t *n, int64_t *db_now,
                          odbox_error *err);
void odbox_subs_types_free(odbox_subtype *t, size_t n);

/* The process id, at open. */
void odbox_subs_process_id(odbox_delivery *d);
/* The heartbeat thread: started by add_jobs, stopped (joined) at free,
 * after closing is set. */
int odbox_subs_start_beat(odbox_delivery *d, odbox_error *err);
void odbox_subs_stop_beat(odbox_delivery *d);
/* A clean stop: stops the heartbeat and removes this process's rows of
 * subscription_processes where it recorded them (a failure is logged:
 * they then age out), so that it is no longer listed live. After the
 * rounds have stopped. */
void odbox_subs_leave(odbox_delivery *d);

/* Records message as the last error of handler (an index into d's
 * handlers) on ds's eventlog, on c, unless one was recorded there less
 * than a second ago. Best effort: a failure is logged, not returned. */
void odbox_subs_note_error(odbox_delivery *d, odbox_dshard *ds, odbox_conn *c, int handler, const char *message);

/* ---- in-process metrics ------------------------------------------------------ */

int odbox_dmetrics_new(const odbox_handlers *h, odbox_dmetrics **out, odbox_error *err);
void odbox_dmetrics_free(odbox_dmetrics **m);

/* One handler's outcome (index into the registry): outcome one of the
 * ODBOX_DM_* below; duration_us < 0: no call; lag_us for a success. */
enum { ODBOX_DM_SUCCEEDED = 0, ODBOX_DM_FAILED_RETRY, ODBOX_DM_EXPIRED_PREFLIGHT, ODBOX_DM_EXPIRED_POSTFAILURE };
typedef struct odbox_dm_outcome {
    int handler;         /* -1: a row no handler answers to */
    int outcome;
    int64_t duration_us; /* < 0: not called */
    int64_t lag_us;
} odbox_dm_outcome;

void odbox_dmetrics_record(odbox_dmetrics *m, const odbox_dm_outcome *o, size_t n);
void odbox_dmetrics_fanout(odbox_dmetrics *m, size_t delivered, size_t notifications);
void odbox_dmetrics_round_error(odbox_dmetrics *m);
/* Rows a handling round took from a hand-off. */
void odbox_dmetrics_handoff(odbox_dmetrics *m, size_t taken);
/* Rows of a hand-off that no loop took, given back. */
void odbox_dmetrics_given_back(odbox_dmetrics *m, size_t given);

/* Begins a delivery transaction: the dialect's isolation for it, then
 * first_sql (may be NULL) inside it. */
int odbox_delivery_begin(odbox_conn *c, const char *first_sql, odbox_error *err);

#endif
