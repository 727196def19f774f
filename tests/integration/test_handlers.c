/* odbox — integration tests of in-process event handlers, one round at a
 * time on a manual clock, on two shards: the fan-out copies every
 * handled event's context into one notification per handler and flips
 * it, leaves unhandled types and sentinels for a later handler to
 * backfill, reads oldest first across types, and writes nothing twice;
 * the handling calls every handler with the event's envelope, retries
 * with Ekbatan's backoff to the microsecond, expires before the call and
 * after a failure (retention from the later of event_date and
 * created_date), writes one UPDATE per bucket (counted by the delivery
 * and, on PostgreSQL and MariaDB, by the server), never overwrites a row
 * that changed meanwhile, and re-delivers what a crash or a lost
 * connection left unwritten. Handlers apart, names and chaining:
 * test_handlers_names.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include "test_handlers.h"

static const odbox_event_type EV_A = {"OrderPlaced"};
static const odbox_event_type EV_B = {"OrderShipped"};
static const odbox_event_type EV_C = {"OrderAudited"};

#define T EPOCH_2030
#define MIN_US (60 * SEC_US)
#define HOUR_US (60 * MIN_US)

/* "ok" takes EV_A and succeeds, "bad" takes EV_B and always fails. */
static void deliver_ok_bad(hx *x, hbeh *ok, hbeh *bad, odbox_delivery_config *cfg)
{
    hbeh_init(ok, &x->rec, NULL);
    hbeh_init(bad, &x->rec, NULL);
    bad->fail_always = 1;
    hx_deliver(x,
               handlers_of(2, (const char *[]){"ok", "bad"}, (const char *[]){EV_A.name, EV_B.name},
                           (hbeh *[]){ok, bad}),
               cfg);
}

/* "mail" and "index" take EV_A, "ship" takes EV_B; all succeed. */
static void deliver_mail_index_ship(hx *x, hbeh *mail, hbeh *index, hbeh *ship)
{
    hbeh_init(mail, &x->rec, NULL), hbeh_init(index, &x->rec, NULL), hbeh_init(ship, &x->rec, NULL);
    hx_deliver(x,
               handlers_of(3, (const char *[]){"mail", "index", "ship"},
                           (const char *[]){EV_A.name, EV_A.name, EV_B.name}, (hbeh *[]){mail, index, ship}),
               NULL);
}

/* Sets columns of the notification (event_id, handler) by SQL text. */
static void nset(hx *x, int member, const char *event_id, const char *handler, const char *set)
{
    itest_exec(x->f.c[member], "UPDATE %s SET %s WHERE event_id = '%s' AND handler_name = '%s'", ntab(&x->f, member),
               set, event_id, handler);
}

/* Sets a timestamp column of that notification. */
static void nset_ts(hx *x, int member, const char *event_id, const char *handler, const char *col, int64_t us)
{
    char sql[512];
    snprintf(sql, sizeof sql, "UPDATE %s SET %s = ? WHERE event_id = '%s' AND handler_name = '%s'",
             ntab(&x->f, member), col, event_id, handler);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_prepare(x->f.c[member], sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 1, us, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_rows_affected(s), 1);
    odbox_stmt_free(&s);
}

static int64_t delivered(hx *x, int member, const char *where)
{
    return itest_count(x->f.c[member], "SELECT COUNT(*) FROM %s WHERE delivered = TRUE AND %s", etab(&x->f, member),
                       where);
}

/* ---- fan-out ------------------------------------------------------------------ */

START_TEST(fanout_copies_flips_and_never_writes_twice)
{
    hx x;
    hx_open(&x, 2);
    hbeh mail, index, ship;
    deliver_mail_index_ship(&x, &mail, &index, &ship);
    char a[2][37], b[1][37], c[1][37], a1[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 2, a);
    emit_n(&x.f, x.exe, 0, &EV_B, 1, b);
    emit_n(&x.f, x.exe, 0, &EV_C, 1, c);
    emit_none(&x.f, x.exe);
    emit_n(&x.f, x.exe, 1, &EV_A, 1, a1);

    odbox_delivery_round r = hx_fanout(&x, 0);
    ck_assert_int_eq(r.job, ODBOX_DELIVERY_FANOUT);
    ck_assert_int_eq(r.read, 3);
    ck_assert_int_eq(r.delivered, 3);
    ck_assert_int_eq(r.notifications, 5);
    ck_assert_int_ge(r.statements, 2);
    /* one row per (event x handler), PENDING, attempts 0, due at event_date,
     * created and updated now (the delivery's clock) */
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 5);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'PENDING' AND attempts = 0 AND next_retry_at = event_date"), 5);
    ck_assert_int_eq(ncol_ts(&x.f, 0, a[0], "mail", "created_date"), T);
    ck_assert_int_eq(ncol_ts(&x.f, 0, a[1], "index", "updated_date"), T);
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "ship"), "PENDING");
    ck_assert_int_eq(nrows(&x.f, 0, "event_type = 'OrderPlaced' AND handler_name IN ('mail', 'index')"), 4);
    /* the whole context copied, to the microsecond and the JSON value */
    ck_assert_int_eq(itest_count(x.f.c[0],
                                 "SELECT COUNT(*) FROM %s n JOIN %s e ON n.event_id = e.id WHERE n.namespace = "
                                 "e.namespace AND n.action_id = e.action_id AND n.action_name = e.action_name AND "
                                 "n.action_params = e.action_params AND n.started_date = e.started_date AND "
                                 "n.completion_date = e.completion_date AND n.model_id = e.model_id AND n.model_type = "
                                 "e.model_type AND n.event_type = e.event_type AND n.payload = e.payload AND "
                                 "n.event_date = e.event_date",
                                 ntab(&x.f, 0), etab(&x.f, 0)),
                     5);
    /* handled events flipped; the unhandled type and the sentinel wait */
    ck_assert_int_eq(delivered(&x, 0, "1 = 1"), 3);
    ck_assert_int_eq(itest_count(x.f.c[0], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE", etab(&x.f, 0)), 2);
    ck_assert_int_eq(itest_count(x.f.c[0], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE AND (event_type IS NULL "
                                           "OR event_type = 'OrderAudited')", etab(&x.f, 0)),
                     2);
    /* shards apart: 0.1 only in its own round */
    ck_assert_int_eq(nrows(&x.f, 1, NULL), 0);
    r = hx_fanout(&x, 1);
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_eq(nrows(&x.f, 1, NULL), 2);
    ck_assert_str_eq(nstate(&x.f, 1, a1[0], "index"), "PENDING");

    /* run again: nothing to read */
    r = hx_fanout(&x, 0);
    ck_assert_int_eq(r.read, 0);
    ck_assert_int_eq(r.delivered, 0);
    /* the same events again (a crash between insert and flip, a lagging
     * replica): sent again, written once */
    itest_exec(x.f.c[0], "UPDATE %s SET delivered = FALSE WHERE event_type IN ('OrderPlaced', 'OrderShipped')",
               etab(&x.f, 0));
    r = hx_fanout(&x, 0);
    ck_assert_int_eq(r.read, 3);
    ck_assert_int_eq(r.notifications, 5);
    ck_assert_int_eq(r.delivered, 3);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 5);
    ck_assert_int_eq(delivered(&x, 0, "1 = 1"), 3);
    hx_close(&x);
}
END_TEST

START_TEST(fanout_backfills_when_a_handler_appears)
{
    hx x;
    hx_open(&x, 2);
    hbeh mail, audit;
    hbeh_init(&mail, &x.rec, NULL), hbeh_init(&audit, &x.rec, NULL);
    hx_deliver(&x, handlers_of(1, (const char *[]){"mail"}, (const char *[]){EV_A.name}, (hbeh *[]){&mail}), NULL);
    char c[2][37];
    emit_n(&x.f, x.exe, 1, &EV_C, 2, c);
    emit_n(&x.f, x.exe, 1, &EV_A, 1, NULL);
    emit_none(&x.f, x.exe);
    ck_assert_int_eq(hx_fanout(&x, 1).delivered, 1);
    ck_assert_int_eq(hx_fanout(&x, 1).read, 0);
    ck_assert_int_eq(delivered(&x, 1, "event_type = 'OrderAudited'"), 0);
    /* a handler for the type is deployed: the backlog is fanned out */
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"mail", "audit"}, (const char *[]){EV_A.name, EV_C.name},
                           (hbeh *[]){&mail, &audit}),
               NULL);
    odbox_delivery_round r = hx_fanout(&x, 1);
    ck_assert_int_eq(r.read, 2);
    ck_assert_int_eq(r.delivered, 2);
    ck_assert_str_eq(nstate(&x.f, 1, c[1], "audit"), "PENDING");
    ck_assert_int_eq(nrows(&x.f, 1, NULL), 3);
    /* sentinels never: no handler can take them */
    ck_assert_int_eq(hx_fanout(&x, 0).read, 0);
    ck_assert_int_eq(itest_count(x.f.c[0], "SELECT COUNT(*) FROM %s WHERE event_type IS NULL AND delivered = FALSE",
                                 etab(&x.f, 0)),
                     1);
    hx_close(&x);
}
END_TEST

/* Sets an event's event_date (and its notifications' none: before fan-out). */
static void set_event_date(hx *x, int member, const char *id, int64_t us)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE %s SET event_date = ? WHERE id = '%s'", etab(&x->f, member), id);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_prepare(x->f.c[member], sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 1, us, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);
}

START_TEST(fanout_and_handling_read_oldest_first_across_types_and_states)
{
    hx x;
    hx_open(&x, 1);
    hbeh ha, hb;
    hbeh_init(&ha, &x.rec, NULL), hbeh_init(&hb, &x.rec, NULL);
    odbox_delivery_config cfg = {.fanout_batch = 2, .handling_batch = 2};
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"ha", "hb"}, (const char *[]){EV_A.name, EV_B.name},
                           (hbeh *[]){&ha, &hb}),
               &cfg);
    char a[2][37], b[2][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 2, a);
    emit_n(&x.f, x.exe, 0, &EV_B, 2, b);
    /* by date: a0, b0, b1, a1: a type-by-type read would take a0, a1 */
    set_event_date(&x, 0, a[0], T - 40 * SEC_US);
    set_event_date(&x, 0, b[0], T - 30 * SEC_US);
    set_event_date(&x, 0, b[1], T - 20 * SEC_US);
    set_event_date(&x, 0, a[1], T - 10 * SEC_US);
    odbox_delivery_round r = hx_fanout(&x, 0);
    ck_assert_int_eq(r.delivered, 2);
    ck_assert_int_eq(delivered(&x, 0, "1 = 1"), 2);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "ha"), "PENDING");
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "hb"), "PENDING");
    ck_assert_int_eq(hx_fanout(&x, 0).delivered, 2);
    ck_assert_int_eq(hx_fanout(&x, 0).read, 0);
    /* due order across PENDING and FAILED: b1 (FAILED, -3 s), a1 (-2 s),
     * then b0 (FAILED, -1 s), a0 (PENDING, not due) */
    nset(&x, 0, b[1], "hb", "state = 'FAILED', attempts = 1");
    nset(&x, 0, b[0], "hb", "state = 'FAILED', attempts = 1");
    nset_ts(&x, 0, b[1], "hb", "next_retry_at", T - 3 * SEC_US);
    nset_ts(&x, 0, a[1], "ha", "next_retry_at", T - 2 * SEC_US);
    nset_ts(&x, 0, b[0], "hb", "next_retry_at", T - 1 * SEC_US);
    nset_ts(&x, 0, a[0], "ha", "next_retry_at", T + 1 * SEC_US);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.read, 2);
    ck_assert_int_eq(r.succeeded, 2);
    ck_assert_int_ge(hrec_find(&x.rec, "hb", b[1]), 0);
    ck_assert_int_ge(hrec_find(&x.rec, "ha", a[1]), 0);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_ge(hrec_find(&x.rec, "hb", b[0]), 0);
    ck_assert_int_eq(hx_handle(&x, 0).read, 0);
    ck_assert_int_eq(hrec_find(&x.rec, "ha", a[0]), -1);
    hx_close(&x);
}
END_TEST

/* A claim reads each handler on its own, each name of it too, and the
 * handlers take turns at reading first, on each shard: a handler's
 * backlog no longer takes every batch while another handler's row, due
 * later, waits. */
START_TEST(handlers_take_turns_at_a_claim_each_oldest_first)
{
    hx x;
    hx_open(&x, 2);
    hbeh ha, hb;
    hbeh_init(&ha, &x.rec, NULL), hbeh_init(&hb, &x.rec, NULL);
    hx_deliver(&x, handlers_of(2, (const char *[]){"ha", "hb-old"}, (const char *[]){EV_A.name, EV_B.name},
                               (hbeh *[]){&ha, &hb}),
               NULL);
    char a[9][37], b[2][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 9, a);
    emit_n(&x.f, x.exe, 0, &EV_B, 2, b);
    fanout_until_idle(x.d, &x.f, NULL);
    /* hb is renamed from hb-old: one of its rows is under the new name */
    nset(&x, 0, b[1], "hb-old", "handler_name = 'hb'");
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    const char *const former[] = {"hb-old", NULL};
    hb.name = "hb";
    odbox_handler hh[] = {{.name = "ha", .event_type = EV_A.name, .handle = hb_handle, .user = &ha},
                          {.name = "hb", .former_names = former, .event_type = EV_B.name, .handle = hb_handle,
                           .user = &hb}};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(odbox_handlers_add(h, &hh[i], &e), ODBOX_OK);
    odbox_delivery_config cfg = {.handling_batch = 3};
    hx_deliver(&x, h, &cfg);
    /* ha's backlog of 9 (-20 s to -12 s); hb's rows: one older than all
     * of it (-30 s, under hb-old), one newer (-1 s) */
    for (int i = 0; i < 9; i++)
        nset_ts(&x, 0, a[i], "ha", "next_retry_at", T - (20 - i) * SEC_US);
    nset_ts(&x, 0, b[0], "hb-old", "next_retry_at", T - 30 * SEC_US);
    nset_ts(&x, 0, b[1], "hb", "next_retry_at", T - 1 * SEC_US);
    /* in two claims, each handler has begun one: hb's two rows, and
     * ha's four oldest. One read in due order for both took b0 and ha's
     * five oldest, and b1 only in the fourth claim. A claim on the other
     * shard between them takes no turn of this one's */
    int read = hx_handle(&x, 0).read;
    ck_assert_int_eq(hx_handle(&x, 1).read, 0);
    read += hx_handle(&x, 0).read;
    ck_assert_int_eq(read, 6);
    ck_assert_int_ge(hrec_find(&x.rec, "hb", b[0]), 0);
    ck_assert_int_ge(hrec_find(&x.rec, "hb", b[1]), 0);
    for (int i = 0; i < 9; i++)
        ck_assert_msg((hrec_find(&x.rec, "ha", a[i]) >= 0) == (i < 4), "ha's row %d (oldest first) %s", i,
                      i < 4 ? "not called" : "called before older ones");
    /* then ha's others, oldest first, a batch at a time */
    ck_assert_int_eq(hx_handle(&x, 0).read, 3);
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(hrec_find(&x.rec, "ha", a[i]) >= 0, i < 7);
    ck_assert_int_eq(hx_handle(&x, 0).read, 2);
    ck_assert_int_eq(hx_handle(&x, 0).read, 0);
    ck_assert_int_eq(x.rec.n, 11);
    hx_close(&x);
}
END_TEST

/* ---- handling ------------------------------------------------------------------- */

START_TEST(every_subscribed_handler_called_with_the_envelope)
{
    hx x;
    hx_open(&x, 2);
    hbeh mail, index, ship;
    deliver_mail_index_ship(&x, &mail, &index, &ship);
    char a0[2][37], a1[1][37], b1[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 2, a0);
    emit_n(&x.f, x.exe, 1, &EV_A, 1, a1);
    emit_n(&x.f, x.exe, 1, &EV_B, 1, b1);
    emit_n(&x.f, x.exe, 1, &EV_C, 1, NULL);
    fanout_until_idle(x.d, &x.f, NULL);
    odbox_manual_clock_advance(x.clk, 5 * SEC_US);
    odbox_delivery_round sum;
    handle_until_idle(x.d, &x.f, &sum);
    ck_assert_int_eq(sum.read, 7);
    ck_assert_int_eq(sum.succeeded, 7);
    ck_assert_int_eq(sum.failed + sum.expired_preflight + sum.expired_postfailure + sum.unwritten + sum.stale, 0);
    ck_assert_int_eq(hrec_count(&x.rec, "mail"), 3);
    ck_assert_int_eq(hrec_count(&x.rec, "index"), 3);
    ck_assert_int_eq(hrec_count(&x.rec, "ship"), 1);
    for (int m = 0; m < 2; m++)
        ck_assert_int_eq(nrows(&x.f, m, "state = 'SUCCEEDED' AND attempts = 1"), m ? 3 : 4);
    ck_assert_int_eq(ncol_ts(&x.f, 1, b1[0], "ship", "updated_date"), T + 5 * SEC_US);
    /* the envelope is the event row */
    evrow ev[8];
    int n = read_events(&x.f, 1, ev, 8);
    const evrow *e = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(ev[i].id, b1[0]))
            e = &ev[i];
    ck_assert_ptr_nonnull(e);
    const hcall *c = &x.rec.calls[hrec_find(&x.rec, "ship", b1[0])];
    ck_assert_str_eq(c->row_handler, "ship");
    ck_assert_str_eq(c->event_id, e->id);
    ck_assert(odbox_uuid_is_valid(c->notification_id));
    ck_assert_str_eq(c->ns, NS);
    ck_assert_str_eq(c->action_id, e->action_id);
    ck_assert_str_eq(c->action_name, "EmitAction");
    ck_assert_msg(dfx_json_same(c->params, e->params), "params %s vs %s", c->params, e->params);
    ck_assert_msg(dfx_json_same(c->payload, "{\"n\": 7, \"text\": \"caf\xc3\xa9 'q'\"}"), "payload %s", c->payload);
    ck_assert_int_eq(c->started, e->started);
    ck_assert_int_eq(c->completion, e->completion);
    ck_assert_int_eq(c->event_us, e->event_date);
    ck_assert_str_eq(c->model_id, e->model_id);
    ck_assert_str_eq(c->model_type, "Dummy");
    ck_assert_str_eq(c->event_type, EV_B.name);
    ck_assert_int_eq(c->shard.group, 0);
    ck_assert_int_eq(c->shard.member, 1);
    ck_assert_int_eq(c->attempt, 1);
    ck_assert_int_eq(hx_handle(&x, 0).read, 0);
    hx_close(&x);
}
END_TEST

START_TEST(flaky_handler_retried_with_the_exact_backoff)
{
    hx x;
    hx_open(&x, 2);
    hbeh flaky;
    hbeh_init(&flaky, &x.rec, NULL);
    flaky.fail_first = 6;
    hx_deliver(&x, handlers_of(1, (const char *[]){"flaky"}, (const char *[]){EV_A.name}, (hbeh *[]){&flaky}), NULL);
    char a[1][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 1, a);
    hx_fanout(&x, 1);
    /* 30 s x 2^(attempts-1), capped at 5 min */
    const int64_t wait[] = {30 * SEC_US, 60 * SEC_US, 120 * SEC_US, 240 * SEC_US, 300 * SEC_US, 300 * SEC_US};
    int64_t now = T;
    for (int k = 1; k <= 6; k++) {
        odbox_delivery_round r = hx_handle(&x, 1);
        ck_assert_int_eq(r.read, 1);
        ck_assert_int_eq(r.failed, 1);
        ck_assert_int_eq(r.updates, 1);
        ck_assert_str_eq(nstate(&x.f, 1, a[0], "flaky"), "FAILED");
        ck_assert_int_eq(ncol_int(&x.f, 1, a[0], "flaky", "attempts"), k);
        int64_t next = ncol_ts(&x.f, 1, a[0], "flaky", "next_retry_at");
        ck_assert_msg(next == now + wait[k - 1], "try %d: next_retry_at %lld, want %lld", k, (long long)next,
                      (long long)(now + wait[k - 1]));
        ck_assert_int_eq(ncol_ts(&x.f, 1, a[0], "flaky", "updated_date"), now);
        /* not a microsecond early */
        odbox_manual_clock_set(x.clk, next - 1);
        ck_assert_int_eq(hx_handle(&x, 1).read, 0);
        now = next;
        odbox_manual_clock_set(x.clk, now);
    }
    odbox_delivery_round r = hx_handle(&x, 1);
    ck_assert_int_eq(r.succeeded, 1);
    ck_assert_str_eq(nstate(&x.f, 1, a[0], "flaky"), "SUCCEEDED");
    ck_assert_int_eq(ncol_int(&x.f, 1, a[0], "flaky", "attempts"), 7);
    ck_assert_int_eq(hrec_count(&x.rec, "flaky"), 7);
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(x.rec.calls[i].attempt, i + 1);
    odbox_manual_clock_advance(x.clk, HOUR_US);
    ck_assert_int_eq(hx_handle(&x, 1).read, 0);
    hx_close(&x);
}
END_TEST

START_TEST(expiry_before_the_call_and_after_a_failure)
{
    hx x;
    hx_open(&x, 2);
    hbeh ok, bad;
    odbox_delivery_config cfg = {.retention_ms = 3600 * 1000};
    deliver_ok_bad(&x, &ok, &bad, &cfg);
    /* a: the failing handler's event, b: the other's */
    char a[1][37], b[1][37];
    emit_n(&x.f, x.exe, 0, &EV_B, 1, a);
    emit_n(&x.f, x.exe, 0, &EV_A, 1, b);
    /* fanned out at T: created_date T is later than event_date (now), so
     * the deadline is T + 1 h */
    hx_fanout(&x, 0);
    /* b: a microsecond past the deadline: EXPIRED, no call, attempts kept */
    nset_ts(&x, 0, a[0], "bad", "next_retry_at", T + 2 * HOUR_US); /* a waits */
    odbox_manual_clock_set(x.clk, T + HOUR_US + 1);
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.expired_preflight, 1);
    ck_assert_int_eq(hrec_count(&x.rec, "ok"), 0);
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "ok"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, b[0], "ok", "attempts"), 0);
    ck_assert_int_eq(ncol_ts(&x.f, 0, b[0], "ok", "updated_date"), T + HOUR_US + 1);
    /* a: failing 30 s before the deadline: its retry lands on it, not past */
    nset_ts(&x, 0, a[0], "bad", "next_retry_at", T);
    odbox_manual_clock_set(x.clk, T + HOUR_US - 30 * SEC_US);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.failed, 1);
    ck_assert_int_eq(ncol_ts(&x.f, 0, a[0], "bad", "next_retry_at"), T + HOUR_US);
    /* at the deadline (not past it) it is called; the next retry would be
     * past it: EXPIRED after the failure */
    odbox_manual_clock_set(x.clk, T + HOUR_US);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.expired_postfailure, 1);
    ck_assert_int_eq(hrec_count(&x.rec, "bad"), 2);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "bad"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "bad", "attempts"), 2);
    odbox_manual_clock_advance(x.clk, HOUR_US);
    ck_assert_int_eq(hx_handle(&x, 0).read, 0);

    /* a requeue sets created_date = now: the retention starts again */
    char nid[37];
    snprintf(nid, sizeof nid, "%s", x.rec.calls[0].notification_id);
    odbox_manual_clock_set(x.clk, T + 10 * HOUR_US);
    odbox_requeue_spec rq = {.id = nid, .clock = odbox_manual_clock_clock(x.clk)};
    int64_t moved = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_notifications_requeue(x.f.r, &rq, &moved, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(moved, 1);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.failed, 1);
    ck_assert_int_eq(x.rec.calls[2].attempt, 1);
    ck_assert_int_eq(ncol_ts(&x.f, 0, a[0], "bad", "next_retry_at"), T + 10 * HOUR_US + 30 * SEC_US);

    /* the later of the two dates counts: an event_date past created_date */
    char a2[1][37];
    emit_n(&x.f, x.exe, 0, &EV_B, 1, a2);
    odbox_manual_clock_set(x.clk, T - 5 * HOUR_US);
    hx_fanout(&x, 0);
    set_event_date(&x, 0, a2[0], T);
    nset_ts(&x, 0, a2[0], "bad", "event_date", T);
    odbox_manual_clock_set(x.clk, T - HOUR_US);
    r = hx_handle(&x, 0); /* created + 1 h is past; event_date + 1 h is not */
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_eq(r.failed, 1);
    nset_ts(&x, 0, a2[0], "bad", "next_retry_at", T);
    odbox_manual_clock_set(x.clk, T + HOUR_US + 1);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.expired_preflight, 1);
    hx_close(&x);
}
END_TEST

/* ---- outcome statements ------------------------------------------------------------- */

/* The server's own count of UPDATE statements on the round's connection:
 * MariaDB's session status; on PostgreSQL a statement trigger counts them
 * (installed by count_updates_setup); -1 on SQLite (no statement count). */
typedef struct upd_probe {
    hx *x;
    int64_t at_calls_done, at_round_done;
    int calls_done_rc;     /* returned at CALLS_DONE */
    /* changes made at CALLS_DONE: another process finishing a row, a requeue */
    const char *other_done_event, *requeued_event;
    int count;             /* read the server's count (count_updates_setup ran) */
    int kill;              /* end the outcome connection's session at CALLS_DONE */
} upd_probe;

static int64_t server_updates(hx *x, odbox_conn *c)
{
    if (itest_is("sqlite"))
        return -1;
    if (itest_is("pg"))
        return itest_count(c, "SELECT n FROM %s.upd_count", x->f.ev[0]);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    const char *v = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(c, "SHOW SESSION STATUS LIKE 'Com_update'", &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    ck_assert_int_eq(odbox_stmt_get_text(s, 2, &v, NULL, &e), ODBOX_OK);
    int64_t n = atoll(v);
    odbox_stmt_free(&s);
    return n;
}

static void count_updates_setup(hx *x)
{
    if (!itest_is("pg"))
        return;
    const char *ev = x->f.ev[0];
    itest_exec(x->f.c[0], "CREATE TABLE %s.upd_count (n INT NOT NULL)", ev);
    itest_exec(x->f.c[0], "INSERT INTO %s.upd_count VALUES (0)", ev);
    itest_exec(x->f.c[0],
               "CREATE FUNCTION %s.count_upd() RETURNS trigger LANGUAGE plpgsql AS "
               "'BEGIN UPDATE %s.upd_count SET n = n + 1; RETURN NULL; END'",
               ev, ev);
    itest_exec(x->f.c[0],
               "CREATE TRIGGER count_upd AFTER UPDATE ON %s.event_notifications FOR EACH STATEMENT "
               "EXECUTE FUNCTION %s.count_upd()",
               ev, ev);
}

static int probe_hook(void *ud, odbox_delivery_point at, odbox_shard *s, odbox_conn *conn,
                      const odbox_delivery_round *round)
{
    upd_probe *p = ud;
    (void)s;
    if (round->job != ODBOX_DELIVERY_HANDLING || !conn)
        return 0;
    if (at == ODBOX_DELIVERY_CALLS_DONE) {
        p->at_calls_done = p->count ? server_updates(p->x, conn) : -1;
        if (p->other_done_event)
            nset(p->x, 0, p->other_done_event, "ok", "state = 'SUCCEEDED', attempts = attempts + 1");
        if (p->requeued_event)
            nset(p->x, 0, p->requeued_event, "bad", "state = 'PENDING', attempts = 0");
        if (p->kill) /* from another connection, as a server or network failure would */
            itest_kill_session(p->x->f.c[0], itest_session_id(conn));
        return p->calls_done_rc;
    }
    p->at_round_done = p->count ? server_updates(p->x, conn) : -1;
    return 0;
}

START_TEST(one_update_per_bucket)
{
    hx x;
    hx_open(&x, 2);
    count_updates_setup(&x);
    hbeh ok, bad;
    upd_probe probe = {.x = &x, .count = 1};
    odbox_delivery_config cfg = {.retention_ms = 3600 * 1000, .hook = probe_hook, .hook_ud = &probe};
    deliver_ok_bad(&x, &ok, &bad, &cfg);
    char a[3][37], b[4][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 3, a);
    emit_n(&x.f, x.exe, 0, &EV_B, 4, b);
    hx_fanout(&x, 0);
    /* a0 succeeds from PENDING 0, a1 from FAILED 2 (mixed attempts: one
     * statement still); a2 is past retention; b0 and b1 fail from
     * PENDING 0, b2 from FAILED 1; b3 fails with no time left */
    nset(&x, 0, a[1], "ok", "state = 'FAILED', attempts = 2");
    nset_ts(&x, 0, a[2], "ok", "created_date", T - 2 * HOUR_US);
    nset(&x, 0, b[2], "bad", "state = 'FAILED', attempts = 1");
    nset_ts(&x, 0, b[3], "bad", "created_date", T - HOUR_US + 10 * SEC_US);
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.read, 7);
    ck_assert_int_eq(r.succeeded, 2);
    ck_assert_int_eq(r.expired_preflight, 1);
    ck_assert_int_eq(r.expired_postfailure, 1);
    ck_assert_int_eq(r.failed, 3);
    ck_assert_int_eq(r.stale, 0);
    /* buckets: succeeded, preflight, postfailure, retry from 0, retry from 1 */
    ck_assert_int_eq(r.updates, 5);
    /* and the claim: its reads (one per handler, and per state where the
     * due index holds the state: MySQL, MariaDB) and its UPDATE */
    ck_assert_int_eq(r.statements, 5 + 1 + 2 * (itest_is("pg") || itest_is("sqlite") ? 1 : 2));
    ck_assert(itest_is("sqlite") || probe.at_calls_done >= 0); /* the server counted */
    /* PostgreSQL's trigger counts the notifications' UPDATEs; MySQL's
     * Com_update every one, the subscription's last error (bad's) too */
    if (probe.at_calls_done >= 0)
        ck_assert_msg(probe.at_round_done - probe.at_calls_done == 5 + !itest_is("pg"),
                      "the server counted %lld UPDATEs", (long long)(probe.at_round_done - probe.at_calls_done));
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "ok"), "SUCCEEDED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "ok", "attempts"), 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[1], "ok"), "SUCCEEDED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[1], "ok", "attempts"), 3);
    ck_assert_str_eq(nstate(&x.f, 0, a[2], "ok"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[2], "ok", "attempts"), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_str_eq(nstate(&x.f, 0, b[i], "bad"), "FAILED");
        ck_assert_int_eq(ncol_int(&x.f, 0, b[i], "bad", "attempts"), 1);
        ck_assert_int_eq(ncol_ts(&x.f, 0, b[i], "bad", "next_retry_at"), T + 30 * SEC_US);
    }
    ck_assert_int_eq(ncol_int(&x.f, 0, b[2], "bad", "attempts"), 2);
    ck_assert_int_eq(ncol_ts(&x.f, 0, b[2], "bad", "next_retry_at"), T + 60 * SEC_US);
    ck_assert_str_eq(nstate(&x.f, 0, b[3], "bad"), "EXPIRED");
    ck_assert_int_eq(ncol_int(&x.f, 0, b[3], "bad", "attempts"), 1);
    ck_assert_int_eq(hrec_count(&x.rec, NULL), 6);
    hx_close(&x);
}
END_TEST

START_TEST(a_row_changed_meanwhile_keeps_the_newer_outcome)
{
    hx x;
    hx_open(&x, 2);
    hbeh ok, bad;
    upd_probe probe = {.x = &x};
    odbox_delivery_config cfg = {.hook = probe_hook, .hook_ud = &probe};
    deliver_ok_bad(&x, &ok, &bad, &cfg);
    char a[2][37], b[2][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 2, a);
    emit_n(&x.f, x.exe, 0, &EV_B, 2, b);
    hx_fanout(&x, 0);
    nset(&x, 0, b[0], "bad", "state = 'FAILED', attempts = 2");
    /* while the calls run, another process finishes a0 and a requeue
     * moves b0 back to PENDING 0 */
    probe.other_done_event = a[0];
    probe.requeued_event = b[0];
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.read, 4);
    ck_assert_int_eq(r.stale, 2);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "ok"), "SUCCEEDED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "ok", "attempts"), 1); /* the other's write, not 2 */
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "bad"), "PENDING");
    ck_assert_int_eq(ncol_int(&x.f, 0, b[0], "bad", "attempts"), 0);
    ck_assert_int_eq(ncol_int(&x.f, 0, a[1], "ok", "attempts"), 1);
    ck_assert_str_eq(nstate(&x.f, 0, b[1], "bad"), "FAILED");
    hx_close(&x);
}
END_TEST

/* The handlers succeeded, then their outcomes are lost before the write:
 * refused by the hook (kill 0), or with the connection that would write
 * them, its session ended from another connection (kill 1). The round
 * fails naming the shard and writes nothing, the rows stay due (refused:
 * their claim given back at once; killed: once the claim's lease has
 * passed), and the next round calls the handler again (at least once)
 * and ends them SUCCEEDED. */
static void outcomes_lost(int kill)
{
    hx x;
    hx_open(&x, 2);
    hbeh ok;
    hbeh_init(&ok, &x.rec, NULL);
    upd_probe probe = {.x = &x, .calls_done_rc = kill ? 0 : ODBOX_ECONNLOST, .kill = kill};
    odbox_delivery_config cfg = {.hook = probe_hook, .hook_ud = &probe};
    hx_deliver(&x, handlers_of(1, (const char *[]){"ok"}, (const char *[]){EV_A.name}, (hbeh *[]){&ok}), &cfg);
    char a[2][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 2, a);
    hx_fanout(&x, 0);
    odbox_delivery_round r;
    odbox_error e = {0};
    int rc = odbox_delivery_handling_round(x.d, hx_shard(&x, 0), &r, &e);
    ck_assert_msg(rc == ODBOX_ECONNLOST, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, "shard 0.0"), "%s", e.message);
    ck_assert_int_eq(r.read, 2);
    ck_assert_int_eq(r.unwritten, 2);
    ck_assert_int_eq(r.succeeded, 0);
    ck_assert_int_eq(hrec_count(&x.rec, "ok"), 2);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'PENDING' AND attempts = 0"), 2);
    if (!kill) /* given back: due again at the claim's time, not at the lease's end */
        ck_assert_int_eq(nrows(&x.f, 0, "lease_until IS NULL AND next_retry_at <= created_date"), 2);
    probe.calls_done_rc = probe.kill = 0;
    if (kill) { /* still claimed by the lost round until its lease ends */
        r = hx_handle(&x, 0);
        ck_assert_int_eq(r.read, 0);
        ck_assert_int_eq(nrows(&x.f, 0, "lease_owner IS NOT NULL AND lease_until IS NOT NULL"), 2);
        ck_assert_int_eq(nrows(&x.f, 0, "next_retry_at = lease_until"), 2);
        odbox_manual_clock_advance(x.clk, (300 + 30) * SEC_US + 1); /* the default: handler_timeout_ms + 30 s */
    }
    r = hx_handle(&x, 0); /* after a kill, on a new session: the pool dropped the dead one */
    ck_assert_int_eq(r.read, 2);
    ck_assert_int_eq(r.succeeded, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_str_eq(nstate(&x.f, 0, a[i], "ok"), "SUCCEEDED");
        ck_assert_int_eq(ncol_int(&x.f, 0, a[i], "ok", "attempts"), 1);
    }
    ck_assert_int_eq(hrec_count(&x.rec, "ok"), 4); /* each event's handler called twice */
    ck_assert_int_eq(x.rec.calls[3].attempt, 1);
    hx_close(&x);
}

START_TEST(outcomes_lost_before_their_write_are_delivered_again)
{
    outcomes_lost(0);
}
END_TEST

START_TEST(outcomes_lost_with_their_connection_are_delivered_again)
{
    outcomes_lost(1);
}
END_TEST

/* ---- an outcome UPDATE that loses a deadlock ------------------------------------------ */

/* PostgreSQL: another session holds the row the outcome UPDATE waits for,
 * then asks for the table in SHARE mode, which the UPDATE holds in ROW
 * EXCLUSIVE mode. The UPDATE's session looks for the deadlock 5 s into
 * its wait and the other's only after 60 s, so the UPDATE is the one
 * aborted: with both at the server's 1 s, a slow machine (ASan) let the
 * UPDATE's one look pass before the cycle closed, and the other's LOCK
 * lost instead. */
typedef struct dl_probe {
    hx *x;
    const char *event;
    odbox_conn *other, *watch;
    pthread_t thread;
    int started;
} dl_probe;

static void *dl_close_the_cycle(void *arg)
{
    dl_probe *p = arg;
    for (int i = 0; i < 1000 && !itest_count(p->watch, "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type "
                                                       "= 'Lock' AND query LIKE 'UPDATE %%event_notifications%%'");
         i++)
        usleep(10000); /* at most 10 s for the UPDATE to wait */
    itest_exec(p->other, "SET deadlock_timeout = '60s'");
    itest_exec(p->other, "LOCK TABLE %s.event_notifications IN SHARE MODE", p->x->f.ev[0]);
    odbox_error e = {0};
    odbox_conn_rollback(p->other, &e);
    return NULL;
}

static int dl_hook(void *ud, odbox_delivery_point at, odbox_shard *s, odbox_conn *conn,
                   const odbox_delivery_round *round)
{
    dl_probe *p = ud;
    (void)s;
    if (at != ODBOX_DELIVERY_CALLS_DONE || round->job != ODBOX_DELIVERY_HANDLING || p->started)
        return 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_conn_exec(conn, "SET deadlock_timeout = '5s'", &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_conn_begin(p->other, &e), ODBOX_OK);
    itest_exec(p->other, "UPDATE %s.event_notifications SET attempts = attempts WHERE event_id = '%s'", p->x->f.ev[0],
               p->event);
    ck_assert_int_eq(pthread_create(&p->thread, NULL, dl_close_the_cycle, p), 0);
    p->started = 1;
    return 0;
}

/* The outcomes' transaction (PostgreSQL: outcome_begin_sql) that lost
 * the deadlock held nothing else, so it is run again whole: the row ends
 * SUCCEEDED in this round rather than claimed until its lease ends
 * (without the repeat the round failed with ODBOX_EDEADLOCK). */
START_TEST(an_outcome_update_that_loses_a_deadlock_runs_again)
{
    hx x;
    hx_open(&x, 1);
    hbeh ok;
    hbeh_init(&ok, &x.rec, NULL);
    char a[1][37];
    dl_probe probe = {.x = &x, .event = a[0], .other = itest_connect(1), .watch = itest_connect(1)};
    odbox_delivery_config cfg = {.hook = dl_hook, .hook_ud = &probe};
    hx_deliver(&x, handlers_of(1, (const char *[]){"ok"}, (const char *[]){EV_A.name}, (hbeh *[]){&ok}), &cfg);
    emit_n(&x.f, x.exe, 0, &EV_A, 1, a);
    hx_fanout(&x, 0);
    odbox_delivery_round r;
    odbox_error e = {0};
    int rc = odbox_delivery_handling_round(x.d, hx_shard(&x, 0), &r, &e);
    ck_assert(probe.started);
    pthread_join(probe.thread, NULL);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(r.succeeded, 1);
    /* the claim's read and UPDATE, and the outcome UPDATE twice */
    ck_assert_int_eq(r.statements, 4);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "ok"), "SUCCEEDED");
    ck_assert_int_eq(nrows(&x.f, 0, "lease_owner IS NOT NULL"), 0);
    odbox_conn_close(&probe.other);
    odbox_conn_close(&probe.watch);
    hx_close(&x);
}
END_TEST

Suite *handlers_suite(void)
{
    Suite *s = suite_create("handlers");
    TCase *tc = tcase_create("handlers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fanout_copies_flips_and_never_writes_twice);
    tcase_add_test(tc, fanout_backfills_when_a_handler_appears);
    tcase_add_test(tc, fanout_and_handling_read_oldest_first_across_types_and_states);
    tcase_add_test(tc, handlers_take_turns_at_a_claim_each_oldest_first);
    tcase_add_test(tc, every_subscribed_handler_called_with_the_envelope);
    tcase_add_test(tc, flaky_handler_retried_with_the_exact_backoff);
    tcase_add_test(tc, expiry_before_the_call_and_after_a_failure);
    tcase_add_test(tc, one_update_per_bucket);
    tcase_add_test(tc, a_row_changed_meanwhile_keeps_the_newer_outcome);
    tcase_add_test(tc, outcomes_lost_before_their_write_are_delivered_again);
    tcase_add_test(tc, outcomes_lost_with_their_connection_are_delivered_again);
    tcase_add_test(tc, an_outcome_update_that_loses_a_deadlock_runs_again);
    suite_add_tcase(s, tc);
    return s;
}
