/* odbox — integration tests of in-process event handlers, one round at a
 * time on a manual clock: handlers of one type each keep their own row
 * and lifecycle, one handler takes several types, former names answer
 * and rows no handler here answers to wait unclaimed, a handler's action reaches
 * a second handler, and rounds name the shard they fail on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_handlers.h"

static const odbox_event_type EV_A = {"OrderPlaced"};
static const odbox_event_type EV_B = {"OrderShipped"};
static const odbox_event_type EV_C = {"OrderAudited"};

/* ---- handlers apart, names, chaining ------------------------------------------------------ */

START_TEST(handlers_of_one_type_each_have_their_own_row)
{
    hx x;
    hx_open(&x, 2);
    hbeh ok, bad;
    hbeh_init(&ok, &x.rec, NULL), hbeh_init(&bad, &x.rec, NULL);
    bad.fail_first = 1;
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"ok", "bad"}, (const char *[]){EV_A.name, EV_A.name},
                           (hbeh *[]){&ok, &bad}),
               NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 1, a);
    hx_fanout(&x, 1);
    ck_assert_int_eq(nrows(&x.f, 1, NULL), 2);
    odbox_delivery_round r = hx_handle(&x, 1);
    ck_assert_int_eq(r.succeeded, 1);
    ck_assert_int_eq(r.failed, 1);
    ck_assert_str_eq(nstate(&x.f, 1, a[0], "ok"), "SUCCEEDED");
    ck_assert_str_eq(nstate(&x.f, 1, a[0], "bad"), "FAILED");
    odbox_manual_clock_advance(x.clk, 30 * SEC_US);
    r = hx_handle(&x, 1);
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_eq(r.succeeded, 1);
    ck_assert_int_eq(hrec_count(&x.rec, "ok"), 1);
    ck_assert_int_eq(hrec_count(&x.rec, "bad"), 2);
    ck_assert_int_eq(ncol_int(&x.f, 1, a[0], "bad", "attempts"), 2);
    ck_assert_int_eq(ncol_int(&x.f, 1, a[0], "ok", "attempts"), 1);
    hx_close(&x);
}
END_TEST

START_TEST(one_handler_takes_several_types)
{
    hx x;
    hx_open(&x, 2);
    hbeh both, ship;
    hbeh_init(&both, &x.rec, "both"), hbeh_init(&ship, &x.rec, "ship");
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    const char *const types[] = {EV_A.name, EV_B.name, NULL};
    odbox_handler hb = {.name = "both", .event_types = types, .handle = hb_handle, .user = &both};
    odbox_handler hs = {.name = "ship", .event_type = EV_B.name, .handle = hb_handle, .user = &ship};
    ck_assert_int_eq(odbox_handlers_add(h, &hb, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_add(h, &hs, &e), ODBOX_OK);
    hx_deliver(&x, h, NULL);
    char a[2][37], b[1][37], c[1][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 2, a);
    emit_n(&x.f, x.exe, 1, &EV_B, 1, b);
    emit_n(&x.f, x.exe, 1, &EV_C, 1, c);
    odbox_delivery_round r = hx_fanout(&x, 1);
    ck_assert_int_eq(r.delivered, 3);
    /* one row per event under its one name; EV_B's also for ship */
    ck_assert_int_eq(nrows(&x.f, 1, "handler_name = 'both'"), 3);
    ck_assert_int_eq(nrows(&x.f, 1, "handler_name = 'ship'"), 1);
    ck_assert_int_eq(nrows(&x.f, 1, NULL), 4);
    r = hx_handle(&x, 1);
    ck_assert_int_eq(r.succeeded, 4);
    ck_assert_int_eq(hrec_count(&x.rec, "both"), 3);
    ck_assert_str_eq(nstate(&x.f, 1, a[1], "both"), "SUCCEEDED");
    ck_assert_str_eq(nstate(&x.f, 1, b[0], "both"), "SUCCEEDED");
    /* the envelope tells the types apart */
    int at = hrec_find(&x.rec, "both", b[0]);
    ck_assert_int_ge(at, 0);
    ck_assert_str_eq(x.rec.calls[at].event_type, EV_B.name);
    ck_assert_str_eq(x.rec.calls[hrec_find(&x.rec, "both", a[0])].event_type, EV_A.name);
    /* a type it does not take stays undelivered */
    ck_assert_int_eq(itest_count(x.f.c[1], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE AND event_type = '%s'",
                                 etab(&x.f, 1), EV_C.name),
                     1);
    odbox_delivery_metrics m;
    ck_assert_msg(odbox_delivery_metrics_read(x.d, NULL, &m, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_str_eq(m.handlers[0].event_type, "OrderPlaced,OrderShipped");
    ck_assert_int_eq(m.handlers[0].succeeded, 3);
    odbox_delivery_metrics_clear(&m);
    hx_close(&x);
}
END_TEST

START_TEST(former_names_answer_and_rows_of_unserved_names_wait)
{
    hx x;
    hx_open(&x, 2);
    hbeh old, ghost, renamed, ok;
    hbeh_init(&old, &x.rec, NULL), hbeh_init(&ghost, &x.rec, NULL);
    hbeh_init(&renamed, &x.rec, NULL), hbeh_init(&ok, &x.rec, NULL);
    hx_deliver(&x,
               handlers_of(3, (const char *[]){"old-name", "ghost", "ok"},
                           (const char *[]){EV_A.name, EV_B.name, EV_B.name}, (hbeh *[]){&old, &ghost, &ok}),
               NULL);
    char a[1][37], b[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 1, a);
    emit_n(&x.f, x.exe, 0, &EV_B, 1, b);
    hx_fanout(&x, 0);
    /* a new deployment: old-name is renamed, ghost is gone */
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    renamed.name = "new-name";
    ok.name = "ok";
    const char *const former[] = {"old-name", NULL};
    odbox_handler hr = {.name = "new-name", .former_names = former, .event_type = EV_A.name, .handle = hb_handle,
                        .user = &renamed};
    odbox_handler hk = {.name = "ok", .event_type = EV_B.name, .handle = hb_handle, .user = &ok};
    ck_assert_int_eq(odbox_handlers_add(h, &hr, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_add(h, &hk, &e), ODBOX_OK);
    hx_deliver(&x, h, NULL);
    /* ghost's row is not claimed: no handler here answers to it */
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.read, 2);
    ck_assert_int_eq(r.succeeded, 2);
    ck_assert_int_eq(r.failed, 0);
    int at = hrec_find(&x.rec, "new-name", a[0]);
    ck_assert_int_ge(at, 0);
    ck_assert_str_eq(x.rec.calls[at].row_handler, "old-name");
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "old-name"), "SUCCEEDED");
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "ok"), "SUCCEEDED");
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "ghost"), "PENDING");
    ck_assert_int_eq(ncol_int(&x.f, 0, b[0], "ghost", "attempts"), 0);
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'ghost' AND lease_owner IS NULL"), 1);
    ck_assert_int_eq(hrec_count(&x.rec, "ghost"), 0);
    odbox_delivery_metrics m;
    ck_assert_msg(odbox_delivery_metrics_read(x.d, NULL, &m, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(m.unknown_handler, 0);
    ck_assert_int_eq(m.handlers[0].succeeded, 1);
    odbox_delivery_metrics_clear(&m);
    /* the fan-out writes names only, never former ones */
    emit_n(&x.f, x.exe, 0, &EV_A, 1, a);
    hx_fanout(&x, 0);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "new-name"), "PENDING");
    hx_close(&x);
}
END_TEST

START_TEST(a_handlers_action_reaches_a_second_handler)
{
    hx x;
    hx_open(&x, 2);
    hbeh chain, sink;
    hbeh_init(&chain, &x.rec, NULL), hbeh_init(&sink, &x.rec, NULL);
    chain.chain_exe = x.exe;
    chain.chain_type = &EV_B;
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"chain", "sink"}, (const char *[]){EV_A.name, EV_B.name},
                           (hbeh *[]){&chain, &sink}),
               NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 1, a);
    fanout_until_idle(x.d, &x.f, NULL);
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(hrec_count(&x.rec, "chain"), 1);
    ck_assert_int_eq(hrec_count(&x.rec, "sink"), 0);
    fanout_until_idle(x.d, &x.f, NULL);
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(hrec_count(&x.rec, "sink"), 1);
    const hcall *c = &x.rec.calls[1];
    ck_assert_str_eq(c->handler, "sink");
    ck_assert_str_eq(c->action_name, "ChainedAction");
    ck_assert_int_eq(c->shard.member, 1);
    char want[128];
    snprintf(want, sizeof want, "{\"source\": \"%s\"}", a[0]);
    ck_assert_msg(dfx_json_same(c->params, want), "params %s", c->params);
    ck_assert_msg(dfx_json_same(c->payload, want), "payload %s", c->payload);
    hx_close(&x);
}
END_TEST

/* ---- errors ----------------------------------------------------------------------------------- */

START_TEST(rounds_on_a_shard_without_an_eventlog_fail_naming_it)
{
    hx x;
    hx_open(&x, 1);
    hbeh ok;
    hbeh_init(&ok, &x.rec, NULL);
    odbox_handlers *h = handlers_of(1, (const char *[]){"ok"}, (const char *[]){EV_A.name}, (hbeh *[]){&ok});
    char *dsn = itest_dsn_with(1, "eventlog=ev_never_migrated");
    odbox_registry *r = NULL;
    odbox_delivery *d = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn(dsn, &r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_open(r, h, NULL, &d, &e), ODBOX_OK);
    odbox_delivery_round rd;
    int rc = odbox_delivery_fanout_round(d, odbox_registry_shard_at(r, 0), &rd, &e);
    ck_assert_msg(rc == ODBOX_EDB && strstr(e.message, "shard 0.0"), "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(rd.read, 0);
    rc = odbox_delivery_handling_round(d, odbox_registry_shard_at(r, 0), &rd, &e);
    ck_assert_msg(rc == ODBOX_EDB && strstr(e.message, "shard 0.0"), "%s: %s", odbox_errname(rc), e.message);
    /* a shard of another registry */
    ck_assert_int_eq(odbox_delivery_fanout_round(d, hx_shard(&x, 0), &rd, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_handling_round(d, NULL, &rd, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_handling_round(NULL, hx_shard(&x, 0), NULL, &e), ODBOX_EINVAL);
    odbox_delivery_free(&d);
    odbox_registry_free(&r);
    odbox_handlers_free(&h);
    free(dsn);
    hx_close(&x);
}
END_TEST

Suite *handlers_names_suite(void)
{
    Suite *s = suite_create("handlers_names");
    TCase *tc = tcase_create("handlers_names");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, handlers_of_one_type_each_have_their_own_row);
    tcase_add_test(tc, one_handler_takes_several_types);
    tcase_add_test(tc, former_names_answer_and_rows_of_unserved_names_wait);
    tcase_add_test(tc, a_handlers_action_reaches_a_second_handler);
    tcase_add_test(tc, rounds_on_a_shard_without_an_eventlog_fail_naming_it);
    suite_add_tcase(s, tc);
    return s;
}
