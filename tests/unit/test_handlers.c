/* odbox — unit tests of in-process handlers without a server: the
 * registry's names (durable and former, one namespace), what a delivery
 * refuses (configuration, jobs, executors, rounds), Ekbatan's backoff,
 * and the worker threads' bounds (a hung call abandoned and replaced, a
 * stop that does not wait for it). */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "delivery_internal.h"
#include "unit.h"

#define DSN "sqlite:///nonexistent-dir/handlers.db"

static int noop(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)user, (void)err;
    return 0;
}

static int add(odbox_handlers *h, const char *name, const char *const *former, const char *type, odbox_error *e)
{
    odbox_handler hd = {name, former, type, noop, NULL, NULL};
    return odbox_handlers_add(h, &hd, e);
}

START_TEST(names_are_one_namespace)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    const char *const former[] = {"mail.v1", "mail-old", NULL};
    ck_assert_int_eq(add(h, "mail:v2", former, "OrderPlaced", &e), ODBOX_OK);
    ck_assert_int_eq(add(h, "index", NULL, "OrderPlaced", &e), ODBOX_OK); /* a second handler of a type */
    ck_assert_uint_eq(odbox_handlers_count(h), 2);
    /* a name, or a former name, taken */
    ck_assert_int_eq(add(h, "index", NULL, "Other", &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "taken by handler index"));
    ck_assert_int_eq(add(h, "mail-old", NULL, "Other", &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "taken by handler mail:v2"));
    const char *const steals[] = {"index", NULL};
    ck_assert_int_eq(add(h, "fresh", steals, "Other", &e), ODBOX_EINVAL);
    const char *const self[] = {"solo", NULL};
    ck_assert_int_eq(add(h, "solo", self, "Other", &e), ODBOX_EINVAL);
    const char *const twice[] = {"x1", "x1", NULL};
    ck_assert_int_eq(add(h, "twice", twice, "Other", &e), ODBOX_EINVAL);
    /* the rule: [A-Za-z0-9][A-Za-z0-9_.:-]*, at most 255 */
    char long_name[300];
    memset(long_name, 'n', 256);
    long_name[256] = '\0';
    const char *bad[] = {NULL, "", "-lead", "has space", "semi;colon", "quo'te", "\xc3\xa9t\xc3\xa9", long_name};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(add(h, bad[i], NULL, "T", &e) == ODBOX_EINVAL, "name %zu accepted", i);
    long_name[255] = '\0';
    ck_assert_int_eq(add(h, long_name, NULL, "T", &e), ODBOX_OK);
    const char *const bad_former[] = {"ok-name", "bad name", NULL};
    ck_assert_int_eq(add(h, "good", bad_former, "T", &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "former name 'bad name'"));
    /* event types as odbox_event_type names; a callback */
    ck_assert_int_eq(add(h, "t1", NULL, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(add(h, "t2", NULL, "has-dash", &e), ODBOX_EINVAL);
    ck_assert_int_eq(add(h, "t3", NULL, "9Lead", &e), ODBOX_EINVAL);
    odbox_handler nofn = {"t4", NULL, "T", NULL, NULL, NULL};
    ck_assert_int_eq(odbox_handlers_add(h, &nofn, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_handlers_add(h, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_handlers_add(NULL, &nofn, &e), ODBOX_EINVAL);
    /* several types: event_types instead of event_type, each valid, once */
    const char *const two[] = {"T", "U", NULL}, *const none[] = {NULL}, *const repeated[] = {"T", "U", "T", NULL},
                      *const bad_one[] = {"T", "bad-type", NULL};
    odbox_handler multi = {.name = "t5", .event_type = "T", .event_types = two, .handle = noop};
    ck_assert_int_eq(odbox_handlers_add(h, &multi, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "both event_type and event_types"));
    multi.event_type = NULL, multi.event_types = none;
    ck_assert_int_eq(odbox_handlers_add(h, &multi, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "event_types is empty"));
    multi.event_types = repeated;
    ck_assert_int_eq(odbox_handlers_add(h, &multi, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "lists the event type T twice"));
    multi.event_types = bad_one;
    ck_assert_int_eq(odbox_handlers_add(h, &multi, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "'bad-type'"));
    multi.event_types = two;
    ck_assert_int_eq(odbox_handlers_add(h, &multi, &e), ODBOX_OK);
    /* nothing half-added */
    ck_assert_uint_eq(odbox_handlers_count(h), 4);
    ck_assert_int_eq(odbox_handlers_find(h, "mail.v1"), 0);
    ck_assert_int_eq(odbox_handlers_find(h, "mail:v2"), 0);
    ck_assert_int_eq(odbox_handlers_find(h, "index"), 1);
    ck_assert_int_eq(odbox_handlers_find(h, "ok-name"), -1);
    ck_assert_int_eq(odbox_handlers_find(h, "nobody"), -1);
    ck_assert_int_eq(odbox_handlers_new(NULL, &e), ODBOX_EINVAL);
    odbox_handlers_free(&h);
    ck_assert_ptr_null(h);
    odbox_handlers_free(&h);
    odbox_handlers_free(NULL);
}
END_TEST

/* A limit of no handler, of a former name, negative, or with NULLs is
 * refused and leaves the one set as it was; 0 takes it off. */
START_TEST(max_attempts_refusals)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    const char *const former[] = {"old-name", NULL};
    ck_assert_int_eq(add(h, "named", former, "T", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_set_max_attempts(h, "named", 3, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_set_max_attempts(NULL, "named", 1, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_handlers_set_max_attempts(h, NULL, 1, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_handlers_set_max_attempts(h, "nobody", 1, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "no handler is named 'nobody'"));
    ck_assert_int_eq(odbox_handlers_set_max_attempts(h, "old-name", 1, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "that is a former name"));
    ck_assert_int_eq(odbox_handlers_set_max_attempts(h, "named", -1, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "-1 is negative"));
    ck_assert_int_eq(h->v[0].max_attempts, 3);
    ck_assert_int_eq(odbox_handlers_set_max_attempts(h, "named", 0, &e), ODBOX_OK);
    ck_assert_int_eq(h->v[0].max_attempts, 0);
    odbox_handlers_free(&h);
}
END_TEST

START_TEST(delivery_refuses_bad_input)
{
    odbox_registry *r = NULL;
    odbox_handlers *h = NULL, *empty = NULL;
    odbox_delivery *d = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn(DSN, &r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_new(&empty, &e), ODBOX_OK);
    ck_assert_int_eq(add(h, "a", NULL, "T", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_open(NULL, h, NULL, &d, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_open(r, NULL, NULL, &d, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_open(r, h, NULL, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_open(r, empty, NULL, &d, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "no handlers"));
    const odbox_delivery_config bad[] = {
        {.fanout_batch = -1},        {.handling_batch = 10001},   {.fanout_poll_ms = -5},
        {.handling_poll_ms = -1},    {.backoff_base_ms = -1},     {.backoff_cap_ms = -1},
        {.retention_ms = -1},        {.workers = -2},             {.workers = 5000},
        {.handler_timeout_ms = -1},  {.stop_wait_ms = -1},        {.execution_max_ms = -1},
        {.cross_process_wakeup = 1}, {.replica_max_lag_ms = -1},  {.replica_max_lag_ms = 86400001},
        {.handling_loops = -1},      {.handling_loops = 65},      {.lease_ms = -1},
        {.subscription_live_ms = -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(odbox_delivery_open(r, h, &bad[i], &d, &e) == ODBOX_EINVAL, "config %zu accepted", i);
        ck_assert_ptr_null(d);
        if (bad[i].lease_ms < 0)
            ck_assert_msg(strstr(e.message, "lease_ms -1 is out of range"), "%s", e.message);
        if (bad[i].subscription_live_ms < 0)
            ck_assert_msg(strstr(e.message, "subscription_live_ms -1 is out of range"), "%s", e.message);
    }
    ck_assert_ptr_nonnull(strstr(e.message, "subscription_live_ms"));
    /* a refused open leaves the handlers open to additions */
    ck_assert_int_eq(add(h, "b", NULL, "T", &e), ODBOX_OK);
    /* a cap below the base is Ekbatan's handling-max-backoff-cap of 10 s
     * with its fixed 30 s base: every retry waits the cap */
    odbox_delivery_config low_cap = {.backoff_cap_ms = 10000};
    ck_assert_msg(odbox_delivery_open(r, h, &low_cap, &d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(add(h, "c", NULL, "T", &e), ODBOX_ESTATE);

    /* jobs */
    odbox_jobs *jobs = NULL;
    ck_assert_int_eq(odbox_jobs_open(r, NULL, &jobs, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_add_jobs(d, NULL, ODBOX_DELIVERY_FANOUT, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_add_jobs(NULL, jobs, ODBOX_DELIVERY_FANOUT, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_add_jobs(d, jobs, 0, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_add_jobs(d, jobs, 4, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_add_jobs(d, jobs, ODBOX_DELIVERY_HANDLING, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_add_jobs(d, jobs, ODBOX_DELIVERY_HANDLING | ODBOX_DELIVERY_FANOUT, &e),
                     ODBOX_ESTATE);
    ck_assert_int_eq(odbox_delivery_add_jobs(d, jobs, ODBOX_DELIVERY_FANOUT, &e), ODBOX_OK);
    /* a stop wait above half the registry's shutdown wait: refused, both named */
    odbox_jobs *quick = NULL;
    odbox_delivery *d2 = NULL;
    ck_assert_int_eq(odbox_jobs_open(r, &(odbox_jobs_config){.shutdown_max_wait_ms = 9999}, &quick, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_open(r, h, NULL, &d2, &e), ODBOX_OK); /* stop_wait_ms 5000 */
    ck_assert_int_eq(odbox_delivery_add_jobs(d2, quick, ODBOX_DELIVERY_HANDLING, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "stop_wait_ms 5000") && strstr(e.message, "shutdown_max_wait_ms 9999"), "%s",
                  e.message);
    odbox_delivery_free(&d2);
    ck_assert_int_eq(
        odbox_delivery_open(r, h, &(odbox_delivery_config){.stop_wait_ms = 4999}, &d2, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_add_jobs(d2, quick, ODBOX_DELIVERY_HANDLING, &e), ODBOX_OK);
    odbox_jobs_free(&quick);
    odbox_delivery_free(&d2);

    /* executors */
    odbox_executor *exe = NULL;
    ck_assert_int_eq(odbox_executor_open("com.example", r, NULL, &exe, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_attach(d, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_attach(NULL, exe, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_detach(d, exe, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_delivery_attach(d, exe, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_attach(d, exe, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_detach(d, exe, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_detach(d, exe, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_delivery_attach(d, exe, &e), ODBOX_OK); /* free detaches it */

    /* rounds */
    ck_assert_int_eq(odbox_delivery_fanout_round(d, NULL, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_handling_round(NULL, odbox_registry_shard_at(r, 0), NULL, &e), ODBOX_EINVAL);
    odbox_delivery_metrics m;
    ck_assert_int_eq(odbox_delivery_metrics_read(d, NULL, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_metrics_read(NULL, NULL, &m, &e), ODBOX_EINVAL);

    odbox_jobs_free(&jobs);
    odbox_delivery_free(&d);
    ck_assert_ptr_null(d);
    odbox_delivery_free(&d);
    odbox_delivery_free(NULL);
    odbox_executor_free(&exe);
    odbox_handlers_free(&h);
    odbox_handlers_free(&empty);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(backoff_is_ekbatans)
{
    odbox_dcfg c = {.backoff_base_us = 30 * 1000000LL, .backoff_cap_us = 300 * 1000000LL};
    const int64_t want[] = {30, 30, 60, 120, 240, 300, 300, 300};
    for (int attempts = 0; attempts < 8; attempts++)
        ck_assert_int_eq(odbox_delivery_backoff_us(&c, attempts), want[attempts] * 1000000LL);
    ck_assert_int_eq(odbox_delivery_backoff_us(&c, 1000000), 300 * 1000000LL);
    /* a cap far above: the exponent stops at 30 (Ekbatan's min(attempts-1, 30)) */
    odbox_dcfg big = {.backoff_base_us = 1, .backoff_cap_us = INT64_MAX};
    ck_assert_int_eq(odbox_delivery_backoff_us(&big, 31), INT64_C(1) << 30);
    ck_assert_int_eq(odbox_delivery_backoff_us(&big, 500), INT64_C(1) << 30);
    /* the largest allowed base and cap: no overflow */
    odbox_dcfg max = {.backoff_base_us = 86400000LL * 1000, .backoff_cap_us = 366LL * 86400000 * 1000};
    ck_assert_int_eq(odbox_delivery_backoff_us(&max, 40), max.backoff_cap_us);
    /* a cap below the base: every retry waits the cap */
    odbox_dcfg low = {.backoff_base_us = 30 * 1000000LL, .backoff_cap_us = 10 * 1000000LL};
    for (int attempts = 0; attempts < 4; attempts++)
        ck_assert_int_eq(odbox_delivery_backoff_us(&low, attempts), 10 * 1000000LL);
}
END_TEST

/* ---- worker threads ---------------------------------------------------------- */

typedef struct job {
    odbox_work w;
    atomic_int *gate;     /* while set, run waits (at most 10 s) */
    atomic_int ran, *released;
} job;

static void job_run(odbox_work *w)
{
    job *j = (job *)w;
    for (int i = 0; i < 1000 && j->gate && atomic_load(j->gate); i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    atomic_store(&j->ran, 1);
}

static void job_release(odbox_work *w)
{
    job *j = (job *)w;
    if (atomic_fetch_sub(&w->refs, 1) == 1) {
        atomic_fetch_add(j->released, 1);
        free(j);
    }
}

static job *job_new(atomic_int *gate, atomic_int *released)
{
    job *j = calloc(1, sizeof *j);
    j->w.run = job_run;
    j->w.release = job_release;
    atomic_init(&j->w.refs, 1);
    j->gate = gate;
    j->released = released;
    return j;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *open_gate_later(void *gate)
{
    nanosleep(&(struct timespec){0, 300000000}, NULL);
    atomic_store((atomic_int *)gate, 0);
    return NULL;
}

START_TEST(a_hung_call_is_abandoned_and_its_thread_replaced)
{
    odbox_workers *p = NULL;
    ck_assert_int_eq(odbox_workers_open(1, 0, &p, NULL), ODBOX_OK);
    atomic_int gate, released;
    atomic_init(&gate, 1);
    atomic_init(&released, 0);
    /* one thread: the hung call holds it until the timeout, then a new
     * thread runs the other two */
    job *j[3] = {job_new(&gate, &released), job_new(NULL, &released), job_new(NULL, &released)};
    odbox_work *batch[3] = {&j[0]->w, &j[1]->w, &j[2]->w};
    int64_t t0 = now_ms();
    odbox_workers_run(p, batch, 3, 200, 0, NULL, 0);
    int64_t took = now_ms() - t0;
    ck_assert_msg(took >= 190 && took < 5000, "took %lld ms", (long long)took);
    ck_assert_int_eq(j[0]->w.state, ODBOX_WORK_TIMED_OUT);
    ck_assert_int_eq(j[1]->w.state, ODBOX_WORK_DONE);
    ck_assert_int_eq(j[2]->w.state, ODBOX_WORK_DONE);
    ck_assert_int_eq(atomic_load(&j[1]->ran), 1);
    /* the submitter lets go; the hung one lives on with its thread */
    for (int i = 0; i < 3; i++)
        batch[i]->release(batch[i]);
    ck_assert_int_eq(atomic_load(&released), 2);
    /* a stop: a queued call never starts, a running one gets the wait */
    atomic_int stop;
    atomic_init(&stop, 1);
    atomic_int gate2;
    atomic_init(&gate2, 1);
    job *k[2] = {job_new(&gate2, &released), job_new(NULL, &released)};
    odbox_work *b2[2] = {&k[0]->w, &k[1]->w};
    t0 = now_ms();
    odbox_workers_run(p, b2, 2, 60000, 0, &stop, 100);
    took = now_ms() - t0;
    ck_assert_msg(took < 5000, "stop took %lld ms", (long long)took);
    ck_assert(k[1]->w.state == ODBOX_WORK_NOT_RUN || k[1]->w.state == ODBOX_WORK_DONE);
    ck_assert(k[0]->w.state == ODBOX_WORK_NOT_RUN || k[0]->w.state == ODBOX_WORK_CUT_OFF);
    for (int i = 0; i < 2; i++)
        b2[i]->release(b2[i]);
    /* free does not wait for hung calls; they end and free what is left */
    odbox_workers_free(&p);
    ck_assert_ptr_null(p);
    atomic_store(&gate, 0);
    atomic_store(&gate2, 0);
    int64_t end = now_ms() + 10000;
    while (atomic_load(&released) < 5 && now_ms() < end)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    ck_assert_int_eq(atomic_load(&released), 5);
    /* the abandoned threads' last step is freeing the pool: give them it */
    nanosleep(&(struct timespec){0, 200000000}, NULL);
}
END_TEST

/* One thread, held by a slow call: the call queued behind it does not
 * start after its start_by (it ends LATE, not run), and the batch ends
 * when the slow one does, not later. */
START_TEST(a_call_no_thread_took_by_its_start_by_never_starts)
{
    odbox_workers *p = NULL;
    ck_assert_int_eq(odbox_workers_open(1, 0, &p, NULL), ODBOX_OK);
    atomic_int gate, released;
    atomic_init(&gate, 1);
    atomic_init(&released, 0);
    job *j[2] = {job_new(&gate, &released), job_new(NULL, &released)};
    odbox_work *batch[2] = {&j[0]->w, &j[1]->w};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t start_by = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 + 100000; /* 100 ms from now */
    int64_t t0 = now_ms();
    pthread_t t; /* the slow call holds the thread 300 ms: its gate opens then */
    ck_assert_int_eq(pthread_create(&t, NULL, open_gate_later, &gate), 0);
    odbox_workers_run(p, batch, 2, 60000, start_by, NULL, 0);
    int64_t took = now_ms() - t0;
    pthread_join(t, NULL);
    ck_assert_msg(took >= 250 && took < 5000, "took %lld ms", (long long)took);
    ck_assert_int_eq(j[0]->w.state, ODBOX_WORK_DONE);
    ck_assert_int_eq(j[1]->w.state, ODBOX_WORK_LATE);
    ck_assert_int_eq(atomic_load(&j[1]->ran), 0);
    for (int i = 0; i < 2; i++)
        batch[i]->release(batch[i]);
    ck_assert_int_eq(atomic_load(&released), 2);
    odbox_workers_free(&p);
}
END_TEST

/* Two threads, a cap of 1 for group 0: its second call waits for the
 * first to end (300 ms), then runs. One thread, a cap of 2: group 0's
 * first two calls hang and are abandoned (each thread replaced), its
 * third is held, never started; group 1 runs meanwhile. Once the hung
 * calls return, group 0's calls start again. Before the cap, every call
 * of a handler that never returns took a thread of its own, without end. */
START_TEST(a_group_holds_at_most_its_cap_of_threads_hung_ones_included)
{
    odbox_workers *p = NULL;
    atomic_int gate, released;
    atomic_init(&gate, 1);
    atomic_init(&released, 0);
    ck_assert_int_eq(odbox_workers_open(2, 1, &p, NULL), ODBOX_OK);
    job *one[2] = {job_new(&gate, &released), job_new(NULL, &released)};
    odbox_work *b1[2] = {&one[0]->w, &one[1]->w};
    for (int i = 0; i < 2; i++)
        one[i]->w.group = 0, one[i]->w.group_cap = 1;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, open_gate_later, &gate), 0);
    int64_t t0 = now_ms();
    odbox_workers_run(p, b1, 2, 60000, 0, NULL, 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(one[0]->w.state, ODBOX_WORK_DONE);
    ck_assert_int_eq(one[1]->w.state, ODBOX_WORK_DONE);
    ck_assert_msg(one[1]->w.started_us / 1000 >= t0 + 250, "the second call started %lld ms after the first, "
                  "while it ran", (long long)(one[1]->w.started_us / 1000 - t0));
    for (int i = 0; i < 2; i++)
        b1[i]->release(b1[i]);
    odbox_workers_free(&p);
    atomic_store(&gate, 1);
    ck_assert_int_eq(odbox_workers_open(1, 2, &p, NULL), ODBOX_OK);
    job *j[4] = {job_new(&gate, &released), job_new(&gate, &released), job_new(&gate, &released),
                 job_new(NULL, &released)};
    for (int i = 0; i < 4; i++)
        j[i]->w.group = i < 3 ? 0 : 1, j[i]->w.group_cap = 2;
    odbox_work *batch[4] = {&j[0]->w, &j[1]->w, &j[2]->w, &j[3]->w};
    odbox_workers_run(p, batch, 4, 100, 0, NULL, 0);
    ck_assert_int_eq(j[0]->w.state, ODBOX_WORK_TIMED_OUT);
    ck_assert_int_eq(j[1]->w.state, ODBOX_WORK_TIMED_OUT);
    ck_assert_int_eq(j[2]->w.state, ODBOX_WORK_HELD);
    ck_assert_int_eq(atomic_load(&j[2]->ran), 0);
    ck_assert_int_eq(j[3]->w.state, ODBOX_WORK_DONE);
    ck_assert_int_eq(odbox_workers_hung(p, 0), 2);
    ck_assert_int_eq(odbox_workers_hung(p, 1), 0);
    ck_assert_int_eq(odbox_workers_hung(p, 7), 0); /* out of range: none */
    for (int i = 0; i < 4; i++)
        batch[i]->release(batch[i]);
    atomic_store(&gate, 0);
    int64_t end = now_ms() + 10000;
    while ((odbox_workers_hung(p, 0) > 0 || atomic_load(&released) < 6) && now_ms() < end)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    ck_assert_int_eq(odbox_workers_hung(p, 0), 0);
    ck_assert_int_eq(atomic_load(&released), 6);
    job *again = job_new(NULL, &released);
    again->w.group = 0, again->w.group_cap = 2;
    odbox_work *b2[1] = {&again->w};
    odbox_workers_run(p, b2, 1, 1000, 0, NULL, 0);
    ck_assert_int_eq(again->w.state, ODBOX_WORK_DONE);
    b2[0]->release(b2[0]);
    odbox_workers_free(&p);
}
END_TEST

Suite *handlers_suite(void)
{
    Suite *s = suite_create("handlers");
    TCase *tc = tcase_create("handlers");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, names_are_one_namespace);
    tcase_add_test(tc, max_attempts_refusals);
    tcase_add_test(tc, delivery_refuses_bad_input);
    tcase_add_test(tc, backoff_is_ekbatans);
    tcase_add_test(tc, a_hung_call_is_abandoned_and_its_thread_replaced);
    tcase_add_test(tc, a_call_no_thread_took_by_its_start_by_never_starts);
    tcase_add_test(tc, a_group_holds_at_most_its_cap_of_threads_hung_ones_included);
    suite_add_tcase(s, tc);
    return s;
}
