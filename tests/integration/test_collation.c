/* odbox — names that differ only in case are different names in the
 * database too, as they are to odbox (strcmp): two handlers of one type,
 * event types whose older events come first, and two jobs (issue item
 * 8), and models whose ids differ only in case each in their own order.
 * PostgreSQL and SQLite compare text byte by byte; MySQL/MariaDB compare
 * these columns in utf8mb4_bin since V7, and event_notifications.order_key
 * since V14. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jobs_fx.h"
#include "test_handlers.h"

static const odbox_event_type EV_UPPER = {"EV"};
static const odbox_event_type EV_MIXED = {"Ev"};
static const odbox_event_type EV_AUDITED = {"Audited"};

/* 'audit' and 'Audit' on one type: a row each (the unique key is
 * (event_id, handler_name)), and both are called. */
START_TEST(handlers_differing_in_case_each_get_their_row)
{
    hx x;
    hx_open(&x, 1);
    hbeh lower, upper;
    hbeh_init(&lower, &x.rec, NULL), hbeh_init(&upper, &x.rec, NULL);
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"audit", "Audit"}, (const char *[]){EV_AUDITED.name, EV_AUDITED.name},
                           (hbeh *[]){&lower, &upper}),
               NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_AUDITED, 1, a);
    odbox_delivery_round r = hx_fanout(&x, 0);
    ck_assert_int_eq(r.delivered, 1);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 2);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.succeeded, 2);
    ck_assert_int_eq(hrec_count(&x.rec, "audit"), 1);
    ck_assert_int_eq(hrec_count(&x.rec, "Audit"), 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "audit"), "SUCCEEDED");
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "Audit"), "SUCCEEDED");
    hx_close(&x);
}
END_TEST

/* 250 older events of 'EV' (no handler) ahead of 'Ev' (a handler): the
 * fan-out reads "event_type = 'Ev'" (batch 200, the default) and reaches
 * the Ev events at once; the EV ones stay undelivered. */
START_TEST(older_events_of_a_type_differing_in_case_do_not_hold_back_fanout)
{
    hx x;
    hx_open(&x, 1);
    hbeh ev;
    hbeh_init(&ev, &x.rec, NULL);
    hx_deliver(&x, handlers_of(1, (const char *[]){"ev"}, (const char *[]){EV_MIXED.name}, (hbeh *[]){&ev}), NULL);
    emit_n(&x.f, x.exe, 0, &EV_UPPER, 250, NULL);
    char m[3][37];
    emit_n(&x.f, x.exe, 0, &EV_MIXED, 3, m);
    int delivered = 0;
    for (int round = 0; round < 5 && delivered < 3; round++)
        delivered += hx_fanout(&x, 0).delivered;
    ck_assert_int_eq(delivered, 3);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 3);
    ck_assert_int_eq(hx_handle(&x, 0).succeeded, 3);
    ck_assert_int_eq(hrec_count(&x.rec, "ev"), 3);
    ck_assert_int_ge(hrec_find(&x.rec, "ev", m[2]), 0);
    ck_assert_int_eq(itest_count(x.f.c[0], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE AND event_type = 'EV'",
                                 etab(&x.f, 0)),
                     250);
    ck_assert_int_eq(itest_count(x.f.c[0], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE AND event_type = 'Ev'",
                                 etab(&x.f, 0)),
                     0);
    hx_close(&x);
}
END_TEST

static const odbox_event_type EV_KEYED = {"Keyed"};

/* Fails every call for model "a1"; records the others. */
static int fail_a1(const odbox_envelope *env, void *user, odbox_error *err)
{
    if (env->model_id && !strcmp(env->model_id, "a1")) {
        snprintf(err->message, sizeof err->message, "a1 always fails");
        return ODBOX_EINVAL;
    }
    return hb_handle(env, user, err);
}

/* Emits one event on model_id; its event id into id_out (found by the
 * action id: MySQL/MariaDB compare events.model_id ignoring case). */
static void emit_on(hx *x, const char *model_id, char id_out[37])
{
    odbox_tx *tx = NULL;
    odbox_error e = {0};
    char action[37];
    ck_assert_msg(odbox_tx_begin(x->exe, (odbox_shard_id){0, 0}, NULL, &tx, &e) == ODBOX_OK, "%s", e.message);
    snprintf(action, sizeof action, "%s", odbox_tx_action_id(tx));
    json_object *payload = json_object_new_object();
    ck_assert_msg(odbox_tx_emit(tx, "Doc", model_id, &EV_KEYED, payload, &e) == ODBOX_OK, "%s", e.message);
    json_object_put(payload);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    event_of_action(&x->f, 0, action, id_out);
}

/* An ordered handler keeps each model's order apart: model "a1"'s
 * failing row holds back no row of model "A1" (order_key compared byte
 * by byte; MySQL/MariaDB's default collation took them for one key). */
START_TEST(models_differing_in_case_keep_their_own_order)
{
    hx x;
    hx_open(&x, 1);
    hbeh ok;
    hbeh_init(&ok, &x.rec, "ord");
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    odbox_handler hd = {.name = "ord", .event_type = EV_KEYED.name, .handle = fail_a1, .user = &ok};
    ck_assert_int_eq(odbox_handlers_add(h, &hd, &e), ODBOX_OK);
    odbox_handler_options ordered = {.ordered = 1};
    ck_assert_msg(odbox_handlers_set_options(h, "ord", &ordered, &e) == ODBOX_OK, "%s", e.message);
    hx_deliver(&x, h, NULL);
    char lower[37], upper[37];
    emit_on(&x, "a1", lower);
    emit_on(&x, "A1", upper);
    ck_assert_int_eq(hx_fanout(&x, 0).delivered, 2);
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL"), 2);
    for (int round = 0; round < 3; round++)
        hx_handle(&x, 0);
    ck_assert_str_eq(nstate(&x.f, 0, lower, "ord"), "FAILED");
    ck_assert_int_eq(hrec_count(&x.rec, "ord"), 1);
    ck_assert_int_ge(hrec_find(&x.rec, "ord", upper), 0);
    ck_assert_str_eq(nstate(&x.f, 0, upper, "ord"), "SUCCEEDED");
    hx_close(&x);
}
END_TEST

/* Jobs 'x_job' and 'X_JOB': a row each in scheduled_tasks, and pausing
 * one (odbox_job_state) leaves the other running. */
START_TEST(job_names_differing_in_case_get_their_rows)
{
    jfx f;
    jfx_open(&f);
    char lower[96], upper[96];
    snprintf(lower, sizeof lower, "%s_x_job", f.job);
    snprintf(upper, sizeof upper, "%s_X_JOB", f.job);
    jt_counter k = {0};
    odbox_job a = {.name = lower, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job, .user = &k};
    odbox_job b = {.name = upper, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job, .user = &k};
    odbox_jobs *j = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_open(f.r, NULL, &j, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_jobs_add(j, &a, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_jobs_add(j, &b, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_jobs_start(j, &e) == ODBOX_OK, "%s", e.message);
    odbox_job_info in;
    ck_assert_msg(jt_row(f.pool, lower, &in), "no row for %s", lower);
    ck_assert_msg(jt_row(f.pool, upper, &in), "no row for %s", upper);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name LIKE '%s%%'", f.job), 2);
    ck_assert_msg(odbox_jobs_pause(f.pool, upper, &e) == ODBOX_OK, "%s", e.message);
    ck_assert(jt_row(f.pool, upper, &in) && in.paused);
    ck_assert(jt_row(f.pool, lower, &in) && !in.paused);
    odbox_jobs_free(&j);
    jfx_close(&f);
}
END_TEST

Suite *collation_suite(void)
{
    Suite *s = suite_create("collation");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, handlers_differing_in_case_each_get_their_row);
    tcase_add_test(t, older_events_of_a_type_differing_in_case_do_not_hold_back_fanout);
    tcase_add_test(t, job_names_differing_in_case_get_their_rows);
    tcase_add_test(t, models_differing_in_case_keep_their_own_order);
    suite_add_tcase(s, t);
    return s;
}
