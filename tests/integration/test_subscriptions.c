/* odbox — subscriptions are data (issue 19 item 1): the fan-out writes one
 * row per event per subscription recorded in the eventlog, whatever
 * handlers the process running it has; a process going away is not a
 * retirement; retire and replay (in the database's time). */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#include "itest.h"
#include "test_handlers.h"

static const odbox_event_type EV_A = {"OrderPlaced"};
static const odbox_event_type EV_B = {"OrderShipped"};

/* Another delivery on x's registry and clock: another process. */
static odbox_delivery *other(hx *x, odbox_handlers *h)
{
    odbox_delivery_config c = {.clock = odbox_manual_clock_clock(x->clk)};
    odbox_delivery *d = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x->f.r, h, &c, &d, &e) == ODBOX_OK, "%s", e.message);
    return d;
}

static odbox_delivery_round fanout(hx *x, odbox_delivery *d, int member)
{
    odbox_delivery_round r;
    odbox_error e = {0};
    round_ok(odbox_delivery_fanout_round(d, hx_shard(x, member), &r, &e), &e);
    return r;
}

static int64_t rows_of(hx *x, int member, const char *handler, const char *state)
{
    char where[160];
    snprintf(where, sizeof where, "handler_name = '%s'%s%s%s", handler, state ? " AND state = '" : "",
             state ? state : "", state ? "'" : "");
    return nrows(&x->f, member, where);
}

/* The rolling deploy: process A serves {a}, process B {a, b}; a writer
 * emits while A and B are restarted in turn and each runs the fan-out in
 * its turn. Before subscriptions were data, the events A fanned out
 * never reached b. */
START_TEST(a_rolling_deploy_reaches_every_subscription)
{
    hx x;
    hx_open(&x, 2);
    hbeh a1, a2, b2;
    hbeh_init(&a1, &x.rec, NULL), hbeh_init(&a2, &x.rec, NULL), hbeh_init(&b2, &x.rec, NULL);
    const char *const one[] = {"a"}, *const two[] = {"a", "b"};
    const char *const t1[] = {EV_A.name}, *const t2[] = {EV_A.name, EV_A.name};
    hx_deliver(&x, handlers_of(2, two, t2, (hbeh *[]){&a2, &b2}), NULL); /* B starts */
    fanout(&x, x.d, 1);
    odbox_handlers *ha = handlers_of(1, one, t1, (hbeh *[]){&a1});
    odbox_delivery *A = other(&x, ha);
    enum { ROUNDS = 8, PER = 3 };
    char ids[ROUNDS * PER][37];
    for (int i = 0; i < ROUNDS; i++) {
        emit_n(&x.f, x.exe, 1, &EV_A, PER, &ids[i * PER]);
        if (i % 2 == 0) { /* A's turn; B restarts meanwhile */
            fanout(&x, A, 1);
            hx_deliver(&x, handlers_of(2, two, t2, (hbeh *[]){&a2, &b2}), NULL);
        } else { /* B's turn; A restarts meanwhile */
            fanout(&x, x.d, 1);
            odbox_delivery_free(&A);
            odbox_handlers_free(&ha);
            ha = handlers_of(1, one, t1, (hbeh *[]){&a1});
            A = other(&x, ha);
        }
    }
    fanout_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(rows_of(&x, 1, "a", NULL), ROUNDS * PER);
    ck_assert_int_eq(rows_of(&x, 1, "b", NULL), ROUNDS * PER);
    handle_until_idle(x.d, &x.f, NULL);
    for (int i = 0; i < ROUNDS * PER; i++) {
        ck_assert_str_eq(nstate(&x.f, 1, ids[i], "a"), "SUCCEEDED");
        ck_assert_str_eq(nstate(&x.f, 1, ids[i], "b"), "SUCCEEDED");
    }
    ck_assert_int_eq(hrec_count(&x.rec, "b"), ROUNDS * PER);
    odbox_delivery_free(&A);
    odbox_handlers_free(&ha);
    hx_close(&x);
}
END_TEST

/* Calls of handler "h" by event type, in one process's delivery. */
typedef struct by_type {
    atomic_int a, b;
} by_type;

static int count_by_type(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)err;
    by_type *t = user;
    atomic_fetch_add(!strcmp(env->event_type, EV_B.name) ? &t->b : &t->a, 1);
    return 0;
}

static odbox_handlers *handler_h(by_type *t, int with_b)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    const char *const types[] = {EV_A.name, with_b ? EV_B.name : NULL, NULL};
    odbox_handler hd = {.name = "h", .event_types = types, .handle = count_by_type, .user = t};
    ck_assert_msg(odbox_handlers_add(h, &hd, &e) == ODBOX_OK, "%s", e.message);
    return h;
}

/* A rolling deploy that adds a type to a handler: the new version's h
 * takes A and B, the old one's A only. Once the new version has
 * registered, the fan-out (here the old process's) writes h rows for B
 * too; the old process claims only its own types' rows, so B's row waits
 * for the new version instead of reaching old code that never took B
 * (which would have marked it SUCCEEDED unhandled). Before, the old
 * process claimed and called it. */
START_TEST(a_process_takes_only_the_types_its_handler_declares)
{
    hx x;
    hx_open(&x, 2);
    by_type old_calls = {0}, new_calls = {0};
    odbox_handlers *hnew = handler_h(&new_calls, 1);
    odbox_delivery *NEW = other(&x, hnew);
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_register(NEW, &e) == ODBOX_OK, "%s", e.message);
    hx_deliver(&x, handler_h(&old_calls, 0), NULL); /* the old version */
    char a[2][37], b[2][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 2, a);
    emit_n(&x.f, x.exe, 1, &EV_B, 2, b);
    fanout_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(rows_of(&x, 1, "h", NULL), 4);
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(atomic_load(&old_calls.a), 2);
    ck_assert_int_eq(atomic_load(&old_calls.b), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_str_eq(nstate(&x.f, 1, a[i], "h"), "SUCCEEDED");
        ck_assert_str_eq(nstate(&x.f, 1, b[i], "h"), "PENDING");
        ck_assert_int_eq(ncol_int(&x.f, 1, b[i], "h", "attempts"), 0);
    }
    handle_until_idle(NEW, &x.f, NULL);
    ck_assert_int_eq(atomic_load(&new_calls.b), 2);
    ck_assert_int_eq(atomic_load(&new_calls.a), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_str_eq(nstate(&x.f, 1, b[i], "h"), "SUCCEEDED");
    odbox_delivery_free(&NEW);
    odbox_handlers_free(&hnew);
    hx_close(&x);
}
END_TEST

/* B registers b and goes away: b's rows are still written, and wait. */
START_TEST(a_subscription_outlives_its_process)
{
    hx x;
    hx_open(&x, 2);
    hbeh a1, a2, b2;
    hbeh_init(&a1, &x.rec, NULL), hbeh_init(&a2, &x.rec, NULL), hbeh_init(&b2, &x.rec, NULL);
    odbox_handlers *hb = handlers_of(2, (const char *[]){"a", "b"}, (const char *[]){EV_A.name, EV_A.name},
                                     (hbeh *[]){&a2, &b2});
    odbox_delivery *B = other(&x, hb);
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_register(B, &e) == ODBOX_OK, "%s", e.message);
    odbox_delivery_free(&B);
    odbox_handlers_free(&hb);
    hx_deliver(&x, handlers_of(1, (const char *[]){"a"}, (const char *[]){EV_A.name}, (hbeh *[]){&a1}), NULL);
    char ids[2][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 2, ids);
    fanout(&x, x.d, 1);
    ck_assert_int_eq(rows_of(&x, 1, "b", "PENDING"), 2);
    ck_assert_int_eq(ncol_int(&x.f, 1, ids[0], "b", "attempts"), 0);
    /* listed, without its process: B stopped cleanly */
    odbox_subscription *s = NULL;
    size_t n = 0;
    ck_assert_msg(odbox_subscriptions_list(x.f.r, hx_shard(&x, 1), 0, &s, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(s[0].name, "a");
    ck_assert_str_eq(s[1].name, "b");
    ck_assert_int_eq(s[1].ntypes, 1);
    ck_assert_str_eq(s[1].types[0], EV_A.name);
    ck_assert_int_eq(s[1].nprocesses, 0);
    ck_assert_int_eq(s[0].nprocesses, 1);
    ck_assert_int_eq(s[1].retired_us, 0);
    ck_assert_int_gt(s[1].created_us, 0);
    odbox_subscriptions_free(&s, n);
    hx_close(&x);
}
END_TEST

/* Subscription name of shard 0 as listed with live_ms (NULL: none); the
 * list, which holds it, into *all (*n of them) for odbox_subscriptions_free. */
static const odbox_subscription *listed(hx *x, int live_ms, const char *name, odbox_subscription **all, size_t *n)
{
    odbox_error e = {0};
    *all = NULL, *n = 0;
    ck_assert_msg(odbox_subscriptions_list(x->f.r, hx_shard(x, 0), live_ms, all, n, &e) == ODBOX_OK, "%s",
                  e.message);
    for (size_t i = 0; i < *n; i++)
        if (!strcmp((*all)[i].name, name))
            return &(*all)[i];
    return NULL;
}

/* The live processes of subscription "a" on shard 0 within live_ms. */
static size_t live_of_a(hx *x, int live_ms)
{
    odbox_subscription *all;
    size_t n;
    const odbox_subscription *a = listed(x, live_ms, "a", &all, &n);
    size_t live = a ? a->nprocesses : 0;
    odbox_subscriptions_free(&all, n);
    return live;
}

/* A process that stops cleanly (odbox_delivery_free) removes its own rows
 * of subscription_processes: odbox handlers no longer shows it live.
 * Before, it was shown live until --live-ms passed. One that stops
 * without a free (killed: here, registered and never beating again) and
 * an older odbox's process (a row written as it writes them) stay live
 * until their heartbeat ages out; the free touches no row of theirs. */
START_TEST(a_clean_stop_is_no_longer_live)
{
    hx x;
    hx_open(&x, 1);
    hbeh a1, a2;
    hbeh_init(&a1, &x.rec, NULL), hbeh_init(&a2, &x.rec, NULL);
    odbox_handlers *hk = handlers_of(1, (const char *[]){"a"}, (const char *[]){EV_A.name}, (hbeh *[]){&a1});
    odbox_handlers *hc = handlers_of(1, (const char *[]){"a"}, (const char *[]){EV_A.name}, (hbeh *[]){&a2});
    odbox_delivery *killed = other(&x, hk), *clean = other(&x, hc);
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_register(killed, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_delivery_register(clean, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt *st = NULL;
    char sql[512];
    const odbox_dialect *dl = odbox_conn_dialect(x.f.c[0]);
    snprintf(sql, sizeof sql, "INSERT INTO %s (name, process, last_seen) VALUES ('a', 'old:1:version', %s)",
             itest_evt(x.f.ev[0], "subscription_processes"), dl->now_sql);
    ck_assert_msg(odbox_stmt_prepare(x.f.c[0], sql, &st, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_stmt_execute(st, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&st);
    ck_assert_int_eq(live_of_a(&x, 0), 3);
    odbox_delivery_free(&clean);
    ck_assert_int_eq(live_of_a(&x, 0), 2);
    usleep(1100 * 1000);
    ck_assert_int_eq(live_of_a(&x, 1000), 0);
    ck_assert_int_eq(live_of_a(&x, 0), 2);
    odbox_delivery_free(&killed);
    odbox_handlers_free(&hk);
    odbox_handlers_free(&hc);
    hx_close(&x);
}
END_TEST

/* A failed call names its subscription's last error (odbox handlers shows
 * it): a relay's broker that is down is visible without the logs. */
START_TEST(a_failed_call_is_its_subscriptions_last_error)
{
    hx x;
    hx_open(&x, 1);
    hbeh ok, bad;
    hbeh_init(&ok, &x.rec, NULL), hbeh_init(&bad, &x.rec, NULL);
    bad.fail_always = 1;
    hx_deliver(&x, handlers_of(2, (const char *[]){"ok", "bad"}, (const char *[]){EV_A.name, EV_A.name},
                               (hbeh *[]){&ok, &bad}),
               NULL);
    emit_n(&x.f, x.exe, 0, &EV_A, 3, NULL);
    fanout_until_idle(x.d, &x.f, NULL);
    int64_t t0 = dfx_now_us();
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.failed, 3);
    int64_t at = 0;
    char *msg = last_error_of(&x, 0, "bad", &at);
    ck_assert_ptr_nonnull(msg);
    ck_assert_msg(strstr(msg, "scripted failure"), "last error: %s", msg);
    /* the database's time; the test's clock may differ by the servers' skew */
    ck_assert_int_gt(at, t0 - 60 * INT64_C(1000000));
    ck_assert_int_lt(at, t0 + 60 * INT64_C(1000000));
    free(msg);
    ck_assert_ptr_null(last_error_of(&x, 0, "ok", &at));
    ck_assert_int_eq(at, 0);
    /* at most once a second per subscription: the rows' retries a moment
     * later leave what an operator wrote there; a second later they write */
    itest_exec(x.f.c[0], "UPDATE %s SET last_error = 'seen' WHERE name = 'bad'", itest_evt(x.f.ev[0], "subscriptions"));
    odbox_manual_clock_advance(x.clk, 3600 * INT64_C(1000000));
    ck_assert_int_eq(hx_handle(&x, 0).failed, 3);
    msg = last_error_of(&x, 0, "bad", &at);
    ck_assert_str_eq(msg, "seen");
    free(msg);
    usleep(1100 * 1000);
    odbox_manual_clock_advance(x.clk, 3600 * INT64_C(1000000));
    ck_assert_int_eq(hx_handle(&x, 0).failed, 3);
    msg = last_error_of(&x, 0, "bad", &at);
    ck_assert_msg(strstr(msg, "scripted failure"), "last error: %s", msg);
    free(msg);
    hx_close(&x);
}
END_TEST

/* A handler's message in another encoding (Latin-1 here, and a sequence
 * cut short) is its subscription's last error as UTF-8, each bad byte
 * U+FFFD. Before, PostgreSQL and MySQL/MariaDB refused the UPDATE (no
 * last error, a warning in the log) and SQLite kept the bytes, which
 * `odbox handlers --json` printed. */
START_TEST(a_last_error_in_another_encoding_is_kept_as_utf8)
{
    hx x;
    hx_open(&x, 1);
    hbeh bad;
    hbeh_init(&bad, &x.rec, NULL);
    bad.fail_always = 1;
    bad.fail_message = "ung\xFCltig: \xE2\x82 cut, caf\xC3\xA9";
    hx_deliver(&x, handlers_of(1, (const char *[]){"bad"}, (const char *[]){EV_A.name}, (hbeh *[]){&bad}), NULL);
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    fanout_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(hx_handle(&x, 0).failed, 1);
    int64_t at = 0;
    char *msg = last_error_of(&x, 0, "bad", &at);
    ck_assert_msg(msg != NULL, "no last error recorded");
    ck_assert_str_eq(msg, "ung\xEF\xBF\xBDltig: \xEF\xBF\xBD\xEF\xBF\xBD cut, caf\xC3\xA9");
    free(msg);
    hx_close(&x);
}
END_TEST

/* A row the handler cannot be called with (its payload nested deeper than
 * json-c reads: written by another writer, PostgreSQL, MySQL and SQLite
 * store it) fails without a call, and says why as its subscription's last
 * error: before, it retried until it expired and `odbox handlers` showed
 * nothing. */
START_TEST(a_row_json_c_cannot_read_is_its_subscriptions_last_error)
{
    hx x;
    hx_open(&x, 1);
    hbeh h;
    hbeh_init(&h, &x.rec, NULL);
    hx_deliver(&x, handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&h}), NULL);
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    fanout_until_idle(x.d, &x.f, NULL);
    char deep[128];
    itest_exec(x.f.c[0], "UPDATE %s SET payload = '%s' WHERE handler_name = 'h'",
               itest_evt(x.f.ev[0], "event_notifications"), nested_json(deep, 40));
    ck_assert_int_eq(hx_handle(&x, 0).failed, 1);
    ck_assert_int_eq(atomic_load(&h.calls), 0);
    int64_t at = 0;
    char *msg = last_error_of(&x, 0, "h", &at);
    ck_assert_msg(msg != NULL, "no last error recorded");
    ck_assert_msg(strstr(msg, "payload cannot be read as JSON (nesting too deep)"), "last error: %s", msg);
    free(msg);
    hx_close(&x);
}
END_TEST

START_TEST(a_retired_subscription_gets_no_new_rows)
{
    hx x;
    hx_open(&x, 2);
    hbeh a, b;
    hbeh_init(&a, &x.rec, NULL), hbeh_init(&b, &x.rec, NULL);
    const char *const names[] = {"a", "b"}, *const types[] = {EV_A.name, EV_A.name};
    hx_deliver(&x, handlers_of(2, names, types, (hbeh *[]){&a, &b}), NULL);
    char ids[1][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 1, ids);
    hx_fanout(&x, 1);
    ck_assert_int_eq(rows_of(&x, 1, "b", NULL), 1);
    odbox_error e = {0};
    int64_t retired = -1;
    ck_assert_msg(odbox_subscription_retire(x.f.r, "b", &retired, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(retired, 1);
    ck_assert_int_eq(odbox_subscription_retire(x.f.r, "b", &retired, &e), ODBOX_OK);
    ck_assert_int_eq(retired, 0);
    ck_assert_int_eq(odbox_subscription_retire(x.f.r, "nope", &retired, &e), ODBOX_ENOTFOUND);
    ck_assert_str_eq(e.message, "no subscription named 'nope'");
    emit_n(&x.f, x.exe, 1, &EV_A, 1, ids);
    hx_fanout(&x, 1);
    ck_assert_int_eq(rows_of(&x, 1, "a", NULL), 2);
    ck_assert_int_eq(rows_of(&x, 1, "b", NULL), 1);
    /* its existing row is still handled */
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(rows_of(&x, 1, "b", "SUCCEEDED"), 1);
    /* registered again by a process (restarted): it stays retired */
    hx_deliver(&x, handlers_of(2, names, types, (hbeh *[]){&a, &b}), NULL);
    emit_n(&x.f, x.exe, 1, &EV_A, 1, ids);
    hx_fanout(&x, 1);
    ck_assert_int_eq(rows_of(&x, 1, "a", NULL), 3);
    ck_assert_int_eq(rows_of(&x, 1, "b", NULL), 1);
    odbox_subscription *s = NULL;
    size_t n = 0;
    ck_assert_msg(odbox_subscriptions_list(x.f.r, NULL, 0, &s, &n, &e) == ODBOX_OK, "%s", e.message);
    int seen = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, "b") && s[i].retired_us > 0)
            seen++;
    ck_assert_int_eq(seen, 1);
    odbox_subscriptions_free(&s, n);
    hx_close(&x);
}
END_TEST

/* c subscribes after 5 events were fanned out: a replay gives it those
 * (of its types), once. */
START_TEST(a_replay_writes_the_retained_events_once)
{
    hx x;
    hx_open(&x, 2);
    hbeh a1, a2, c2;
    hbeh_init(&a1, &x.rec, NULL), hbeh_init(&a2, &x.rec, NULL), hbeh_init(&c2, &x.rec, NULL);
    hx_deliver(&x, handlers_of(1, (const char *[]){"a"}, (const char *[]){EV_A.name}, (hbeh *[]){&a1}), NULL);
    char ids[5][37], other_ids[2][37];
    const odbox_clock *sys = odbox_clock_system();
    int64_t before = sys->now_us(sys->ud) - SEC_US; /* the executor dates events by the system clock */
    emit_n(&x.f, x.exe, 1, &EV_A, 5, ids);
    emit_n(&x.f, x.exe, 1, &EV_B, 2, other_ids);
    hx_fanout(&x, 1);
    ck_assert_int_eq(rows_of(&x, 1, "a", NULL), 5);
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"a", "c"}, (const char *[]){EV_A.name, EV_A.name},
                           (hbeh *[]){&a2, &c2}),
               NULL);
    hx_fanout(&x, 1); /* registers c; nothing to fan out */
    ck_assert_int_eq(rows_of(&x, 1, "c", NULL), 0);
    usleep(2000);
    int64_t after = sys->now_us(sys->ud);
    /* the delivery's clock: the rows' created_date, and what "the future" is */
    const odbox_clock *ck = odbox_manual_clock_clock(x.clk);
    odbox_error e = {0};
    int64_t created = -1;
    /* bad input */
    ck_assert_int_eq(odbox_subscription_replay(x.f.r, "nope", before, ck, &created, &e), ODBOX_ENOTFOUND);
    ck_assert_str_eq(e.message, "no subscription named 'nope'");
    ck_assert_int_eq(odbox_subscription_replay(x.f.r, "c", ck->now_us(ck->ud) + SEC_US, ck, &created, &e),
                     ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "future"));
    /* since after the events: none */
    ck_assert_int_eq(odbox_subscription_replay(x.f.r, "c", after, ck, &created, &e), ODBOX_OK);
    ck_assert_int_eq(created, 0);
    ck_assert_msg(odbox_subscription_replay(x.f.r, "c", before, ck, &created, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(created, 5); /* of its type only */
    ck_assert_int_eq(odbox_subscription_replay(x.f.r, "c", before, ck, &created, &e), ODBOX_OK);
    ck_assert_int_eq(created, 0); /* the rows exist */
    ck_assert_int_eq(rows_of(&x, 1, "c", "PENDING"), 5);
    ck_assert_int_eq(rows_of(&x, 1, "a", NULL), 5);
    char more[1][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 1, more);
    ck_assert_int_eq(odbox_subscription_replay(x.f.r, "c", after, ck, &created, &e), ODBOX_OK);
    ck_assert_int_eq(created, 0); /* undelivered still: the fan-out writes its row */
    ck_assert_int_eq(rows_of(&x, 1, "c", NULL), 5);
    hx_fanout(&x, 1);
    ck_assert_int_eq(rows_of(&x, 1, "c", NULL), 6);
    ck_assert_int_eq(rows_of(&x, 1, "a", NULL), 6);
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(hrec_count(&x.rec, "c"), 6);
    for (int i = 0; i < 5; i++)
        ck_assert_int_ge(hrec_find(&x.rec, "c", ids[i]), 0);
    /* a retired one is not replayed */
    ck_assert_int_eq(odbox_subscription_retire(x.f.r, "c", NULL, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_subscription_replay(x.f.r, "c", before, ck, &created, &e), ODBOX_ESTATE);
    hx_close(&x);
}
END_TEST

/* A renamed handler (former_names) is one subscription under its names:
 * the rows queued under the old name reach it. A replay of the new name
 * skips the events that already have a row under a former name (before:
 * it wrote a second row for each, and every event the old name had
 * handled was handled again). */
START_TEST(a_replay_of_a_renamed_subscription_skips_its_former_rows)
{
    hx x;
    hx_open(&x, 1);
    hbeh old, renamed;
    hbeh_init(&old, &x.rec, NULL), hbeh_init(&renamed, &x.rec, NULL);
    hx_deliver(&x, handlers_of(1, (const char *[]){"old-name"}, (const char *[]){EV_A.name}, (hbeh *[]){&old}), NULL);
    int64_t since = itest_db_now(x.f.c[0]) - 60 * SEC_US;
    char ids[3][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 3, ids);
    hx_fanout(&x, 0);
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(rows_of(&x, 0, "old-name", "SUCCEEDED"), 3);
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    renamed.name = "new-name";
    const char *const former[] = {"old-name", NULL};
    odbox_handler hr = {.name = "new-name", .former_names = former, .event_type = EV_A.name, .handle = hb_handle,
                        .user = &renamed};
    ck_assert_int_eq(odbox_handlers_add(h, &hr, &e), ODBOX_OK);
    hx_deliver(&x, h, NULL);
    hx_fanout(&x, 0); /* registers new-name, retires old-name */
    int64_t created = -1;
    ck_assert_msg(odbox_subscription_replay(x.f.r, "new-name", since, NULL, &created, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(created, 0);
    ck_assert_int_eq(rows_of(&x, 0, "new-name", NULL), 0);
    /* an event the old name never got (fanned out when neither name
     * took its type: flipped here without a row) is replayed */
    char more[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 1, more);
    itest_exec(x.f.c[0], "UPDATE %s SET delivered = TRUE WHERE id = '%s'", etab(&x.f, 0), more[0]);
    /* dated by the delivery's clock, so that its handling does not find it expired */
    ck_assert_msg(odbox_subscription_replay(x.f.r, "new-name", since, odbox_manual_clock_clock(x.clk), &created,
                                            &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(created, 1);
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(hrec_count(&x.rec, "new-name"), 1);
    ck_assert_int_ge(hrec_find(&x.rec, "new-name", more[0]), 0);
    hx_close(&x);
}
END_TEST

static odbox_handlers *renamed_from(hbeh *beh, const char *const *former)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    odbox_handler hr = {.name = "new-name", .former_names = former, .event_type = EV_A.name, .handle = hb_handle,
                        .user = beh};
    ck_assert_int_eq(odbox_handlers_add(h, &hr, &e), ODBOX_OK);
    return h;
}

/* The former names subscription name records (malloc'd; NULL: none). */
static char *recorded_former(hx *x, const char *name)
{
    odbox_subscription *all;
    size_t n;
    const odbox_subscription *sub = listed(x, 0, name, &all, &n);
    char *former = sub && sub->former_names ? strdup(sub->former_names) : NULL;
    odbox_subscriptions_free(&all, n);
    return former;
}

/* A subscription registered first without former names, then renamed
 * from one by a later deploy (the first forgot it): the later deploy's
 * former names are recorded, and a replay skips the events the former
 * name has rows for (before: only the first registration's were
 * recorded, none here, and the replay wrote a second row for each).
 * A deploy naming another former name adds it, keeping the first. */
START_TEST(former_names_of_a_later_deploy_are_recorded)
{
    hx x;
    hx_open(&x, 1);
    hbeh old, renamed;
    hbeh_init(&old, &x.rec, NULL), hbeh_init(&renamed, &x.rec, NULL);
    renamed.name = "new-name";
    hx_deliver(&x, handlers_of(1, (const char *[]){"old-name"}, (const char *[]){EV_A.name}, (hbeh *[]){&old}), NULL);
    int64_t since = itest_db_now(x.f.c[0]) - 60 * SEC_US;
    char ids[3][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 3, ids);
    hx_fanout(&x, 0);
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(rows_of(&x, 0, "old-name", "SUCCEEDED"), 3);
    hx_deliver(&x, renamed_from(&renamed, NULL), NULL);
    hx_fanout(&x, 0);
    ck_assert_ptr_null(recorded_former(&x, "new-name"));
    hx_deliver(&x, renamed_from(&renamed, (const char *const[]){"old-name", NULL}), NULL);
    hx_fanout(&x, 0);
    char *former = recorded_former(&x, "new-name");
    ck_assert_str_eq(former ? former : "(none)", "old-name");
    free(former);
    odbox_error e = {0};
    int64_t created = -1;
    ck_assert_msg(odbox_subscription_replay(x.f.r, "new-name", since, NULL, &created, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(created, 0);
    ck_assert_int_eq(rows_of(&x, 0, "new-name", NULL), 0);
    /* another deploy names another one: both are recorded, once each */
    hx_deliver(&x, renamed_from(&renamed, (const char *const[]){"older-name", "old-name", NULL}), NULL);
    hx_fanout(&x, 0);
    hx_deliver(&x, renamed_from(&renamed, (const char *const[]){"older-name", NULL}), NULL);
    hx_fanout(&x, 0);
    former = recorded_former(&x, "new-name");
    ck_assert_str_eq(former ? former : "(none)", "old-name older-name");
    free(former);
    hx_close(&x);
}
END_TEST

/* A replay without a clock measures its since and dates its rows in the
 * database's time. This process's clock an hour slow: a since a minute
 * ago by the database is not "in the future" (before: refused as such),
 * and the rows are created at the database's now (before: an hour
 * earlier, which would have ended their retention an hour early). */
START_TEST(a_replay_is_in_the_database_time)
{
    hx x;
    hx_open(&x, 1);
    hbeh a1, a2, c2;
    hbeh_init(&a1, &x.rec, NULL), hbeh_init(&a2, &x.rec, NULL), hbeh_init(&c2, &x.rec, NULL);
    hx_deliver(&x, handlers_of(1, (const char *[]){"a"}, (const char *[]){EV_A.name}, (hbeh *[]){&a1}), NULL);
    int64_t since = itest_db_now(x.f.c[0]) - 60 * SEC_US;
    char ids[2][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 2, ids);
    hx_fanout(&x, 0);
    hx_deliver(&x,
               handlers_of(2, (const char *[]){"a", "c"}, (const char *[]){EV_A.name, EV_A.name},
                           (hbeh *[]){&a2, &c2}),
               NULL);
    hx_fanout(&x, 0); /* registers c */
    int64_t before = itest_db_now(x.f.c[0]);
    odbox_error e = {0};
    int64_t created = -1;
    odbox_clock_skew_set(-3600 * SEC_US);
    int rc = odbox_subscription_replay(x.f.r, "c", since, NULL, &created, &e);
    odbox_clock_skew_set(0);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(created, 2);
    for (int i = 0; i < 2; i++) {
        int64_t at = ncol_ts(&x.f, 0, ids[i], "c", "created_date");
        ck_assert_msg(at >= before - SEC_US, "a replayed row was created %lld s before the database's now",
                      (long long)((before - at) / SEC_US));
    }
    /* a since an hour ahead of the database is the future, whatever this
     * process's clock says */
    odbox_clock_skew_set(2 * 3600 * SEC_US);
    rc = odbox_subscription_replay(x.f.r, "c", before + 3600 * SEC_US, NULL, &created, &e);
    odbox_clock_skew_set(0);
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "future"));
    hx_close(&x);
}
END_TEST

/* Moves every row of shard 0's subscription_processes to `at`. */
static void processes_seen_at(hx *x, int64_t at)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE %s SET last_seen = ?", itest_evt(x->f.ev[0], "subscription_processes"));
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    int rc = odbox_stmt_prepare(x->f.c[0], sql, &s, &e);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_timestamp(s, 1, at, &e)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", sql, e.message);
    odbox_stmt_free(&s);
}

static int64_t processes(hx *x)
{
    return itest_count(x->f.c[0], "SELECT COUNT(*) FROM %s", itest_evt(x->f.ev[0], "subscription_processes"));
}

/* Every delivery is a process of its own in subscription_processes (a
 * row per handler and shard), and nothing removed them: the table grew
 * with every start. A purge removes the rows not seen for longer than
 * its window (in the database's time) and counts them; a live process's
 * row stays (its heartbeat keeps it young), and one removed anyway (a
 * window shorter than the heartbeat's period) is written again at its
 * next heartbeat. */
START_TEST(a_purge_removes_the_processes_long_gone)
{
    hx x;
    hx_open(&x, 1);
    hbeh a1, b1, a2;
    hbeh_init(&a1, &x.rec, NULL), hbeh_init(&b1, &x.rec, NULL), hbeh_init(&a2, &x.rec, NULL);
    odbox_handlers *hg = handlers_of(2, (const char *[]){"a", "b"}, (const char *[]){EV_A.name, EV_B.name},
                                     (hbeh *[]){&a1, &b1});
    /* registered, and then beats no more, as a process killed: freed at the
     * end (a clean stop removes its rows) */
    odbox_delivery *gone = other(&x, hg);
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_register(gone, &e) == ODBOX_OK, "%s", e.message);
    hx_deliver(&x, handlers_of(1, (const char *[]){"a"}, (const char *[]){EV_A.name}, (hbeh *[]){&a2}), NULL);
    ck_assert_msg(odbox_delivery_register(x.d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(processes(&x), 3);
    /* two days gone; the live one beats again */
    processes_seen_at(&x, itest_db_now(x.f.c[0]) - 2 * 86400 * SEC_US);
    ck_assert_msg(odbox_delivery_register(x.d, &e) == ODBOX_OK, "%s", e.message);
    odbox_purge_options o = {.older_than_us = 86400 * SEC_US};
    odbox_purge_result *res = NULL;
    size_t n = 0;
    ck_assert_msg(odbox_purge_run(x.f.r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(processes(&x), 1);
    ck_assert_int_eq(res[0].processes, 2);
    odbox_purge_results_free(&res);
    odbox_subscription *s = NULL;
    ck_assert_msg(odbox_subscriptions_list(x.f.r, NULL, 0, &s, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(s[0].name, "a");
    ck_assert_int_eq(s[0].nprocesses, 1); /* the live one */
    ck_assert_int_eq(s[1].nprocesses, 0);
    odbox_subscriptions_free(&s, n);
    /* a window of a second, the live row older: removed, then back */
    usleep(1100 * 1000);
    o.older_than_us = SEC_US;
    ck_assert_msg(odbox_purge_run(x.f.r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res[0].processes, 1);
    odbox_purge_results_free(&res);
    ck_assert_int_eq(processes(&x), 0);
    ck_assert_msg(odbox_delivery_register(x.d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(processes(&x), 1);
    odbox_delivery_free(&gone);
    odbox_handlers_free(&hg);
    hx_close(&x);
}
END_TEST

/* An installation from before subscriptions were data: rows PENDING and
 * an eventlog whose subscription tables are empty. The rows are handled,
 * and the first fan-out records the subscriptions it sees. */
START_TEST(an_existing_installation_keeps_working)
{
    hx x;
    hx_open(&x, 2);
    hbeh a1, a2;
    hbeh_init(&a1, &x.rec, NULL), hbeh_init(&a2, &x.rec, NULL);
    const char *const names[] = {"a"}, *const types[] = {EV_A.name};
    hx_deliver(&x, handlers_of(1, names, types, (hbeh *[]){&a1}), NULL);
    char ids[3][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 3, ids);
    hx_fanout(&x, 1);
    const char *ev = x.f.ev[1];
    odbox_conn *c = x.f.c[1];
    itest_exec(c, "DELETE FROM %s", itest_evt(ev, "subscription_processes"));
    itest_exec(c, "DELETE FROM %s", itest_evt(ev, "subscription_types"));
    itest_exec(c, "DELETE FROM %s", itest_evt(ev, "subscriptions"));
    hx_deliver(&x, handlers_of(1, names, types, (hbeh *[]){&a2}), NULL); /* the upgraded process */
    handle_until_idle(x.d, &x.f, NULL);
    ck_assert_int_eq(rows_of(&x, 1, "a", "SUCCEEDED"), 3);
    emit_n(&x.f, x.exe, 1, &EV_A, 1, ids);
    hx_fanout(&x, 1);
    ck_assert_int_eq(rows_of(&x, 1, "a", "PENDING"), 1);
    odbox_subscription *s = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_subscriptions_list(x.f.r, hx_shard(&x, 1), 0, &s, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(s[0].name, "a");
    ck_assert_int_eq(s[0].nprocesses, 1);
    odbox_subscriptions_free(&s, n);
    hx_close(&x);
}
END_TEST

/* ---- a relay's round at once -------------------------------------------------- */

/* A broker whose batch publish fails every second row, and whose first
 * batch outlasts the round's handler_timeout_ms; its one-row publish is
 * never to be used once a batch is given. */
static atomic_int g_batches, g_rows, g_singles, g_batch_returned, g_closed;

static int fake_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    (void)broker, (void)env, (void)body, (void)len;
    atomic_fetch_add(&g_singles, 1);
    return odbox_error_set(err, ODBOX_EIO, "the one-row publish was used");
}

static void fake_publish_batch(void *broker, size_t n, const odbox_envelope *const *envs, const char *const *bodies,
                               const size_t *lens, int *rcs, odbox_error *errs)
{
    (void)broker;
    int k = atomic_fetch_add(&g_batches, 1);
    atomic_fetch_add(&g_rows, (int)n);
    if (k == 0 || k == 2)
        usleep((k ? 3000 : 900) * 1000); /* past handler_timeout_ms: abandoned */
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_nonnull(strstr(bodies[i], envs[i]->event_id));
        ck_assert_uint_eq(lens[i], strlen(bodies[i]));
        rcs[i] = i % 2 ? odbox_error_set(&errs[i], ODBOX_EIO, "refused by the fake broker") : ODBOX_OK;
    }
    atomic_fetch_add(&g_batch_returned, 1);
}

static void fake_close(void *broker)
{
    (void)broker;
    atomic_fetch_add(&g_closed, 1);
}

static const odbox_relay_ops fake_batch_ops = {ODBOX_RELAY_OPS_VERSION, "fake", fake_publish, fake_close,
                                               fake_publish_batch};

/* A relay whose ops publish a batch gets the round's rows in one call on
 * one worker thread, beside a plain handler's calls; each row's outcome
 * is its own; a batch past handler_timeout_ms is abandoned and all its
 * rows are retried, the abandoned call's rows kept alive until it
 * returns; a relay freed while such a call runs closes its broker when
 * the call returns. */
START_TEST(a_relay_publishes_a_rounds_rows_at_once)
{
    hx x;
    hx_open(&x, 1);
    hbeh plain;
    hbeh_init(&plain, &x.rec, NULL);
    odbox_handlers *h = handlers_of(1, (const char *[]){"plain"}, (const char *[]){EV_A.name}, (hbeh *[]){&plain});
    const char *types[] = {EV_A.name, NULL};
    odbox_relay_config rc = {.name = "relay", .event_types = types};
    odbox_relay *relay = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_relay_add(h, &rc, &fake_batch_ops, NULL, &relay, &e) == ODBOX_OK, "%s", e.message);
    odbox_delivery_config cfg = {.clock = odbox_manual_clock_clock(x.clk), .handler_timeout_ms = 300,
                                 .backoff_base_ms = 1000, .backoff_cap_ms = 1000};
    hx_deliver(&x, h, &cfg);
    emit_n(&x.f, x.exe, 0, &EV_A, 10, NULL);
    fanout_until_idle(x.d, &x.f, NULL);
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.timed_out, 10);
    ck_assert_int_eq(odbox_relay_calls_running(relay), 1); /* the abandoned batch, still running */
    ck_assert_int_eq(odbox_relay_calls_running(NULL), 0);
    ck_assert_int_eq(rows_of(&x, 0, "plain", "SUCCEEDED"), 10);
    ck_assert_int_eq(rows_of(&x, 0, "relay", "FAILED"), 10);
    ck_assert_int_eq(atomic_load(&g_batches), 1);
    int64_t at = 0;
    char *msg = last_error_of(&x, 0, "relay", &at);
    ck_assert_msg(msg && strstr(msg, "handler_timeout_ms"), "last error: %s", msg ? msg : "(none)");
    free(msg);
    /* after the backoff: one call for the ten rows, half refused (a second
     * later, when the subscription's last error may be written again) */
    usleep(1100 * 1000);
    odbox_manual_clock_advance(x.clk, 2 * INT64_C(1000000));
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.succeeded, 5);
    ck_assert_int_eq(r.failed, 5);
    ck_assert_int_eq(atomic_load(&g_batches), 2);
    ck_assert_int_eq(atomic_load(&g_rows), 20);
    ck_assert_int_eq(atomic_load(&g_singles), 0);
    ck_assert_int_eq(rows_of(&x, 0, "relay", "SUCCEEDED"), 5);
    ck_assert_int_eq(rows_of(&x, 0, "relay", "FAILED"), 5);
    /* the broker's answers, the abandoned batch's too once it returned */
    for (int waited = 0; atomic_load(&g_batch_returned) < 2 && waited < 5000; waited += 10)
        usleep(10 * 1000);
    ck_assert_int_eq(atomic_load(&g_batch_returned), 2);
    for (int waited = 0; odbox_relay_calls_running(relay) > 0 && waited < 5000; waited += 10)
        usleep(10 * 1000); /* the call's last steps after the broker's answers */
    ck_assert_int_eq(odbox_relay_calls_running(relay), 0);
    ck_assert_int_eq(odbox_relay_published(relay), 10);
    ck_assert_int_eq(odbox_relay_failed(relay), 10);
    msg = last_error_of(&x, 0, "relay", &at);
    ck_assert_msg(msg && strstr(msg, "refused by the fake broker"), "last error: %s", msg ? msg : "(none)");
    free(msg);
    /* a third round's batch abandoned too: the relay freed after its
     * delivery, while that call still runs, waits for it */
    odbox_manual_clock_advance(x.clk, 2 * INT64_C(1000000));
    ck_assert_int_eq(hx_handle(&x, 0).timed_out, 5);
    hx_close(&x);
    odbox_relay_free(&relay);
    ck_assert_ptr_null(relay);
    ck_assert_int_eq(atomic_load(&g_batch_returned), 2);
    ck_assert_int_eq(atomic_load(&g_closed), 0);
    for (int waited = 0; atomic_load(&g_closed) < 1 && waited < 10000; waited += 10)
        usleep(10 * 1000);
    ck_assert_int_eq(atomic_load(&g_batch_returned), 3);
    ck_assert_int_eq(atomic_load(&g_closed), 1);
}
END_TEST

Suite *subscriptions_suite(void)
{
    Suite *s = suite_create("subscriptions");
    TCase *tc = tcase_create("subscriptions");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_rolling_deploy_reaches_every_subscription);
    tcase_add_test(tc, a_process_takes_only_the_types_its_handler_declares);
    tcase_add_test(tc, a_subscription_outlives_its_process);
    tcase_add_test(tc, a_clean_stop_is_no_longer_live);
    tcase_add_test(tc, a_relay_publishes_a_rounds_rows_at_once);
    tcase_add_test(tc, a_failed_call_is_its_subscriptions_last_error);
    tcase_add_test(tc, a_last_error_in_another_encoding_is_kept_as_utf8);
    tcase_add_test(tc, a_row_json_c_cannot_read_is_its_subscriptions_last_error);
    tcase_add_test(tc, a_retired_subscription_gets_no_new_rows);
    tcase_add_test(tc, a_replay_writes_the_retained_events_once);
    tcase_add_test(tc, a_replay_is_in_the_database_time);
    tcase_add_test(tc, a_replay_of_a_renamed_subscription_skips_its_former_rows);
    tcase_add_test(tc, former_names_of_a_later_deploy_are_recorded);
    tcase_add_test(tc, a_purge_removes_the_processes_long_gone);
    tcase_add_test(tc, an_existing_installation_keeps_working);
    suite_add_tcase(s, tc);
    return s;
}
