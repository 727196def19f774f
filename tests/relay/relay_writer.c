/* odbox — a writer for the relay tests: commits COUNT events of type
 * RelayProbed, BATCH per action (one transaction), event i on model
 * 00000000-0000-4000-8000-<i % MODELS, 12 digits> of type RelayProbe with payload {"seq": i}, so a
 * consumer can check per model_id order. Exits 0, or 1 with the message.
 *
 * Usage: relay-writer DSN COUNT [BATCH [MODELS [START]]]
 * RELAY_WRITER_NAMESPACE: the actions' namespace instead of
 * com.example.relay_writer (a long one makes a long {namespace}). */
#include <stdio.h>
#include <stdlib.h>
#include "odbox/odbox.h"

static const odbox_model_type PROBE_T = {"RelayProbe", "relay_probes", ODBOX_KIND_MODEL, NULL, 0};
static const odbox_event_type PROBED = {"RelayProbed"};

typedef struct span {
    int first, n, models;
} span;

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    (void)params;
    const span *s = user;
    int rc = ODBOX_OK;
    for (int i = s->first; rc == ODBOX_OK && i < s->first + s->n; i++) {
        char id[40];
        snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i % s->models);
        odbox_model *m = NULL;
        rc = odbox_model_new(&PROBE_T, id, &m, err);
        json_object *payload = json_object_new_object();
        json_object_object_add(payload, "seq", json_object_new_int(i));
        if (rc == ODBOX_OK)
            rc = odbox_plan_emit(plan, m, &PROBED, payload, err);
        json_object_put(payload);
        odbox_model_free(&m);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 6) {
        fprintf(stderr, "usage: relay-writer DSN COUNT [BATCH [MODELS [START]]]\n");
        return 2;
    }
    int count = atoi(argv[2]), batch = argc > 3 ? atoi(argv[3]) : 1, models = argc > 4 ? atoi(argv[4]) : 10;
    int start = argc > 5 ? atoi(argv[5]) : 0;
    if (batch < 1 || models < 1) {
        fprintf(stderr, "relay-writer: BATCH and MODELS must be positive\n");
        return 2;
    }
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    int rc = odbox_registry_open_dsn(argv[1], &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_open(getenv("RELAY_WRITER_NAMESPACE") ? getenv("RELAY_WRITER_NAMESPACE")
                                                                  : "com.example.relay_writer",
                                 r, NULL, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(exe, &PROBE_T, &e);
    for (int i = start; i < start + count && rc == ODBOX_OK; i += batch) {
        span s = {i, start + count - i < batch ? start + count - i : batch, models};
        const odbox_action action = {"RelayWrite", perform, &s};
        odbox_result res;
        rc = odbox_execute(exe, &action, NULL, NULL, &res, &e);
        odbox_result_clear(&res);
    }
    if (rc != ODBOX_OK)
        fprintf(stderr, "relay-writer: %s: %s\n", odbox_errname(rc), e.message);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc == ODBOX_OK ? 0 : 1;
}
