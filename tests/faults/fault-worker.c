/* odbox — the processes of the faults tier (tests/faults/faults.test),
 * which share nothing but the database:
 *
 *   fault-worker setup DSN          migrates the shard, creates fault_calls
 *   fault-worker write DSN COUNT    runs COUNT actions; prints per action
 *                                   "<action_id> <outcome> <code>", outcome
 *                                   committed | refused | doubt-committed |
 *                                   doubt-uncommitted; goes on after errors
 *   fault-worker work DSN           runs the fan-out and handling jobs with
 *                                   short poll/heartbeat/dead windows until
 *                                   SIGTERM (the test kill -9s it); with
 *                                   FAULT_HANDLERS=alpha,gamma (say) only
 *                                   those handlers: an older version of the
 *                                   service in a rolling deploy
 *   fault-worker pending DSN        prints what is not finished yet
 *   fault-worker check DSN LOG      checks the end state against the
 *                                   writer's LOG; prints the duplicates
 *
 * Every action emits one or two events: FaultA always, FaultB every third
 * action; each type has two handlers. Every 50th action fails in perform
 * after emitting (refused: its events must never appear). A handler
 * records its call in fault_calls (one row per call, committed before it
 * returns success), so a call whose outcome a crash lost shows twice. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "odbox/odbox.h"

static const odbox_model_type PROBE_T = {"FaultProbe", "fault_probes", ODBOX_KIND_MODEL, NULL, 0};
static const odbox_event_type EV_A = {"FaultA"};
static const odbox_event_type EV_B = {"FaultB"};
#define HANDLERS 4
static const char *const HNAME[HANDLERS] = {"alpha", "beta", "gamma", "delta"};
static const char *const HTYPE[HANDLERS] = {"FaultA", "FaultA", "FaultB", "FaultB"};
#define REFUSE_EVERY 50
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
    if ((rc = q("CREATE TABLE fault_calls (handler VARCHAR(64) NOT NULL, event_id VARCHAR(36) NOT NULL)", NULL,
                NULL, NULL, &e)) != ODBOX_OK)
        return fail("create fault_calls", rc, &e);
    return 0;
}

/* ---- the writer ------------------------------------------------------------------------------- */

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    int i = *(int *)user;
    odbox_model *m = NULL;
    int rc = odbox_model_new(&PROBE_T, NULL, &m, err);
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

static int write_actions(int n)
{
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    int rc = odbox_executor_open("com.example.faults", reg, NULL, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(exe, &PROBE_T, &e);
    if (rc != ODBOX_OK)
        return fail("executor", rc, &e);
    int i;
    const odbox_action action = {"FaultWrite", perform, &i};
    for (i = 0; i < n; i++) {
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
    }
    fflush(stdout);
    odbox_executor_free(&exe);
    return 0;
}

/* ---- the worker ------------------------------------------------------------------------------- */

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig, stop = 1; }

static int record_call(const odbox_envelope *env, void *user, odbox_error *err)
{
    return q("INSERT INTO fault_calls (handler, event_id) VALUES (?, ?)", (const char *)user, env->event_id, NULL,
             err);
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
    for (int i = 0; rc == ODBOX_OK && i < HANDLERS; i++) {
        char key[80];
        snprintf(key, sizeof key, ",%s,", HNAME[i]);
        char list[256];
        snprintf(list, sizeof list, ",%s,", only ? only : "");
        if (only && !strstr(list, key))
            continue;
        odbox_handler hd = {.name = HNAME[i], .event_type = HTYPE[i], .handle = record_call, .user = (void *)HNAME[i]};
        rc = odbox_handlers_add(h, &hd, &e);
    }
    /* the handlers return at once: a killed worker's claims are taken
     * over once their lease (12 s) has passed */
    odbox_delivery_config dc = {.handler_timeout_ms = 10000, .lease_ms = 12000};
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

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fault-worker setup|write|work|pending|check DSN [COUNT|LOG]\n");
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
    odbox_registry_free(&reg);
    return ret;
}
