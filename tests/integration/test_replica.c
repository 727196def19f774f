/* odbox — the fan-out on a shard with a real streaming standby as its
 * replica (PostgreSQL; tests/db/with-servers.sh --standby or
 * tests/db/start-standby.sh export ODBOX_TEST_PG_REPLICA_DSN): a backlog
 * drains in rounds that each flip a batch (no round re-reads what the one
 * before flipped from a replica that has not replayed it yet), and with
 * replay paused new events are still fanned out, from the primary, until
 * replay resumes and the replica is read again. Assertions count rounds
 * and rows, never time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_handlers.h"

static const odbox_event_type EV_R = {"ReplicaDrained"};

typedef struct rfx {
    dfx f;
    odbox_registry *r;  /* shard 0.0: f's primary, the standby as its replica */
    odbox_shard *s;
    odbox_conn *standby; /* an admin session on the standby (the odbox role is a superuser there too) */
    hrec rec;
    hbeh h;
    odbox_handlers *hs;
    odbox_delivery *d;
} rfx;

/* The standby's DSN; NULL (said loudly, and a failure under CI=true)
 * when there is none. */
static const char *standby_dsn(void)
{
    const char *dsn = getenv("ODBOX_TEST_PG_REPLICA_DSN");
    if (dsn && *dsn)
        return dsn;
    const char *ci = getenv("CI");
    if (ci && !strcmp(ci, "true"))
        ck_abort_msg("replica: ODBOX_TEST_PG_REPLICA_DSN unset under CI=true (run through "
                     "tests/db/with-servers.sh --standby)");
    fprintf(stderr, "\n*** SKIPPED: replica suite: no standby (ODBOX_TEST_PG_REPLICA_DSN unset). Nothing was "
                    "tested against a real replica. Run: tests/db/with-servers.sh --standby -- make check\n\n");
    return NULL;
}

static void replay_resume(odbox_conn *standby)
{
    itest_exec(standby, "SELECT CASE WHEN pg_is_wal_replay_paused() THEN pg_wal_replay_resume() END");
}

/* What the standby says of its replication, for a failure message. */
static void standby_state(rfx *x, char *buf, size_t n)
{
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    const char *v = NULL;
    snprintf(buf, n, "(no answer)");
    if (odbox_stmt_prepare(x->standby,
                           "SELECT CONCAT('receiver ', COALESCE((SELECT status || ' received up to ' || "
                           "CAST(flushed_lsn AS TEXT) FROM pg_stat_wal_receiver), 'not running'), "
                           "', replayed up to ', CAST(pg_last_wal_replay_lsn() AS TEXT), "
                           "', replay paused ', CAST(pg_is_wal_replay_paused() AS TEXT), "
                           "', conflicts ', (SELECT CAST(SUM(confl_lock + confl_snapshot) AS TEXT) "
                           "FROM pg_stat_database_conflicts))",
                           &s, &e) == ODBOX_OK &&
        odbox_stmt_execute(s, &e) == ODBOX_OK && odbox_stmt_fetch(s, &e) == 1 &&
        odbox_stmt_get_text(s, 1, &v, NULL, &e) == ODBOX_OK && v)
        snprintf(buf, n, "%s", v);
    else
        snprintf(buf, n, "(%s)", e.message);
    odbox_stmt_free(&s);
}

/* Waits (at most 60 s: past max_standby_streaming_delay, 30 s by
 * default, after which replay cancels a standby query in its way) until
 * the standby has replayed all the primary wrote so far. */
static void wait_replayed(rfx *x)
{
    char lsn[64];
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    const char *v = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(x->f.c[0], "SELECT CAST(pg_current_wal_insert_lsn() AS TEXT)", &s, &e),
                     ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &v, NULL, &e), ODBOX_OK);
    snprintf(lsn, sizeof lsn, "%s", v);
    odbox_stmt_free(&s);
    for (int i = 0; i < 6000; i++) {
        if (itest_count(x->standby, "SELECT CASE WHEN pg_last_wal_replay_lsn() >= '%s' THEN 1 ELSE 0 END", lsn))
            return;
        usleep(10000);
    }
    char state[sizeof((odbox_error *)0)->message + 256];
    standby_state(x, state, sizeof state);
    ck_abort_msg("replica: the standby did not replay %s in 60 s: %s", lsn, state);
}

/* n undelivered events of EV_R on the primary, in one statement. */
static void backlog(rfx *x, int n)
{
    itest_exec(x->f.c[0],
               "INSERT INTO %s (id, namespace, action_id, action_name, action_params, started_date, "
               "completion_date, model_id, model_type, event_type, payload, event_date, delivered) "
               "SELECT gen_random_uuid(), 'test', gen_random_uuid(), 'Backlog', '{}', now(), now(), "
               "CAST(g AS TEXT), 'dummy', '%s', '{\"n\": 1}', "
               "CAST(now() AT TIME ZONE 'UTC' AS TIMESTAMP) + g * INTERVAL '1 microsecond', FALSE "
               "FROM generate_series(1, %d) AS g",
               etab(&x->f, 0), EV_R.name, n);
}

static int64_t undelivered(rfx *x, odbox_conn *c)
{
    return itest_count(c, "SELECT COUNT(*) FROM %s WHERE delivered = FALSE AND event_type = '%s'", etab(&x->f, 0),
                       EV_R.name);
}

static int rfx_open(rfx *x, const odbox_delivery_config *cfg)
{
    memset(x, 0, sizeof *x);
    const char *dsn = standby_dsn();
    if (!dsn)
        return 0;
    dfx_open(&x->f, 1, 0);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .replica_dsn = dsn, .eventlog = x->f.ev[0]};
    odbox_registry_config rc = {.shards = &sc, .nshards = 1};
    odbox_error e = {0};
    ck_assert_msg(odbox_registry_open(&rc, &x->r, &e) == ODBOX_OK, "%s", e.message);
    x->s = odbox_registry_shard_at(x->r, 0);
    ck_assert_msg(odbox_pool_acquire(odbox_shard_replica(x->s), &x->standby, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(itest_count(x->standby, "SELECT CASE WHEN pg_is_in_recovery() THEN 1 ELSE 0 END"), 1);
    replay_resume(x->standby); /* left paused by a run that failed half-way */
    hrec_init(&x->rec);
    hbeh_init(&x->h, &x->rec, NULL);
    x->hs = handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_R.name}, (hbeh *[]){&x->h});
    ck_assert_msg(odbox_delivery_open(x->r, x->hs, cfg, &x->d, &e) == ODBOX_OK, "%s", e.message);
    wait_replayed(x); /* the eventlog's tables */
    return 1;
}

static void rfx_close(rfx *x)
{
    replay_resume(x->standby);
    odbox_delivery_free(&x->d);
    odbox_handlers_free(&x->hs);
    odbox_pool_release(odbox_shard_replica(x->s), &x->standby);
    odbox_registry_free(&x->r);
    hrec_destroy(&x->rec);
    dfx_close(&x->f);
}

static odbox_delivery_round fanout(rfx *x)
{
    odbox_delivery_round rd;
    odbox_error e = {0};
    round_ok(odbox_delivery_fanout_round(x->d, x->s, &rd, &e), &e);
    return rd;
}

#define BACKLOG 5000
#define BATCH 200

START_TEST(a_backlog_drains_through_the_replica_without_idle_rounds)
{
    rfx x;
    if (!rfx_open(&x, &(odbox_delivery_config){.fanout_batch = BATCH}))
        return;
    backlog(&x, BACKLOG);
    wait_replayed(&x); /* the replica shows the whole backlog */
    ck_assert_int_eq(undelivered(&x, x.standby), BACKLOG);
    size_t delivered = 0;
    int rounds = 0, replica_rounds = 0;
    for (;;) {
        odbox_delivery_round rd = fanout(&x);
        rounds++;
        replica_rounds += rd.from_replica;
        if (rd.read == 0)
            break;
        /* the job loop sleeps fanout_poll_ms after a round that flips
         * nothing: each round with events must flip its batch */
        ck_assert_msg(rd.delivered > 0, "round %d read %zu events from the %s and flipped none (%zu flipped before)",
                      rounds, rd.read, rd.from_replica ? "replica" : "primary", delivered);
        delivered += rd.delivered;
        ck_assert_int_le(rounds, BACKLOG / BATCH + 3);
    }
    ck_assert_uint_eq(delivered, BACKLOG);
    ck_assert_int_le(rounds, BACKLOG / BATCH + 2);
    ck_assert_int_ge(replica_rounds, 1); /* the first: the replica had replayed the backlog */
    ck_assert_int_eq(undelivered(&x, x.f.c[0]), 0);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), BACKLOG);
    /* replayed, the replica is read again and shows nothing left */
    wait_replayed(&x);
    odbox_delivery_round rd = fanout(&x);
    ck_assert_int_eq(rd.from_replica, 1);
    ck_assert_uint_eq(rd.read, 0);
    rfx_close(&x);
}
END_TEST

/* Runs rounds until n events were flipped (at most max rounds); the
 * rounds it took, each one's source ORed into *sources (1 replica, 2
 * primary). */
static int fan_out_n(rfx *x, size_t n, int max, int *sources)
{
    size_t got = 0;
    int rounds = 0;
    *sources = 0;
    while (got < n && rounds < max) {
        odbox_delivery_round rd = fanout(x);
        rounds++;
        got += rd.delivered;
        if (rd.delivered)
            *sources |= rd.from_replica ? 1 : 2;
    }
    ck_assert_msg(got == n, "%zu of %zu events fanned out in %d rounds", got, n, rounds);
    return rounds;
}

START_TEST(paused_replay_falls_back_to_the_primary_and_back)
{
    rfx x;
    if (!rfx_open(&x, NULL))
        return;
    int sources = 0;
    /* replaying: the replica is read */
    backlog(&x, 10);
    wait_replayed(&x);
    ck_assert_int_eq(fan_out_n(&x, 10, 1, &sources), 1);
    ck_assert_int_eq(sources, 1);
    /* replay paused: the replica shows none of the new events, which the
     * primary fans out at once */
    wait_replayed(&x);
    ck_assert_int_eq(undelivered(&x, x.standby), 0);
    itest_exec(x.standby, "SELECT pg_wal_replay_pause()");
    for (int i = 0; i < 3000 && !itest_count(x.standby, "SELECT CASE WHEN pg_get_wal_replay_pause_state() = "
                                                        "'paused' THEN 1 ELSE 0 END");
         i++)
        usleep(10000);
    backlog(&x, 10);
    ck_assert_int_eq(undelivered(&x, x.standby), 0);
    ck_assert_int_le(fan_out_n(&x, 10, 3, &sources), 2);
    ck_assert_int_eq(sources, 2);
    ck_assert_int_eq(undelivered(&x, x.f.c[0]), 0);
    ck_assert_int_eq(undelivered(&x, x.standby), 0); /* still not replayed */
    /* and again, with no flip of the fan-out's own to wait for */
    backlog(&x, 10);
    ck_assert_int_le(fan_out_n(&x, 10, 3, &sources), 2);
    ck_assert_int_eq(sources, 2);
    odbox_delivery_round rd = fanout(&x);
    ck_assert_int_eq(rd.from_replica, 0);
    ck_assert_uint_eq(rd.read, 0);
    /* replay resumed and caught up: the replica is read again */
    replay_resume(x.standby);
    backlog(&x, 10);
    wait_replayed(&x);
    ck_assert_int_eq(fan_out_n(&x, 10, 1, &sources), 1);
    ck_assert_int_eq(sources, 1);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 40);
    rfx_close(&x);
}
END_TEST

Suite *replica_suite(void)
{
    Suite *s = suite_create("replica");
    TCase *tc = tcase_create("standby");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_backlog_drains_through_the_replica_without_idle_rounds);
    tcase_add_test(tc, paused_replay_falls_back_to_the_primary_and_back);
    suite_add_tcase(s, tc);
    return s;
}
