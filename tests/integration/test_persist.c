/* odbox — integration tests of how the executor writes a shard: one
 * statement on PostgreSQL (which plans, and that the outcome is the same
 * as a transaction's), statements split at the parameter limit, and
 * connections lost before and after the commit was sent
 * (ODBOX_EINDOUBT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "actions.h"

/* ---- a shard in one statement ----------------------------------------------
 * Where the dialect joins writes (PostgreSQL), a shard whose plan updates
 * at most one row is written by one statement in autocommit, the other
 * rows and the events depending on that update; elsewhere, and for larger
 * updates, in a transaction. The outcome must not differ. */

static odbox_model *typed_dummy(const char *name)
{
    odbox_model *m = dfx_dummy(NULL, name, 9007199254740993LL);
    odbox_error e;
    ck_assert_int_eq(odbox_model_set_int64(m, "reward_points", -5, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_double(m, "ratio", 1234.5678, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m, "flag", 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", "{\"nick\": [\"a\", \"b\"]}", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_timestamp(m, "seen_at", 1767225600123456LL, &e), ODBOX_OK);
    return m;
}

static odbox_model *new_tag(const char *label)
{
    odbox_model *t = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(t, "label", label, &e), ODBOX_OK);
    return t;
}

/* Seeds a dummy and moves it to version 2 behind the back of a copy read
 * at version 1, which the caller gets in *stale. */
static odbox_model *seed_moved(dfx *f, odbox_executor *exe, odbox_model **stale)
{
    odbox_model *x = dfx_dummy(NULL, "x", 1);
    script seed = {.add = {x}, .nadd = 1};
    odbox_result res;
    execute_script_ok(exe, "Seed", &seed, NULL, &res);
    odbox_result_clear(&res);
    *stale = find_dummy(f, odbox_model_id(x));
    odbox_model *other = find_dummy(f, odbox_model_id(x));
    ck_assert_int_eq(odbox_model_set_int64(other, "amount", 2, NULL), ODBOX_OK);
    script bump = {.upd = {other}, .nupd = 1};
    execute_script_ok(exe, "Elsewhere", &bump, NULL, &res);
    odbox_result_clear(&res);
    odbox_model_free(&other);
    return x;
}

/* Adds two dummies and a tag, updates upd, and emits on both dummies and
 * on upd: one update beside every other kind of row. */
static script beside(const odbox_model *n1, const odbox_model *n2, const odbox_model *tag, const odbox_model *upd)
{
    return (script){.add = {n1, n2, tag},
                    .nadd = 3,
                    .upd = {upd},
                    .nupd = 1,
                    .emit = {{n1, &EV_CREATED, "{\"k\": 1}"}, {n2, &EV_CREATED, "{}"}, {upd, &EV_CHANGED, "{}"}},
                    .nemit = 3};
}

START_TEST(one_update_beside_adds_and_events_is_all_or_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *stale = NULL, *x = seed_moved(&f, exe, &stale);
    const char *xid = odbox_model_id(x);
    int64_t events0 = dfx_events(&f, 0);
    odbox_model *n1 = typed_dummy("n1"), *n2 = dfx_dummy(NULL, "n2", 0), *tag1 = new_tag("t1");
    ck_assert_int_eq(odbox_model_set_int64(stale, "amount", 99, NULL), ODBOX_OK);
    script s = beside(n1, n2, tag1, stale);
    odbox_result res;
    odbox_error e;
    /* stale on both attempts (the default: one retry): nothing of it lands */
    int rc = execute_script(exe, "StaleBeside", &s, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_ESTALE, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, xid) != NULL, "the message names the stale row: %s", e.message);
    ck_assert_int_eq(s.calls, 2);
    ck_assert_int_eq(res.retries[0], 1);
    ck_assert_int_eq(res.ncommitted, 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), 0);
    ck_assert_int_eq(dfx_events(&f, 0), events0);
    ck_assert_int_eq(amount_of(&f, xid), 2);
    odbox_result_clear(&res);

    /* read again: the same plan lands whole, every value as staged */
    odbox_model *cur = find_dummy(&f, xid);
    int64_t before_upd = odbox_model_updated(cur);
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 3, NULL), ODBOX_OK);
    script ok = beside(n1, n2, tag1, cur);
    int64_t t0 = dfx_now_us();
    execute_script_ok(exe, "FreshBeside", &ok, NULL, &res);
    int64_t t1 = dfx_now_us();
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 3);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), 1);
    odbox_model *const staged[] = {n1, n2};
    for (int i = 0; i < 2; i++) {
        odbox_model *got = find_dummy(&f, odbox_model_id(staged[i]));
        dfx_assert_same(staged[i], got);
        odbox_model_free(&got);
    }
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM tags WHERE id = '%s' AND label = 't1'",
                                 odbox_model_id(tag1)),
                     1);
    odbox_model *after = find_dummy(&f, xid);
    ck_assert_int_eq(odbox_model_version(after), 3);
    ck_assert_int_eq(amount_of(&f, xid), 3);
    ck_assert(odbox_model_updated(after) > before_upd && odbox_model_updated(after) <= t1 + SLACK_US);
    evrow rows[8];
    ck_assert_int_eq(read_events(&f, 0, rows, 8), (int)events0 + 3);
    int mine = 0;
    for (int i = 0; i < (int)events0 + 3; i++)
        if (!strcmp(rows[i].action_id, res.action_id))
            rows[mine++] = rows[i];
    ck_assert_int_eq(mine, 3);
    check_rows(rows, 3, res.action_id, "FreshBeside", "{}", t0, t1);
    assert_event(&rows[0], cur, "DummyChanged", "{}");
    odbox_result_clear(&res);
    odbox_model_free(&after);
    odbox_model_free(&cur);
    odbox_model_free(&n1);
    odbox_model_free(&n2);
    odbox_model_free(&tag1);
    odbox_model_free(&stale);
    odbox_model_free(&x);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(unique_conflict_beside_an_update_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *x = dfx_dummy(NULL, "x", 1), *y = dfx_dummy(NULL, "y", 1);
    script seed = {.add = {x, y}, .nadd = 2};
    odbox_result res;
    execute_script_ok(exe, "Seed", &seed, NULL, &res);
    odbox_result_clear(&res);
    odbox_model *cur = find_dummy(&f, odbox_model_id(x));
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 5, NULL), ODBOX_OK);
    odbox_model *dup = dfx_dummy(odbox_model_id(y), "y again", 7);
    script s = {.add = {dup}, .nadd = 1, .upd = {cur}, .nupd = 1, .emit = {{cur, &EV_CHANGED, "{}"}}, .nemit = 1};
    odbox_error e;
    int rc = execute_script(exe, "Duplicate", &s, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_EUNIQUE, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(s.calls, 1);
    odbox_model *after = find_dummy(&f, odbox_model_id(x));
    ck_assert_int_eq(odbox_model_version(after), 1);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(x)), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&after);
    odbox_model_free(&dup);
    odbox_model_free(&cur);
    odbox_model_free(&x);
    odbox_model_free(&y);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

static int noop_hook(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
{
    (void)ud, (void)at, (void)shard, (void)conn;
    return 0;
}

/* Every write to dummies and to the events table records its statement's
 * start and its transaction in the table stamps, by trigger fn. */
static void stamps_on(dfx *f, char stamps[64], char fn[64])
{
    itest_name(stamps, 64, "stamps");
    itest_name(fn, 64, "stamp");
    itest_exec(f->c[0], "CREATE TABLE %s (tbl TEXT, ts TIMESTAMPTZ, tx BIGINT)", stamps);
    itest_exec(f->c[0],
               "CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO %s VALUES "
               "(TG_TABLE_NAME, statement_timestamp(), txid_current()); RETURN NULL; END $$",
               fn, stamps);
    itest_exec(f->c[0], "CREATE TRIGGER stamp_dummies AFTER INSERT OR UPDATE ON dummies FOR EACH ROW EXECUTE FUNCTION %s()",
               fn);
    itest_exec(f->c[0], "CREATE TRIGGER stamp_events AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()",
               itest_evt(f->ev[0], "events"), fn);
}

static void stamps_off(dfx *f, const char *stamps, const char *fn)
{
    itest_exec(f->c[0], "DROP TRIGGER stamp_events ON %s", itest_evt(f->ev[0], "events"));
    itest_exec(f->c[0], "DROP TRIGGER stamp_dummies ON dummies");
    itest_exec(f->c[0], "DROP FUNCTION %s()", fn);
    itest_exec(f->c[0], "DROP TABLE %s", stamps);
}

/* The last execution wrote rows rows with stmts statements in one
 * transaction (see stamps_on). */
static void assert_written_by(dfx *f, const char *stamps, int64_t rows, int64_t stmts)
{
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(*) FROM %s", stamps), rows);
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(DISTINCT ts) FROM %s", stamps), stmts);
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(DISTINCT tx) FROM %s", stamps), 1);
    itest_exec(f->c[0], "DELETE FROM %s", stamps);
}

START_TEST(postgresql_writes_such_a_shard_in_one_statement)
{
    if (strcmp(itest_dialect(), "pg"))
        return; /* no data-modifying WITH: always a transaction, tested above */
    dfx f;
    dfx_open(&f, 1, 0);
    char stamps[64], fn[64];
    stamps_on(&f, stamps, fn);
    odbox_executor *exe = open_exe(&f);
    odbox_model *a = dfx_dummy(NULL, "a", 1), *b = dfx_dummy(NULL, "b", 1);
    odbox_result res;
    /* inserts and events, no update: one statement */
    script add = {.add = {a, b}, .nadd = 2, .emit = {{a, &EV_CREATED, "{}"}, {b, &EV_CREATED, "{}"}}, .nemit = 2};
    execute_script_ok(exe, "AddTwo", &add, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 4, 1);
    /* one update, an insert and two events: one statement */
    odbox_model *ca = find_dummy(&f, odbox_model_id(a)), *c = dfx_dummy(NULL, "c", 1);
    script one = {.add = {c}, .nadd = 1, .upd = {ca}, .nupd = 1,
                  .emit = {{ca, &EV_CHANGED, "{}"}, {c, &EV_CREATED, "{}"}}, .nemit = 2};
    execute_script_ok(exe, "UpdateOne", &one, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 4, 1);
    /* two updates: a transaction of several statements */
    odbox_model *ca2 = find_dummy(&f, odbox_model_id(a)), *cb = find_dummy(&f, odbox_model_id(b));
    script two = {.upd = {ca2, cb}, .nupd = 2, .emit = {{ca2, &EV_CHANGED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "UpdateTwo", &two, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 3, 2);
    /* a hook needs the transaction it runs in */
    odbox_executor_set_hook(exe, noop_hook, NULL);
    odbox_model *d = dfx_dummy(NULL, "d", 1);
    script hooked = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "Hooked", &hooked, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 2, 2);
    odbox_executor_set_hook(exe, NULL, NULL);
    stamps_off(&f, stamps, fn);
    odbox_model *all[] = {a, b, c, d, ca, ca2, cb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        odbox_model_free(&all[i]);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- connections lost at the commit --------------------------------------- */

/* The default rules and 3 retries for ODBOX_ECONNLOST (rule 1). */
static void retry_lost_connections(odbox_exec_config *cfg)
{
    odbox_exec_config_default(cfg);
    cfg->retries[cfg->nretries++] = (odbox_retry_rule){ODBOX_ECONNLOST, 3, 0};
}

static int committed(dfx *f, const char *action_id)
{
    int yes = -1;
    odbox_error e;
    int rc = odbox_action_committed(f->r, (odbox_shard_id){0, 0}, action_id, &yes, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    return yes;
}

/* The client cannot know whether a COMMIT whose connection was lost
 * committed: ODBOX_EINDOUBT, never retried (a retry could write the
 * action twice), and odbox_action_committed tells. */
START_TEST(commit_lost_is_in_doubt_and_never_retried)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config cfg;
    retry_lost_connections(&cfg);
    odbox_executor_set_hook(exe, kill_before_commit, &f);
    odbox_model *d = dfx_dummy(NULL, "lost", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    odbox_error e;
    int rc = execute_script(exe, "LostCommit", &s, NULL, &cfg, &res, &e);
    ck_assert_msg(rc == ODBOX_EINDOUBT, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(e.code, ODBOX_EINDOUBT);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(res.retries[1], 0);
    ck_assert_int_eq(res.ncommitted, 0);
    ck_assert(res.has_failed_shard && res.failed_shard.group == 0 && res.failed_shard.member == 0);
    ck_assert_msg(strstr(e.message, "IN DOUBT") && strstr(e.message, res.action_id) && strstr(e.message, "0.0"),
                  "message: %s", e.message);
    /* the session died before its COMMIT: it did not commit */
    ck_assert_int_eq(committed(&f, res.action_id), 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    odbox_result_clear(&res);

    /* the pool replaces the dead connection; a commit is found */
    odbox_executor_set_hook(exe, NULL, NULL);
    execute_script_ok(exe, "Landed", &s, NULL, &res);
    ck_assert_int_eq(committed(&f, res.action_id), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    odbox_result_clear(&res);

    /* no rule may retry what has or may have committed */
    const int never[] = {ODBOX_EINDOUBT, ODBOX_EPARTIAL};
    for (int i = 0; i < 2; i++) {
        odbox_exec_config bad;
        odbox_exec_config_default(&bad);
        bad.retries[bad.nretries++] = (odbox_retry_rule){never[i], 1, 0};
        script none = {0};
        rc = execute_script(exe, "BadRule", &none, NULL, &bad, &res, &e);
        ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, odbox_errname(never[i])), "%s: %s",
                      odbox_errname(rc), e.message);
        ck_assert_int_eq(none.calls, 0);
        odbox_result_clear(&res);
    }

    /* odbox_action_committed's own errors */
    int yes = 7;
    char v4[37];
    odbox_uuid_v4(v4);
    ck_assert_int_eq(odbox_action_committed(NULL, (odbox_shard_id){0, 0}, v4, &yes, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){0, 0}, v4, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){0, 0}, "not-a-uuid", &yes, &e), ODBOX_EINVAL);
    ck_assert_int_eq(yes, 0);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){0, 0}, NULL, &yes, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){9, 9}, v4, &yes, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "9.9"), "message: %s", e.message);
    ck_assert_int_eq(committed(&f, v4), 0);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A connection that died while idle in the pool: where the shard takes a
 * transaction, its BEGIN meets the lost session, which is replaced under
 * it and the action lands on its first attempt; where it is one
 * statement in autocommit (PostgreSQL), that statement was the commit:
 * in doubt, never sent again; through libpq, whose prepare goes to the
 * server first, the prepare meets it and the write lands once. */
START_TEST(connection_lost_while_idle)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config cfg;
    retry_lost_connections(&cfg);
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(f.r));
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
    int64_t id = itest_session_id(c);
    int one_statement = odbox_conn_dialect(c)->join_writes_sql != NULL;
    odbox_pool_release(pool, &c);
    itest_kill_session(f.c[0], id); /* well within the pool's 1 s without a ping */
    odbox_model *d = dfx_dummy(NULL, "idle", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    int rc = execute_script(exe, "AfterIdle", &s, NULL, &cfg, &res, &e);
    if (one_statement && itest_libpq()) {
        /* libpq prepares on the server: the prepare met the lost session,
         * which was replaced before the write was sent, once */
        ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(committed(&f, res.action_id), 1);
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    } else if (one_statement) {
        ck_assert_msg(rc == ODBOX_EINDOUBT, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(committed(&f, res.action_id), 0);
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    } else {
        ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(res.retries[1], 0);
        ck_assert_int_eq(committed(&f, res.action_id), 1);
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
        ck_assert_int_eq(dfx_events(&f, 0), 1);
    }
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A one-statement write is its own commit: when its row count is not the
 * one sent (here a trigger drops one event row), what it committed is
 * unknown. ODBOX_EINDOUBT, never retried, even under a rule for
 * ODBOX_EDB (which would write the action twice). */
START_TEST(unexpected_count_of_a_one_statement_write_is_in_doubt)
{
    dfx f;
    dfx_open(&f, 1, 0);
    if (!odbox_conn_dialect(f.c[0])->join_writes_sql) {
        /* MySQL/MariaDB write in a transaction: nothing commits unless all of it does */
        dfx_close(&f);
        return;
    }
    itest_exec(f.c[0],
               "CREATE FUNCTION %s.drop_poison() RETURNS trigger LANGUAGE plpgsql AS "
               "$$BEGIN IF NEW.event_type = 'PoisonEvent' THEN RETURN NULL; END IF; RETURN NEW; END$$",
               f.ev[0]);
    itest_exec(f.c[0], "CREATE TRIGGER drop_poison BEFORE INSERT ON %s.events FOR EACH ROW EXECUTE FUNCTION %s.drop_poison()",
               f.ev[0], f.ev[0]);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    cfg.retries[cfg.nretries++] = (odbox_retry_rule){ODBOX_EDB, 3, 0};
    odbox_model *d = dfx_dummy(NULL, "counted", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}, {d, &EV_POISON, "{}"}}, .nemit = 2};
    odbox_result res;
    odbox_error e;
    int rc = execute_script(exe, "Miscounted", &s, NULL, &cfg, &res, &e);
    ck_assert_msg(rc == ODBOX_EINDOUBT && e.code == ODBOX_EINDOUBT, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, "IN DOUBT") && strstr(e.message, res.action_id), "message: %s", e.message);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(res.retries[1], 0);
    /* it did commit, once: the domain row and the event the trigger let in */
    ck_assert_int_eq(committed(&f, res.action_id), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- plans larger than one statement -------------------------------------- */

typedef struct bulk {
    odbox_model **m;
    int n, emit, update;
    odbox_model *beside; /* updated before the n rows are staged */
} bulk;

static int bulk_perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    bulk *b = user;
    json_object *p = json_object_new_object();
    int rc = b->beside ? odbox_plan_update(plan, b->beside, NULL, err) : 0;
    for (int i = 0; i < b->n && !rc; i++) {
        rc = b->update ? odbox_plan_update(plan, b->m[i], NULL, err) : odbox_plan_add(plan, b->m[i], err);
        if (!rc && b->emit)
            rc = odbox_plan_emit(plan, b->m[i], &EV_CREATED, p, err);
    }
    json_object_put(p);
    return rc;
}

static odbox_model **bulk_dummies(int n)
{
    odbox_model **d = calloc((size_t)n, sizeof *d);
    ck_assert_ptr_nonnull(d);
    for (int i = 0; i < n; i++)
        d[i] = dfx_dummy(NULL, "bulk", i);
    return d;
}

static void bulk_free(odbox_model **m, int n)
{
    for (int i = 0; i < n; i++)
        odbox_model_free(&m[i]);
    free(m);
}

/* Plans bigger than a few hundred rows: the headers promise one multi-row
 * INSERT per table and shard and state no limit (Ekbatan has none). */
START_TEST(many_events_in_one_action)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    const int sizes[] = {600, 2100};
    int64_t total = 0;
    for (size_t k = 0; k < 2; k++) {
        int n = sizes[k];
        odbox_model **d = bulk_dummies(n);
        bulk b = {.m = d, .n = n, .emit = 1};
        odbox_action a = {.name = "BulkEmit", .perform = bulk_perform, .user = &b};
        odbox_error e;
        int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
        ck_assert_msg(rc == ODBOX_OK, "%d models with one event each: %s: %s", n, odbox_errname(rc), e.message);
        total += n;
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), total);
        ck_assert_int_eq(dfx_events(&f, 0), total);
        bulk_free(d, n);
    }
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(many_rows_in_one_plan)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_error e;
    /* 700 models added, then all 700 updated, in one plan each */
    enum { ND = 700, NT = 4200 };
    odbox_model **d = bulk_dummies(ND);
    bulk b = {.m = d, .n = ND};
    odbox_action a = {.name = "BulkAdd", .perform = bulk_perform, .user = &b};
    int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%d models added: %s: %s", ND, odbox_errname(rc), e.message);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), ND);
    for (int i = 0; i < ND; i++)
        ck_assert_int_eq(odbox_model_set_int64(d[i], "amount", -i, &e), ODBOX_OK);
    b.update = 1;
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%d models updated: %s: %s", ND, odbox_errname(rc), e.message);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE version = 2 AND amount <= 0"), ND);
    bulk_free(d, ND);
    /* 4200 entities */
    odbox_model **t = calloc(NT, sizeof *t);
    for (int i = 0; i < NT; i++) {
        ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t[i], &e), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_text(t[i], "label", "bulk", &e), ODBOX_OK);
    }
    bulk bt = {.m = t, .n = NT};
    a.user = &bt;
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%d entities added: %s: %s", NT, odbox_errname(rc), e.message);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), NT);
    bulk_free(t, NT);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* On PostgreSQL one UPDATE and up to 30 inserted rows are one statement
 * (32 WITH items with the events, however many events); one more inserted
 * row takes a transaction. Both write all or nothing. */
START_TEST(postgresql_joins_at_most_32_items)
{
    if (strcmp(itest_dialect(), "pg"))
        return;
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *stale = NULL, *x = seed_moved(&f, exe, &stale);
    const char *xid = odbox_model_id(x);
    char stamps[64], fn[64];
    stamps_on(&f, stamps, fn);
    odbox_error e;
    odbox_model *cur = find_dummy(&f, xid);
    odbox_model **d = bulk_dummies(30);
    bulk b = {.m = d, .n = 30, .emit = 1, .beside = cur};
    odbox_action a = {.name = "UpdateAndAdd", .perform = bulk_perform, .user = &b};
    int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    assert_written_by(&f, stamps, 1 + 30 + 30, 1);
    bulk_free(d, 30);

    /* 31 inserted rows: a transaction; stale, so none of them lands */
    int64_t dummies = dfx_rows(&f, 0, "dummies"), events = dfx_events(&f, 0);
    d = bulk_dummies(31);
    b = (bulk){.m = d, .n = 31, .beside = stale};
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_ESTALE, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), dummies);
    ck_assert_int_eq(dfx_events(&f, 0), events);
    itest_exec(f.c[0], "DELETE FROM %s", stamps);
    odbox_model_free(&cur);
    cur = find_dummy(&f, xid);
    b.beside = cur;
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    assert_written_by(&f, stamps, 31 + 1 + 1, 3); /* INSERT, UPDATE, the sentinel */
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), dummies + 31);
    bulk_free(d, 31);
    stamps_off(&f, stamps, fn);
    odbox_model_free(&cur);
    odbox_model_free(&stale);
    odbox_model_free(&x);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* model.h / action.h: action_name matches [A-Za-z_][A-Za-z0-9_.]* (<= 255). */

Suite *persist_suite(void)
{
    Suite *s = suite_create("persist");
    TCase *t = tcase_create("persist");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, one_update_beside_adds_and_events_is_all_or_nothing);
    tcase_add_test(t, unique_conflict_beside_an_update_writes_nothing);
    tcase_add_test(t, postgresql_writes_such_a_shard_in_one_statement);
    tcase_add_test(t, postgresql_joins_at_most_32_items);
    tcase_add_test(t, commit_lost_is_in_doubt_and_never_retried);
    tcase_add_test(t, connection_lost_while_idle);
    tcase_add_test(t, unexpected_count_of_a_one_statement_write_is_in_doubt);
    tcase_add_test(t, many_events_in_one_action);
    tcase_add_test(t, many_rows_in_one_plan);
    suite_add_tcase(s, t);
    return s;
}
