/* odbox — many writers on the same rows, on every dialect: 8 threads x 200
 * actions, each reading one of 4 shared rows, adding 1 to it and emitting
 * an event. Every action commits: the only failure allowed is the
 * optimistic ODBOX_ESTALE, which the executor retries (on SQLite, whose
 * writers take turns on one file, no "database is locked" either); the
 * amounts, versions and events add up exactly. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "actions.h"

enum { THREADS = 8, ACTIONS = 200, ROWS = 4 };

typedef struct writer {
    odbox_executor *exe;
    const char *const *ids;
    int k;             /* thread number */
    int i;             /* action number in this thread */
    int failures;
    long stale_retries;
    char message[ODBOX_ERROR_MESSAGE_MAX];
} writer;

/* perform: row (k + i) % ROWS gets amount + 1 and a DummyChanged event */
static int add_one(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)params;
    writer *w = user;
    odbox_model *m = NULL;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &DUMMY_T, w->ids[(w->k + w->i) % ROWS], ODBOX_READ_PRIMARY,
                             &m, err);
    if (rc)
        return rc;
    int64_t amount = 0;
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "writer", json_object_new_int(w->k));
    if (!(rc = odbox_model_get_int64(m, "amount", &amount, err)) &&
        !(rc = odbox_model_set_int64(m, "amount", amount + 1, err)) && !(rc = odbox_plan_update(plan, m, NULL, err)))
        rc = odbox_plan_emit(plan, m, &EV_CHANGED, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

static void *write_all(void *ud)
{
    writer *w = ud;
    /* retry stale versions without a pause, as often as it takes: only
     * another writer's commit makes a version stale, so each retry follows
     * someone's progress */
    odbox_exec_config cfg = {.retries = {{ODBOX_ESTALE, 1000000, 0}}, .nretries = 1};
    odbox_action a = {.name = "AddOne", .perform = add_one, .user = w};
    for (w->i = 0; w->i < ACTIONS; w->i++) {
        odbox_result res;
        odbox_error e = {0};
        int rc = odbox_execute(w->exe, &a, NULL, &cfg, &res, &e);
        w->stale_retries += res.retries[0];
        if (rc != ODBOX_OK && w->failures++ == 0)
            snprintf(w->message, sizeof w->message, "%s: %.400s", odbox_errname(rc), e.message);
        odbox_result_clear(&res);
    }
    return NULL;
}

START_TEST(many_writers_on_shared_rows)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *seed[ROWS];
    const char *ids[ROWS];
    for (int r = 0; r < ROWS; r++) {
        seed[r] = dfx_dummy(NULL, "shared", 0);
        ids[r] = odbox_model_id(seed[r]);
    }
    dfx_insert(&f, 0, seed, ROWS);

    writer w[THREADS];
    pthread_t th[THREADS];
    for (int k = 0; k < THREADS; k++) {
        w[k] = (writer){.exe = exe, .ids = ids, .k = k};
        ck_assert_int_eq(pthread_create(&th[k], NULL, write_all, &w[k]), 0);
    }
    long retries = 0;
    for (int k = 0; k < THREADS; k++) {
        pthread_join(th[k], NULL);
        ck_assert_msg(w[k].failures == 0, "writer %d: %d failed actions, the first: %s", k, w[k].failures,
                      w[k].message);
        retries += w[k].stale_retries;
    }
    printf("many_writers_on_shared_rows (%s): %d actions, %ld stale versions retried\n", itest_dialect(),
           THREADS * ACTIONS, retries);

    /* each row got one update per action that picked it: (k + i) % ROWS
     * spreads every thread's actions evenly */
    for (int r = 0; r < ROWS; r++) {
        odbox_model *got = find_dummy(&f, ids[r]);
        int64_t amount = 0;
        odbox_error e;
        ck_assert_int_eq(odbox_model_get_int64(got, "amount", &amount, &e), ODBOX_OK);
        ck_assert_int_eq(amount, THREADS * ACTIONS / ROWS);
        ck_assert_int_eq(odbox_model_version(got), 1 + THREADS * ACTIONS / ROWS);
        odbox_model_free(&got);
    }
    const char *events = itest_evt(f.ev[0], "events");
    ck_assert_int_eq(dfx_events(&f, 0), THREADS * ACTIONS);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(DISTINCT action_id) FROM %s", events), THREADS * ACTIONS);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE event_type = 'DummyChanged'", events),
                     THREADS * ACTIONS);
    for (int r = 0; r < ROWS; r++)
        odbox_model_free(&seed[r]);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

Suite *writers_suite(void)
{
    Suite *s = suite_create("writers");
    TCase *t = tcase_create("shared_rows");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, many_writers_on_shared_rows);
    suite_add_tcase(s, t);
    return s;
}
