/* odbox — integration tests of how a handler's failures end, on every
 * dialect: a handler gives up on a row after its last allowed failure
 * (EXPIRED, its failure the subscription's last error) while a handler
 * without a limit on the same event goes on; a row whose attempts are
 * already spent (a limit lowered) expires without a call; a requeue gives
 * it its attempts back; a handler returning ODBOX_EDISCARD gives its row
 * up at once; one that asks for a retry delay gets it instead of the
 * backoff; a row that cannot be read is given up on too; an ordered
 * handler that gives up lets the model's next row through at once; a
 * limit set once a delivery opened is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_handlers.h"

static const odbox_event_type EV_G = {"ParcelLabelled"};

#define T EPOCH_2030
#define MIN_US (60 * SEC_US)

static void set_max_attempts(odbox_handlers *h, const char *name, int max)
{
    odbox_error e = {0};
    ck_assert_msg(odbox_handlers_set_max_attempts(h, name, max, &e) == ODBOX_OK, "%s", e.message);
}

/* Rounds on shard 0, the clock moved past every backoff before each. */
static odbox_delivery_round round_later(hx *x)
{
    odbox_manual_clock_advance(x->clk, 10 * MIN_US);
    return hx_handle(x, 0);
}

START_TEST(a_handler_gives_up_after_its_max_attempts)
{
    hx x;
    hx_open(&x, 1);
    hbeh capped, unlimited;
    hbeh_init(&capped, &x.rec, NULL), hbeh_init(&unlimited, &x.rec, NULL);
    capped.fail_always = unlimited.fail_always = 1;
    odbox_handlers *h = handlers_of(2, (const char *[]){"capped", "unlimited"}, (const char *[]){EV_G.name, EV_G.name},
                                    (hbeh *[]){&capped, &unlimited});
    set_max_attempts(h, "capped", 3);
    hx_deliver(&x, h, NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_G, 1, a);
    fanout_until_idle(x.d, &x.f, NULL);
    for (int k = 1; k <= 2; k++) {
        odbox_delivery_round r = round_later(&x);
        ck_assert_int_eq(r.failed, 2);
        ck_assert_str_eq(nstate(&x.f, 0, a[0], "capped"), "FAILED");
    }
    /* the third failure is its last: EXPIRED with 3 attempts, the other
     * handler's row retried; its message the last error (written at most
     * once a second per subscription) */
    usleep(1100 * 1000);
    odbox_delivery_round r = round_later(&x);
    ck_assert_int_eq(r.expired_postfailure, 1);
    ck_assert_int_eq(r.failed, 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "capped"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "capped", "attempts"), 3);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "unlimited"), "FAILED");
    int64_t at = 0;
    char *msg = last_error_of(&x, 0, "capped", &at);
    ck_assert_msg(msg && strstr(msg, "scripted failure of call 3"), "last error: %s", msg ? msg : "(none)");
    free(msg);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(round_later(&x).failed, 1);
    ck_assert_int_eq(hrec_count(&x.rec, "capped"), 3);
    ck_assert_int_eq(hrec_count(&x.rec, "unlimited"), 6);

    /* a row whose attempts are spent already (a limit lowered since its
     * last try) expires without a call, its attempts as they were */
    char b[1][37];
    emit_n(&x.f, x.exe, 0, &EV_G, 1, b);
    fanout_until_idle(x.d, &x.f, NULL);
    itest_exec(x.f.c[0], "UPDATE %s SET state = 'FAILED', attempts = 4 WHERE event_id = '%s' AND handler_name = 'capped'",
               ntab(&x.f, 0), b[0]);
    r = round_later(&x);
    ck_assert_int_eq(r.expired_preflight, 1);
    ck_assert_int_eq(hrec_count(&x.rec, "capped"), 3);
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "capped"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, b[0], "capped", "attempts"), 4);

    /* a requeue gives the first row its attempts back: called again */
    odbox_requeue_spec rq = {.handler = "capped", .state = "EXPIRED", .clock = odbox_manual_clock_clock(x.clk)};
    int64_t moved = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_notifications_requeue(x.f.r, &rq, &moved, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(moved, 2);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(hrec_count(&x.rec, "capped"), 5);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "capped"), "FAILED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "capped", "attempts"), 1);
    hx_close(&x);
}
END_TEST

/* A handler that returns ODBOX_EDISCARD gives its row up at once, without
 * a limit: EXPIRED after one call, its message the last error; a handler
 * failing otherwise on the same event is retried. */
START_TEST(a_handler_that_discards_gives_up_at_once)
{
    hx x;
    hx_open(&x, 1);
    hbeh discarding, failing;
    hbeh_init(&discarding, &x.rec, NULL), hbeh_init(&failing, &x.rec, NULL);
    discarding.fail_always = failing.fail_always = 1;
    discarding.fail_code = ODBOX_EDISCARD;
    discarding.fail_message = "the receiver refused the request as invalid (HTTP 400)";
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"discarding", "failing"}, (const char *[]){EV_G.name, EV_G.name},
                           (hbeh *[]){&discarding, &failing}),
               NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_G, 1, a);
    fanout_until_idle(x.d, &x.f, NULL);
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.expired_postfailure, 1);
    ck_assert_int_eq(r.failed, 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "discarding"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "discarding", "attempts"), 1);
    int64_t at = 0;
    char *msg = last_error_of(&x, 0, "discarding", &at);
    ck_assert_msg(msg && strstr(msg, "HTTP 400"), "last error: %s", msg ? msg : "(none)");
    free(msg);
    ck_assert_int_eq(round_later(&x).failed, 1);
    ck_assert_int_eq(hrec_count(&x.rec, "discarding"), 1);
    ck_assert_int_eq(hrec_count(&x.rec, "failing"), 2);
    hx_close(&x);
}
END_TEST

/* A handler that says when to come back: each call asks for the next
 * delay in its list (-1: none, the backoff; -2: ask with a negative one,
 * refused, the backoff stands), and records what the asks returned. */
typedef struct later {
    const int64_t *delays_ms;
    int calls;
    int rcs[8];
} later;

static int later_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env;
    later *l = user;
    int64_t d = l->delays_ms[l->calls];
    odbox_error e = {0};
    int rc = d == -1 ? ODBOX_OK : odbox_handler_retry_after(d == -2 ? -5 : d, &e);
    l->rcs[l->calls++] = rc;
    snprintf(err->message, sizeof err->message, "busy: come back later");
    return ODBOX_EIO;
}

/* odbox_handler_retry_after: the row is due after the delay asked for,
 * not the backoff, as a failure (attempts + 1); a refused ask leaves the
 * backoff; a delay past the retention expires the row; outside a call it
 * is refused. */
START_TEST(a_handler_says_when_to_retry)
{
    hx x;
    hx_open(&x, 1);
    const int64_t delays[] = {5000, -1, -2, 8 * 86400 * INT64_C(1000)};
    later l = {delays, 0, {0}};
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    odbox_handler hd = {.name = "later", .event_type = EV_G.name, .handle = later_handle, .user = &l};
    ck_assert_int_eq(odbox_handlers_add(h, &hd, &e), ODBOX_OK);
    hx_deliver(&x, h, NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_G, 1, a);
    fanout_until_idle(x.d, &x.f, NULL);
    /* 1: asks for 5 s */
    int64_t now = T;
    ck_assert_int_eq(hx_handle(&x, 0).failed, 1);
    ck_assert_int_eq(l.rcs[0], ODBOX_OK);
    ck_assert_int_eq(ncol_ts(&x.f, 0, a[0], "later", "next_retry_at"), now + 5 * SEC_US);
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "later", "attempts"), 1);
    odbox_manual_clock_set(x.clk, now + 5 * SEC_US - 1);
    ck_assert_int_eq(hx_handle(&x, 0).read, 0);
    /* 2: asks for nothing: the backoff of a second attempt, 60 s */
    now += 5 * SEC_US;
    odbox_manual_clock_set(x.clk, now);
    ck_assert_int_eq(hx_handle(&x, 0).failed, 1);
    ck_assert_int_eq(ncol_ts(&x.f, 0, a[0], "later", "next_retry_at"), now + 60 * SEC_US);
    /* 3: a negative delay is refused: the backoff of a third, 120 s */
    now += 60 * SEC_US;
    odbox_manual_clock_set(x.clk, now);
    ck_assert_int_eq(hx_handle(&x, 0).failed, 1);
    ck_assert_int_eq(l.rcs[2], ODBOX_EINVAL);
    ck_assert_int_eq(ncol_ts(&x.f, 0, a[0], "later", "next_retry_at"), now + 120 * SEC_US);
    /* 4: 8 days, past the 7 days' retention: EXPIRED */
    now += 120 * SEC_US;
    odbox_manual_clock_set(x.clk, now);
    ck_assert_int_eq(hx_handle(&x, 0).expired_postfailure, 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "later"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "later", "attempts"), 4);
    /* outside a handler's call */
    ck_assert_int_eq(odbox_handler_retry_after(1000, &e), ODBOX_ESTATE);
    ck_assert_ptr_nonnull(strstr(e.message, "not during a handler's call"));
    hx_close(&x);
}
END_TEST

/* A row json-c cannot read never reaches its handler: with a limit it is
 * given up on like a failed call (MySQL and MariaDB refuse such a row). */
START_TEST(a_row_that_cannot_be_read_is_given_up_on)
{
    hx x;
    hx_open(&x, 1);
    hbeh hb;
    hbeh_init(&hb, &x.rec, NULL);
    odbox_handlers *h = handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_G.name}, (hbeh *[]){&hb});
    set_max_attempts(h, "h", 2);
    hx_deliver(&x, h, NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_G, 1, a);
    fanout_until_idle(x.d, &x.f, NULL);
    char deep[128];
    itest_exec(x.f.c[0], "UPDATE %s SET payload = '%s' WHERE handler_name = 'h'", ntab(&x.f, 0), nested_json(deep, 40));
    ck_assert_int_eq(round_later(&x).failed, 1);
    ck_assert_int_eq(round_later(&x).expired_postfailure, 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "h"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "h", "attempts"), 2);
    ck_assert_int_eq(atomic_load(&hb.calls), 0);
    hx_close(&x);
}
END_TEST

/* ---- an ordered handler: two events of one model in one action ---------------- */

static int two_on_one_model(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    int rc = ODBOX_OK;
    json_object *payload = json_object_new_object();
    for (int i = 0; i < 2 && rc == ODBOX_OK; i++)
        rc = odbox_plan_emit(plan, user, &EV_G, payload, err);
    json_object_put(payload);
    return rc;
}

/* Subscription name's settings as odbox_subscription_settings_get reads
 * them from shard 0.0 (the default). */
static odbox_subscription_settings recorded(hx *x, const char *name)
{
    odbox_subscription_settings st = {
        .version = ODBOX_SUBSCRIPTION_SETTINGS_VERSION, .ordered = -1, .max_attempts = -1};
    odbox_error e = {0};
    ck_assert_msg(odbox_subscription_settings_get(x->f.r, NULL, name, &st, &e) == ODBOX_OK, "%s", e.message);
    return st;
}

/* The recorded max attempts of subscription name on shard 0 (0: none):
 * the row itself, and as the settings read it. */
static int64_t recorded_limit(hx *x, const char *name)
{
    int64_t row = itest_count(x->f.c[0], "SELECT COALESCE(max_attempts, 0) FROM %s WHERE name = '%s'",
                              itest_evt(x->f.ev[0], "subscriptions"), name);
    odbox_subscription_settings st = recorded(x, name);
    ck_assert_int_eq(st.max_attempts, row);
    ck_assert_int_eq(st.ordered, 0);
    return row;
}

START_TEST(an_ordered_handler_that_gives_up_lets_the_models_next_row_through)
{
    hx x;
    hx_open(&x, 1);
    hbeh hb;
    hbeh_init(&hb, &x.rec, NULL);
    hb.fail_first = 1;
    odbox_handlers *h = handlers_of(1, (const char *[]){"ord"}, (const char *[]){EV_G.name}, (hbeh *[]){&hb});
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_set_options(h, "ord", &(odbox_handler_options){.ordered = 1}, &e), ODBOX_OK);
    set_max_attempts(h, "ord", 1);
    hx_deliver(&x, h, NULL);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "parcel", 1);
    odbox_action act = {"LabelTwice", two_on_one_model, m};
    odbox_result res;
    ck_assert_msg(odbox_execute(x.exe, &act, NULL, NULL, &res, &e) == ODBOX_OK, "%s", e.message);
    odbox_result_clear(&res);
    fanout_until_idle(x.d, &x.f, NULL);
    odbox_subscription_settings st = recorded(&x, "ord");
    ck_assert_int_eq(st.ordered, 1);
    ck_assert_int_eq(st.max_attempts, 1);
    /* the older row fails once and is given up on; the clock does not
     * move, so the younger row goes in the next round, not after a backoff */
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_eq(r.expired_postfailure, 1);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.succeeded, 1);
    ck_assert_int_eq(hrec_count(&x.rec, "ord"), 2);
    ck_assert_str_ne(x.rec.calls[0].event_id, x.rec.calls[1].event_id);
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'ord' AND state = 'EXPIRED'"), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'ord' AND state = 'SUCCEEDED'"), 1);
    odbox_model_free(&m);
    hx_close(&x);
}
END_TEST

/* A limit set once a delivery uses the handlers is refused and changes
 * nothing: the limit stays the one the delivery opened with (the unit
 * tier tests the other refusals). */
START_TEST(a_limit_after_the_delivery_opened_is_refused)
{
    hx x;
    hx_open(&x, 1);
    hbeh hb;
    hbeh_init(&hb, &x.rec, NULL);
    hb.fail_always = 1;
    odbox_handlers *h = handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_G.name}, (hbeh *[]){&hb});
    set_max_attempts(h, "h", 2);
    hx_deliver(&x, h, NULL);
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_set_max_attempts(h, "h", 1, &e), ODBOX_ESTATE);
    ck_assert_ptr_nonnull(strstr(e.message, "a delivery uses these handlers already"));
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_G, 1, a);
    fanout_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(round_later(&x).failed, 1);
    ck_assert_int_eq(round_later(&x).expired_postfailure, 1);
    hx_close(&x);
}
END_TEST

/* Another process: a delivery of one handler, name, with max attempts
 * max (0: none), registered on the shards when made. */
typedef struct elsewhere {
    hbeh b;
    odbox_handlers *h;
    odbox_delivery *d;
} elsewhere;

static void register_elsewhere(hx *x, elsewhere *o, const char *name, int max)
{
    hbeh_init(&o->b, &x->rec, NULL);
    o->h = handlers_of(1, (const char *[]){name}, (const char *[]){EV_G.name}, (hbeh *[]){&o->b});
    if (max)
        set_max_attempts(o->h, name, max);
    odbox_delivery_config c = {.clock = odbox_manual_clock_clock(x->clk)};
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x->f.r, o->h, &c, &o->d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_delivery_register(o->d, &e) == ODBOX_OK, "%s", e.message);
}

static void elsewhere_close(elsewhere *o)
{
    odbox_delivery_free(&o->d);
    odbox_handlers_free(&o->h);
}

/* A process's next heartbeat (due every live_ms / 3), now. */
static void beat(odbox_delivery *d)
{
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_register(d, &e) == ODBOX_OK, "%s", e.message);
}

/* Another process o registers "flaky" with max (recorded), x's delivery
 * beats, then an event of it is fanned out there: its id into id. */
static void registered_later(hx *x, elsewhere *o, int max, char id[37])
{
    register_elsewhere(x, o, "flaky", max);
    ck_assert_int_eq(recorded_limit(x, "flaky"), max);
    beat(x->d);
    char a[1][37];
    emit_n(&x->f, x->exe, 0, &EV_G, 1, a);
    fanout_until_idle(x->d, &x->f, NULL);
    memcpy(id, a[0], sizeof a[0]);
}

/* The limit is the subscription's, recorded in the database by the
 * process that registers the handler last, and every process judges by
 * it from its next heartbeat on, whatever its own configuration: a
 * rolling deploy that changes a limit does not leave processes that
 * give a row up at different counts. */
START_TEST(the_last_registration_sets_the_limit_for_every_process)
{
    hx x;
    hx_open(&x, 1);
    hbeh mine;
    elsewhere o2, o3;
    hbeh_init(&mine, &x.rec, NULL);
    mine.fail_always = 1;
    odbox_handlers *h = handlers_of(1, (const char *[]){"flaky"}, (const char *[]){EV_G.name}, (hbeh *[]){&mine});
    set_max_attempts(h, "flaky", 5);
    hx_deliver(&x, h, NULL);
    beat(x.d);
    ck_assert_int_eq(recorded_limit(&x, "flaky"), 5);

    /* what the settings refuse: nothing is written into *out */
    odbox_error e = {0};
    odbox_subscription_settings st = {
        .version = ODBOX_SUBSCRIPTION_SETTINGS_VERSION, .ordered = 7, .max_attempts = 7};
    ck_assert_int_eq(odbox_subscription_settings_get(x.f.r, hx_shard(&x, 0), "nope", &st, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "shard 0.0") && strstr(e.message, "no subscription named 'nope'"), "%s",
                  e.message);
    ck_assert_int_eq(st.ordered, 7);
    ck_assert_int_eq(st.max_attempts, 7);
    for (int v = 0; v <= ODBOX_SUBSCRIPTION_SETTINGS_VERSION + 1; v += ODBOX_SUBSCRIPTION_SETTINGS_VERSION + 1) {
        st.version = v;
        ck_assert_int_eq(odbox_subscription_settings_get(x.f.r, NULL, "flaky", &st, &e), ODBOX_EINVAL);
        ck_assert_msg(strstr(e.message, "version"), "%s", e.message);
        ck_assert_int_eq(st.max_attempts, 7);
    }
    st.version = ODBOX_SUBSCRIPTION_SETTINGS_VERSION;
    ck_assert_int_eq(odbox_subscription_settings_get(NULL, NULL, "flaky", &st, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_subscription_settings_get(x.f.r, NULL, NULL, &st, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_subscription_settings_get(x.f.r, NULL, "", &st, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_subscription_settings_get(x.f.r, NULL, "flaky", NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_subscription_settings_get(x.f.r, hx_shard(&x, 0), "flaky", &st, NULL), ODBOX_OK);
    ck_assert_int_eq(st.max_attempts, 5);
    /* a shard that cannot be reached is named, once, and its password not */
    odbox_registry *down = NULL;
    ck_assert_int_eq(odbox_registry_open_dsn(itest_unreachable_dsn("S3cretPw"), &down, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_subscription_settings_get(down, NULL, "flaky", &st, &e), ODBOX_ECONNECT);
    const char *named = strstr(e.message, "shard 0.0: ");
    ck_assert_msg(named && !strstr(named + 1, "shard 0.0") && !strstr(e.message, "S3cretPw"), "%s", e.message);
    ck_assert_int_eq(st.max_attempts, 5);
    odbox_registry_free(&down);

    /* another process registers it later with 1: this one gives a row up
     * after one failed call, not five */
    char a[37], b[37];
    registered_later(&x, &o2, 1, a);
    ck_assert_int_eq(round_later(&x).expired_postfailure, 1);
    ck_assert_str_eq(nstate(&x.f, 0, a, "flaky"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a, "flaky", "attempts"), 1);

    /* a third registers it without a limit: retried past five */
    registered_later(&x, &o3, 0, b);
    for (int k = 1; k <= 6; k++)
        ck_assert_int_eq(round_later(&x).failed, 1);
    ck_assert_str_eq(nstate(&x.f, 0, b, "flaky"), "FAILED");
    ck_assert_int_eq(ncol_int(&x.f, 0, b, "flaky", "attempts"), 6);
    ck_assert_int_eq(hrec_count(&x.rec, "flaky"), 7);
    elsewhere_close(&o2);
    elsewhere_close(&o3);
    hx_close(&x);
}
END_TEST

Suite *handlers_giveup_suite(void)
{
    Suite *s = suite_create("handlers_giveup");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_handler_gives_up_after_its_max_attempts);
    tcase_add_test(tc, a_handler_that_discards_gives_up_at_once);
    tcase_add_test(tc, a_row_that_cannot_be_read_is_given_up_on);
    tcase_add_test(tc, a_handler_says_when_to_retry);
    tcase_add_test(tc, an_ordered_handler_that_gives_up_lets_the_models_next_row_through);
    tcase_add_test(tc, a_limit_after_the_delivery_opened_is_refused);
    tcase_add_test(tc, the_last_registration_sets_the_limit_for_every_process);
    suite_add_tcase(s, tc);
    return s;
}
