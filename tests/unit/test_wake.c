/* odbox — unit tests for wake-up signals without a server (src/wake.c):
 * channel names, a shard's notify switches, in-process signals and their
 * subscribers, and what a wake refuses. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "registry_internal.h"
#include "wake.h"
#include "odbox/dsn.h"
#include "unit.h"

#define PG "postgresql://u:s3cr3t-PW@db.invalid/app"

START_TEST(channel_names)
{
    char ch[ODBOX_NAME_MAX];
    ck_assert_int_eq(odbox_wake_channel("eventlog", ODBOX_WAKE_EVENTS, ch, NULL), ODBOX_OK);
    ck_assert_str_eq(ch, "eventlog_events");
    ck_assert_int_eq(odbox_wake_channel("ev_app2", ODBOX_WAKE_NOTIFICATIONS, ch, NULL), ODBOX_OK);
    ck_assert_str_eq(ch, "ev_app2_notifications");
    ck_assert_str_eq(odbox_wake_signal_name(ODBOX_WAKE_EVENTS), "events");
    ck_assert_ptr_null(odbox_wake_signal_name((odbox_wake_signal)2));

    /* the longest that fits as is: 49 + "_notifications" = 63 */
    char ev[ODBOX_NAME_MAX];
    memset(ev, 'a', 49);
    ev[49] = '\0';
    ck_assert_int_eq(odbox_wake_channel(ev, ODBOX_WAKE_NOTIFICATIONS, ch, NULL), ODBOX_OK);
    ck_assert_uint_eq(strlen(ch), 63);
    ck_assert(!strncmp(ch, ev, 49));

    /* longer: cut and hashed, so that eventlogs that differ only past the
     * cut get different channels, each a valid name of at most 63 */
    char ev2[ODBOX_NAME_MAX], ch2[ODBOX_NAME_MAX];
    memset(ev, 'a', 63);
    ev[63] = '\0';
    memcpy(ev2, ev, sizeof ev);
    ev2[62] = 'b';
    ck_assert_int_eq(odbox_wake_channel(ev, ODBOX_WAKE_NOTIFICATIONS, ch, NULL), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_channel(ev2, ODBOX_WAKE_NOTIFICATIONS, ch2, NULL), ODBOX_OK);
    ck_assert_uint_eq(strlen(ch), 63);
    ck_assert_str_ne(ch, ch2);
    ck_assert(odbox_name_is_valid(ch) && odbox_name_is_valid(ch2));
    ck_assert_str_eq(ch + 63 - strlen("_notifications"), "_notifications");
    /* the same eventlog always gives the same channel (writer and worker
     * are different processes) */
    ck_assert_int_eq(odbox_wake_channel(ev2, ODBOX_WAKE_NOTIFICATIONS, ch, NULL), ODBOX_OK);
    ck_assert_str_eq(ch, ch2);

    odbox_error e;
    ck_assert_int_eq(odbox_wake_channel("Ev-Log", ODBOX_WAKE_EVENTS, ch, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "not a valid name"));
    ck_assert_int_eq(odbox_wake_channel(NULL, ODBOX_WAKE_EVENTS, ch, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_wake_channel("eventlog", (odbox_wake_signal)7, ch, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown signal"));
}
END_TEST

static odbox_registry *open_registry(const char *dsn)
{
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open_dsn(dsn, &r, &e) == ODBOX_OK, "%s", e.message);
    return r;
}

/* The primary DSN's notify= and notify_interval_ms= reach the shard. */
START_TEST(shard_notify_switches)
{
    static const struct {
        const char *dsn;
        int interval;
    } cases[] = {
        {PG, ODBOX_NOTIFY_INTERVAL_MS},
        {PG "?notify=off", 0},
        {PG "?notify=OFF&notify_interval_ms=50", 0},
        {PG "?notify=on&notify_interval_ms=50", 50},
        {"Driver=x;Server=h;notify_interval_ms=7", 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        odbox_registry *r = open_registry(cases[i].dsn);
        odbox_shard *s = odbox_registry_default_shard(r);
        ck_assert_int_eq(odbox_shard_notify_interval_ms(s), cases[i].interval);
        ck_assert_str_eq(odbox_shard_primary_dsn(s), cases[i].dsn);
        odbox_registry_free(&r);
    }
    /* a replica's notify= counts for nothing: replicas are neither
     * notified nor listened to */
    odbox_shard_config sc = {.primary_dsn = PG, .replica_dsn = PG "?notify=off"};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, NULL), ODBOX_OK);
    ck_assert_int_eq(odbox_shard_notify_interval_ms(odbox_registry_default_shard(r)), ODBOX_NOTIFY_INTERVAL_MS);
    odbox_registry_free(&r);
}
END_TEST

typedef struct calls {
    int n;
    odbox_shard_id shard[8];
    odbox_wake_signal sig[8];
} calls;

static void record(void *ud, odbox_shard_id shard, odbox_wake_signal sig)
{
    calls *c = ud;
    if (c->n < 8) {
        c->shard[c->n] = shard;
        c->sig[c->n] = sig;
    }
    c->n++;
}

static odbox_registry *two_shards(void)
{
    odbox_shard_config sc[2] = {{.id = {0, 0}, .primary_dsn = PG}, {.id = {3, 1}, .primary_dsn = PG "?eventlog=ev2"}};
    odbox_registry_config cfg = {.shards = sc, .nshards = 2};
    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, NULL), ODBOX_OK);
    return r;
}

START_TEST(signals_in_process)
{
    odbox_registry *r = two_shards();
    odbox_wake *w = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_wake_open(r, NULL, &w, &e), ODBOX_OK);
    calls ev = {0}, nt = {0};
    ck_assert_int_eq(odbox_wake_subscribe(w, ODBOX_WAKE_EVENTS, record, &ev, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_subscribe(w, ODBOX_WAKE_NOTIFICATIONS, record, &nt, &e), ODBOX_OK);

    odbox_shard_id s31 = {3, 1}, s00 = {0, 0};
    ck_assert_int_eq(odbox_wake_take(w, s31, ODBOX_WAKE_EVENTS), 0);
    ck_assert_int_eq(odbox_wake_raise(w, s31, ODBOX_WAKE_EVENTS, 0), ODBOX_OK);
    ck_assert_int_eq(ev.n, 1);
    ck_assert_int_eq(nt.n, 0);
    ck_assert(ev.shard[0].group == 3 && ev.shard[0].member == 1 && ev.sig[0] == ODBOX_WAKE_EVENTS);
    /* the flag is per shard and signal, and a take clears it */
    ck_assert_int_eq(odbox_wake_take(w, s00, ODBOX_WAKE_EVENTS), 0);
    ck_assert_int_eq(odbox_wake_take(w, s31, ODBOX_WAKE_NOTIFICATIONS), 0);
    ck_assert_int_eq(odbox_wake_take(w, s31, ODBOX_WAKE_EVENTS), 1);
    ck_assert_int_eq(odbox_wake_take(w, s31, ODBOX_WAKE_EVENTS), 0);

    /* a commit listener: events raise EVENTS, a sentinel-only commit nothing */
    odbox_wake_on_commit(w, s00, 0);
    ck_assert_int_eq(ev.n, 1);
    odbox_wake_on_commit(w, s00, 3);
    ck_assert_int_eq(ev.n, 2);
    ck_assert(ev.shard[1].group == 0 && ev.shard[1].member == 0);
    ck_assert_int_eq(odbox_wake_take(w, s00, ODBOX_WAKE_EVENTS), 1);

    ck_assert_int_eq(odbox_wake_raise(w, s00, ODBOX_WAKE_NOTIFICATIONS, 0), ODBOX_OK);
    ck_assert_int_eq(nt.n, 1);
    ck_assert(nt.sig[0] == ODBOX_WAKE_NOTIFICATIONS);

    /* unsubscribed: not called again, and once only */
    ck_assert_int_eq(odbox_wake_unsubscribe(w, ODBOX_WAKE_EVENTS, record, &ev), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_unsubscribe(w, ODBOX_WAKE_EVENTS, record, &ev), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_wake_raise(w, s00, ODBOX_WAKE_EVENTS, 0), ODBOX_OK);
    ck_assert_int_eq(ev.n, 2);
    ck_assert_int_eq(odbox_wake_take(w, s00, ODBOX_WAKE_EVENTS), 1); /* the flag is set all the same */
    ck_assert_int_eq(nt.n, 1);
    odbox_wake_free(&w);
    ck_assert_ptr_null(w);
    odbox_wake_free(&w);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(wake_refuses_bad_input)
{
    odbox_registry *r = two_shards();
    odbox_wake *w = (odbox_wake *)1;
    odbox_error e;
    ck_assert_int_eq(odbox_wake_open(NULL, NULL, &w, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(w);
    ck_assert_int_eq(odbox_wake_open(r, NULL, NULL, &e), ODBOX_EINVAL);
    static const odbox_wake_config bad[] = {
        {.listen = 1}, {.connect_timeout_ms = -1}, {.backoff_min_ms = -5}, {.backoff_min_ms = 200, .backoff_max_ms = 100},
    };
    static const char *const why[] = {"listen is 0 (on) or -1 (off)", "must not be negative", "must not be negative",
                                      "below backoff_min_ms"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(odbox_wake_open(r, &bad[i], &w, &e), ODBOX_EINVAL);
        ck_assert_ptr_null(w);
        ck_assert_msg(strstr(e.message, why[i]), "%zu: %s", i, e.message);
    }
    ck_assert_int_eq(odbox_wake_open(r, NULL, &w, &e), ODBOX_OK);
    calls c = {0};
    ck_assert_int_eq(odbox_wake_subscribe(w, ODBOX_WAKE_EVENTS, NULL, &c, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_wake_subscribe(w, (odbox_wake_signal)5, record, &c, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_wake_subscribe(NULL, ODBOX_WAKE_EVENTS, record, &c, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_wake_subscribe(w, ODBOX_WAKE_EVENTS, record, &c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_subscribe(w, ODBOX_WAKE_EVENTS, record, &c, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "subscribed to events already"));
    ck_assert_int_eq(odbox_wake_unsubscribe(w, ODBOX_WAKE_NOTIFICATIONS, record, &c), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_wake_unsubscribe(NULL, ODBOX_WAKE_EVENTS, record, &c), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_wake_raise(w, (odbox_shard_id){0, 1}, ODBOX_WAKE_EVENTS, 0), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_wake_raise(w, (odbox_shard_id){0, 0}, (odbox_wake_signal)2, 0), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_wake_raise(NULL, (odbox_shard_id){0, 0}, ODBOX_WAKE_EVENTS, 0), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_wake_take(w, (odbox_shard_id){9, 9}, ODBOX_WAKE_EVENTS), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_wake_take(w, (odbox_shard_id){0, 0}, (odbox_wake_signal)-1), ODBOX_EINVAL);
    ck_assert_int_eq(c.n, 0);
    ck_assert_int_eq(odbox_wake_listening(w, (odbox_shard_id){0, 0}), 0);
    ck_assert_int_eq(odbox_wake_listening(NULL, (odbox_shard_id){0, 0}), 0);
    ck_assert_int_eq(odbox_wake_start(NULL, &e), ODBOX_EINVAL);
    odbox_wake_stop(NULL);
    odbox_wake_free(&w);
    odbox_registry_free(&r);
}
END_TEST

/* Turned off, a wake starts no listener and never connects (the host
 * does not exist, and starting is immediate). */
START_TEST(listen_off_starts_nothing)
{
    odbox_shard_config sc[2] = {{.id = {0, 0}, .primary_dsn = PG}, {.id = {0, 1}, .primary_dsn = PG "?notify=off"}};
    odbox_registry_config rc = {.shards = sc, .nshards = 2};
    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open(&rc, &r, NULL), ODBOX_OK);
    odbox_wake_config cfg = {.listen = -1};
    odbox_wake *w = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_wake_open(r, &cfg, &w, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_start(w, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_wake_start(w, &e), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_wake_listening(w, (odbox_shard_id){0, 0}), 0);
    odbox_wake_stop(w);
    odbox_wake_stop(w);
    odbox_wake_free(&w);
    odbox_registry_free(&r);
}
END_TEST

Suite *wake_suite(void)
{
    Suite *s = suite_create("wake");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, channel_names);
    tcase_add_test(tc, shard_notify_switches);
    tcase_add_test(tc, signals_in_process);
    tcase_add_test(tc, wake_refuses_bad_input);
    tcase_add_test(tc, listen_off_starts_nothing);
    suite_add_tcase(s, tc);
    return s;
}
