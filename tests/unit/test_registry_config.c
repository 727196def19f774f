/* odbox — unit tests: registries built in code and from JSON config. No
 * server is needed: pools connect lazily. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "odbox/odbox.h"
#include "unit.h"

#define PG "postgresql://app:s3cr3t-PW@db1.internal:5432/app"

START_TEST(config_two_shards)
{
    const char *json =
        "{ \"default_shard\": \"0.1\",\n"
        "  \"pool\": { \"size\": 4, \"acquire_timeout_ms\": 2000 },\n"
        "  \"shards\": [\n"
        "    { \"group\": 0, \"member\": 0, \"primary\": \"" PG "\" },\n"
        "    { \"group\": 0, \"member\": 1, \"primary\": \"mariadb://u:p@h2/app\",\n"
        "      \"replica\": \"mariadb://u:p@h2r/app\", \"eventlog\": \"eventlog_b\",\n"
        "      \"pool\": { \"size\": 2 } } ],\n"
        "  \"relays\": [ { \"name\": \"read by odbox relay, not here\" } ] }";
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_parse(json, &r, &e), ODBOX_OK);
    ck_assert_uint_eq(odbox_registry_shard_count(r), 2);
    odbox_shard *def = odbox_registry_default_shard(r);
    ck_assert_int_eq(odbox_shard_get_id(def).member, 1);
    ck_assert_str_eq(odbox_shard_eventlog(def), "eventlog_b");
    ck_assert(odbox_shard_has_replica(def));
    ck_assert_ptr_ne(odbox_shard_replica(def), odbox_shard_primary(def));
    odbox_shard *s0 = odbox_registry_shard(r, (odbox_shard_id){0, 0});
    ck_assert_ptr_nonnull(s0);
    ck_assert_str_eq(odbox_shard_eventlog(s0), "eventlog");
    ck_assert(!odbox_shard_has_replica(s0));
    ck_assert_ptr_eq(odbox_shard_replica(s0), odbox_shard_primary(s0));
    ck_assert_ptr_null(strstr(odbox_shard_primary_redacted(s0), "s3cr3t-PW"));
    ck_assert_ptr_nonnull(strstr(odbox_shard_primary_redacted(s0), "db1.internal"));
    /* unregistered shards route to the default */
    ck_assert_ptr_null(odbox_registry_shard(r, (odbox_shard_id){7, 3}));
    ck_assert_ptr_eq(odbox_registry_effective_shard(r, (odbox_shard_id){7, 3}), def);
    ck_assert_ptr_eq(odbox_registry_effective_shard(r, (odbox_shard_id){0, 0}), s0);
    ck_assert_ptr_eq(odbox_pool_dialect(odbox_shard_primary(def)), odbox_dialect_find("mariadb"));
    ck_assert_ptr_eq(odbox_pool_dialect(odbox_shard_primary(s0)), odbox_dialect_find("postgresql"));
    odbox_registry_free(&r);
    ck_assert_ptr_null(r);
}
END_TEST

START_TEST(one_dsn_is_one_shard)
{
    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open_dsn(PG, &r, NULL), ODBOX_OK);
    ck_assert_uint_eq(odbox_registry_shard_count(r), 1);
    odbox_shard_id id = odbox_shard_get_id(odbox_registry_default_shard(r));
    ck_assert_int_eq(id.group, 0);
    ck_assert_int_eq(id.member, 0);
    odbox_registry_free(&r);
}
END_TEST

/* eventlog= in a DSN names the shard's eventlog; where the config names
 * it too, the two must agree */
START_TEST(dsn_names_the_eventlog)
{
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open_dsn(PG "?eventlog=ev_app2", &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(r)), "ev_app2");
    odbox_registry_free(&r);
    ck_assert_int_eq(odbox_registry_open_dsn("DSN=x;eventlog=ev_raw", &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(r)), "ev_raw");
    odbox_registry_free(&r);
    ck_assert_int_eq(odbox_registry_open_dsn(PG "?eventlog=Bad-Name", &r, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "not a valid name"));
    ck_assert_ptr_null(strstr(e.message, "s3cr3t-PW"));
    ck_assert_ptr_null(r);

    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = PG "?eventlog=ev_a", .eventlog = "ev_a"};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(r)), "ev_a");
    odbox_registry_free(&r);
    sc.eventlog = "ev_other";
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "eventlog=ev_a") && strstr(e.message, "ev_other"), "%s", e.message);
    sc.eventlog = NULL;
    sc.replica_dsn = PG "?eventlog=ev_b";
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "replica") && strstr(e.message, "ev_b"), "%s", e.message);
    sc.replica_dsn = PG;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(r)), "ev_a");
    odbox_registry_free(&r);

    const char *json = "{\"shards\": [{\"group\": 0, \"member\": 0, \"primary\": \"" PG "?eventlog=ev_x\"}]}";
    ck_assert_int_eq(odbox_registry_parse(json, &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(r)), "ev_x");
    odbox_registry_free(&r);

    /* the name comes from the primary (or the config), never the replica:
     * a replica's eventlog= that is not the shard's is refused */
    sc.primary_dsn = PG;
    sc.replica_dsn = PG "?eventlog=ev_b";
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(e.message, "replica") && strstr(e.message, "eventlog=ev_b") && strstr(e.message, "'eventlog'"),
                  "%s", e.message);
    sc.replica_dsn = PG "?eventlog=eventlog";
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(r)), "eventlog");
    odbox_registry_free(&r);
    sc.eventlog = "ev_b";
    sc.replica_dsn = PG "?eventlog=ev_b";
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(r)), "ev_b");
    odbox_registry_free(&r);
    sc.eventlog = NULL;
    json = "{\"shards\": [{\"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"replica\": \"" PG
           "?eventlog=ev_r\"}]}";
    ck_assert_int_eq(odbox_registry_parse(json, &r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "eventlog=ev_r"), "%s", e.message);
}
END_TEST

START_TEST(built_in_code)
{
    odbox_shard_config sc[] = {
        {.id = {3, 5}, .primary_dsn = PG, .eventlog = "ev_35"},
        {.id = {3, 6}, .primary_dsn = "mysql://u@h/db"},
    };
    odbox_registry_config cfg = {.shards = sc, .nshards = 2, .has_default = 1, .default_shard = {3, 6}};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_shard_at(r, 0)), "ev_35");
    ck_assert_int_eq(odbox_shard_get_id(odbox_registry_default_shard(r)).member, 6);
    odbox_registry_free(&r);

    /* several shards and no default named: (0,0) must exist */
    cfg.has_default = 0;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(e.message, "default shard 0.0"));
    sc[1].id = sc[0].id;
    cfg.has_default = 1;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "twice"));
    ck_assert_int_eq(odbox_registry_open(NULL, &r, &e), ODBOX_EINVAL);
}
END_TEST

typedef struct bad_config {
    const char *json;
    const char *expect; /* a fragment the message must contain */
} bad_config;

#define S0 "{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\" }"
static const bad_config bad_configs[] = {
    {"", "invalid JSON"},
    {"{", "invalid JSON"},
    {"{\"shards\": [" S0 "]} trailing", "invalid JSON"},
    {"[]", "top level must be an object"},
    {"42", "top level must be an object"},
    {"{}", "\"shards\" is required"},
    {"{\"shards\": []}", "non-empty array"},
    {"{\"shards\": {}}", "non-empty array"},
    {"{\"shards\": [42]}", "shards[0] must be an object"},
    {"{\"shards\": [" S0 "], \"shard\": 1}", "unknown key 'shard'"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"replcia\": \"x\" }]}",
     "shards[0]: unknown key 'replcia'"},
    {"{\"shards\": [{ \"member\": 0, \"primary\": \"" PG "\" }]}", "shards[0].group is required"},
    {"{\"shards\": [{ \"group\": 0, \"primary\": \"" PG "\" }]}", "shards[0].member is required"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0 }]}", "shards[0].primary is required"},
    {"{\"shards\": [{ \"group\": 256, \"member\": 0, \"primary\": \"" PG "\" }]}", "out of range 0..255"},
    {"{\"shards\": [{ \"group\": -1, \"member\": 0, \"primary\": \"" PG "\" }]}", "out of range 0..255"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 64, \"primary\": \"" PG "\" }]}", "out of range 0..63"},
    {"{\"shards\": [{ \"group\": \"0\", \"member\": 0, \"primary\": \"" PG "\" }]}", "group must be an integer"},
    {"{\"shards\": [{ \"group\": 0.5, \"member\": 0, \"primary\": \"" PG "\" }]}", "group must be an integer"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": 5 }]}", "primary must be a string"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"\" }]}", "primary must not be empty"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"postgresql://u:s3cr3t-PW@h:0/db\" }]}", "port"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"oracle://u:s3cr3t-PW@h/db\" }]}", "unknown scheme"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"postgresql://u:s3cr3t-PW@h/db?dialect=x\" }]}", "unknown dialect"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"postgresql://u:s3cr3t-PW@h/db?dialect=mysql\" }]}", "does not go with the scheme postgresql"},
    /* refused when the registry is made, not first at a connect */
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"postgresql://u:s3cr3t-PW@h/db?connect_timeout=10s\" }]}", "connect_timeout must be a whole number of seconds"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"replica\": \"mysql://h/db?read_timeout=-1\" }]}", "read_timeout must be"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"replica\": \"garbage\" }]}", "replica"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"eventlog\": \"Event-Log\" }]}", "eventlog: 'Event-Log' is not a valid name"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"eventlog\": \"x; DROP TABLE y\" }]}", "not a valid name"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"eventlog\": \"a123456789012345678901234567890123456789012345678901234567890123\" }]}", "not a valid name"},
    {"{\"shards\": [" S0 ", " S0 "]}", "listed twice"},
    {"{\"default_shard\": \"1.0\", \"shards\": [" S0 "]}", "default shard 1.0 is not among"},
    {"{\"default_shard\": 0, \"shards\": [" S0 "]}", "default_shard must be a string"},
    {"{\"default_shard\": \"zero\", \"shards\": [" S0 "]}", "GROUP.MEMBER"},
    {"{\"pool\": 3, \"shards\": [" S0 "]}", "pool must be an object"},
    {"{\"pool\": {\"size\": 0}, \"shards\": [" S0 "]}", "size: 0 is out of range"},
    {"{\"pool\": {\"sise\": 3}, \"shards\": [" S0 "]}", "unknown key 'sise'"},
    {"{\"pool\": {\"acquire_timeout_ms\": -5}, \"shards\": [" S0 "]}", "acquire_timeout_ms"},
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"pool\": {\"size\": 100000} }]}", "shards[0].pool.size"},
    /* a key twice in one object: json-c keeps the last, which made this shard 0.1 */
    {"{\"shards\": [{ \"group\": 0, \"member\": 0, \"primary\": \"" PG "\", \"member\": 1 }]}",
     "shards[0]: duplicate key 'member' (line 1)"},
    {"{\"shards\": [" S0 "],\n \"shards\": [" S0 "]}", "(top): duplicate key 'shards' (line 2)"},
    {"{\"shards\": [" S0 "], \"sh\\u0061rds\": [" S0 "]}", "(top): duplicate key 'shards'"},
    {"{'shards': [" S0 "], \"shards\": [" S0 "]}", "(top): duplicate key 'shards'"},
    {"{\"shards\": [" S0 ", { \"group\": 0, \"member\": 1, \"primary\": \"" PG "\", \"pool\": {\"size\": 1, /* x */ \"size\": 2} }]}",
     "shards[1].pool: duplicate key 'size'"},
    {"{\"shards\": [" S0 "], \"relays\": [{\"kind\": \"nats\"}, {\"kind\": \"nats\", \"kind\": \"kafka\"}]}",
     "relays[1]: duplicate key 'kind'"},
};

START_TEST(config_rejects_bad)
{
    const bad_config *c = &bad_configs[_i];
    odbox_registry *r = (odbox_registry *)1;
    odbox_error e;
    int rc = odbox_registry_parse(c->json, &r, &e);
    ck_assert_msg(rc == ODBOX_EINVAL, "case %d: rc %s for %s", _i, odbox_errname(rc), c->json);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(e.message, c->expect) != NULL, "case %d: message '%s' lacks '%s'", _i, e.message, c->expect);
    ck_assert_msg(strstr(e.message, "s3cr3t-PW") == NULL, "case %d: password in '%s'", _i, e.message);
}
END_TEST

/* The same key in sibling objects, key names inside values and comments,
 * and keys that only look alike are no duplicates. */
START_TEST(config_keys_once_per_object)
{
    const char *json = "{ /* \"shards\": [] */ \"default_shard\": \"0.1\",\n"
                       "  \"shards\": [ { \"group\": 0, \"member\": 0, \"primary\": \"" PG "\" },\n"
                       "    { \"group\": 0, \"member\": 1, \"primary\": \"" PG "\", // 'member'\n"
                       "      \"eventlog\": \"ev_1\" } ],\n"
                       "  \"relays\": [{\"kind\": \"nats\", \"Kind\": \"member\", \"note\": \"x\\\"kind\\\": 2\"}] }";
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_parse(json, &r, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(odbox_registry_shard_count(r), 2);
    ck_assert_int_eq(odbox_shard_get_id(odbox_registry_default_shard(r)).member, 1);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(config_file)
{
    char path[] = "/tmp/odbox-config-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *json = "{\"shards\": [" S0 "]}";
    ck_assert_int_eq(write(fd, json, strlen(json)), (int)strlen(json));
    close(fd);
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_load(path, &r, &e), ODBOX_OK);
    odbox_registry_free(&r);
    unlink(path);
    ck_assert_int_eq(odbox_registry_load(path, &r, &e), ODBOX_EIO);
    ck_assert_ptr_nonnull(strstr(e.message, "cannot open"));
    ck_assert_int_eq(odbox_registry_load(NULL, &r, &e), ODBOX_EINVAL);
    /* a NULL out is refused before the file is read */
    ck_assert_int_eq(odbox_registry_load(path, NULL, &e), ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "config: out is NULL");
    ck_assert_int_eq(odbox_registry_parse(NULL, &r, &e), ODBOX_EINVAL);
}
END_TEST

Suite *registry_config_suite(void)
{
    Suite *s = suite_create("registry_config");
    TCase *t = tcase_create("core");
    tcase_add_test(t, config_two_shards);
    tcase_add_test(t, one_dsn_is_one_shard);
    tcase_add_test(t, dsn_names_the_eventlog);
    tcase_add_test(t, built_in_code);
    tcase_add_loop_test(t, config_rejects_bad, 0, (int)(sizeof bad_configs / sizeof bad_configs[0]));
    tcase_add_test(t, config_keys_once_per_object);
    tcase_add_test(t, config_file);
    suite_add_tcase(s, t);
    return s;
}
