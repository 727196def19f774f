/* odbox — integration tests of the executor's commit listeners
 * (action_internal.h) and of the in-process wake-up built on them
 * (wake.h), on every dialect: called once per shard that committed, with
 * its number of events, after the commit is durable and visible, on the
 * committing thread; never for an action that did not commit; safe while
 * other threads execute. */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "action_internal.h"
#include "actions.h"
#include "wake.h"

#define MAXCALLS 16

typedef struct commits {
    dfx *f;
    pthread_t thread;   /* the thread that executes */
    int n;
    odbox_shard_id shard[MAXCALLS];
    size_t nevents[MAXCALLS];
    int64_t visible[MAXCALLS]; /* the shard's event rows, counted from another session during the call */
    int other_thread;
} commits;

static void on_commit(void *ud, odbox_shard_id shard, size_t nevents)
{
    commits *c = ud;
    if (c->n < MAXCALLS) {
        c->shard[c->n] = shard;
        c->nevents[c->n] = nevents;
        c->visible[c->n] = dfx_events(c->f, shard.member);
    }
    c->other_thread |= !pthread_equal(pthread_self(), c->thread);
    c->n++;
}

static void assert_call(const commits *c, int i, int member, size_t nevents, int64_t events_then)
{
    ck_assert_int_lt(i, c->n);
    ck_assert_msg(c->shard[i].group == 0 && c->shard[i].member == member, "call %d: shard %d.%d, want 0.%d", i,
                  c->shard[i].group, c->shard[i].member, member);
    ck_assert_uint_eq(c->nevents[i], nevents);
    /* committed, visible to everyone, when the listener runs */
    ck_assert_int_eq(c->visible[i], events_then);
}

START_TEST(listener_once_per_committed_shard)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    commits c = {.f = &f, .thread = pthread_self()};
    odbox_error e;
    ck_assert_int_eq(odbox_executor_add_commit_listener(exe, on_commit, &c, &e), ODBOX_OK);
    odbox_result res;

    /* two events on one shard: one call with 2 */
    odbox_model *a = dfx_dummy_in((odbox_shard_id){0, 0}, "a", 1);
    script s1 = {.add = {a}, .nadd = 1, .emit = {{a, &EV_CREATED, "{}"}, {a, &EV_CHANGED, "{}"}}, .nemit = 2};
    execute_script_ok(exe, "Two", &s1, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(c.n, 1);
    assert_call(&c, 0, 0, 2, 2);

    /* rows without events: the sentinel row commits, a call with 0 */
    odbox_model *b = dfx_dummy_in((odbox_shard_id){0, 1}, "b", 1);
    script s2 = {.add = {b}, .nadd = 1};
    execute_script_ok(exe, "Quiet", &s2, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(c.n, 2);
    assert_call(&c, 1, 1, 0, 1);

    /* nothing committed, nothing called: perform fails, a stale update
     * (no retries), a transaction rolled back before its commit, a
     * cross-shard plan refused */
    script bad = {.add = {a}, .nadd = 1, .codes = {ODBOX_EDB}};
    ck_assert_int_eq(execute_script(exe, "Refused", &bad, NULL, NULL, &res, &e), ODBOX_EDB);
    odbox_result_clear(&res);
    odbox_exec_config none = {.nretries = 0};
    odbox_model *old = find_dummy(&f, odbox_model_id(a));
    script bump = {.upd = {old}, .nupd = 1};
    execute_script_ok(exe, "Bump", &bump, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(c.n, 3);
    assert_call(&c, 2, 0, 0, 3);
    script stale = {.upd = {old}, .nupd = 1, .emit = {{old, &EV_CHANGED, "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "Stale", &stale, NULL, &none, &res, &e), ODBOX_ESTALE);
    odbox_result_clear(&res);
    hookrec h = {.fail_at = ODBOX_HOOK_EVENTS_WRITTEN, .fail_group = -1, .fail_member = -1, .fail_code = ODBOX_EDB};
    odbox_executor_set_hook(exe, record_hook, &h);
    odbox_model *rb = dfx_dummy_in((odbox_shard_id){0, 0}, "rolled back", 1);
    script s3 = {.add = {rb}, .nadd = 1, .emit = {{rb, &EV_CREATED, "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "RolledBack", &s3, NULL, &none, &res, &e), ODBOX_EDB);
    odbox_result_clear(&res);
    odbox_model *x0 = dfx_dummy_in((odbox_shard_id){0, 0}, "x0", 1);
    odbox_model *x1 = dfx_dummy_in((odbox_shard_id){0, 1}, "x1", 1);
    script cross = {.add = {x0, x1}, .nadd = 2, .emit = {{x0, &EV_CREATED, "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "Cross", &cross, NULL, NULL, &res, &e), ODBOX_ECROSSSHARD);
    odbox_result_clear(&res);
    ck_assert_int_eq(c.n, 3);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    ck_assert_int_eq(dfx_events(&f, 1), 1);

    /* cross-shard allowed: one call per shard, each with its own count */
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_exec_config allow = {.allow_cross_shard = 1};
    script both = {.add = {x0, x1},
                   .nadd = 2,
                   .emit = {{x0, &EV_CREATED, "{}"}, {x1, &EV_CREATED, "{}"}, {x1, &EV_CHANGED, "{}"}},
                   .nemit = 3};
    ck_assert_int_eq(execute_script(exe, "Both", &both, NULL, &allow, &res, &e), ODBOX_OK);
    odbox_result_clear(&res);
    ck_assert_int_eq(c.n, 5);
    assert_call(&c, 3, 0, 1, 4);
    assert_call(&c, 4, 1, 2, 3);

    /* a partial commit: the shard that committed is announced, the one
     * that failed is not */
    hookrec h1 = {.fail_at = ODBOX_HOOK_EVENTS_WRITTEN, .fail_group = 0, .fail_member = 1, .fail_code = ODBOX_EDB};
    odbox_executor_set_hook(exe, record_hook, &h1);
    odbox_model *p0 = dfx_dummy_in((odbox_shard_id){0, 0}, "p0", 1);
    odbox_model *p1 = dfx_dummy_in((odbox_shard_id){0, 1}, "p1", 1);
    script partial = {.add = {p0, p1}, .nadd = 2, .emit = {{p0, &EV_CREATED, "{}"}, {p1, &EV_CREATED, "{}"}},
                      .nemit = 2};
    ck_assert_int_eq(execute_script(exe, "Partial", &partial, NULL, &allow, &res, &e), ODBOX_EPARTIAL);
    odbox_result_clear(&res);
    odbox_executor_set_hook(exe, NULL, NULL);
    ck_assert_int_eq(c.n, 6);
    assert_call(&c, 5, 0, 1, 5);
    ck_assert_int_eq(dfx_events(&f, 1), 3);
    ck_assert_int_eq(c.other_thread, 0); /* always on the committing thread */

    ck_assert_int_eq(odbox_executor_remove_commit_listener(exe, on_commit, &c), ODBOX_OK);
    odbox_model *q = dfx_dummy_in((odbox_shard_id){0, 0}, "q", 1);
    script after = {.add = {q}, .nadd = 1, .emit = {{q, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "After", &after, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(c.n, 6);

    odbox_model *models[] = {a, b, old, rb, x0, x1, p0, p1, q};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        odbox_model_free(&models[i]);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

static void count_only(void *ud, odbox_shard_id shard, size_t nevents)
{
    (void)shard;
    atomic_fetch_add((atomic_long *)ud, (long)nevents + 1000);
}

START_TEST(listeners_refuse_bad_input)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    atomic_long n1 = 0, n2 = 0;
    odbox_error e;
    ck_assert_int_eq(odbox_executor_add_commit_listener(NULL, count_only, &n1, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_executor_add_commit_listener(exe, NULL, &n1, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "NULL"));
    ck_assert_int_eq(odbox_executor_add_commit_listener(exe, count_only, &n1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_add_commit_listener(exe, count_only, &n1, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "added already"));
    ck_assert_int_eq(odbox_executor_add_commit_listener(exe, count_only, &n2, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_remove_commit_listener(exe, count_only, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_executor_remove_commit_listener(NULL, count_only, &n1), ODBOX_EINVAL);
    odbox_model *d = dfx_dummy(NULL, "d", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    execute_script_ok(exe, "Each", &s, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(atomic_load(&n1), 1001); /* each listener once */
    ck_assert_int_eq(atomic_load(&n2), 1001);
    ck_assert_int_eq(odbox_executor_remove_commit_listener(exe, count_only, &n1), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_remove_commit_listener(exe, count_only, &n1), ODBOX_ENOTFOUND);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* Listeners added and removed while other threads execute: every commit
 * reaches the listener that stays, exactly once. */
#define WRITERS 4
#define PER_WRITER 25

START_TEST(listeners_change_while_others_execute)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    atomic_long kept = 0, churn = 0;
    odbox_error e;
    ck_assert_int_eq(odbox_executor_add_commit_listener(exe, count_only, &kept, &e), ODBOX_OK);
    many m;
    many_start(&m, exe, WRITERS, PER_WRITER, 1);
    for (int i = 0; i < 2000; i++) {
        ck_assert_int_eq(odbox_executor_add_commit_listener(exe, count_only, &churn, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_executor_remove_commit_listener(exe, count_only, &churn), ODBOX_OK);
    }
    many_wait(&m);
    ck_assert_int_eq(atomic_load(&kept), (long)WRITERS * PER_WRITER * 1001);
    ck_assert_int_eq(atomic_load(&churn) % 1001, 0);
    ck_assert_int_eq(dfx_events(&f, 0), WRITERS * PER_WRITER);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- the in-process wake-up on commits ------------------------------------- */

typedef struct woken {
    atomic_int n;
    odbox_shard_id shard;
    odbox_wake_signal sig;
} woken;

static void on_wake(void *ud, odbox_shard_id shard, odbox_wake_signal sig)
{
    woken *w = ud;
    w->shard = shard;
    w->sig = sig;
    atomic_fetch_add(&w->n, 1);
}

START_TEST(commit_wakes_this_process_at_once)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_wake *w = NULL;
    odbox_error e;
    odbox_wake_config cfg = {.listen = -1}; /* only this process */
    ck_assert_int_eq(odbox_wake_open(f.r, &cfg, &w, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_start(w, &e), ODBOX_OK);
    woken got = {0};
    ck_assert_int_eq(odbox_wake_subscribe(w, ODBOX_WAKE_EVENTS, on_wake, &got, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_add_commit_listener(exe, odbox_wake_on_commit, w, &e), ODBOX_OK);

    odbox_model *d = dfx_dummy_in((odbox_shard_id){0, 1}, "d", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    execute_script_ok(exe, "Wakes", &s, NULL, &res);
    odbox_result_clear(&res);
    /* before odbox_execute returned: no waiting at all */
    ck_assert_int_eq(atomic_load(&got.n), 1);
    ck_assert(got.shard.group == 0 && got.shard.member == 1 && got.sig == ODBOX_WAKE_EVENTS);
    ck_assert_int_eq(odbox_wake_take(w, (odbox_shard_id){0, 1}, ODBOX_WAKE_EVENTS), 1);
    ck_assert_int_eq(odbox_wake_take(w, (odbox_shard_id){0, 0}, ODBOX_WAKE_EVENTS), 0);

    /* a commit with no events has nothing to deliver */
    odbox_model *q = dfx_dummy_in((odbox_shard_id){0, 0}, "q", 1);
    script quiet = {.add = {q}, .nadd = 1};
    execute_script_ok(exe, "Quiet", &quiet, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(atomic_load(&got.n), 1);
    ck_assert_int_eq(odbox_wake_take(w, (odbox_shard_id){0, 0}, ODBOX_WAKE_EVENTS), 0);

    ck_assert_int_eq(odbox_executor_remove_commit_listener(exe, odbox_wake_on_commit, w), ODBOX_OK);
    odbox_wake_free(&w);
    odbox_model_free(&d);
    odbox_model_free(&q);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* Where the dialect has no LISTEN (MySQL, MariaDB), or odbox was built
 * without libpq, starting listens on nothing and says so: in-process
 * signals and polling. */
typedef struct logged {
    pthread_mutex_t mu;
    int no_listen;
} logged;

static void capture(void *ud, odbox_log_level level, const char *message)
{
    (void)level;
    logged *l = ud;
    pthread_mutex_lock(&l->mu);
    l->no_listen += strstr(message, "no LISTEN") != NULL;
    pthread_mutex_unlock(&l->mu);
}

START_TEST(no_listener_without_listen)
{
    logged lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_log_set(capture, &lg, ODBOX_LOG_DEBUG);
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_wake *w = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_wake_open(f.r, NULL, &w, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_start(w, &e), ODBOX_OK);
    const odbox_dialect *d = odbox_pool_dialect(odbox_shard_primary(odbox_registry_default_shard(f.r)));
    ck_assert_ptr_null(d->listen_open);
    ck_assert_int_eq(odbox_wake_listening(w, (odbox_shard_id){0, 0}), 0);
    ck_assert_int_eq(lg.no_listen, 1);
    odbox_wake_free(&w);
    odbox_log_set(NULL, NULL, ODBOX_LOG_INFO);
    dfx_close(&f);
}
END_TEST

Suite *commit_listeners_suite(void)
{
    Suite *s = suite_create("commit_listeners");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, listener_once_per_committed_shard);
    tcase_add_test(t, listeners_refuse_bad_input);
    tcase_add_test(t, listeners_change_while_others_execute);
    tcase_add_test(t, commit_wakes_this_process_at_once);
#ifdef HAVE_LIBPQ
    if (strcmp(itest_dialect(), "pg"))
#endif
        tcase_add_test(t, no_listener_without_listen);
    suite_add_tcase(s, t);
    return s;
}
