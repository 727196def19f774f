/* odbox — a caller process for the idempotency suite: opens its own
 * registry and executor, waits (bounded) until the barrier file exists, so
 * that every caller starts at the same moment, then runs one keyed action
 * that adds a dummy named NAME with AMOUNT and emits a DummyCreated event
 * (with UPDATE_ID: adds AMOUNT to that dummy's amount and emits a
 * DummyChanged event on it, an optimistic UPDATE), and prints
 *     <ODBOX code name> <action_id> <replayed> <attempts> <result JSON>
 * then exits 0 (1 when the execution failed, its message on stderr, or
 * succeeded with its odbox_error still holding one). The
 * action's perform pauses PAUSE_MS first, so that every caller reaches
 * the key's INSERT before the first commits: the unique key decides.
 *
 * attempts is 0 when the key was found before perform ran (read first,
 * or, on MySQL/MariaDB, its INSERT before perform waited for the winner),
 * else perform ran and the claim (or a stale version) met the winner's
 * key.
 *
 * With IDEM_CLAIM_KEYS_FIRST=1 in its environment the executor claims
 * keys first (odbox_executor_claim_keys_first).
 *
 * Usage: idem-caller DSN KEY NAME AMOUNT BARRIER_FILE PAUSE_MS [UPDATE_ID] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "odbox/odbox.h"

static const odbox_column dummy_columns[] = {
    {"name", ODBOX_TYPE_TEXT, 0, 100},          {"amount", ODBOX_TYPE_INT64, 0, 0},
    {"reward_points", ODBOX_TYPE_INT64, 1, 0},  {"ratio", ODBOX_TYPE_DOUBLE, 1, 0},
    {"flag", ODBOX_TYPE_BOOL, 1, 0},            {"aliases", ODBOX_TYPE_JSON, 1, 0},
    {"seen_at", ODBOX_TYPE_TIMESTAMP, 1, 0},
};
static const odbox_model_type DUMMY = {"Dummy", "dummies", ODBOX_KIND_MODEL, dummy_columns,
                                       sizeof dummy_columns / sizeof dummy_columns[0]};
static const odbox_event_type CREATED = {"DummyCreated"}, CHANGED = {"DummyChanged"};

static int pause_ms;
static const char *update_id;

static int update(odbox_context *ctx, int64_t amount, odbox_plan *plan, odbox_error *err)
{
    odbox_model *m = NULL;
    int64_t was = 0;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &DUMMY, update_id, ODBOX_READ_PRIMARY, &m, err);
    if (rc == ODBOX_OK && (rc = odbox_model_get_int64(m, "amount", &was, err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(m, "amount", was + amount, err)) == ODBOX_OK)
        rc = odbox_plan_update(plan, m, NULL, err);
    json_object *payload = json_object_new_object();
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &CHANGED, payload, err);
    json_object_put(payload);
    if (rc == ODBOX_OK) {
        json_object *result = json_object_new_object();
        json_object_object_add(result, "amount", json_object_new_int64(was + amount));
        json_object_object_add(result, "pid", json_object_new_int((int)getpid()));
        odbox_plan_set_result(plan, result);
    }
    odbox_model_free(&m);
    return rc;
}

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    (void)user;
    usleep((useconds_t)pause_ms * 1000);
    const char *name = json_object_get_string(json_object_object_get(params, "name"));
    int64_t amount = json_object_get_int64(json_object_object_get(params, "amount"));
    if (update_id)
        return update(ctx, amount, plan, err);
    odbox_model *m = NULL;
    int rc = odbox_model_new(&DUMMY, NULL, &m, err);
    if (rc == ODBOX_OK && (rc = odbox_model_set_text(m, "name", name, err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(m, "amount", amount, err)) == ODBOX_OK)
        rc = odbox_plan_add(plan, m, err);
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "amount", json_object_new_int64(amount));
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &CREATED, payload, err);
    json_object_put(payload);
    if (rc == ODBOX_OK) {
        json_object *result = json_object_new_object();
        json_object_object_add(result, "id", json_object_new_string(odbox_model_id(m)));
        json_object_object_add(result, "pid", json_object_new_int((int)getpid()));
        odbox_plan_set_result(plan, result);
    }
    odbox_model_free(&m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: idem-caller DSN KEY NAME AMOUNT BARRIER_FILE PAUSE_MS [UPDATE_ID]\n");
        return 2;
    }
    pause_ms = atoi(argv[6]);
    update_id = argc == 8 ? argv[7] : NULL;
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    int rc = odbox_registry_open_dsn(argv[1], &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_open("com.example.odbox_test", r, NULL, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(exe, &DUMMY, &e);
    const char *first = getenv("IDEM_CLAIM_KEYS_FIRST");
    if (rc == ODBOX_OK && first && !strcmp(first, "1"))
        odbox_executor_claim_keys_first(exe, 1);
    for (int waited = 0; rc == ODBOX_OK && access(argv[5], F_OK) != 0; waited += 5) {
        if (waited > 30000) {
            fprintf(stderr, "idem-caller: no barrier file after 30 s\n");
            return 1;
        }
        usleep(5000);
    }
    odbox_result res = {0};
    if (rc == ODBOX_OK) {
        json_object *params = json_object_new_object();
        json_object_object_add(params, "name", json_object_new_string(argv[3]));
        json_object_object_add(params, "amount", json_object_new_int64(atoll(argv[4])));
        const odbox_action action = {"IdemCreate", perform, NULL};
        rc = odbox_execute_keyed(exe, &action, params, argv[2], NULL, &res, &e);
        json_object_put(params);
    }
    printf("%s %s %d %d %s\n", odbox_errname(rc), res.action_id[0] ? res.action_id : "-", res.replayed, res.attempts,
           res.value ? json_object_to_json_string_ext(res.value, JSON_C_TO_STRING_PLAIN) : "null");
    fflush(stdout);
    if (rc != ODBOX_OK)
        fprintf(stderr, "idem-caller: %s\n", e.message);
    int left = rc == ODBOX_OK && (e.code || e.message[0]); /* a success leaves no error behind */
    if (left)
        fprintf(stderr, "idem-caller: ODBOX_OK, but the error still holds %s: %s\n", odbox_errname(e.code), e.message);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc == ODBOX_OK && !left ? 0 : 1;
}
