/* odbox — helpers shared by the executor's integration suites (action,
 * persist, shards): an executor on the dummies fixture, a scripted perform,
 * the event rows read back and checked, and a recording hook. */
#ifndef ODBOX_TESTS_ACTIONS_H
#define ODBOX_TESTS_ACTIONS_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include "dummies.h"

#define NS "com.example.odbox_test"
#define SLACK_US 5000000 /* "within a few seconds of now" */

extern const odbox_event_type EV_CREATED, EV_CHANGED, EV_POISON;

/* An executor in namespace NS on f's registry, DUMMY_T and TAG_T registered. */
odbox_executor *open_exe(dfx *f);

/* ---- a scripted perform: stages what the script says, records what it saw */

#define MAXS 8

typedef struct emit_spec {
    const odbox_model *m;
    const odbox_event_type *et;
    const char *payload; /* JSON text, parsed per call */
} emit_spec;

typedef struct script {
    const odbox_model *add[MAXS];
    size_t nadd;
    const odbox_model *upd[MAXS];
    size_t nupd;
    emit_spec emit[MAXS];
    size_t nemit;
    int codes[MAXS];       /* perform's return on attempt k (0: go on) */
    const char *result;    /* JSON handed to odbox_plan_set_result */
    /* observed */
    int calls;
    int attempts_seen[MAXS];
    char action_ids[MAXS][37];
    odbox_registry *registry_seen;
    int stage_rc;          /* the first failing staging call's code */
    int stage_step;        /* 1-based index of that call (adds, updates, emits) */
    int64_t next_version[MAXS];
} script;

/* The perform callback of a script (user = the script). */
int scripted(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err);
/* Executes action name performing s; params_json and cfg may be NULL. */
int execute_script(odbox_executor *exe, const char *name, script *s, const char *params_json,
                   const odbox_exec_config *cfg, odbox_result *res, odbox_error *e);
/* The same, and expects success. */
void execute_script_ok(odbox_executor *exe, const char *name, script *s, const char *params_json, odbox_result *res);

/* Executes action name (perform with user) with idempotency key and the
 * params that params_json holds (it must parse). */
int execute_keyed_json(odbox_executor *exe, const char *name, odbox_perform_fn perform, void *user, const char *key,
                       const char *params_json, odbox_result *res, odbox_error *e);

/* Bounds every lock wait of the default shard's pooled sessions to ms
 * (the dialect's bounded_session_sql; odbox's own is 50 s), for a test
 * that waits on a lock an open transaction holds. */
void dfx_short_lock_waits(dfx *f, int ms);
/* A JSON object nested depth levels deep, {"a": [[...]]}, in buf (at
 * least depth * 2 + 8 bytes). */
const char *nested_json(char *buf, int depth);

/* A perform (user = a maker) that adds a dummy named params.name with
 * params.amount and its created event, and sets a result; counts its
 * calls, and refuses (ODBOX_EINVAL, a business rule) when told to. */
typedef struct maker {
    int calls;
    int refuse;
} maker;
int make_dummy(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err);

/* ---- many small actions from threads ------------------------------------- */

#define MANY_MAX_THREADS 8

/* nthreads threads each run per_thread actions on exe, every one emitting
 * one event on a dummy, which add also writes (else only its event is). */
typedef struct many {
    odbox_executor *exe;
    int per_thread, add, nthreads;
    pthread_t t[MANY_MAX_THREADS];
    atomic_int failures;
} many;

void many_start(many *m, odbox_executor *exe, int nthreads, int per_thread, int add);
/* Waits for the threads and asserts that every action succeeded. */
void many_wait(many *m);

/* ---- event rows ----------------------------------------------------------- */

typedef struct evrow {
    char id[64], ns[256], action_id[64], action_name[256];
    char params[8192];
    int64_t started, completion, event_date;
    char model_id[256], model_type[256], event_type[256], payload[8192];
    int model_id_null, model_type_null, event_type_null, payload_null;
    int delivered, delivered_null;
} evrow;

/* Reads the shard's event rows ordered by event type, then model id. */
int read_events(dfx *f, int shard, evrow *rows, int cap);
/* What every row of one execution shares, and what every row must be. */
void check_rows(const evrow *rows, int n, const char *action_id, const char *action_name, const char *params_json,
                int64_t t0, int64_t t1);
void assert_sentinel(const evrow *r);
void assert_event(const evrow *r, const odbox_model *m, const char *type, const char *payload);
/* A dummy read back by id from the primary, and its amount. */
odbox_model *find_dummy(dfx *f, const char *id);
int64_t amount_of(dfx *f, const char *id);
/* Nothing at all on the shard: no domain rows, no events. */
void assert_empty(dfx *f, int shard);

/* ---- hooks: record every call, fail at one point on one shard ------------- */

typedef struct hookrec {
    int fail_at;                 /* hook point that fails (0: none) */
    int fail_group, fail_member; /* -1: any shard */
    int fail_code;
    int n;
    int at[16];
    odbox_shard_id shard[16];
    /* visibility probes at DOMAIN_WRITTEN / EVENTS_WRITTEN */
    dfx *f;
    int64_t dummies_inside, events_inside, dummies_outside;
} hookrec;

int record_hook(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn);

/* An executor hook (ud: the dfx) that ends the writing session, from the
 * dfx's shard 0.0 connection, once the events are written and before the
 * COMMIT is sent: the COMMIT meets a lost connection. */
int kill_before_commit(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn);

#endif
