/* odbox — helpers of the handler suites (test_handlers.c, test_handlers_jobs.c):
 * two shards with an executor, handlers whose behaviour a test scripts
 * and whose calls are recorded, events emitted through real actions,
 * and the notification rows read back. */
#ifndef ODBOX_TESTS_HANDLERS_H
#define ODBOX_TESTS_HANDLERS_H

#include <pthread.h>
#include <stdatomic.h>
#include "actions.h"

#define EPOCH_2030 INT64_C(1893456000000000)
#define SEC_US INT64_C(1000000)

/* One call as the handler saw it. */
typedef struct hcall {
    char handler[64];      /* the handler that was called */
    char row_handler[64];  /* env->handler_name */
    char notification_id[37], event_id[37], action_id[37];
    char ns[128], action_name[128], event_type[128], model_id[64], model_type[64];
    char params[512], payload[512];
    int payload_null, model_null;
    int64_t started, completion, event_us;
    odbox_shard_id shard;
    int attempt;
} hcall;

#define HREC_MAX 512

typedef struct hrec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hcall calls[HREC_MAX];
    int n;
} hrec;

/* A handler's behaviour (its user data). */
typedef struct hbeh {
    hrec *rec;
    const char *name;
    atomic_int calls;
    int fail_first;        /* the first this many calls fail */
    int fail_always;
    const char *fail_message; /* a failure's message (else "<name>: scripted failure of call N") */
    int fail_code;         /* a failure's code (0: ODBOX_EDB) */
    atomic_int block;      /* while set, a call waits (at most 30 s) */
    atomic_int blocked;    /* calls waiting now */
    atomic_int finished;   /* calls returned (the last thing a call does) */
    /* chaining: each call runs an action on chain_exe emitting chain_type
     * on a model of the event's shard, with {"source": event_id} as params */
    odbox_executor *chain_exe;
    const odbox_event_type *chain_type;
} hbeh;

int hb_handle(const odbox_envelope *env, void *user, odbox_error *err);

void hrec_init(hrec *r);
void hrec_destroy(hrec *r);
int hrec_count(hrec *r, const char *handler);
/* The index of the first call of handler for event_id, or -1. */
int hrec_find(hrec *r, const char *handler, const char *event_id);
/* Waits (up to bound_ms) until handler has n calls; 1 when it has. */
int hrec_wait(hrec *r, const char *handler, int n, int bound_ms);

void hbeh_init(hbeh *b, hrec *rec, const char *name);

/* A registry of handlers: (name, event type, behaviour) triples, the
 * behaviour's name set to the handler's. */
odbox_handlers *handlers_of(int n, const char *const *names, const char *const *types, hbeh *const *behs);
/* A registry of one handler, name on event_type calling fn with user,
 * with options o (NULL: none). */
odbox_handlers *one_handler_on(const char *name, const char *event_type, odbox_handler_fn fn, void *user,
                               const odbox_handler_options *o);

/* Emits n events of type et, one action each, on models of shard
 * (0, member); event ids into ids (may be NULL, else n of them). The
 * payload is {"n": 7, "text": "café 'q'"}, the params {"who": "test"}. */
void emit_n(dfx *f, odbox_executor *exe, int member, const odbox_event_type *et, int n, char (*ids)[37]);
/* The id of the one event row action_id wrote on shard (0, member). */
void event_of_action(dfx *f, int member, const char *action_id, char out[37]);
/* An action that emits nothing: a sentinel row on the default shard. */
void emit_none(dfx *f, odbox_executor *exe);

/* SQL name of a table of shard member's eventlog. */
const char *ntab(dfx *f, int member);
const char *etab(dfx *f, int member);

/* Rows of event_notifications on a shard WHERE where. */
int64_t nrows(dfx *f, int member, const char *where);
/* A notification's column, by event id and handler. */
int64_t ncol_ts(dfx *f, int member, const char *event_id, const char *handler, const char *col);
int64_t ncol_int(dfx *f, int member, const char *event_id, const char *handler, const char *col);
const char *nstate(dfx *f, int member, const char *event_id, const char *handler);

/* Runs rounds until one finds nothing (at most 50); the round counts summed. */
void fanout_until_idle(odbox_delivery *d, dfx *f, odbox_delivery_round *sum);
void handle_until_idle(odbox_delivery *d, dfx *f, odbox_delivery_round *sum);
void round_ok(int rc, const odbox_error *e);

int64_t mono_ms_now(void);

/* A fixture of nshards shards with an executor, a call record and a
 * manual clock at EPOCH_2030; hx_deliver opens a delivery of h (taken)
 * with cfg (NULL: defaults) on that clock; rounds run on one shard. */
typedef struct hx {
    dfx f;
    odbox_executor *exe;
    hrec rec;
    odbox_manual_clock *clk;
    odbox_handlers *h;
    odbox_delivery *d;
} hx;
void hx_open(hx *x, int nshards);
void hx_deliver(hx *x, odbox_handlers *h, odbox_delivery_config *cfg);
void hx_close(hx *x);
odbox_shard *hx_shard(hx *x, int member);
odbox_delivery_round hx_fanout(hx *x, int member);
odbox_delivery_round hx_handle(hx *x, int member);
/* The last error of subscription name on shard member, malloc'd (NULL:
 * none); *at when (0: none). Fails the test when there is no such
 * subscription. */
char *last_error_of(hx *x, int member, const char *name, int64_t *at);

/* A fixture of nshards shards with an executor and a call record for the
 * delivery as jobs, in real time (test_handlers_jobs.c,
 * test_handlers_leases.c, test_handlers_handoff.c): jx_run opens a
 * delivery of h (taken) with cfg, its jobs (which: ODBOX_DELIVERY_FANOUT | ..._HANDLING) on a job registry
 * of their own polling every poll_ms (jx_run: 200), started; commits of
 * x->exe attached. Its rounds are counted per job and shard. */
typedef struct jx {
    dfx f;
    odbox_executor *exe;
    hrec rec;
    odbox_handlers *h;
    odbox_delivery *d;
    odbox_jobs *jobs;
    atomic_int rounds[2][2]; /* ROUND_DONE per job and shard */
    atomic_int fail_rounds;  /* this many handling rounds fail at CALLS_DONE */
    /* the delivery's warnings since jx_open, for a failing test to print */
    pthread_mutex_t log_mu;
    char warnings[2048];
    char described[1024];
} jx;
void jx_open(jx *x, int nshards);
void jx_run_polling(jx *x, odbox_handlers *h, odbox_delivery_config *cfg, int which, int poll_ms);
void jx_run(jx *x, odbox_handlers *h, odbox_delivery_config *cfg, int which);
/* Until each job of which has finished a round on every shard. */
void jx_wait_rounds(jx *x, int which);
void jx_close(jx *x);
/* The delivery hook jx_run sets (ud = the jx): counts ROUND_DONE, and
 * fails the next fail_rounds handling rounds at CALLS_DONE (rows due again). */
int jx_count_rounds(void *ud, odbox_delivery_point at, odbox_shard *s, odbox_conn *conn,
                    const odbox_delivery_round *r);
/* Deletes the rows of the delivery's jobs (named per eventlog,
 * odbox-event-*) from the job tables. */
void jx_clear_job_rows(odbox_conn *c);
/* The warnings logged since jx_open (empty: none). */
const char *jx_warnings(jx *x);
/* The rows of every shard and the rounds run, for a failed wait to say. */
const char *jx_describe(jx *x);

/* A second delivery on a registry of its own (sharing nothing with x's in
 * this process) of shard 0.0, that runs the handling job with handler
 * "h" of b on event_type, polling every poll_ms: only the server's NOTIFY
 * (listen: LISTEN, and wait until it listens) wakes it sooner. Open
 * returns after its first round (it found nothing); rounds counts its
 * handling rounds. */
typedef struct other_proc {
    odbox_registry *r;
    odbox_delivery *d;
    odbox_jobs *j;
    odbox_handlers *h;
    atomic_int rounds;
} other_proc;
void other_open(other_proc *o, jx *x, hbeh *b, const char *event_type, int listen, int poll_ms);
void other_close(other_proc *o);

#endif
