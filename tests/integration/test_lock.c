/* odbox — integration tests of keyed locks (leases) against a real server:
 * mutual exclusion between threads, try/bounded waits, independent keys,
 * re-entrancy, the max-hold watchdog, connections going back to the
 * pool, lock sessions apart from the executor's connections, backend
 * failures and bad input. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "actions.h"

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static odbox_registry *open_registry(int pool_size, int acquire_timeout_ms)
{
    odbox_registry *r = NULL;
    odbox_error e = {0};
    if (pool_size == 0) {
        ck_assert_msg(odbox_registry_open_dsn(itest_dsn(1), &r, &e) == ODBOX_OK, "%s", e.message);
        return r;
    }
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1)};
    sc.pool.size = pool_size;
    sc.pool.acquire_timeout_ms = acquire_timeout_ms;
    odbox_registry_config rc = {.shards = &sc, .nshards = 1};
    ck_assert_msg(odbox_registry_open(&rc, &r, &e) == ODBOX_OK, "%s", e.message);
    return r;
}

/* Leaves n idle connections in the shard's pool, so that timings below
 * measure locking, not connecting (slow under valgrind). */
static void prewarm(odbox_shard *s, int n)
{
    odbox_lease *l[8] = {0};
    ck_assert_int_le(n, 8);
    for (int i = 0; i < n; i++) {
        char key[64];
        odbox_error e = {0};
        itest_name(key, sizeof key, "lock_warm");
        ck_assert_msg(odbox_lock_try_acquire(s, key, 0, 60000, &l[i], &e) == ODBOX_OK, "%s", e.message);
    }
    for (int i = 0; i < n; i++)
        odbox_lock_release(&l[i]);
}

/* ---- another thread's attempt ---------------------------------------------------- */

typedef struct attempt {
    odbox_shard *shard;
    const char *key;
    int wait_ms;      /* < 0: odbox_lock_acquire */
    int max_hold_ms;
    int hold_ms;      /* keep the lease this long before releasing */
    int rc;
    int held;         /* odbox_lock_is_held right after acquiring */
    long elapsed_ms;  /* time to acquire or fail */
    char message[ODBOX_ERROR_MESSAGE_MAX];
} attempt;

static void *attempt_main(void *arg)
{
    attempt *a = arg;
    odbox_lease *l = (odbox_lease *)&a->rc; /* must be overwritten */
    odbox_error e = {0};
    long t0 = now_ms();
    a->rc = a->wait_ms < 0 ? odbox_lock_acquire(a->shard, a->key, a->max_hold_ms, &l, &e)
                           : odbox_lock_try_acquire(a->shard, a->key, a->wait_ms, a->max_hold_ms, &l, &e);
    a->elapsed_ms = now_ms() - t0;
    snprintf(a->message, sizeof a->message, "%s", e.message);
    if (a->rc != ODBOX_OK) {
        if (l != NULL)
            a->rc = 1000; /* lease not cleared on failure */
        return NULL;
    }
    a->held = odbox_lock_is_held(l);
    if (a->hold_ms > 0)
        sleep_ms(a->hold_ms);
    odbox_lock_release(&l);
    if (l != NULL)
        a->rc = 1001;
    return NULL;
}

/* Runs one attempt on a new thread (a new thread never re-enters). */
static attempt other_thread(odbox_shard *shard, const char *key, int wait_ms, int max_hold_ms)
{
    attempt a = {.shard = shard, .key = key, .wait_ms = wait_ms, .max_hold_ms = max_hold_ms};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, attempt_main, &a), 0);
    pthread_join(t, NULL);
    return a;
}

/* ---- tests ----------------------------------------------------------------------- */

typedef struct exclusion {
    odbox_shard *shard;
    const char *key;
    int rounds;
    int use_try;         /* odbox_lock_try_acquire with a bounded wait */
    long counter;        /* deliberately not atomic */
    atomic_int inside;
    atomic_int overlaps;
    atomic_int failures;
    char message[ODBOX_ERROR_MESSAGE_MAX];
} exclusion;

typedef struct exclusion_arg {
    exclusion *x;
    int use_try;
} exclusion_arg;

static void *exclusion_main(void *arg)
{
    exclusion_arg *xa = arg;
    exclusion *x = xa->x;
    for (int i = 0; i < x->rounds; i++) {
        odbox_lease *l = NULL;
        odbox_error e = {0};
        int rc = xa->use_try ? odbox_lock_try_acquire(x->shard, x->key, 20000, 10000, &l, &e)
                             : odbox_lock_acquire(x->shard, x->key, 10000, &l, &e);
        if (rc != ODBOX_OK) {
            atomic_fetch_add(&x->failures, 1);
            snprintf(x->message, sizeof x->message, "%s: %.400s", odbox_errname(rc), e.message);
            continue;
        }
        if (atomic_fetch_add(&x->inside, 1) != 0)
            atomic_fetch_add(&x->overlaps, 1);
        long v = x->counter;
        sleep_ms(3);
        x->counter = v + 1;
        atomic_fetch_sub(&x->inside, 1);
        odbox_lock_release(&l);
    }
    return NULL;
}

START_TEST(mutual_exclusion_between_threads)
{
    odbox_registry *r = open_registry(0, 0);
    char key[64];
    itest_name(key, sizeof key, "lock_mx");
    exclusion x = {.shard = odbox_registry_default_shard(r), .key = key, .rounds = 25};
    /* connections opened here, not concurrently: psqlODBC's connect calls
     * setlocale(), which races between threads (valgrind sees it) */
    prewarm(x.shard, 3);
    atomic_init(&x.inside, 0);
    atomic_init(&x.overlaps, 0);
    atomic_init(&x.failures, 0);
    enum { T = 3 };
    pthread_t th[T];
    exclusion_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (exclusion_arg){&x, i % 2};
        ck_assert_int_eq(pthread_create(&th[i], NULL, exclusion_main, &args[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(atomic_load(&x.failures) == 0, "failures: %d, last %s", atomic_load(&x.failures), x.message);
    ck_assert_int_eq(atomic_load(&x.overlaps), 0);
    ck_assert_int_eq(x.counter, T * x.rounds);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(try_once_on_held_key_is_busy_fast)
{
    odbox_registry *r = open_registry(0, 0);
    odbox_shard *s = odbox_registry_default_shard(r);
    char key[64];
    itest_name(key, sizeof key, "lock_busy");
    prewarm(s, 2);
    odbox_lease *l = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_lock_try_acquire(s, key, 0, 10000, &l, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(odbox_lock_is_held(l), 1);

    attempt a = other_thread(s, key, 0, 10000);
    ck_assert_msg(a.rc == ODBOX_EBUSY, "%s: %s", odbox_errname(a.rc), a.message);
    ck_assert_int_lt(a.elapsed_ms, 1000);
    ck_assert(a.message[0]);

    /* the same lock id as a raw session lock (Ekbatan's ids) */
    odbox_conn *c = itest_connect(1);
    int taken = -1;
    ck_assert_int_eq(odbox_conn_try_lock(c, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 0);

    odbox_lock_release(&l);
    ck_assert_ptr_null(l);
    ck_assert_int_eq(odbox_conn_try_lock(c, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1);
    /* held by a foreign session now: a lease is busy */
    a = other_thread(s, key, 0, 10000);
    ck_assert_int_eq(a.rc, ODBOX_EBUSY);
    ck_assert_int_eq(odbox_conn_unlock(c, key, &e), ODBOX_OK);
    a = other_thread(s, key, 0, 10000);
    ck_assert_msg(a.rc == ODBOX_OK, "%s", a.message);
    ck_assert_int_eq(a.held, 1);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(bounded_wait_times_out)
{
    odbox_registry *r = open_registry(0, 0);
    odbox_shard *s = odbox_registry_default_shard(r);
    char key[64];
    itest_name(key, sizeof key, "lock_wait");
    prewarm(s, 3);
    odbox_lease *l = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_lock_acquire(s, key, 10000, &l, &e) == ODBOX_OK, "%s", e.message);

    attempt a = other_thread(s, key, 400, 10000);
    ck_assert_msg(a.rc == ODBOX_ETIMEDOUT, "%s: %s", odbox_errname(a.rc), a.message);
    ck_assert_int_ge(a.elapsed_ms, 390);
    ck_assert_int_lt(a.elapsed_ms, 3000);

    /* a waiter gets the lock once it is released within its wait */
    attempt w = {.shard = s, .key = key, .wait_ms = 5000, .max_hold_ms = 10000};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, attempt_main, &w), 0);
    sleep_ms(300);
    odbox_lock_release(&l);
    pthread_join(t, NULL);
    ck_assert_msg(w.rc == ODBOX_OK, "%s: %s", odbox_errname(w.rc), w.message);
    ck_assert_int_ge(w.elapsed_ms, 250);
    ck_assert_int_lt(w.elapsed_ms, 4000);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(different_keys_are_independent)
{
    odbox_registry *r = open_registry(0, 0);
    odbox_shard *s = odbox_registry_default_shard(r);
    char k1[64], k2[64];
    itest_name(k1, sizeof k1, "lock_a");
    itest_name(k2, sizeof k2, "lock_b");
    odbox_lease *l1 = NULL, *l2 = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_lock_try_acquire(s, k1, 0, 10000, &l1, &e), ODBOX_OK);
    attempt a = other_thread(s, k2, 0, 10000);
    ck_assert_msg(a.rc == ODBOX_OK, "%s", a.message);
    /* this thread holds both at once */
    ck_assert_int_eq(odbox_lock_try_acquire(s, k2, 0, 10000, &l2, &e), ODBOX_OK);
    ck_assert(odbox_lock_is_held(l1) && odbox_lock_is_held(l2));
    ck_assert_int_eq(other_thread(s, k1, 0, 10000).rc, ODBOX_EBUSY);
    ck_assert_int_eq(other_thread(s, k2, 0, 10000).rc, ODBOX_EBUSY);
    odbox_lock_release(&l1);
    ck_assert_int_eq(other_thread(s, k1, 0, 10000).rc, ODBOX_OK);
    ck_assert_int_eq(other_thread(s, k2, 0, 10000).rc, ODBOX_EBUSY);
    odbox_lock_release(&l2);
    ck_assert_int_eq(other_thread(s, k2, 0, 10000).rc, ODBOX_OK);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(reentrant_per_thread)
{
    odbox_registry *r = open_registry(0, 0);
    odbox_shard *s = odbox_registry_default_shard(r);
    char key[64];
    itest_name(key, sizeof key, "lock_re");
    odbox_lease *outer = NULL, *inner = NULL, *inner2 = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 0, 10000, &outer, &e), ODBOX_OK);
    /* nested: no backend call; the inner max hold is ignored */
    ck_assert_int_eq(odbox_lock_acquire(s, key, 1, &inner, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 0, 1, &inner2, &e), ODBOX_OK);
    ck_assert_ptr_nonnull(inner);
    ck_assert_ptr_ne(inner, outer);
    sleep_ms(100);
    ck_assert(odbox_lock_is_held(outer) && odbox_lock_is_held(inner) && odbox_lock_is_held(inner2));
    ck_assert_int_eq(other_thread(s, key, 0, 10000).rc, ODBOX_EBUSY);

    odbox_lock_release(&inner2);
    odbox_lock_release(&inner);
    ck_assert_ptr_null(inner);
    ck_assert_int_eq(odbox_lock_is_held(outer), 1);
    ck_assert_int_eq(other_thread(s, key, 0, 10000).rc, ODBOX_EBUSY);

    odbox_lock_release(&outer);
    ck_assert_int_eq(other_thread(s, key, 0, 10000).rc, ODBOX_OK);
    odbox_lock_release(&outer); /* NULL: harmless */
    odbox_registry_free(&r);
}
END_TEST

START_TEST(max_hold_force_releases)
{
    odbox_registry *r = open_registry(0, 0);
    odbox_shard *s = odbox_registry_default_shard(r);
    char key[64];
    itest_name(key, sizeof key, "lock_hold");
    prewarm(s, 3);
    odbox_lease *l = NULL, *nested = NULL;
    odbox_error e = {0};
    long t0 = now_ms();
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 0, 300, &l, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_lock_acquire(s, key, 60000, &nested, &e), ODBOX_OK);

    attempt a = other_thread(s, key, 10000, 10000);
    long waited = now_ms() - t0;
    ck_assert_msg(a.rc == ODBOX_OK, "%s: %s", odbox_errname(a.rc), a.message);
    ck_assert_int_eq(a.held, 1);
    ck_assert_int_ge(waited, 290);
    ck_assert_int_lt(waited, 8000);
    ck_assert_int_eq(odbox_lock_is_held(l), 0);
    ck_assert_int_eq(odbox_lock_is_held(nested), 0);

    /* a new acquire by this thread does not re-enter the released hold */
    odbox_lease *again = NULL;
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 0, 10000, &again, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_lock_is_held(again), 1);
    ck_assert_int_eq(other_thread(s, key, 0, 10000).rc, ODBOX_EBUSY);

    odbox_lock_release(&nested);
    odbox_lock_release(&l); /* harmless: the watchdog already unlocked */
    ck_assert_int_eq(odbox_lock_is_held(again), 1);
    ck_assert_int_eq(other_thread(s, key, 0, 10000).rc, ODBOX_EBUSY);
    odbox_lock_release(&again);
    ck_assert_int_eq(other_thread(s, key, 0, 10000).rc, ODBOX_OK);
    odbox_registry_free(&r);
}
END_TEST

/* Polls until lease l is no longer held; returns the ms it took, or -1. */
static long until_released(odbox_lease *l, long limit_ms)
{
    long t0 = now_ms();
    while (odbox_lock_is_held(l)) {
        if (now_ms() - t0 > limit_ms)
            return -1;
        sleep_ms(10);
    }
    return now_ms() - t0;
}

START_TEST(watchdog_honours_each_deadline)
{
    odbox_registry *r = open_registry(0, 0);
    odbox_shard *s = odbox_registry_default_shard(r);
    char k1[64], k2[64], k3[64];
    itest_name(k1, sizeof k1, "lock_wd1");
    itest_name(k2, sizeof k2, "lock_wd2");
    itest_name(k3, sizeof k3, "lock_wd3");
    prewarm(s, 4);
    odbox_lease *long_l = NULL, *short_l = NULL, *none = NULL;
    odbox_error e = {0};
    /* the later deadline is armed first */
    ck_assert_int_eq(odbox_lock_try_acquire(s, k1, 0, 2500, &long_l, &e), ODBOX_OK);
    long t_long = now_ms();
    ck_assert_int_eq(odbox_lock_try_acquire(s, k2, 0, 150, &short_l, &e), ODBOX_OK);
    long t_short = now_ms();
    ck_assert_int_eq(odbox_lock_try_acquire(s, k3, 0, 60000, &none, &e), ODBOX_OK);

    ck_assert_int_ge(until_released(short_l, 5000), 0);
    ck_assert_int_ge(now_ms() - t_short, 140);
    if (now_ms() - t_long < 2000) { /* skipped on a very slow machine */
        ck_assert_int_eq(odbox_lock_is_held(long_l), 1);
        ck_assert_int_eq(other_thread(s, k1, 0, 10000).rc, ODBOX_EBUSY);
    }
    ck_assert_int_eq(other_thread(s, k2, 0, 10000).rc, ODBOX_OK);

    ck_assert_int_ge(until_released(long_l, 10000), 0);
    ck_assert_int_ge(now_ms() - t_long, 2400);
    ck_assert_int_eq(other_thread(s, k1, 0, 10000).rc, ODBOX_OK);
    ck_assert_int_eq(odbox_lock_is_held(none), 1);
    ck_assert_int_eq(other_thread(s, k3, 0, 10000).rc, ODBOX_EBUSY);
    odbox_lock_release(&short_l);
    odbox_lock_release(&long_l);
    odbox_lock_release(&none);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(connection_returns_to_pool)
{
    /* one connection: every acquire needs the previous one returned */
    odbox_registry *r = open_registry(1, 1000);
    odbox_shard *s = odbox_registry_default_shard(r);
    char key[64], other[64];
    itest_name(key, sizeof key, "lock_pool");
    itest_name(other, sizeof other, "lock_pool_b");
    odbox_error e = {0};
    for (int i = 0; i < 3; i++) {
        odbox_lease *l = NULL, *nested = NULL;
        ck_assert_msg(odbox_lock_acquire(s, key, 10000, &l, &e) == ODBOX_OK, "round %d: %s", i, e.message);
        ck_assert_int_eq(odbox_lock_acquire(s, key, 10000, &nested, &e), ODBOX_OK); /* no 2nd connection */
        odbox_lock_release(&nested);
        odbox_lock_release(&l);
    }

    /* after a force-release, release still returns the connection */
    odbox_lease *l = NULL;
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 0, 300, &l, &e), ODBOX_OK);
    sleep_ms(700);
    ck_assert_int_eq(odbox_lock_is_held(l), 0);
    odbox_conn *c = itest_connect(1);
    int taken = -1;
    ck_assert_int_eq(odbox_conn_try_lock(c, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1); /* really unlocked on the server */
    odbox_lock_release(&l);
    ck_assert_msg(odbox_lock_try_acquire(s, other, 0, 10000, &l, &e) == ODBOX_OK, "%s", e.message);
    odbox_lock_release(&l);

    /* after contention, too */
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 0, 10000, &l, &e), ODBOX_EBUSY);
    ck_assert_ptr_null(l);
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 200, 10000, &l, &e), ODBOX_ETIMEDOUT);
    ck_assert_ptr_null(l);
    ck_assert_msg(odbox_lock_try_acquire(s, other, 0, 10000, &l, &e) == ODBOX_OK, "%s", e.message);
    odbox_lock_release(&l);
    ck_assert_int_eq(odbox_conn_unlock(c, key, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_lock_try_acquire(s, key, 0, 10000, &l, &e), ODBOX_OK);
    odbox_lock_release(&l);
    odbox_conn_close(&c);
    odbox_registry_free(&r); /* all connections back, or this would be unsafe */
}
END_TEST

/* ---- lock sessions apart from the executor's connections ---------------------------- */

/* The dummies fixture on a registry whose primary pool has `size`
 * connections and gives up waiting for a free one after 3 s. */
static void open_small_pool_fixture(dfx *f, int size)
{
    dfx_open(f, 1, 0);
    odbox_registry_free(&f->r);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = f->ev[0]};
    sc.pool.size = size;
    sc.pool.acquire_timeout_ms = 3000;
    odbox_registry_config rc = {.shards = &sc, .nshards = 1};
    odbox_error e = {0};
    ck_assert_msg(odbox_registry_open(&rc, &f->r, &e) == ODBOX_OK, "%s", e.message);
}

/* The pattern README recommends: lock, execute, release. The execute adds
 * one dummy with one event and must commit. */
static void execute_under_lock(dfx *f, odbox_executor *exe, int64_t rows_before)
{
    odbox_model *d = dfx_dummy(NULL, "locked", 1);
    script sc = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    odbox_error e = {0};
    long t0 = now_ms();
    int rc = execute_script(exe, "LockedCreate", &sc, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "the lock holder's execute: %s %s (after %ld ms)", odbox_errname(rc), e.message,
                  now_ms() - t0);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(f, 0, "dummies"), rows_before + 1);
    ck_assert_int_eq(dfx_events(f, 0), rows_before + 1);
    odbox_model_free(&d);
}

START_TEST(waiters_do_not_starve_the_holder)
{
    enum { POOL = 3 };
    dfx f;
    open_small_pool_fixture(&f, POOL);
    odbox_executor *exe = open_exe(&f);
    odbox_shard *s = odbox_registry_default_shard(f.r);
    char key[64];
    itest_name(key, sizeof key, "lock_starve");
    odbox_lease *l = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_lock_acquire(s, key, 60000, &l, &e) == ODBOX_OK, "%s", e.message);

    /* as many waiters as the primary pool has connections, unbounded and
     * bounded; each holds the lock a moment once it has it */
    attempt w[POOL];
    pthread_t t[POOL];
    for (int i = 0; i < POOL; i++) {
        w[i] = (attempt){.shard = s, .key = key, .wait_ms = i % 2 ? 60000 : -1, .max_hold_ms = 10000, .hold_ms = 20};
        ck_assert_int_eq(pthread_create(&t[i], NULL, attempt_main, &w[i]), 0);
    }
    sleep_ms(300); /* they are waiting (before the fix, each on a connection of the pool) */
    execute_under_lock(&f, exe, 0);
    ck_assert_int_eq(odbox_lock_is_held(l), 1);

    /* one more waiter gives up cleanly while the lock is held */
    attempt quitter = other_thread(s, key, 400, 10000);
    ck_assert_msg(quitter.rc == ODBOX_ETIMEDOUT, "%s: %s", odbox_errname(quitter.rc), quitter.message);
    ck_assert(strstr(quitter.message, "held by another session"));
    ck_assert_int_ge(quitter.elapsed_ms, 390);
    ck_assert_int_lt(quitter.elapsed_ms, 5000);

    odbox_lock_release(&l);
    for (int i = 0; i < POOL; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(w[i].rc == ODBOX_OK, "waiter %d: %s: %s", i, odbox_errname(w[i].rc), w[i].message);
        ck_assert_int_eq(w[i].held, 1);
    }
    odbox_executor_free(&exe);
    dfx_close(&f); /* frees the registry: every connection went back */
}
END_TEST

START_TEST(held_keys_leave_the_executor_its_connections)
{
    enum { POOL = 2 };
    dfx f;
    open_small_pool_fixture(&f, POOL);
    odbox_executor *exe = open_exe(&f);
    odbox_shard *s = odbox_registry_default_shard(f.r);
    char keys[POOL + 1][64];
    odbox_lease *l[POOL] = {0};
    odbox_error e = {0};
    for (int i = 0; i <= POOL; i++)
        itest_name(keys[i], sizeof keys[i], "lock_sessions");
    for (int i = 0; i < POOL; i++)
        ck_assert_msg(odbox_lock_try_acquire(s, keys[i], 0, 60000, &l[i], &e) == ODBOX_OK, "%s", e.message);
    execute_under_lock(&f, exe, 0);

    /* every lock session holds a lock: a new key is contention, bounded */
    attempt a = other_thread(s, keys[POOL], 0, 10000);
    ck_assert_msg(a.rc == ODBOX_EBUSY, "%s: %s", odbox_errname(a.rc), a.message);
    ck_assert_msg(strstr(a.message, "every lock session of the shard is in use"), "%s", a.message);
    ck_assert_int_lt(a.elapsed_ms, 2000);
    a = other_thread(s, keys[POOL], 300, 10000);
    ck_assert_msg(a.rc == ODBOX_ETIMEDOUT, "%s: %s", odbox_errname(a.rc), a.message);
    ck_assert_int_ge(a.elapsed_ms, 290);
    ck_assert_int_lt(a.elapsed_ms, 5000);
    execute_under_lock(&f, exe, 1);

    /* a waiter gets a session once a lock is released within its wait */
    attempt w = {.shard = s, .key = keys[POOL], .wait_ms = 10000, .max_hold_ms = 10000};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, attempt_main, &w), 0);
    sleep_ms(200);
    odbox_lock_release(&l[0]);
    pthread_join(t, NULL);
    ck_assert_msg(w.rc == ODBOX_OK, "%s: %s", odbox_errname(w.rc), w.message);
    ck_assert_int_eq(w.held, 1);
    odbox_lock_release(&l[1]);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(backend_failure_is_not_busy)
{
    odbox_registry *r = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn(itest_unreachable_dsn("Secret-91"), &r, &e), ODBOX_OK);
    odbox_shard *s = odbox_registry_default_shard(r);
    odbox_lease *l = (odbox_lease *)&e; /* must be cleared */
    ck_assert_int_eq(odbox_lock_try_acquire(s, "k", 0, 1000, &l, &e), ODBOX_ECONNECT);
    ck_assert_ptr_null(l);
    ck_assert(strstr(e.message, "Secret-91") == NULL);
    ck_assert_int_eq(odbox_lock_try_acquire(s, "k", 500, 1000, &l, &e), ODBOX_ECONNECT);
    ck_assert_int_eq(odbox_lock_acquire(s, "k", 1000, &l, &e), ODBOX_ECONNECT);
    ck_assert_ptr_null(l);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(bad_input)
{
    odbox_registry *r = open_registry(0, 0);
    odbox_shard *s = odbox_registry_default_shard(r);
    odbox_lease *l = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_lock_try_acquire(NULL, "k", 0, 1000, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(e.code, ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_try_acquire(s, NULL, 0, 1000, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_try_acquire(s, "", 0, 1000, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_try_acquire(s, "k", 0, 0, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_try_acquire(s, "k", 0, -5, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_try_acquire(s, "k", -1, 1000, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_try_acquire(s, "k", 0, 1000, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_acquire(NULL, "k", 1000, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_acquire(s, "", 1000, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_acquire(s, "k", 0, &l, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_lock_acquire(s, "k", 1000, NULL, NULL), ODBOX_EINVAL);
    ck_assert_ptr_null(l);
    ck_assert_int_eq(odbox_lock_is_held(NULL), 0);
    odbox_lock_release(NULL);
    odbox_lock_release(&l);
    odbox_registry_free(&r);
}
END_TEST

Suite *lock_suite(void)
{
    Suite *s = suite_create("lock");
    TCase *t = tcase_create("leases");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, mutual_exclusion_between_threads);
    tcase_add_test(t, try_once_on_held_key_is_busy_fast);
    tcase_add_test(t, bounded_wait_times_out);
    tcase_add_test(t, different_keys_are_independent);
    tcase_add_test(t, reentrant_per_thread);
    tcase_add_test(t, max_hold_force_releases);
    tcase_add_test(t, watchdog_honours_each_deadline);
    tcase_add_test(t, connection_returns_to_pool);
    tcase_add_test(t, waiters_do_not_starve_the_holder);
    tcase_add_test(t, held_keys_leave_the_executor_its_connections);
    tcase_add_test(t, backend_failure_is_not_busy);
    tcase_add_test(t, bad_input);
    suite_add_tcase(s, t);
    return s;
}
