/* odbox — integration tests of cross-process wake-ups on PostgreSQL
 * (wake.h): a writer's NOTIFY after its commit reaches a listener in
 * another process within milliseconds; it comes after the commit, from a
 * session of its own; nothing is sent for what did not commit; a burst of
 * commits sends few NOTIFYs; the switches turn either side off; the
 * listener outlives a terminated session and (in the restart suite) a
 * server restart; every wait is bounded and stop is prompt.
 *
 * What the writers send is counted by a plain libpq session that LISTENs,
 * as any other process would, sharing nothing with the module. */
#include "config.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "actions.h"
#include "wake.h"
#include "odbox/tx.h"
#ifdef HAVE_LIBPQ
#include <libpq-fe.h>
#include <poll.h>

/* Generous bounds for a loaded machine; what is measured is printed. */
#define ARRIVES_MS 2000    /* a notification reaches its listener */
#define SILENCE_MS 1000    /* nothing arrives: 200 notify intervals */
#define LISTENING_MS 20000 /* a listener is up (connect, LISTEN) */
#define STOP_MS 1000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a plain LISTENing session ---------------------------------------------- */

static PGconn *plain_listen(const char *channel)
{
    odbox_dsn *d = NULL;
    ck_assert_int_eq(odbox_dsn_parse(itest_dsn(1), &d, NULL), ODBOX_OK);
    char port[16];
    snprintf(port, sizeof port, "%d", d->port ? d->port : 5432);
    const char *keys[] = {"host", "port", "dbname", "user", "password", NULL};
    const char *vals[] = {d->host, port, d->database, d->user, d->password, NULL};
    PGconn *pg = PQconnectdbParams(keys, vals, 0);
    odbox_dsn_free(&d);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "plain listener: %s", PQerrorMessage(pg));
    char sql[128];
    snprintf(sql, sizeof sql, "LISTEN \"%s\"", channel);
    PGresult *r = PQexec(pg, sql);
    ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    return pg;
}

/* Notifications arriving within wait_ms (sooner once `enough` came, when
 * enough > 0); *be_pid (may be NULL) gets the last sender's backend. */
static int plain_count(PGconn *pg, int wait_ms, int enough, int *be_pid)
{
    int n = 0;
    int64_t deadline = mono_ms() + wait_ms;
    for (;;) {
        PGnotify *m;
        while ((m = PQnotifies(pg))) {
            if (be_pid)
                *be_pid = m->be_pid;
            PQfreemem(m);
            n++;
        }
        int64_t left = deadline - mono_ms();
        if ((enough > 0 && n >= enough) || left <= 0)
            return n;
        struct pollfd p = {.fd = PQsocket(pg), .events = POLLIN};
        if (poll(&p, 1, (int)left) > 0)
            ck_assert_msg(PQconsumeInput(pg), "plain listener: %s", PQerrorMessage(pg));
    }
}

/* Everything still arriving, until a second passes without any. */
static int plain_drain(PGconn *pg)
{
    int total = 0, n;
    while ((n = plain_count(pg, 1000, 0, NULL)) > 0)
        total += n;
    return total;
}

static void channel_of(const dfx *f, odbox_wake_signal sig, char ch[ODBOX_NAME_MAX])
{
    ck_assert_int_eq(odbox_wake_channel(f->ev[0], sig, ch, NULL), ODBOX_OK);
}

/* One shard, the channel of its EVENTS, and (with listen) a plain session
 * that LISTENs on it. */
typedef struct heard {
    dfx f;
    char ch[ODBOX_NAME_MAX];
    PGconn *pg;
} heard;

static void heard_open(heard *h, int listen)
{
    dfx_open(&h->f, 1, 0);
    channel_of(&h->f, ODBOX_WAKE_EVENTS, h->ch);
    h->pg = listen ? plain_listen(h->ch) : NULL;
}

static void heard_close(heard *h)
{
    if (h->pg)
        PQfinish(h->pg);
    dfx_close(&h->f);
}

/* ---- a wake and what its callbacks saw --------------------------------------- */

typedef struct seen {
    atomic_int n[ODBOX_WAKE_NSIGNALS];
    _Atomic int64_t events_at_us[8]; /* UTC: the first calls for EVENTS */
} seen;

static void on_signal(void *ud, odbox_shard_id shard, odbox_wake_signal sig)
{
    (void)shard;
    seen *s = ud;
    int k = atomic_fetch_add(&s->n[sig], 1);
    if (sig == ODBOX_WAKE_EVENTS && k < 8)
        atomic_store(&s->events_at_us[k], dfx_now_us());
}

static odbox_wake *open_wake(odbox_registry *r, const odbox_wake_config *cfg, seen *s)
{
    odbox_wake *w = NULL;
    odbox_error e;
    ck_assert_msg(odbox_wake_open(r, cfg, &w, &e) == ODBOX_OK, "%s", e.message);
    for (int sig = 0; sig < ODBOX_WAKE_NSIGNALS; sig++)
        ck_assert_int_eq(odbox_wake_subscribe(w, sig, on_signal, s, &e), ODBOX_OK);
    ck_assert_msg(odbox_wake_start(w, &e) == ODBOX_OK, "%s", e.message);
    return w;
}

static int wait_for(atomic_int *counter, int at_least, int ms)
{
    int64_t deadline = mono_ms() + ms;
    while (atomic_load(counter) < at_least && mono_ms() < deadline)
        usleep(2000);
    return atomic_load(counter) >= at_least;
}

static void wait_listening(odbox_wake *w)
{
    int64_t deadline = mono_ms() + LISTENING_MS;
    while (!odbox_wake_listening(w, (odbox_shard_id){0, 0}) && mono_ms() < deadline)
        usleep(5000);
    ck_assert_msg(odbox_wake_listening(w, (odbox_shard_id){0, 0}), "not listening after %d ms", LISTENING_MS);
}

static void notify_now(odbox_conn *c, const char *channel)
{
    itest_exec(c, "SELECT pg_notify('%s', '')", channel);
}

/* The listener sessions of f's eventlog (other tests' may still be on
 * their way out). */
#define LISTENERS_OF "FROM pg_stat_activity WHERE application_name = 'odbox-wake' AND query LIKE '%%\"%s_events\"%%'"

/* Waits (bounded) until f's eventlog has want listener sessions. */
static void assert_listener_sessions(dfx *f, int64_t want)
{
    int64_t n = -1, deadline = mono_ms() + 5000;
    while ((n = itest_count(f->c[0], "SELECT COUNT(*) " LISTENERS_OF, f->ev[0])) != want && mono_ms() < deadline)
        usleep(20000);
    ck_assert_int_eq(n, want);
}

/* ---- a writer in another process ---------------------------------------------------- */

#define WRITES 3

START_TEST(a_commit_in_another_process_wakes_the_listener)
{
    dfx f;
    dfx_open(&f, 1, 0);
    seen s = {0};
    odbox_wake *w = open_wake(f.r, NULL, &s);
    wait_listening(w);
    char extra[128], cmd[4096];
    snprintf(extra, sizeof extra, "eventlog=%s", f.ev[0]);
    char *dsn = itest_dsn_with(1, extra);
    const char *build = getenv("ODBOX_BUILDDIR");
    /* three commits 300 ms apart (60 notify intervals): each is heard */
    snprintf(cmd, sizeof cmd, "'%s/tests/integration/wake-writer' '%s' %d 300", build ? build : ".", dsn, WRITES);
    free(dsn);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char action_id[WRITES][64];
    long long committed_us[WRITES];
    for (int k = 0; k < WRITES; k++)
        ck_assert_int_eq(fscanf(p, "%63s %lld", action_id[k], &committed_us[k]), 2);
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(wait_for(&s.n[ODBOX_WAKE_EVENTS], WRITES, 10000), "%d wake-ups within 10 s",
                  atomic_load(&s.n[ODBOX_WAKE_EVENTS]));
    for (int k = 0; k < WRITES; k++) {
        int64_t latency_us = atomic_load(&s.events_at_us[k]) - committed_us[k];
        printf("wake-up latency across processes, commit %d (%s): %.2f ms from the commit's return to the "
               "listener's callback\n", k + 1, k ? "the writer's NOTIFY connection open" : "its first NOTIFY connects",
               latency_us / 1000.0);
        ck_assert_msg(latency_us < ARRIVES_MS * 1000, "latency %lld us", (long long)latency_us);
        /* it came after the commit: the event is there for whoever reads it */
        ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s' AND "
                                             "event_type = 'WakeProbed'", f.ev[0], action_id[k]),
                         1);
    }
    ck_assert_int_eq(atomic_load(&s.n[ODBOX_WAKE_NOTIFICATIONS]), 0);
    odbox_wake_free(&w);
    dfx_close(&f);
}
END_TEST

/* ---- what the writer sends, seen by a plain listener ------------------------------------ */

typedef struct pid_probe {
    int64_t pid;
    int fail; /* fail the transaction at EVENTS_WRITTEN */
} pid_probe;

static int probe_hook(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
{
    (void)shard;
    pid_probe *p = ud;
    if (at != ODBOX_HOOK_EVENTS_WRITTEN)
        return 0;
    p->pid = itest_session_id(conn);
    return p->fail ? ODBOX_EDB : 0;
}

START_TEST(notify_follows_the_commit_from_a_session_of_its_own)
{
    heard h;
    heard_open(&h, 1);
    dfx *f = &h.f;
    PGconn *pg = h.pg;
    odbox_executor *exe = open_exe(f);
    odbox_result res;
    /* in a transaction (a hook is set): the NOTIFY is not in it */
    pid_probe probe = {0};
    odbox_executor_set_hook(exe, probe_hook, &probe);
    odbox_model *d = dfx_dummy(NULL, "d", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "Notified", &s, NULL, &res);
    int be_pid = 0;
    ck_assert_int_eq(plain_count(pg, ARRIVES_MS, 1, &be_pid), 1);
    ck_assert_int_gt(probe.pid, 0);
    ck_assert_msg(be_pid != probe.pid, "the NOTIFY came from the action's own session %d", be_pid);
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s'", f->ev[0],
                                 res.action_id),
                     1);
    odbox_result_clear(&res);
    /* one statement in autocommit (no hook) */
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_model *d2 = dfx_dummy(NULL, "d2", 1);
    script s2 = {.add = {d2}, .nadd = 1, .emit = {{d2, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "NotifiedToo", &s2, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(plain_count(pg, ARRIVES_MS, 1, NULL), 1);
    odbox_model_free(&d);
    odbox_model_free(&d2);
    odbox_executor_free(&exe);
    heard_close(&h);
}
END_TEST

START_TEST(nothing_is_sent_for_what_did_not_commit_events)
{
    heard h;
    heard_open(&h, 1);
    dfx *f = &h.f;
    PGconn *pg = h.pg;
    odbox_executor *exe = open_exe(f);
    odbox_result res;
    odbox_error e;
    odbox_exec_config none = {.nretries = 0};
    /* rolled back just before its commit */
    pid_probe probe = {.fail = 1};
    odbox_executor_set_hook(exe, probe_hook, &probe);
    odbox_model *d = dfx_dummy(NULL, "d", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "RolledBack", &s, NULL, &none, &res, &e), ODBOX_EDB);
    odbox_result_clear(&res);
    odbox_executor_set_hook(exe, NULL, NULL);
    /* a failed perform, and a stale update */
    script bad = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1, .codes = {ODBOX_EDB}};
    ck_assert_int_eq(execute_script(exe, "Failed", &bad, NULL, &none, &res, &e), ODBOX_EDB);
    odbox_result_clear(&res);
    script add = {.add = {d}, .nadd = 1};
    execute_script_ok(exe, "Add", &add, NULL, &res); /* rows only: its sentinel is nothing to deliver */
    odbox_result_clear(&res);
    odbox_model *v1 = find_dummy(f, odbox_model_id(d));
    script bump = {.upd = {v1}, .nupd = 1};
    execute_script_ok(exe, "Bump", &bump, NULL, &res);
    odbox_result_clear(&res);
    script stale = {.upd = {v1}, .nupd = 1, .emit = {{v1, &EV_CHANGED, "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "Stale", &stale, NULL, &none, &res, &e), ODBOX_ESTALE);
    odbox_result_clear(&res);
    ck_assert_int_eq(plain_count(pg, SILENCE_MS, 0, NULL), 0);
    /* and the listener does hear a commit with events */
    odbox_model *d2 = dfx_dummy(NULL, "d2", 1);
    script ok = {.add = {d2}, .nadd = 1, .emit = {{d2, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "Committed", &ok, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(plain_count(pg, ARRIVES_MS, 1, NULL), 1);
    odbox_model_free(&d);
    odbox_model_free(&d2);
    odbox_model_free(&v1);
    odbox_executor_free(&exe);
    heard_close(&h);
}
END_TEST

/* An own transaction (odbox/tx.h) wakes other processes as an action
 * does: a NOTIFY after a commit with events; none for a rollback, a
 * refused commit or a commit without events (its sentinel). */
START_TEST(an_own_transaction_notifies_after_its_commit)
{
    heard h;
    heard_open(&h, 1);
    odbox_executor *exe = open_exe(&h.f);
    json_object *payload = json_object_new_object();
    odbox_tx *tx = NULL;
    odbox_error e;
    const odbox_shard_id s0 = {0, 0};
    ck_assert_int_eq(odbox_tx_begin(exe, s0, NULL, &tx, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_tx_emit(tx, "Order", "rolled-back", &EV_CREATED, payload, &e), ODBOX_OK);
    odbox_tx_rollback(&tx);
    ck_assert_int_eq(odbox_tx_begin(exe, s0, NULL, &tx, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_tx_commit(&tx, &e), ODBOX_OK);
    ck_assert_int_eq(plain_count(h.pg, SILENCE_MS, 0, NULL), 0);
    ck_assert_int_eq(odbox_tx_begin(exe, s0, NULL, &tx, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_tx_emit(tx, "Order", "committed", &EV_CREATED, payload, &e), ODBOX_OK);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(plain_count(h.pg, ARRIVES_MS, 1, NULL), 1);
    ck_assert_int_eq(itest_count(h.f.c[0], "SELECT COUNT(*) FROM %s.events WHERE event_type IS NOT NULL", h.f.ev[0]),
                     1);
    json_object_put(payload);
    odbox_executor_free(&exe);
    heard_close(&h);
}
END_TEST

#define BURST 10000
#define BURST_THREADS 4

START_TEST(a_burst_of_commits_sends_few_notifies)
{
    heard h;
    heard_open(&h, 1);
    dfx *f = &h.f;
    PGconn *pg = h.pg;
    odbox_executor *exe = open_exe(f);
    int64_t t0 = mono_ms();
    many m; /* events only: the cheapest commits */
    many_start(&m, exe, BURST_THREADS, BURST / BURST_THREADS, 0);
    many_wait(&m);
    odbox_executor_free(&exe); /* sends what is pending: every NOTIFY is out */
    int64_t elapsed = mono_ms() - t0;
    int n = plain_drain(pg);
    /* one per interval at most, and one more at the end (the executor's
     * free sends what is pending at once) */
    int64_t bound = elapsed / ODBOX_NOTIFY_INTERVAL_MS + 2;
    printf("burst: %d commits in %lld ms (%.0f/s) sent %d NOTIFYs (bound %lld: one per %d ms)\n", BURST,
           (long long)elapsed, BURST * 1000.0 / (double)elapsed, n, (long long)bound, ODBOX_NOTIFY_INTERVAL_MS);
    ck_assert_int_eq(dfx_events(f, 0), BURST);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, bound);
    ck_assert_int_le(n, BURST / 4);
    heard_close(&h);
}
END_TEST

/* ---- the switches -------------------------------------------------------------------------- */

static odbox_registry *registry_with(const dfx *f, const char *extra)
{
    char opts[256];
    snprintf(opts, sizeof opts, "eventlog=%s&%s", f->ev[0], extra);
    char *dsn = itest_dsn_with(1, opts);
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open_dsn(dsn, &r, &e) == ODBOX_OK, "%s", e.message);
    free(dsn);
    return r;
}

START_TEST(notify_off_sends_nothing_and_listens_to_nothing)
{
    heard h;
    heard_open(&h, 1);
    dfx *f = &h.f;
    PGconn *pg = h.pg;
    const char *ch = h.ch;
    odbox_registry *off = registry_with(f, "notify=off");
    odbox_executor *exe = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_executor_open(NS, off, NULL, &exe, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_model(exe, &DUMMY_T, &e), ODBOX_OK);
    odbox_model *d = dfx_dummy(NULL, "d", 1);
    odbox_result res;
    for (int i = 0; i < 3; i++) {
        script s = {.emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
        execute_script_ok(exe, "Quietly", &s, NULL, &res);
        odbox_result_clear(&res);
    }
    odbox_executor_free(&exe);
    ck_assert_int_eq(dfx_events(f, 0), 3);
    ck_assert_int_eq(plain_count(pg, SILENCE_MS, 0, NULL), 0);

    /* a worker on a notify=off DSN does not LISTEN */
    seen s = {0};
    odbox_wake *w = open_wake(off, NULL, &s);
    notify_now(f->c[0], ch);
    ck_assert_int_eq(plain_count(pg, ARRIVES_MS, 1, NULL), 1); /* it was sent */
    usleep(SILENCE_MS * 1000);
    ck_assert_int_eq(atomic_load(&s.n[ODBOX_WAKE_EVENTS]), 0);
    ck_assert_int_eq(odbox_wake_listening(w, (odbox_shard_id){0, 0}), 0);
    assert_listener_sessions(f, 0);
    odbox_wake_free(&w);

    /* the same writer without the switch is heard */
    exe = open_exe(f);
    script s2 = {.emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "Heard", &s2, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(plain_count(pg, ARRIVES_MS, 1, NULL), 1);
    odbox_executor_free(&exe);
    odbox_model_free(&d);
    odbox_registry_free(&off);
    heard_close(&h);
}
END_TEST

START_TEST(listen_off_starts_no_session)
{
    dfx f;
    dfx_open(&f, 1, 0);
    char ch[ODBOX_NAME_MAX];
    channel_of(&f, ODBOX_WAKE_EVENTS, ch);
    seen off = {0}, on = {0};
    odbox_wake_config cfg = {.listen = -1};
    odbox_wake *w_off = open_wake(f.r, &cfg, &off);
    odbox_wake *w_on = open_wake(f.r, NULL, &on);
    wait_listening(w_on);
    assert_listener_sessions(&f, 1); /* w_on's only */
    notify_now(f.c[0], ch);
    ck_assert(wait_for(&on.n[ODBOX_WAKE_EVENTS], 1, ARRIVES_MS));
    usleep(SILENCE_MS * 1000);
    ck_assert_int_eq(atomic_load(&off.n[ODBOX_WAKE_EVENTS]), 0);
    ck_assert_int_eq(odbox_wake_listening(w_off, (odbox_shard_id){0, 0}), 0);
    odbox_wake_free(&w_off);
    odbox_wake_free(&w_on);
    dfx_close(&f);
}
END_TEST

/* ---- the listener's session goes away ---------------------------------------------------------- */

/* After losing its session, a listener reconnects and raises both
 * signals (what was notified meanwhile is lost); then it hears again. */
static void assert_listens_again(dfx *f, odbox_wake *w, seen *s, int round)
{
    ck_assert_msg(wait_for(&s->n[ODBOX_WAKE_NOTIFICATIONS], round, 60000), "round %d: no reconnect within 60 s",
                  round);
    wait_listening(w);
    char ch[ODBOX_NAME_MAX];
    channel_of(f, ODBOX_WAKE_EVENTS, ch);
    int before = atomic_load(&s->n[ODBOX_WAKE_EVENTS]);
    notify_now(f->c[0], ch);
    ck_assert_msg(wait_for(&s->n[ODBOX_WAKE_EVENTS], before + 1, ARRIVES_MS), "round %d: not heard", round);
}

START_TEST(listener_survives_its_session_being_terminated)
{
    dfx f;
    dfx_open(&f, 1, 0);
    seen s = {0};
    odbox_wake_config cfg = {.backoff_min_ms = 50, .backoff_max_ms = 400};
    odbox_wake *w = open_wake(f.r, &cfg, &s);
    wait_listening(w);
    for (int round = 1; round <= 2; round++) {
        ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) " LISTENERS_OF
                                              ") t", f.ev[0]),
                         1);
        assert_listens_again(&f, w, &s, round);
    }
    odbox_wake_free(&w);
    dfx_close(&f);
}
END_TEST

/* Run by the restart suite (test_restart.c, from restart.test after every
 * other test that uses the servers): a restart cuts the sessions of the
 * tests running beside it. */
START_TEST(listener_survives_a_server_restart)
{
    dfx f;
    dfx_open(&f, 1, 0);
    seen s = {0};
    odbox_wake_config cfg = {.backoff_min_ms = 50, .backoff_max_ms = 500};
    odbox_wake *w = open_wake(f.r, &cfg, &s);
    wait_listening(w);
    if (itest_restart_server()) {
        odbox_conn_close(&f.c[0]); /* ended by the restart */
        f.c[0] = itest_connect(1);
        assert_listens_again(&f, w, &s, 1);
    }
    odbox_wake_free(&w);
    dfx_close(&f);
}
END_TEST

/* ---- bounded waits ----------------------------------------------------------------------------------- */

typedef struct logged {
    pthread_mutex_t mu;
    int timeouts, refused, leaked;
} logged;

static void capture(void *ud, odbox_log_level level, const char *message)
{
    logged *l = ud;
    pthread_mutex_lock(&l->mu);
    if (level >= ODBOX_LOG_WARN && strstr(message, "timed out while connecting"))
        l->timeouts++;
    if (level >= ODBOX_LOG_WARN && strstr(message, "cannot connect"))
        l->refused++;
    if (strstr(message, "s3cr3t-PW"))
        l->leaked++;
    pthread_mutex_unlock(&l->mu);
}

/* A TCP port that accepts connections (the kernel completes them) and
 * never answers: a server that hangs. */
static int black_hole(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 64), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

static int64_t timed_stop(odbox_wake **w)
{
    int64_t t0 = mono_ms();
    odbox_wake_free(w);
    return mono_ms() - t0;
}

static odbox_registry *registry_at(int port)
{
    char dsn[256];
    snprintf(dsn, sizeof dsn, "postgresql://odbox:s3cr3t-PW@127.0.0.1:%d/nowhere?eventlog=ev_nowhere", port);
    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open_dsn(dsn, &r, NULL), ODBOX_OK);
    return r;
}

START_TEST(connect_times_out_and_stop_is_prompt)
{
    logged lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_log_set(capture, &lg, ODBOX_LOG_DEBUG);
    int port;
    int hole = black_hole(&port);
    odbox_registry *r = registry_at(port);
    seen s = {0};

    /* the connect's bound trips, then it backs off and tries again */
    odbox_wake_config quick = {.connect_timeout_ms = 300, .backoff_min_ms = 100, .backoff_max_ms = 200};
    odbox_wake *w = open_wake(r, &quick, &s);
    int64_t deadline = mono_ms() + 10000;
    while (mono_ms() < deadline) {
        pthread_mutex_lock(&lg.mu);
        int n = lg.timeouts;
        pthread_mutex_unlock(&lg.mu);
        if (n)
            break;
        usleep(10000);
    }
    ck_assert_int_eq(lg.timeouts, 1); /* logged once, however often it retries */
    usleep(700 * 1000);
    ck_assert_int_eq(odbox_wake_listening(w, (odbox_shard_id){0, 0}), 0);
    int64_t ms = timed_stop(&w);
    printf("stop while connecting and backing off: %lld ms\n", (long long)ms);
    ck_assert_int_lt(ms, STOP_MS);

    /* stop in the middle of a connect that would wait a minute */
    odbox_wake_config slow = {.connect_timeout_ms = 60000};
    w = open_wake(r, &slow, &s);
    usleep(300 * 1000);
    ms = timed_stop(&w);
    printf("stop during a hanging connect: %lld ms\n", (long long)ms);
    ck_assert_int_lt(ms, STOP_MS);
    odbox_registry_free(&r);
    close(hole);

    /* nothing listens on the port: refused, backing off; stop is prompt */
    r = registry_at(port);
    w = open_wake(r, &quick, &s);
    usleep(500 * 1000);
    ms = timed_stop(&w);
    ck_assert_int_lt(ms, STOP_MS);
    ck_assert_int_ge(lg.refused, 1);
    odbox_registry_free(&r);

    /* and while listening */
    dfx f;
    dfx_open(&f, 1, 0);
    w = open_wake(f.r, NULL, &s);
    wait_listening(w);
    ms = timed_stop(&w);
    printf("stop while listening: %lld ms\n", (long long)ms);
    ck_assert_int_lt(ms, STOP_MS);
    dfx_close(&f);
    odbox_log_set(NULL, NULL, ODBOX_LOG_INFO);
    ck_assert_int_eq(lg.leaked, 0);
    ck_assert_int_eq(atomic_load(&s.n[ODBOX_WAKE_EVENTS]), 0);
}
END_TEST

/* ---- raw ODBC strings -------------------------------------------------------------------------------- */

START_TEST(a_raw_odbc_string_listens_where_it_names_its_server)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_dsn *d = NULL;
    ck_assert_int_eq(odbox_dsn_parse(itest_dsn(1), &d, NULL), ODBOX_OK);
    char raw[1024];
    snprintf(raw, sizeof raw, "Driver={PostgreSQL ANSI};Server=%s;Port=%d;Database=%s;Uid=%s;Pwd={%s};eventlog=%s",
             d->host, d->port, d->database, d->user, d->password, f.ev[0]);
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open_dsn(raw, &r, &e) == ODBOX_OK, "%s", e.message);
    seen s = {0};
    odbox_wake *w = open_wake(r, NULL, &s); /* connects once to learn the dialect */
    wait_listening(w);
    char ch[ODBOX_NAME_MAX];
    channel_of(&f, ODBOX_WAKE_EVENTS, ch);
    notify_now(f.c[0], ch);
    ck_assert(wait_for(&s.n[ODBOX_WAKE_EVENTS], 1, ARRIVES_MS));
    odbox_wake_free(&w);
    odbox_registry_free(&r);
    odbox_dsn_free(&d);

    /* one that does not name its server cannot: workers poll it */
    const odbox_dialect *pgd = odbox_dialect_find("postgresql");
    const char *const channels[] = {"eventlog_events"};
    odbox_listener *l = NULL;
    ck_assert_int_eq(odbox_dsn_parse("DSN=somewhere;Database=x;PWD=s3cr3t-PW", &d, NULL), ODBOX_OK);
    ck_assert_int_eq(pgd->listen_open(d, channels, 1, 1000, -1, &l, &e), ODBOX_EUNSUPPORTED);
    ck_assert_ptr_null(l);
    ck_assert_ptr_nonnull(strstr(e.message, "Server="));
    ck_assert_ptr_null(strstr(e.message, "s3cr3t-PW"));
    /* and what the method refuses */
    const char *const bad[] = {"Bad-Name"};
    ck_assert_int_eq(pgd->listen_open(d, bad, 1, 1000, -1, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(pgd->listen_open(d, channels, 0, 1000, -1, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(pgd->listen_open(d, channels, 1, 0, -1, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(pgd->listen_open(d, channels, 1, 1000, -1, NULL, &e), ODBOX_EINVAL);
    unsigned got;
    ck_assert_int_eq(pgd->listen_wait(NULL, 10, -1, &got, &e), ODBOX_EINVAL);
    pgd->listen_close(NULL);
    pgd->listen_close(&l);
    odbox_dsn_free(&d);
    dfx_close(&f);
}
END_TEST

#else

/* Built without libpq (configure found none, or --without-libpq), odbox
 * has no LISTEN and the cross-process tests above are not built: under
 * CI=true that is a failure, as a relay whose library is missing is, so
 * that a CI build that lost libpq-dev does not pass without them. */
START_TEST(cross_process_wakeups_are_built)
{
    ck_abort_msg("wake suite: built without libpq under CI=true: PostgreSQL's cross-process wake-ups (LISTEN) "
                 "and their tests are missing (apt-get install libpq-dev, then configure again)");
}
END_TEST

#endif /* HAVE_LIBPQ */

Suite *wake_suite(void)
{
    Suite *s = suite_create("wake");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 300);
#ifdef HAVE_LIBPQ
    if (!strcmp(itest_dialect(), "pg")) {
        tcase_add_test(t, a_commit_in_another_process_wakes_the_listener);
        tcase_add_test(t, notify_follows_the_commit_from_a_session_of_its_own);
        tcase_add_test(t, nothing_is_sent_for_what_did_not_commit_events);
        tcase_add_test(t, an_own_transaction_notifies_after_its_commit);
        tcase_add_test(t, a_burst_of_commits_sends_few_notifies);
        tcase_add_test(t, notify_off_sends_nothing_and_listens_to_nothing);
        tcase_add_test(t, listen_off_starts_no_session);
        tcase_add_test(t, listener_survives_its_session_being_terminated);
        tcase_add_test(t, connect_times_out_and_stop_is_prompt);
        tcase_add_test(t, a_raw_odbc_string_listens_where_it_names_its_server);
    }
#else
    const char *ci = getenv("CI");
    if (!strcmp(itest_dialect(), "pg") && ci && !strcmp(ci, "true"))
        tcase_add_test(t, cross_process_wakeups_are_built);
    else if (!strcmp(itest_dialect(), "pg"))
        fprintf(stderr, "*** wake suite: built without libpq, so no LISTEN: the cross-process tests do not run "
                        "(commit_listeners checks that nothing listens; under CI=true this fails)\n");
#endif
    suite_add_tcase(s, t);
    return s;
}

void wake_add_restart_tests(TCase *t)
{
#ifdef HAVE_LIBPQ
    if (!strcmp(itest_dialect(), "pg"))
        tcase_add_test(t, listener_survives_a_server_restart);
#else
    (void)t;
#endif
}
