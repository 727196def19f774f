/* odbox — unit tier: what the public calls refuse before they reach a
 * database. NULL handles and outputs, a shard id out of range, two model
 * types of one name, two retry rules for one code, values a column cannot
 * hold, reads by ids that are not UUIDs: each is ODBOX_EINVAL with a
 * message that says what was wrong, and leaves the caller's output empty.
 * The registries here name a server nobody listens on: a call that got
 * past its checks would fail to connect (ODBOX_ECONNECT), not EINVAL. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "odbox/odbox.h"
#include "unit.h"

#define NOWHERE "postgresql://u@127.0.0.1:1/db"
#define ID "0192f0c1-7a3e-7abc-8def-0123456789ab"

static const odbox_column ref_columns[] = {
    {"owner", ODBOX_TYPE_UUID, 1, 0},
    {"ratio", ODBOX_TYPE_DOUBLE, 1, 0},
};
static const odbox_model_type REF_T = {"Ref", "refs", ODBOX_KIND_MODEL, ref_columns, 2};

#define assert_refused(call, code, text)                                                           \
    do {                                                                                           \
        odbox_error e_ = {0};                                                                      \
        int rc_ = (call);                                                                          \
        (void)e_;                                                                                  \
        ck_assert_msg(rc_ == (code), "%s: %s (%s)", #call, odbox_errname(rc_), e_.message);        \
        ck_assert_msg(strstr(e_.message, text) != NULL, "%s: message '%s' lacks '%s'", #call,      \
                      e_.message, text);                                                           \
    } while (0)

START_TEST(registries_refuse_bad_shards)
{
    odbox_registry *r = (odbox_registry *)1;
    odbox_error e;
    odbox_shard_config one = {.id = {0, 0}, .primary_dsn = NOWHERE};
    odbox_registry_config cfg = {.shards = &one, .nshards = 1};
    ck_assert_int_eq(odbox_registry_open(&cfg, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "out is NULL"));

    odbox_shard_config far = {.id = {ODBOX_SHARD_GROUP_MAX + 1, 0}, .primary_dsn = NOWHERE};
    cfg.shards = &far;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "shard 256.0 out of range"), "%s", e.message);
    ck_assert_ptr_null(r);

    odbox_shard_config bare = {.id = {0, 1}, .primary_dsn = ""};
    cfg.shards = &bare;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "shard 0.1 has no primary DSN"), "%s", e.message);
    ck_assert_ptr_null(r);

    /* a shard id's text: a NULL output is named as such, not as bad text */
    odbox_shard_id id = {7, 7};
    assert_refused(odbox_shard_id_parse("1.2", NULL, &e_), ODBOX_EINVAL, "shard: id is NULL");
    assert_refused(odbox_shard_id_parse(NULL, &id, &e_), ODBOX_EINVAL, "shard: expected GROUP.MEMBER, got nothing");
    ck_assert(id.group == 7 && id.member == 7);
}
END_TEST

START_TEST(executors_refuse_bad_descriptors)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = (odbox_executor *)1;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open_dsn(NOWHERE, &r, &e), ODBOX_OK);
    assert_refused(odbox_executor_open("com.example", r, NULL, NULL, &e_), ODBOX_EINVAL, "out is NULL");

    odbox_exec_config twice = {.retries = {{ODBOX_ESTALE, 2, 5}, {ODBOX_ESTALE, 1, 5}}, .nretries = 2};
    ck_assert_int_eq(odbox_executor_open("com.example", r, &twice, &exe, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "two retry rules for ODBOX_ESTALE"), "%s", e.message);
    ck_assert_ptr_null(exe);

    ck_assert_int_eq(odbox_executor_open("com.example", r, NULL, &exe, &e), ODBOX_OK);
    assert_refused(odbox_executor_register_model(NULL, &REF_T, &e_), ODBOX_EINVAL, "executor is NULL");
    ck_assert_int_eq(odbox_executor_register_model(exe, &REF_T, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_model(exe, &REF_T, &e), ODBOX_OK); /* the same descriptor again */
    /* another descriptor of the same name: the name is what events carry */
    static const odbox_model_type twin = {"Ref", "other_refs", ODBOX_KIND_MODEL, ref_columns, 1};
    assert_refused(odbox_executor_register_model(exe, &twin, &e_), ODBOX_EINVAL,
                   "another model type is already named Ref");
    static const odbox_column negative[] = {{"label", ODBOX_TYPE_TEXT, 0, -1}};
    static const odbox_model_type neg = {"Neg", "negs", ODBOX_KIND_MODEL, negative, 1};
    assert_refused(odbox_executor_register_model(exe, &neg, &e_), ODBOX_EINVAL,
                   "column label has a negative max_length");
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(models_refuse_values_their_columns_cannot_hold)
{
    odbox_model *m = (odbox_model *)1;
    odbox_error e;
    assert_refused(odbox_model_new(&REF_T, NULL, NULL, &e_), ODBOX_EINVAL, "out is NULL");
    ck_assert_int_eq(odbox_model_new(&REF_T, "not-a-uuid", &m, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(odbox_model_new(&REF_T, ID, &m, &e), ODBOX_OK);

    assert_refused(odbox_model_set_uuid(NULL, "owner", ID, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_set_uuid(m, "owner", "0192f0c1-7a3e", &e_), ODBOX_EINVAL,
                   "column owner: '0192f0c1-7a3e' is not a UUID");
    assert_refused(odbox_model_set_double(m, "ratio", NAN, &e_), ODBOX_EINVAL, "column ratio: not a finite number");
    assert_refused(odbox_model_set_double(m, "ratio", INFINITY, &e_), ODBOX_EINVAL, "not a finite number");
    assert_refused(odbox_model_set_double(m, "ratio", -INFINITY, &e_), ODBOX_EINVAL, "not a finite number");
    /* what was refused left the columns as they were (NULL) */
    odbox_value v;
    ck_assert_int_eq(odbox_model_get(m, "owner", &v, &e), ODBOX_OK);
    ck_assert(v.is_null);
    ck_assert_int_eq(odbox_model_get(m, "ratio", &v, &e), ODBOX_OK);
    ck_assert(v.is_null);

    ck_assert_int_eq(odbox_model_set_uuid(m, "owner", ID, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_double(m, "ratio", -0.5, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_get(m, "owner", &v, &e), ODBOX_OK);
    ck_assert_str_eq(v.s, ID);
    ck_assert_int_eq(odbox_model_get(m, "ratio", &v, &e), ODBOX_OK);
    ck_assert(v.d == -0.5);
    odbox_model_free(&m);
}
END_TEST

/* The getters: a NULL model, a column the type lacks, a getter of
 * another type than the column's and a NULL output are each refused with
 * a message, and write nothing (the outputs keep what they held). */
START_TEST(model_getters_refuse_bad_input)
{
    static const odbox_column cols[] = {{"label", ODBOX_TYPE_TEXT, 1, 0},     {"n", ODBOX_TYPE_INT64, 1, 0},
                                        {"ratio", ODBOX_TYPE_DOUBLE, 1, 0},   {"on", ODBOX_TYPE_BOOL, 1, 0},
                                        {"at", ODBOX_TYPE_TIMESTAMP, 1, 0}};
    static const odbox_model_type GOT = {"Got", "gots", ODBOX_KIND_MODEL, cols, 5};
    odbox_model *m = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_model_new(&GOT, ID, &m, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(m, "label", "x", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(m, "n", 3, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_double(m, "ratio", 0.5, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m, "on", 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_timestamp(m, "at", 1000000, &e), ODBOX_OK);

    assert_refused(odbox_model_get(m, "n", NULL, &e_), ODBOX_EINVAL, "model get: out is NULL");
    assert_refused(odbox_model_get_text(m, "label", NULL, &e_), ODBOX_EINVAL, "model get: out is NULL");
    assert_refused(odbox_model_get_int64(m, "n", NULL, &e_), ODBOX_EINVAL, "model get: out is NULL");
    assert_refused(odbox_model_get_double(m, "ratio", NULL, &e_), ODBOX_EINVAL, "model get: out is NULL");
    assert_refused(odbox_model_get_bool(m, "on", NULL, &e_), ODBOX_EINVAL, "model get: out is NULL");
    assert_refused(odbox_model_get_timestamp(m, "at", NULL, &e_), ODBOX_EINVAL, "model get: out is NULL");

    odbox_value v = {.type = (odbox_type)99, .i = 7};
    const char *text = "kept";
    int64_t i = 7;
    double d = 7.0;
    int b = 7;
    assert_refused(odbox_model_get(NULL, "n", &v, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_get_text(NULL, "label", &text, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_get_int64(NULL, "n", &i, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_get_double(NULL, "ratio", &d, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_get_bool(NULL, "on", &b, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_get_timestamp(NULL, "at", &i, &e_), ODBOX_EINVAL, "model is NULL");

    assert_refused(odbox_model_get(m, "colour", &v, &e_), ODBOX_EINVAL, "model Got has no column 'colour'");
    assert_refused(odbox_model_get(m, NULL, &v, &e_), ODBOX_EINVAL, "model Got has no column '(null)'");
    assert_refused(odbox_model_get_text(m, "colour", &text, &e_), ODBOX_EINVAL, "model Got has no column 'colour'");
    assert_refused(odbox_model_get_int64(m, "colour", &i, &e_), ODBOX_EINVAL, "model Got has no column 'colour'");
    assert_refused(odbox_model_get_double(m, "colour", &d, &e_), ODBOX_EINVAL, "model Got has no column 'colour'");
    assert_refused(odbox_model_get_bool(m, "colour", &b, &e_), ODBOX_EINVAL, "model Got has no column 'colour'");
    assert_refused(odbox_model_get_timestamp(m, "colour", &i, &e_), ODBOX_EINVAL,
                   "model Got has no column 'colour'");

    assert_refused(odbox_model_get_text(m, "n", &text, &e_), ODBOX_EINVAL,
                   "model Got: column n is not of the type asked for");
    assert_refused(odbox_model_get_int64(m, "label", &i, &e_), ODBOX_EINVAL,
                   "model Got: column label is not of the type asked for");
    assert_refused(odbox_model_get_int64(m, "at", &i, &e_), ODBOX_EINVAL, "column at is not of the type asked for");
    assert_refused(odbox_model_get_double(m, "n", &d, &e_), ODBOX_EINVAL, "column n is not of the type asked for");
    assert_refused(odbox_model_get_bool(m, "n", &b, &e_), ODBOX_EINVAL, "column n is not of the type asked for");
    assert_refused(odbox_model_get_timestamp(m, "n", &i, &e_), ODBOX_EINVAL,
                   "column n is not of the type asked for");
    ck_assert_msg(v.type == (odbox_type)99 && v.i == 7 && !strcmp(text, "kept") && i == 7 && d == 7.0 && b == 7,
                  "a refused get wrote its output");

    /* and what is there reads back */
    ck_assert_int_eq(odbox_model_get_text(m, "label", &text, &e), ODBOX_OK);
    ck_assert_str_eq(text, "x");
    ck_assert_int_eq(odbox_model_get_int64(m, "n", &i, &e), ODBOX_OK);
    ck_assert_int_eq(i, 3);
    ck_assert_int_eq(odbox_model_get_double(m, "ratio", &d, &e), ODBOX_OK);
    ck_assert(d == 0.5);
    ck_assert_int_eq(odbox_model_get_bool(m, "on", &b, &e), ODBOX_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(odbox_model_get_timestamp(m, "at", &i, &e), ODBOX_OK);
    ck_assert_int_eq(i, 1000000);
    odbox_model_free(&m);
}
END_TEST

START_TEST(reads_refuse_bad_input_before_connecting)
{
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open_dsn(NOWHERE, &r, &e), ODBOX_OK);
    odbox_model *m = (odbox_model *)1;
    odbox_models ms = {0};
    int64_t count = -1;
    assert_refused(odbox_repo_find(r, &REF_T, ID, ODBOX_READ_PRIMARY, NULL, &e_), ODBOX_EINVAL, "out is NULL");
    assert_refused(odbox_repo_find(NULL, &REF_T, ID, ODBOX_READ_PRIMARY, &m, &e_), ODBOX_EINVAL,
                   "registry or model type missing");
    ck_assert_ptr_null(m);
    assert_refused(odbox_repo_find_many(r, &REF_T, NULL, 2, ODBOX_READ_PRIMARY, &ms, &e_), ODBOX_EINVAL,
                   "ids missing");
    const char *ids[] = {ID, "0192f0c1"};
    assert_refused(odbox_repo_find_many(r, &REF_T, ids, 2, ODBOX_READ_PRIMARY, &ms, &e_), ODBOX_EINVAL,
                   "id 1 ('0192f0c1') is not a UUID");
    ck_assert_uint_eq(ms.n, 0);
    assert_refused(odbox_repo_find_many(r, &REF_T, ids, 1, ODBOX_READ_PRIMARY, NULL, &e_), ODBOX_EINVAL,
                   "out is NULL");
    assert_refused(odbox_repo_find_where(r, &REF_T, NULL, NULL, ODBOX_READ_PRIMARY, NULL, &e_), ODBOX_EINVAL,
                   "out is NULL");
    assert_refused(odbox_repo_find_where(r, &REF_T, "colour", NULL, ODBOX_READ_PRIMARY, &ms, &e_), ODBOX_EINVAL,
                   "Ref has no column 'colour'");
    assert_refused(odbox_repo_count_where(r, &REF_T, NULL, NULL, ODBOX_READ_PRIMARY, NULL, &e_), ODBOX_EINVAL,
                   "count: out is NULL");
    assert_refused(odbox_repo_count_where(r, NULL, NULL, NULL, ODBOX_READ_PRIMARY, &count, &e_), ODBOX_EINVAL,
                   "registry or model type missing");
    assert_refused(odbox_repo_insert(NULL, &REF_T, &m, 1, &e_), ODBOX_EINVAL, "connection, type or models missing");
    odbox_registry_free(&r);
}
END_TEST

START_TEST(operations_refuse_bad_input_before_connecting)
{
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open_dsn(NOWHERE, &r, &e), ODBOX_OK);
    odbox_subscription *subs = NULL;
    size_t n = 7;
    int64_t done = -1;
    assert_refused(odbox_subscriptions_list(NULL, NULL, 0, &subs, &n, &e_), ODBOX_EINVAL,
                   "registry, out or n is NULL");
    assert_refused(odbox_subscriptions_list(r, NULL, 0, &subs, NULL, &e_), ODBOX_EINVAL, "registry, out or n is NULL");
    assert_refused(odbox_subscriptions_list(r, NULL, -1, &subs, &n, &e_), ODBOX_EINVAL, "live_ms -1 is negative");
    ck_assert_ptr_null(subs);
    assert_refused(odbox_subscription_retire(r, "", &done, &e_), ODBOX_EINVAL, "registry or name is missing");
    ck_assert_int_eq(done, 0);
    done = -1;
    assert_refused(odbox_subscription_retire(NULL, "audit", &done, &e_), ODBOX_EINVAL, "registry or name is missing");
    ck_assert_int_eq(done, 0);
    done = -1;
    assert_refused(odbox_subscription_replay(r, NULL, 0, NULL, &done, &e_), ODBOX_EINVAL,
                   "registry or name is missing");
    ck_assert_int_eq(done, 0);
    assert_refused(odbox_subscription_replay(r, "audit", -1, NULL, &done, &e_), ODBOX_EINVAL, "since is before 1970");
    assert_refused(odbox_subscription_replay(r, "audit", INT64_MAX, NULL, &done, &e_), ODBOX_EINVAL,
                   "since is in the future");
    ck_assert_int_eq(done, 0);

    odbox_notification_row *rows = (odbox_notification_row *)1;
    assert_refused(odbox_notifications_list(r, NULL, 10, NULL, &n, &e_), ODBOX_EINVAL, "registry, rows or n is NULL");
    assert_refused(odbox_notifications_list(NULL, NULL, 10, &rows, &n, &e_), ODBOX_EINVAL,
                   "registry, rows or n is NULL");
    odbox_registry_free(&r);
}
END_TEST

START_TEST(configurations_refuse_bad_input)
{
    odbox_error e;
    odbox_pool *p = (odbox_pool *)1;
    odbox_pool_config negative = {.acquire_timeout_ms = -1};
    assert_refused(odbox_pool_open(NOWHERE, NULL, NULL, &e_), ODBOX_EINVAL, "pool: out is NULL");
    assert_refused(odbox_pool_open(NOWHERE, &negative, &p, &e_), ODBOX_EINVAL, "acquire timeout -1 is negative");
    ck_assert_ptr_null(p);
    odbox_conn *c = (odbox_conn *)1;
    assert_refused(odbox_pool_acquire(NULL, &c, &e_), ODBOX_EINVAL, "acquire with NULL pool or out");

    /* the registry's JSON: a string with a NUL inside, too many shards, too long */
    odbox_registry *r = (odbox_registry *)1;
    assert_refused(odbox_registry_parse("{}", NULL, &e_), ODBOX_EINVAL, "config: out is NULL");
    assert_refused(odbox_registry_parse("{\"shards\": [{\"group\": 0, \"member\": 0, "
                                        "\"primary\": \"postgresql://h/db\\u0000x\"}]}",
                                        &r, &e_),
                   ODBOX_EINVAL, "primary contains a NUL character");
    ck_assert_ptr_null(r);
    size_t many = 256 * 64 + 1, cap = 32 + many * 4;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    size_t len = (size_t)snprintf(text, cap, "{\"shards\": [");
    for (size_t i = 0; i < many; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s{}", i ? "," : "");
    snprintf(text + len, cap - len, "]}");
    assert_refused(odbox_registry_parse(text, &r, &e_), ODBOX_EINVAL, "more than 16384 shards");
    free(text);
    size_t big = 1024 * 1024 + 1;
    text = malloc(big + 1);
    ck_assert_ptr_nonnull(text);
    memset(text, ' ', big);
    text[big] = '\0';
    assert_refused(odbox_registry_parse(text, &r, &e_), ODBOX_EINVAL, "larger than 1048576 bytes");
    free(text);
    ck_assert_ptr_null(r);

    /* schedules */
    odbox_schedule sch;
    int64_t at = 7;
    assert_refused(odbox_schedule_cron("* * * * *", NULL, &e_), ODBOX_EINVAL, "cron: out is NULL");
    ck_assert_int_eq(odbox_schedule_cron("*/5 * * * *", &sch, &e), ODBOX_OK);
    assert_refused(odbox_schedule_next(&sch, 0, NULL, &e_), ODBOX_EINVAL, "next_us is NULL");
    assert_refused(odbox_schedule_next(&sch, INT64_MAX, &at, &e_), ODBOX_EINVAL, "out of range");
    assert_refused(odbox_schedule_initial(&sch, 0, NULL, &e_), ODBOX_EINVAL, "first_us is NULL");
    ck_assert_int_eq(at, 7);

    /* jobs, purge, migrations, metrics, delivery: before any connection */
    ck_assert_int_eq(odbox_registry_open_dsn(NOWHERE, &r, &e), ODBOX_OK);
    odbox_jobs *jobs = (odbox_jobs *)1;
    odbox_jobs_config long_dead = {.heartbeat_interval_ms = 1000000, .missed_heartbeats_limit = 10000};
    assert_refused(odbox_jobs_open(r, &long_dead, &jobs, &e_), ODBOX_EINVAL,
                   "heartbeat interval x missed heartbeats limit is too large");
    ck_assert_ptr_null(jobs);

    odbox_purge_options po = {.older_than_us = 1000000, .keys_older_than_us = -1};
    odbox_job job;
    assert_refused(odbox_purge_job(r, &po, sch, &job, &e_), ODBOX_EINVAL, "keys_older_than_us -1 is not in");
    assert_refused(odbox_purge_job(r, &po, sch, NULL, &e_), ODBOX_EINVAL, "registry or job is NULL");
    odbox_purge_result *res = NULL;
    size_t n = 0;
    po.keys_older_than_us = 0;
    assert_refused(odbox_purge_run(NULL, &po, &res, &n, &e_), ODBOX_EINVAL, "registry, results or n is NULL");

    odbox_migration_info *mi = NULL;
    assert_refused(odbox_migrate_shard(NULL, NULL, &e_), ODBOX_EINVAL, "migrate: shard is NULL");
    assert_refused(odbox_migrate_status(NULL, NULL, &mi, &n, &e_), ODBOX_EINVAL, "NULL argument");
    odbox_notification_stats *st = NULL;
    assert_refused(odbox_notifications_metrics(NULL, NULL, &st, &n, &e_), ODBOX_EINVAL, "registry, out or n is NULL");

    odbox_executor *exe = NULL;
    ck_assert_int_eq(odbox_executor_open("com.example", r, NULL, &exe, &e), ODBOX_OK);
    assert_refused(odbox_delivery_detach(NULL, exe, &e_), ODBOX_EINVAL, "delivery or executor is NULL");
    assert_refused(odbox_delivery_register(NULL, &e_), ODBOX_EINVAL, "delivery register: delivery is NULL");
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
}
END_TEST

/* Calls the audit of the public surface found untested on bad input:
 * each refusal names the call and what was missing, and writes nothing. */
START_TEST(model_setters_and_plans_refuse_bad_input)
{
    static const odbox_column cols[] = {{"label", ODBOX_TYPE_TEXT, 0, 0}, {"doc", ODBOX_TYPE_JSON, 1, 0}};
    static const odbox_model_type SET_T = {"Set", "sets", ODBOX_KIND_MODEL, cols, 2};
    odbox_model *m = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_model_new(&SET_T, ID, &m, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(m, "label", "x", &e), ODBOX_OK);
    odbox_value v = {.type = ODBOX_TYPE_INT64, .i = 3};
    assert_refused(odbox_model_set(NULL, "label", &v, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_set(m, "label", &v, &e_), ODBOX_EINVAL, "column label does not take a value of type");
    assert_refused(odbox_model_set(m, "label", NULL, &e_), ODBOX_EINVAL, "model Set: column label is NOT NULL");
    assert_refused(odbox_model_set_int64(NULL, "label", 3, &e_), ODBOX_EINVAL, "model is NULL");
    assert_refused(odbox_model_set_int64(m, "label", 3, &e_), ODBOX_EINVAL, "does not take a value of type");
    assert_refused(odbox_model_set_bool(m, "colour", 1, &e_), ODBOX_EINVAL, "model Set has no column 'colour'");
    assert_refused(odbox_model_set_bool(m, "label", 1, &e_), ODBOX_EINVAL, "does not take a value of type");
    assert_refused(odbox_model_set_json(m, "doc", "{\"a\": ", &e_), ODBOX_EINVAL, "column doc: invalid JSON");
    assert_refused(odbox_model_set_json(m, "doc", "null", &e_), ODBOX_EINVAL, "column doc: invalid JSON");
    assert_refused(odbox_model_set_json(m, "label", "{}", &e_), ODBOX_EINVAL, "does not take a value of type");
    ck_assert(!odbox_model_is_null(NULL, "label"));
    ck_assert(odbox_model_is_null(m, "doc"));
    const char *text = NULL;
    ck_assert_int_eq(odbox_model_get_text(m, "label", &text, &e), ODBOX_OK);
    ck_assert_str_eq(text, "x");

    /* a shard out of range: nothing made, and the output emptied as every
     * refused constructor empties it (a caller freeing it frees nothing) */
    odbox_model *made = (odbox_model *)1;
    assert_refused(odbox_model_new_in_shard(&SET_T, (odbox_shard_id){ODBOX_SHARD_GROUP_MAX + 1, 0}, &made, &e_),
                   ODBOX_EINVAL, "uuid: shard 256.0 is out of range");
    ck_assert_ptr_null(made);
    assert_refused(odbox_model_new_in_shard(&SET_T, (odbox_shard_id){0, 0}, NULL, &e_), ODBOX_EINVAL, "out is NULL");
    char u[ODBOX_UUID_LEN + 1] = "kept";
    assert_refused(odbox_uuid_v7_sharded((odbox_shard_id){-1, 0}, u, &e_), ODBOX_EINVAL, "uuid: shard -1.0 is out");
    ck_assert_str_eq(u, "");

    /* plans: a NULL plan, model or event type, a negative delay */
    static const odbox_event_type ET = {"SetMade"};
    int64_t next = 7;
    assert_refused(odbox_plan_add(NULL, m, &e_), ODBOX_EINVAL, "plan add: plan or model is NULL");
    assert_refused(odbox_plan_update(NULL, m, &next, &e_), ODBOX_EINVAL, "plan update: plan or model is NULL");
    ck_assert_int_eq(next, 7);
    json_object *payload = json_object_new_object();
    assert_refused(odbox_plan_emit(NULL, m, &ET, payload, &e_), ODBOX_EINVAL,
                   "emit: plan, model or event type is NULL");
    assert_refused(odbox_plan_emit_after(NULL, m, &ET, payload, -1, &e_), ODBOX_EINVAL,
                   "emit: deliver_after -1 is negative");
    /* with no plan, the result given is released, not leaked */
    odbox_plan_set_result(NULL, payload);
    odbox_model_free(&m);
}
END_TEST

START_TEST(handles_refuse_null)
{
    odbox_error e;
    int64_t one = 1;
    assert_refused(odbox_conn_rollback(NULL, &e_), ODBOX_EINVAL, "rollback: connection is NULL");
    assert_refused(odbox_stmt_bind_double(NULL, 1, 0.5, &e_), ODBOX_EINVAL, "bind: statement is NULL");
    assert_refused(odbox_stmt_bind_double(NULL, 1, NAN, &e_), ODBOX_EINVAL, "not a finite number");
    assert_refused(odbox_stmt_bind_uuid(NULL, 1, ID, &e_), ODBOX_EINVAL, "bind: statement is NULL");
    assert_refused(odbox_stmt_bind_uuid(NULL, 1, "0192f0c1", &e_), ODBOX_EINVAL, "parameter 1 is not a UUID");
    ck_assert_int_eq(odbox_stmt_column_count(NULL), 0);
    ck_assert_int_eq(odbox_stmt_column_index(NULL, "x"), 0);
    odbox_stmt_clear_binds(NULL);
    odbox_model *m = NULL;
    ck_assert_int_eq(odbox_model_new(&REF_T, ID, &m, &e), ODBOX_OK);
    assert_refused(odbox_repo_update(NULL, &REF_T, &m, 1, one, &e_), ODBOX_EINVAL,
                   "update: connection, type or models missing");
    odbox_model_free(&m);
    ck_assert(!odbox_name_is_valid(NULL));
    ck_assert(!odbox_name_is_valid(""));

    odbox_pool *p = NULL;
    ck_assert_int_eq(odbox_pool_open(NOWHERE, NULL, &p, &e), ODBOX_OK);
    assert_refused(odbox_jobs_run_now(NULL, "sweep", &e_), ODBOX_EINVAL, "jobs run now: pool is NULL");
    assert_refused(odbox_jobs_run_now(p, "", &e_), ODBOX_EINVAL, "name");
    assert_refused(odbox_jobs_run_now(p, NULL, &e_), ODBOX_EINVAL, "name");
    odbox_pool_free(&p);

    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open_dsn(NOWHERE, &r, &e), ODBOX_OK);
    odbox_requeue_result res = {7, 7};
    assert_refused(odbox_notifications_requeue_run(NULL, NULL, &res, &e_), ODBOX_EINVAL,
                   "notifications: registry is NULL");
    ck_assert(res.moved == 0 && res.in_flight == 0);
    odbox_requeue_spec bad_state = {.state = "PENDING"};
    assert_refused(odbox_notifications_requeue_run(r, &bad_state, &res, &e_), ODBOX_EINVAL, "PENDING");
    odbox_requeue_spec bad_id = {.id = "0192f0c1"};
    assert_refused(odbox_notifications_requeue_run(r, &bad_id, &res, &e_), ODBOX_EINVAL,
                   "'0192f0c1' is not a notification id");
    odbox_requeue_spec both = {.id = ID, .handler = "audit"};
    assert_refused(odbox_notifications_requeue_run(r, &both, &res, &e_), ODBOX_EINVAL, "not both");

    /* a shard id no shard has: lookups answer NULL, and the shard's
     * accessors take that NULL rather than crash */
    odbox_shard_id far = {9, 9};
    odbox_shard *none = odbox_registry_shard(r, far);
    ck_assert_ptr_null(none);
    ck_assert_ptr_null(odbox_registry_shard(NULL, far));
    ck_assert_ptr_null(odbox_registry_shard_for_id(NULL, ID));
    ck_assert_ptr_eq(odbox_registry_shard_for_id(r, "0192f0c1"), odbox_registry_default_shard(r));
    ck_assert_ptr_null(odbox_registry_effective_shard(NULL, far));
    ck_assert_uint_eq(odbox_registry_shard_count(NULL), 0);
    ck_assert_ptr_null(odbox_shard_eventlog(none));
    ck_assert_ptr_null(odbox_shard_primary(none));
    ck_assert_ptr_null(odbox_shard_replica(none));
    ck_assert_ptr_null(odbox_shard_primary_redacted(none));
    ck_assert_int_eq(odbox_shard_has_replica(none), 0);
    ck_assert(odbox_shard_get_id(none).group == -1 && odbox_shard_get_id(none).member == -1);
    odbox_registry_free(&r);
}
END_TEST

/* The rest of the surface with a NULL handle: calls that can fail refuse
 * it with EINVAL naming what is NULL; accessors answer their documented
 * nothing (NULL, 0) and frees do nothing, rather than crash. */
START_TEST(null_handles_everywhere_else)
{
    odbox_error e;
    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open_dsn(NOWHERE, &r, &e), ODBOX_OK);
    odbox_shard *s0 = odbox_registry_default_shard(r);
    ck_assert_ptr_nonnull(s0);
    odbox_registry *none = (odbox_registry *)1;
    assert_refused(odbox_registry_open_dsn(NULL, &none, &e_), ODBOX_EINVAL, "registry: shard 0.0 has no primary DSN");
    ck_assert_ptr_null(none);
    assert_refused(odbox_registry_open_dsn(NOWHERE, NULL, &e_), ODBOX_EINVAL, "registry: out is NULL");
    ck_assert_ptr_null(odbox_registry_default_shard(NULL));
    ck_assert_ptr_null(odbox_registry_shard_at(NULL, 0));
    ck_assert_ptr_null(odbox_registry_shard_at(r, 1));

    assert_refused(odbox_conn_lock(NULL, "k", 0, &e_), ODBOX_EINVAL, "lock: connection or key missing");
    ck_assert_int_eq(odbox_conn_is_dead(NULL), 1);
    odbox_conn_close(NULL);
    ck_assert_ptr_null(odbox_conn_dialect(NULL));
    ck_assert_int_eq(odbox_conn_in_transaction(NULL), 0);
    ck_assert_str_eq(odbox_conn_server_name(NULL), "");
    ck_assert_str_eq(odbox_conn_server_version(NULL), "");
    ck_assert_ptr_null(odbox_pool_dialect(NULL));
    odbox_pool_release(NULL, NULL);
    odbox_pool_discard(NULL, NULL);
    ck_assert_int_eq(odbox_stmt_rows_affected(NULL), -1);
    odbox_stmt_free(NULL);

    odbox_delivery_round rd;
    char *text = (char *)1;
    assert_refused(odbox_delivery_fanout_round(NULL, s0, &rd, &e_), ODBOX_EINVAL,
                   "delivery round: delivery or shard is NULL");
    assert_refused(odbox_delivery_prometheus(NULL, NULL, &text, &e_), ODBOX_EINVAL,
                   "delivery metrics: delivery or out is NULL");
    ck_assert_ptr_null(text);
    ck_assert_ptr_null(odbox_delivery_job_name(NULL, ODBOX_DELIVERY_FANOUT));
    odbox_delivery_metrics_clear(NULL);

    static const odbox_event_type ET = {"Made"};
    static const odbox_action A = {"act", NULL, NULL};
    odbox_result res;
    memset(&res, 0, sizeof res);
    assert_refused(odbox_execute(NULL, &A, NULL, NULL, &res, &e_), ODBOX_EINVAL,
                   "execute: executor or action is NULL");
    assert_refused(odbox_executor_register_event(NULL, &ET, &e_), ODBOX_EINVAL,
                   "register event: executor or event type is NULL");
    odbox_executor *exe = NULL;
    ck_assert_int_eq(odbox_executor_open("com.example", r, NULL, &exe, &e), ODBOX_OK);
    static const odbox_event_type BAD = {"not a name"};
    assert_refused(odbox_executor_register_event(exe, &BAD, &e_), ODBOX_EINVAL, "not a name");
    assert_refused(odbox_executor_register_event(exe, NULL, &e_), ODBOX_EINVAL,
                   "register event: executor or event type is NULL");
    odbox_executor_set_hook(NULL, NULL, NULL);
    odbox_executor_claim_keys_first(NULL, 1);
    odbox_executor_free(&exe);
    odbox_executor_free(NULL);
    odbox_result_clear(NULL);
    odbox_exec_config_default(NULL);
    odbox_error_clear(NULL);
    ck_assert_ptr_null(odbox_context_registry(NULL));
    ck_assert_ptr_null(odbox_context_action_id(NULL));
    ck_assert_int_eq(odbox_context_attempt(NULL), -1);

    ck_assert_uint_eq(odbox_handlers_count(NULL), 0);
    assert_refused(odbox_jobs_add(NULL, &(odbox_job){.name = "x"}, &e_), ODBOX_EINVAL,
                   "jobs add: registry or job is NULL");
    assert_refused(odbox_manual_clock_new(0, NULL, &e_), ODBOX_EINVAL, "manual clock: out is NULL");
    odbox_manual_clock_set(NULL, 1);
    odbox_manual_clock_advance(NULL, 1);
    ck_assert(odbox_clock_now_us(NULL) > 0);
    ck_assert(odbox_job_context_now_us(NULL) > 0);

    char u[ODBOX_UUID_LEN + 1];
    assert_refused(odbox_uuid_v7_sharded_at((odbox_shard_id){0, 0}, 1000, NULL, &e_), ODBOX_EINVAL,
                   "uuid: out is NULL");
    assert_refused(odbox_uuid_v7_sharded_at((odbox_shard_id){0, 64}, 1000, u, &e_), ODBOX_EINVAL, "out of range");

    ck_assert_ptr_null(odbox_model_copy(NULL));
    ck_assert_ptr_null(odbox_model_id(NULL));
    ck_assert_ptr_null(odbox_model_get_type(NULL));
    ck_assert_ptr_null(odbox_model_state(NULL));
    ck_assert_int_eq(odbox_model_version(NULL), 0);
    ck_assert_int_eq(odbox_model_created(NULL), 0);
    ck_assert_int_eq(odbox_model_updated(NULL), 0);
    odbox_model_free(NULL);
    odbox_models_free(NULL);
    ck_assert_int_eq(odbox_relay_published(NULL), 0);
    ck_assert_int_eq(odbox_relay_failed(NULL), 0);
    odbox_relay_free(NULL);
    odbox_notification_stats_free(NULL, 3);
    odbox_notification_rows_free(NULL, 3);
    odbox_subscriptions_free(NULL, 3);
    odbox_purge_results_free(NULL);
    ck_assert_ptr_null(odbox_sql_rows(0, NULL, 1));
    ck_assert_ptr_null(odbox_dialect_detect(NULL, NULL));
    ck_assert_ptr_nonnull(odbox_strerror(12345));
    ck_assert_ptr_nonnull(odbox_errname(12345));
    /* transactions of one's own: refused before any connection */
    static const odbox_event_type PAID = {"Paid"};
    odbox_tx *tx = (odbox_tx *)1;
    assert_refused(odbox_tx_begin(NULL, (odbox_shard_id){0, 0}, NULL, &tx, &e_), ODBOX_EINVAL,
                   "tx begin: executor is NULL");
    ck_assert_ptr_null(tx);
    json_object *pl = json_object_new_object();
    assert_refused(odbox_tx_emit(NULL, "Order", "1", &PAID, pl, &e_), ODBOX_EINVAL, "tx emit: tx is NULL");
    json_object_put(pl);
    assert_refused(odbox_tx_commit(&tx, &e_), ODBOX_EINVAL, "tx commit: the transaction is NULL");
    odbox_tx_rollback(&tx);
    /* a NULL err is allowed: the code alone comes back */
    ck_assert_int_eq(odbox_tx_commit(NULL, NULL), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_rollback(NULL, NULL), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_plan_add(NULL, NULL, NULL), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_int64(NULL, "n", 1, NULL), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_uuid_v7_sharded((odbox_shard_id){0, 64}, u, NULL), ODBOX_EINVAL);
    ck_assert_ptr_null(odbox_tx_action_id(NULL));
    ck_assert_ptr_null(odbox_tx_conn(NULL));
    ck_assert_int_eq(odbox_tx_replayed(NULL), 0);
    /* no shard, as the shard accessors answer (0.0 is a real shard) */
    ck_assert(odbox_tx_shard(NULL).group == -1 && odbox_tx_shard(NULL).member == -1);
    ck_assert_int_eq(odbox_lock_is_held(NULL), 0);
    odbox_registry_free(&r);
    odbox_registry_free(NULL);
}
END_TEST

Suite *refusals_suite(void)
{
    Suite *s = suite_create("refusals");
    TCase *t = tcase_create("core");
    tcase_add_test(t, registries_refuse_bad_shards);
    tcase_add_test(t, executors_refuse_bad_descriptors);
    tcase_add_test(t, models_refuse_values_their_columns_cannot_hold);
    tcase_add_test(t, model_getters_refuse_bad_input);
    tcase_add_test(t, reads_refuse_bad_input_before_connecting);
    tcase_add_test(t, operations_refuse_bad_input_before_connecting);
    tcase_add_test(t, configurations_refuse_bad_input);
    tcase_add_test(t, model_setters_and_plans_refuse_bad_input);
    tcase_add_test(t, handles_refuse_null);
    tcase_add_test(t, null_handles_everywhere_else);
    suite_add_tcase(s, t);
    return s;
}
