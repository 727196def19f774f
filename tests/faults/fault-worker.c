/* odbox — the processes of the faults tier (tests/faults/faults.test),
 * which share nothing but the database:
 *
 *   fault-worker setup DSN          migrates the shard, creates fault_calls
 *                                   and call_log
 *   fault-worker write DSN COUNT    runs COUNT actions (0: until SIGTERM;
 *                                   FAULT_WRITE_PAUSE_MS=N: N ms between
 *                                   actions); prints per action
 *                                   "<action_id> <outcome> <code>", outcome
 *                                   committed | refused | doubt-committed |
 *                                   doubt-uncommitted; goes on after errors
 *   fault-worker work DSN           runs the fan-out and handling jobs with
 *                                   short poll/heartbeat/dead windows until
 *                                   SIGTERM (the test kill -9s it); with
 *                                   FAULT_HANDLERS=alpha,gamma (say) only
 *                                   those handlers: an older version of the
 *                                   service in a rolling deploy; with
 *                                   FAULT_SLEEP_MS=20-50 (say) each call
 *                                   sleeps a random 20 to 50 ms and logs
 *                                   its start and end in call_log, and
 *                                   FAULT_LEASE_MS sets lease_ms (the
 *                                   handler timeout is half of it)
 *   fault-worker pending DSN        prints what is not finished yet
 *   fault-worker check DSN LOG      checks the end state against the
 *                                   writer's LOG; prints the duplicates
 *   fault-worker calls DSN KILLS    checks call_log (KILLS: "<pid> <epoch
 *                                   us>" per kill -9): no (event,
 *                                   subscription) pair without a SUCCEEDED
 *                                   row, no two calls of a row overlapping
 *                                   (a killed process's open call ends at
 *                                   its kill); prints the repeated calls
 *
 * Every action emits one or two events: FaultA always, FaultB every third
 * action; each type has two handlers. Every 50th action fails in perform
 * after emitting (refused: its events must never appear). A handler
 * records its call in fault_calls (one row per call, committed before it
 * returns success), so a call whose outcome a crash lost shows twice. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "odbox/odbox.h"

static const odbox_model_type PROBE_T = {"FaultProbe", "fault_probes", ODBOX_KIND_MODEL, NULL, 0};
static const odbox_event_type EV_A = {"FaultA"};
static const odbox_event_type EV_B = {"FaultB"};
#define HANDLERS 4
static const char *const HNAME[HANDLERS] = {"alpha", "beta", "gamma", "delta"};
static const char *const HTYPE[HANDLERS] = {"FaultA", "FaultA", "FaultB", "FaultB"};
#define REFUSE_EVERY 50
#define GAMMA_LIMIT 2
#define BOUND_MS 120000 /* any wait of the tools themselves */

static odbox_registry *reg;

/* err's code and message, as the library's own errors carry them */
static int set_err(odbox_error *err, int code, const char *msg)
{
    if (err) {
        err->code = code;
        snprintf(err->message, sizeof err->message, "%s", msg);
    }
    return code;
}

static int fail(const char *what, int rc, const odbox_error *e)
{
    fprintf(stderr, "fault-worker: %s: %s: %s\n", what, odbox_errname(rc), e->message);
    return 1;
}

/* ---- SQL helpers on shard (0,0)'s primary --------------------------------------------------- */

static const char *evtab(const char *table)
{
    static char buf[8][256]; /* a few names live at once in check() */
    static int k;
    char *b = buf[k++ % 8];
    odbox_shard *s = odbox_registry_shard_at(reg, 0);
    odbox_pool *p = odbox_shard_primary(s);
    odbox_conn *c = NULL;
    const odbox_dialect *d = NULL;
    odbox_error e = {0};
    if (odbox_pool_acquire(p, &c, &e) == ODBOX_OK) {
        d = odbox_conn_dialect(c);
        odbox_pool_release(p, &c);
    }
    if (!d || odbox_dialect_eventlog_table(d, odbox_shard_eventlog(s), table, b, sizeof buf[0]) != ODBOX_OK)
        snprintf(b, sizeof buf[0], "?");
    return b;
}

/* Runs sql with up to two text parameters; the first column of the first
 * row into *v when v is set. */
static int q(const char *sql, const char *p1, const char *p2, int64_t *v, odbox_error *e)
{
    odbox_pool *p = odbox_shard_primary(odbox_registry_shard_at(reg, 0));
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    int rc = odbox_pool_acquire(p, &c, e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_prepare(c, sql, &s, e);
    if (rc == ODBOX_OK && p1)
        rc = odbox_stmt_bind_text(s, 1, p1, e);
    if (rc == ODBOX_OK && p2)
        rc = odbox_stmt_bind_text(s, 2, p2, e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, e);
    if (rc == ODBOX_OK && v) {
        int f = odbox_stmt_fetch(s, e);
        rc = f < 0 ? f : f == 0 ? set_err(e, ODBOX_ENOTFOUND, "no row") : ODBOX_OK;
        if (rc == ODBOX_OK)
            rc = odbox_stmt_get_int64(s, 1, v, NULL, e);
    }
    odbox_stmt_free(&s);
    if (c)
        odbox_pool_release(p, &c);
    return rc;
}

static int64_t count(const char *fmt, const char *a, const char *b)
{
    char sql[1024];
    snprintf(sql, sizeof sql, fmt, a, b);
    int64_t v = -1;
    odbox_error e = {0};
    int rc = q(sql, NULL, NULL, &v, &e);
    if (rc != ODBOX_OK) {
        fail(sql, rc, &e);
        return -1;
    }
    return v;
}

/* ---- setup ------------------------------------------------------------------------------------ */

static int setup(void)
{
    odbox_error e = {0};
    odbox_migrate_options mo = {0};
    int rc = odbox_migrate_registry(reg, &mo, &e);
    if (rc != ODBOX_OK)
        return fail("migrate", rc, &e);
    /* indexed for check's lookup of each notification's calls: without
     * it MariaDB took 60 s for 26,000 of them */
    if ((rc = q("CREATE TABLE fault_calls (handler VARCHAR(64) NOT NULL, event_id VARCHAR(36) NOT NULL)", NULL,
                NULL, NULL, &e)) != ODBOX_OK ||
        (rc = q("CREATE INDEX fault_calls_event ON fault_calls (handler, event_id)", NULL, NULL, NULL, &e)) !=
            ODBOX_OK)
        return fail("create fault_calls", rc, &e);
    /* one row per call of the timed handlers: started when the call
     * began, ended when it returned (NULL: it never returned), and what
     * the call was given of its event (model_id '': none) and the
     * writer's action index (-1: none), so that the checks join call_log
     * with itself by index: joined to the notifications by
     * CAST(id AS CHAR(36)) they took 100 s on MariaDB */
    if ((rc = q("CREATE TABLE call_log (notification_id VARCHAR(36) NOT NULL, pid BIGINT NOT NULL, "
                "seq BIGINT NOT NULL, started BIGINT NOT NULL, ended BIGINT, handler VARCHAR(64) NOT NULL, "
                "model_id VARCHAR(255) NOT NULL, event_id VARCHAR(36) NOT NULL, event_us BIGINT NOT NULL, "
                "action_i BIGINT NOT NULL, "
                "PRIMARY KEY (pid, seq))",
                NULL, NULL, NULL, &e)) != ODBOX_OK ||
        (rc = q("CREATE INDEX call_log_model ON call_log (handler, model_id)", NULL, NULL, NULL, &e)) != ODBOX_OK)
        return fail("create call_log", rc, &e);
    return 0;
}

/* ---- the writer ------------------------------------------------------------------------------- */

/* FAULT_MODELS=N: the writer's events go to N models in turn (so that a
 * model has many events, in order), else each action's to a new one */
#define MAX_MODELS 64
static odbox_model *models[MAX_MODELS];
static int nmodels;

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    int i = *(int *)user;
    odbox_model *m = NULL;
    int rc = ODBOX_OK;
    if (nmodels)
        rc = (m = odbox_model_copy(models[i % nmodels])) ? ODBOX_OK : set_err(err, ODBOX_ENOMEM, "out of memory");
    else
        rc = odbox_model_new(&PROBE_T, NULL, &m, err);
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "i", json_object_new_int(i));
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &EV_A, payload, err);
    if (rc == ODBOX_OK && i % 3 == 0)
        rc = odbox_plan_emit(plan, m, &EV_B, payload, err);
    if (rc == ODBOX_OK && i % REFUSE_EVERY == REFUSE_EVERY - 1)
        rc = set_err(err, ODBOX_EINVAL, "refused by the test");
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

/* how far the wall clock is ahead of the monotonic one */
static int64_t wall_minus_mono_us(void)
{
    struct timespec w, m;
    clock_gettime(CLOCK_REALTIME, &w);
    clock_gettime(CLOCK_MONOTONIC, &m);
    return ((int64_t)w.tv_sec - m.tv_sec) * 1000000 + (w.tv_nsec - m.tv_nsec) / 1000;
}

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig, stop = 1; }

static int write_actions(int n)
{
    signal(SIGTERM, on_term); /* COUNT 0: the test ends the run with SIGTERM */
    const char *pause_s = getenv("FAULT_WRITE_PAUSE_MS");
    int pause_ms = pause_s ? atoi(pause_s) : 0;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    int rc = odbox_executor_open("com.example.faults", reg, NULL, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(exe, &PROBE_T, &e);
    if (rc != ODBOX_OK)
        return fail("executor", rc, &e);
    const char *models_s = getenv("FAULT_MODELS");
    nmodels = models_s ? atoi(models_s) : 0;
    nmodels = nmodels < 0 ? 0 : nmodels > MAX_MODELS ? MAX_MODELS : nmodels;
    for (int k = 0; k < nmodels && rc == ODBOX_OK; k++)
        rc = odbox_model_new(&PROBE_T, NULL, &models[k], &e);
    if (rc != ODBOX_OK)
        return fail("models", rc, &e);
    int i;
    const odbox_action action = {"FaultWrite", perform, &i};
    int64_t wall_ahead = wall_minus_mono_us();
    for (i = 0; (n == 0 || i < n) && !stop; i++) {
        if (pause_ms > 0 && i > 0)
            usleep((useconds_t)pause_ms * 1000);
        /* the events are dated by the wall clock: a step back is said, as
         * it dates later events earlier (see options_check) */
        int64_t ahead = wall_minus_mono_us();
        if (ahead < wall_ahead - 1000)
            fprintf(stderr, "fault-worker: the wall clock stepped back %lld us before action %d\n",
                    (long long)(wall_ahead - ahead), i);
        wall_ahead = ahead;
        odbox_result res = {0};
        rc = odbox_execute(exe, &action, NULL, NULL, &res, &e);
        const char *outcome = "committed";
        if (rc == ODBOX_EINDOUBT) {
            /* ask until the server answers: it restarts at most a few seconds */
            int yes = -1, qrc = ODBOX_OK;
            odbox_error qe = {0};
            for (int t = 0; t < BOUND_MS / 500; t++) {
                if ((qrc = odbox_action_committed(reg, (odbox_shard_id){0, 0}, res.action_id, &yes, &qe)) ==
                    ODBOX_OK)
                    break;
                usleep(500 * 1000);
            }
            if (qrc != ODBOX_OK) {
                odbox_result_clear(&res);
                odbox_executor_free(&exe);
                return fail("odbox_action_committed", qrc, &qe);
            }
            outcome = yes ? "doubt-committed" : "doubt-uncommitted";
        } else if (rc != ODBOX_OK) {
            outcome = "refused";
            if (rc != ODBOX_EINVAL) /* the server is away: do not spin */
                usleep(100 * 1000);
        }
        printf("%s %s %s\n", res.action_id[0] ? res.action_id : "-", outcome, odbox_errname(rc));
        if (rc != ODBOX_OK && rc != ODBOX_EINVAL && rc != ODBOX_EINDOUBT)
            fprintf(stderr, "fault-worker: action %d: %s: %s\n", i, odbox_errname(rc), e.message);
        odbox_result_clear(&res);
        if (n == 0)
            fflush(stdout); /* a line per action as it ends */
    }
    fflush(stdout);
    odbox_executor_free(&exe);
    for (int k = 0; k < nmodels; k++)
        odbox_model_free(&models[k]);
    return 0;
}

/* ---- the worker ------------------------------------------------------------------------------- */

static int record_call(const odbox_envelope *env, void *user, odbox_error *err)
{
    return q("INSERT INTO fault_calls (handler, event_id) VALUES (?, ?)", (const char *)user, env->event_id, NULL,
             err);
}

/* The machine's monotonic clock, which its processes share (the test's
 * kill times too: fault-worker now): a step of the wall clock (NTP, a
 * VM's resume) would make a later call look earlier. */
static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* FAULT_SLEEP_MS=lo-hi */
static int sleep_lo, sleep_hi;
static atomic_long call_seq;

/* A call that takes a while: its start is committed to call_log before
 * it sleeps, its end after (each on a connection of its own, as a
 * handler's writes are), so a call cut off by kill -9 shows as started
 * and never ended. */
static int timed_call(const odbox_envelope *env, void *user, odbox_error *err)
{
    long seq = atomic_fetch_add(&call_seq, 1);
    long pid = (long)getpid();
    char sql[512];
    if (!odbox_uuid_is_valid(env->event_id))
        return set_err(err, ODBOX_EINVAL, "the event id is not a UUID");
    json_object *iv = NULL;
    long action_i = json_object_object_get_ex(env->payload, "i", &iv) ? (long)json_object_get_int(iv) : -1;
    /* the handler is one of this program's names and the event id a UUID:
     * both fit in the text */
    snprintf(sql, sizeof sql,
             "INSERT INTO call_log (notification_id, pid, seq, started, handler, model_id, event_id, event_us, "
             "action_i) VALUES (?, %ld, %ld, %lld, '%s', ?, '%s', %lld, %ld)",
             pid, seq, (long long)mono_us(), (const char *)user, env->event_id, (long long)env->event_us,
             action_i);
    int rc = q(sql, env->notification_id, env->model_id ? env->model_id : "", NULL, err);
    if (rc != ODBOX_OK)
        return rc;
    /* a random length, the same for a (process, call) on every run */
    unsigned long x = (unsigned long)seq * 2654435761UL ^ (unsigned long)pid * 40503UL;
    usleep((useconds_t)(sleep_lo + (int)(x % (unsigned long)(sleep_hi - sleep_lo + 1))) * 1000);
    /* with FAULT_OPTIONS, beta fails the first call of every 7th action's
     * event: its model's later events wait for the retry */
    int fail = getenv("FAULT_OPTIONS") && !strcmp((const char *)user, "beta") && env->attempt == 1 &&
               action_i >= 0 && action_i % 7 == 0;
    if (!fail && (rc = record_call(env, user, err)) != ODBOX_OK)
        return rc;
    snprintf(sql, sizeof sql, "UPDATE call_log SET ended = %lld WHERE pid = %ld AND seq = %ld", (long long)mono_us(),
             pid, seq);
    if ((rc = q(sql, NULL, NULL, NULL, err)) != ODBOX_OK)
        return rc;
    return fail ? set_err(err, ODBOX_EINVAL, "a failure of the test, retried") : ODBOX_OK;
}

/* what the jobs report (a failed round, a takeover), for the test to count */
static void log_line(void *ud, odbox_log_level level, const char *message)
{
    (void)ud;
    fprintf(stderr, "fault-worker[%ld] %s: %s\n", (long)getpid(), level >= ODBOX_LOG_ERROR ? "error" : "warn",
            message);
}

static int work(void)
{
    odbox_log_set(log_line, NULL, ODBOX_LOG_WARN);
    signal(SIGTERM, on_term); /* before anything: the test may stop a worker it has just started */
    odbox_error e = {0};
    odbox_handlers *h = NULL;
    odbox_delivery *d = NULL;
    odbox_jobs *jobs = NULL;
    int rc = odbox_handlers_new(&h, &e);
    const char *only = getenv("FAULT_HANDLERS");
    const char *sleep_s = getenv("FAULT_SLEEP_MS");
    if (sleep_s && (sscanf(sleep_s, "%d-%d", &sleep_lo, &sleep_hi) != 2 || sleep_lo < 0 || sleep_hi < sleep_lo)) {
        fprintf(stderr, "fault-worker: FAULT_SLEEP_MS=%s: want LO-HI (ms)\n", sleep_s);
        return 2;
    }
    for (int i = 0; rc == ODBOX_OK && i < HANDLERS; i++) {
        char key[80];
        snprintf(key, sizeof key, ",%s,", HNAME[i]);
        char list[256];
        snprintf(list, sizeof list, ",%s,", only ? only : "");
        if (only && !strstr(list, key))
            continue;
        odbox_handler hd = {.name = HNAME[i],
                            .event_type = HTYPE[i],
                            .handle = sleep_s ? timed_call : record_call,
                            .user = (void *)HNAME[i]};
        rc = odbox_handlers_add(h, &hd, &e);
        /* FAULT_OPTIONS=1: beta is ordered per model, gamma has at most
         * GAMMA_LIMIT calls in flight across the workers */
        odbox_handler_options o = {.ordered = !strcmp(HNAME[i], "beta"),
                                   .max_in_flight = !strcmp(HNAME[i], "gamma") ? GAMMA_LIMIT : 0};
        if (rc == ODBOX_OK && getenv("FAULT_OPTIONS"))
            rc = odbox_handlers_set_options(h, HNAME[i], &o, &e);
    }
    /* the handlers return at once: a killed worker's claims are taken
     * over once their lease (12 s) has passed */
    odbox_delivery_config dc = {.handler_timeout_ms = 10000, .lease_ms = 12000};
    const char *lease_s = getenv("FAULT_LEASE_MS");
    if (lease_s && atoi(lease_s) > 0) /* a lease of a few seconds: calls of a killed worker are taken over sooner */
        dc.lease_ms = atoi(lease_s), dc.handler_timeout_ms = dc.lease_ms / 2;
    /* calls that take a while: a round claims two per handler thread, so
     * that it ends well within its lease even on a loaded machine */
    if (sleep_s)
        dc.handling_batch = 16, dc.workers = 8, dc.backoff_base_ms = 200, dc.backoff_cap_ms = 1000;
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(reg, h, &dc, &d, &e);
    /* short windows: a killed worker's run is taken over after 1 s */
    odbox_jobs_config jc = {.poll_interval_ms = 100,
                            .heartbeat_interval_ms = 200,
                            .missed_heartbeats_limit = 5,
                            .shutdown_max_wait_ms = 20000};
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(reg, &jc, &jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(d, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, &e);
    if (rc == ODBOX_OK) {
        while (!stop) /* a sleep, not pause(): a signal between the test and the wait is not lost */
            usleep(50 * 1000);
        rc = odbox_jobs_stop(jobs, &e);
    }
    int ret = rc == ODBOX_OK ? 0 : fail("work", rc, &e);
    odbox_jobs_free(&jobs);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    return ret;
}

/* ---- what is left, the end state -------------------------------------------------------------- */

static int64_t unfinished(void)
{
    int64_t ev = count("SELECT COUNT(*) FROM %s WHERE delivered = FALSE", evtab("events"), NULL);
    int64_t no = count("SELECT COUNT(*) FROM %s WHERE state <> 'SUCCEEDED'", evtab("event_notifications"), NULL);
    return ev < 0 || no < 0 ? -1 : ev + no;
}

static int check(const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f) {
        perror(log);
        return 1;
    }
    char id[64], outcome[64], code[64];
    int bad = 0, committed = 0, uncommitted = 0, noid = 0;
    odbox_error e = {0};
    while (fscanf(f, "%63s %63s %63s", id, outcome, code) == 3) {
        if (!strcmp(id, "-")) {
            noid++;
            continue;
        }
        int yes = !strcmp(outcome, "committed") || !strcmp(outcome, "doubt-committed");
        int64_t n = -1;
        int rc;
        char sql[512];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE action_id = ?", evtab("events"));
        if ((rc = q(sql, id, NULL, &n, &e)) != ODBOX_OK) {
            fclose(f);
            return fail("events of an action", rc, &e);
        }
        if (yes && n == 0)
            bad++, fprintf(stderr, "FAIL: committed action %s has no events\n", id);
        if (!yes && n != 0)
            bad++, fprintf(stderr, "FAIL: %s action %s (%s) has %lld events\n", outcome, id, code, (long long)n);
        yes ? committed++ : uncommitted++;
    }
    fclose(f);
    const char *ev = evtab("events"), *no = evtab("event_notifications");
    int64_t events = count("SELECT COUNT(*) FROM %s", ev, NULL);
    int64_t a = count("SELECT COUNT(*) FROM %s WHERE event_type = 'FaultA'", ev, NULL);
    int64_t b = count("SELECT COUNT(*) FROM %s WHERE event_type = 'FaultB'", ev, NULL);
    int64_t notes = count("SELECT COUNT(*) FROM %s", no, NULL);
    int64_t pairs = count("SELECT COUNT(*) FROM (SELECT event_id, handler_name FROM %s "
                          "GROUP BY event_id, handler_name) t",
                          no, NULL);
    int64_t joined = count("SELECT COUNT(*) FROM %s n JOIN %s e ON e.id = n.event_id AND "
                           "((e.event_type = 'FaultA' AND n.handler_name IN ('alpha', 'beta')) OR "
                           "(e.event_type = 'FaultB' AND n.handler_name IN ('gamma', 'delta')))",
                           no, ev);
    int64_t done = count("SELECT COUNT(*) FROM %s WHERE state = 'SUCCEEDED'", no, NULL);
    int64_t left = unfinished();
    int64_t calls = count("SELECT COUNT(*) FROM fault_calls", NULL, NULL);
    int64_t called = count("SELECT COUNT(*) FROM (SELECT handler, event_id FROM fault_calls "
                           "GROUP BY handler, event_id) t",
                           NULL, NULL);
    int64_t missing = count("SELECT COUNT(*) FROM %s n WHERE NOT EXISTS (SELECT 1 FROM fault_calls c "
                            "WHERE c.event_id = CAST(n.event_id AS CHAR(36)) AND c.handler = n.handler_name)",
                            no, NULL);
    printf("actions: %d committed, %d not committed, %d without an id\n", committed, uncommitted, noid);
    printf("events: %lld (%lld FaultA, %lld FaultB); notifications: %lld, %lld SUCCEEDED\n", (long long)events,
           (long long)a, (long long)b, (long long)notes, (long long)done);
    printf("handler calls: %lld for %lld (handler, event) pairs: %lld duplicates, %lld missing\n", (long long)calls,
           (long long)called, (long long)(calls - called), (long long)missing);
    if (events < 0 || notes < 0 || calls < 0 || missing < 0 || left < 0)
        return 1;
    if (a + b != events || events == 0)
        bad++, fprintf(stderr, "FAIL: %lld events of other types (or none)\n", (long long)(events - a - b));
    if (notes != 2 * events || pairs != notes || joined != notes)
        bad++, fprintf(stderr, "FAIL: %lld notifications, %lld distinct, %lld to a subscribed handler; want %lld\n",
                       (long long)notes, (long long)pairs, (long long)joined, (long long)(2 * events));
    if (done != notes || left != 0)
        bad++, fprintf(stderr, "FAIL: %lld notifications not SUCCEEDED, %lld unfinished\n", (long long)(notes - done),
                       (long long)left);
    if (missing != 0 || called != notes)
        bad++, fprintf(stderr, "FAIL: %lld notifications whose handler was never called (%lld called pairs)\n",
                       (long long)missing, (long long)called);
    return bad ? 1 : 0;
}

/* ---- the calls of the timed handlers ------------------------------------------------------- */

typedef struct kill_rec {
    long pid;
    int64_t at_us;
} kill_rec;

typedef struct call_rec {
    char nid[40];
    long pid;
    int64_t started, ended; /* ended: INT64_MAX when open and not killed */
    int open, killed;
} call_rec;

/* Prints a failed check's rows (at most 20), each column as text. */
static void print_rows(const char *what, const char *fmt, const char *arg)
{
    char sql[1024];
    snprintf(sql, sizeof sql, fmt, arg);
    odbox_pool *p = odbox_shard_primary(odbox_registry_shard_at(reg, 0));
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    int rc = odbox_pool_acquire(p, &c, &e), f = 0, nrows = 0;
    if (rc == ODBOX_OK && (rc = odbox_stmt_prepare(c, sql, &s, &e)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    fprintf(stderr, "%s:\n", what);
    while (rc == ODBOX_OK && nrows++ < 20 && (f = odbox_stmt_fetch(s, &e)) == 1) {
        for (int i = 1; i <= odbox_stmt_column_count(s); i++) {
            const char *v = NULL;
            int null = 0;
            if (odbox_stmt_get_text(s, i, &v, &null, &e) != ODBOX_OK)
                break;
            fprintf(stderr, "%s%s", i > 1 ? " " : "  ", null ? "NULL" : v);
        }
        fputc('\n', stderr);
    }
    if (rc != ODBOX_OK || f < 0)
        fail(what, rc != ODBOX_OK ? rc : f, &e);
    odbox_stmt_free(&s);
    if (c)
        odbox_pool_release(p, &c);
}

/* With FAULT_OPTIONS: beta's calls of one model never go back to an
 * older event than one already called (ordered), and gamma never has
 * more than GAMMA_LIMIT calls running at once across the processes (a
 * killed process's open call ends at its kill).
 * Older is the database's order: event date, then event id. The writer
 * dates its events by its wall clock; where that clock stepped back, an
 * event written later is dated earlier than one already handled, and is
 * called after it, as documented (docs/handlers.md). So a call goes back
 * only when its event is older and was also written earlier (the
 * writer's action index); the calls the clock explains are counted apart. */
static int options_check(const kill_rec *kills, int nkills)
{
    if (!getenv("FAULT_OPTIONS"))
        return 0;
    static const char later_called_older[] =
        " FROM call_log c1 JOIN call_log c2 ON c2.handler = c1.handler "
        "AND c2.model_id = c1.model_id WHERE c1.handler = 'beta' AND c1.model_id <> '' "
        "AND c2.started > c1.started AND (c2.event_us < c1.event_us "
        "OR (c2.event_us = c1.event_us AND c2.event_id < c1.event_id)) AND c2.action_i ";
    int64_t back = count("SELECT COUNT(*)%s< c1.action_i", later_called_older, NULL);
    int64_t dated_back = count("SELECT COUNT(*)%s> c1.action_i", later_called_older, NULL);
    if (back > 0)
        print_rows("beta's calls that went back (model, then each call's pid, seq, started, ended, event time, "
                   "event id, action index; the later call second)",
                   "SELECT c1.model_id, c1.pid, c1.seq, c1.started, c1.ended, c1.event_us, c1.event_id, c1.action_i, "
                   "c2.pid, c2.seq, c2.started, c2.ended, c2.event_us, c2.event_id, c2.action_i%s< c1.action_i "
                   "ORDER BY c1.model_id, c1.started",
                   later_called_older);
    int64_t ordered_models =
        count("%s", "SELECT COUNT(DISTINCT model_id) FROM call_log WHERE handler = 'beta' AND model_id <> ''", NULL);

    /* gamma's calls as (time, +1 start / -1 end), swept in time order */
    typedef struct edge {
        int64_t at;
        int d;
    } edge;
    size_t n = 0, cap = 1024;
    edge *ev = malloc(cap * sizeof *ev);
    odbox_pool *p = odbox_shard_primary(odbox_registry_shard_at(reg, 0));
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    int rc = ev ? odbox_pool_acquire(p, &c, &e) : set_err(&e, ODBOX_ENOMEM, "out of memory");
    if (rc == ODBOX_OK &&
        (rc = odbox_stmt_prepare(c, "SELECT pid, started, ended FROM call_log WHERE handler = 'gamma'", &s, &e)) ==
            ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, &e)) == 1) {
        int64_t pid = 0, started = 0, ended = 0;
        int null = 0;
        if ((rc = odbox_stmt_get_int64(s, 1, &pid, NULL, &e)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 2, &started, NULL, &e)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 3, &ended, &null, &e)) != ODBOX_OK)
            break;
        if (null) /* cut off: at its process's kill, else it never ended */
            ended = INT64_MAX;
        for (int k = 0; null && k < nkills; k++)
            if (kills[k].pid == (long)pid)
                ended = kills[k].at_us;
        if (n + 2 > cap) {
            edge *g = realloc(ev, (cap *= 2) * sizeof *ev);
            if (!g) {
                rc = set_err(&e, ODBOX_ENOMEM, "out of memory");
                break;
            }
            ev = g;
        }
        ev[n++] = (edge){started, 1};
        ev[n++] = (edge){ended, -1};
    }
    rc = rc < 0 ? rc : ODBOX_OK;
    odbox_stmt_free(&s);
    if (c)
        odbox_pool_release(p, &c);
    /* by time; at one instant an end before a start */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && (ev[j - 1].at > ev[j].at || (ev[j - 1].at == ev[j].at && ev[j - 1].d > ev[j].d));
             j--) {
            edge t = ev[j];
            ev[j] = ev[j - 1];
            ev[j - 1] = t;
        }
    int running = 0, most = 0;
    for (size_t i = 0; i < n; i++)
        if ((running += ev[i].d) > most)
            most = running;
    free(ev);
    if (rc != ODBOX_OK)
        return fail("gamma's calls", rc, &e);
    printf("options: beta (ordered) over %lld models: %lld calls that went back to an older event (%lld to one "
           "the writer's clock dated back); gamma (at most %d in flight): %d at most, over %zu calls\n",
           (long long)ordered_models, (long long)back, (long long)dated_back, GAMMA_LIMIT, most, n / 2);
    int bad = 0;
    if (back != 0 || dated_back < 0 || ordered_models <= 0)
        bad++, fprintf(stderr, "FAIL: beta went back to an older event of a model %lld times\n", (long long)back);
    if (most > GAMMA_LIMIT || n == 0)
        bad++, fprintf(stderr, "FAIL: gamma had %d calls in flight, at most %d allowed\n", most, GAMMA_LIMIT);
    return bad;
}

/* The kills file (lines "pid at_us"): into kills, at most cap; how many,
 * or -1 when it cannot be read. */
static int read_kills(const char *kills_path, kill_rec *kills, int cap)
{
    int nkills = 0;
    FILE *f = fopen(kills_path, "r");
    if (!f) {
        perror(kills_path);
        return -1;
    }
    long kp;
    long long kat;
    while (nkills < cap && fscanf(f, "%ld %lld", &kp, &kat) == 2)
        kills[nkills++] = (kill_rec){kp, (int64_t)kat};
    fclose(f);
    return nkills;
}

/* 0 lost: every event of a subscribed type has a SUCCEEDED row per
 * subscription of its type. The failures found (said on stderr), or -1
 * when a count failed. */
static int lost_check(void)
{
    const char *ev = evtab("events"), *no = evtab("event_notifications"), *st = evtab("subscription_types");
    int bad = 0;
    int64_t subs = count("SELECT COUNT(*) FROM %s", st, NULL);
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM %s e JOIN %s t ON t.event_type = e.event_type WHERE NOT EXISTS "
             "(SELECT 1 FROM %s n WHERE n.event_id = e.id AND n.handler_name = t.name AND n.state = 'SUCCEEDED')",
             ev, st, no);
    int64_t lost = count("%s", sql, NULL);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s e JOIN %s t ON t.event_type = e.event_type", ev, st);
    int64_t pairs = count("%s", sql, NULL);
    if (subs < 0 || lost < 0 || pairs < 0)
        return -1;
    printf("(event, subscription) pairs: %lld over %lld subscription types; lost (no SUCCEEDED row): %lld\n",
           (long long)pairs, (long long)subs, (long long)lost);
    if (subs != HANDLERS)
        bad++, fprintf(stderr, "FAIL: %lld subscription types, want %d\n", (long long)subs, HANDLERS);
    if (lost != 0 || pairs == 0)
        bad++, fprintf(stderr, "FAIL: %lld (event, subscription) pairs of %lld have no SUCCEEDED row\n",
                       (long long)lost, (long long)pairs);
    return bad;
}

/* One call_log row into r: a call of a killed process ends at its kill
 * when its end was never written; an open call of a live one never ends. */
static int read_call(odbox_stmt *s, const kill_rec *kills, int nkills, call_rec *r, odbox_error *e)
{
    memset(r, 0, sizeof *r);
    const char *nid = NULL;
    int64_t pid = 0;
    int null = 0, rc;
    if ((rc = odbox_stmt_get_text(s, 1, &nid, NULL, e)) != ODBOX_OK ||
        (rc = odbox_stmt_get_int64(s, 2, &pid, NULL, e)) != ODBOX_OK ||
        (rc = odbox_stmt_get_int64(s, 3, &r->started, NULL, e)) != ODBOX_OK ||
        (rc = odbox_stmt_get_int64(s, 4, &r->ended, &null, e)) != ODBOX_OK)
        return rc;
    snprintf(r->nid, sizeof r->nid, "%s", nid);
    r->pid = (long)pid;
    for (int k = 0; k < nkills; k++)
        if (kills[k].pid == r->pid)
            r->killed = 1, r->ended = null ? kills[k].at_us : r->ended;
    if (null) {
        r->open = 1;
        if (!r->killed)
            r->ended = INT64_MAX;
    }
    return ODBOX_OK;
}

/* The calls, a row's together in the order they started: *out (n of
 * them, the caller frees it, also on failure). */
static int read_calls(const kill_rec *kills, int nkills, call_rec **out, size_t *nout, odbox_error *e)
{
    size_t n = 0, cap = 0;
    call_rec *v = NULL;
    odbox_pool *p = odbox_shard_primary(odbox_registry_shard_at(reg, 0));
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    int rc = odbox_pool_acquire(p, &c, e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_prepare(c,
                                "SELECT notification_id, pid, started, ended FROM call_log "
                                "ORDER BY notification_id, started",
                                &s, e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, e);
    while (rc == ODBOX_OK) {
        int fr = odbox_stmt_fetch(s, e);
        if (fr <= 0) {
            rc = fr < 0 ? fr : ODBOX_OK;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            call_rec *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                rc = set_err(e, ODBOX_ENOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        if ((rc = read_call(s, kills, nkills, &v[n], e)) != ODBOX_OK)
            break;
        n++;
    }
    odbox_stmt_free(&s);
    if (c)
        odbox_pool_release(p, &c);
    *out = v;
    *nout = n;
    return rc;
}

typedef struct call_stats {
    size_t rows, repeated, after_kill, open_killed, open_alive, overlaps, overlaps_closed;
} call_stats;

/* Counts the rows, their repeated calls (those after a call by a killed
 * process apart) and the calls of one row that overlap in time (the first
 * 10 said on stderr). */
static void analyse_calls(const call_rec *v, size_t n, call_stats *st)
{
    memset(st, 0, sizeof *st);
    for (size_t i = 0; i < n; i++) {
        if (v[i].open)
            v[i].killed ? st->open_killed++ : st->open_alive++;
        if (i == 0 || strcmp(v[i].nid, v[i - 1].nid) != 0) {
            st->rows++;
            continue;
        }
        st->repeated++;
        /* a call repeated after an earlier call of the row by a process
         * that was killed (cut off, or its outcome never written) */
        size_t first = i;
        while (first > 0 && !strcmp(v[first - 1].nid, v[i].nid))
            first--;
        int by_killed = 0;
        for (size_t j = first; j < i; j++) {
            by_killed |= v[j].killed;
            if (v[i].started < v[j].ended && v[j].started < v[i].ended) {
                st->overlaps++;
                st->overlaps_closed += !v[i].open && !v[j].open;
                if (st->overlaps <= 10)
                    fprintf(stderr,
                            "FAIL: notification %s: call of pid %ld [%lld, %lld%s] overlaps the call of pid %ld "
                            "[%lld, %lld%s]\n",
                            v[i].nid, v[j].pid, (long long)v[j].started, (long long)v[j].ended,
                            v[j].open ? " (killed)" : "", v[i].pid, (long long)v[i].started, (long long)v[i].ended,
                            v[i].open ? " (killed)" : "");
            }
        }
        st->after_kill += by_killed;
    }
}

static int calls_check(const char *kills_path)
{
    kill_rec kills[1024];
    int nkills = read_kills(kills_path, kills, (int)(sizeof kills / sizeof kills[0]));
    if (nkills < 0)
        return 1;
    int bad = lost_check();
    if (bad < 0)
        return 1;

    size_t n = 0;
    call_rec *v = NULL;
    odbox_error e = {0};
    int rc = read_calls(kills, nkills, &v, &n, &e);
    if (rc != ODBOX_OK) {
        free(v);
        return fail("call_log", rc, &e);
    }
    call_stats st;
    analyse_calls(v, n, &st);
    free(v);
    bad += options_check(kills, nkills);
    printf("calls: %zu of %zu rows: %zu duplicates (%zu after a call by a killed process, %zu otherwise); "
           "%zu cut off by a kill -9\n",
           n, st.rows, st.repeated, st.after_kill, st.repeated - st.after_kill, st.open_killed);
    printf("overlapping calls of one row: %zu (%zu with both calls ended)\n", st.overlaps, st.overlaps_closed);
    if (st.overlaps)
        bad++, fprintf(stderr, "FAIL: %zu pairs of calls of one notification overlap in time\n", st.overlaps);
    if (st.open_alive)
        bad++, fprintf(stderr, "FAIL: %zu calls of processes never killed have no end\n", st.open_alive);
    if (st.rows == 0)
        bad++, fprintf(stderr, "FAIL: no calls\n");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "now")) { /* the time of a kill, on the clock of call_log */
        printf("%lld\n", (long long)mono_us());
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: fault-worker setup|write|work|pending|check|calls DSN [COUNT|LOG|KILLS]\n"
                        "       fault-worker now\n");
        return 2;
    }
    odbox_error e = {0};
    int rc = odbox_registry_open_dsn(argv[2], &reg, &e);
    if (rc != ODBOX_OK)
        return fail("registry", rc, &e);
    int ret = 2;
    if (!strcmp(argv[1], "setup"))
        ret = setup();
    else if (!strcmp(argv[1], "write") && argc == 4)
        ret = write_actions(atoi(argv[3]));
    else if (!strcmp(argv[1], "work"))
        ret = work();
    else if (!strcmp(argv[1], "pending")) {
        int64_t n = unfinished();
        printf("%lld\n", (long long)n);
        ret = n < 0;
    } else if (!strcmp(argv[1], "check") && argc == 4)
        ret = check(argv[3]);
    else if (!strcmp(argv[1], "calls") && argc == 4)
        ret = calls_check(argv[3]);
    odbox_registry_free(&reg);
    return ret;
}
