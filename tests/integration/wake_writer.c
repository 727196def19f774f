/* odbox — a writer process for the wake-up tests: runs COUNT actions, each
 * emitting one event (on a model it never writes, so it needs no table),
 * through an executor of its own, and prints per action
 *     <action_id> <UTC microseconds when odbox_execute returned>
 * then exits 0 (1 on any failure, with the message on stderr). It shares
 * nothing with the test process but the database.
 *
 * Usage: wake-writer DSN COUNT [PAUSE_MS]   (PAUSE_MS between actions) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "odbox/odbox.h"

static const odbox_model_type PROBE_T = {"WakeProbe", "wake_probes", ODBOX_KIND_MODEL, NULL, 0};
static const odbox_event_type PROBED = {"WakeProbed"};

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    (void)params;
    (void)user;
    odbox_model *m = NULL;
    int rc = odbox_model_new(&PROBE_T, NULL, &m, err);
    json_object *payload = json_object_new_object();
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &PROBED, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: wake-writer DSN COUNT [PAUSE_MS]\n");
        return 2;
    }
    int count = atoi(argv[2]), pause_ms = argc == 4 ? atoi(argv[3]) : 0;
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    int rc = odbox_registry_open_dsn(argv[1], &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_open("com.example.wake_writer", r, NULL, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(exe, &PROBE_T, &e);
    const odbox_action action = {"WakeWrite", perform, NULL};
    for (int i = 0; i < count && rc == ODBOX_OK; i++) {
        if (i && pause_ms > 0)
            usleep((useconds_t)pause_ms * 1000);
        odbox_result res;
        rc = odbox_execute(exe, &action, NULL, NULL, &res, &e);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        if (rc == ODBOX_OK)
            printf("%s %lld\n", res.action_id, (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
        fflush(stdout);
        odbox_result_clear(&res);
    }
    if (rc != ODBOX_OK)
        fprintf(stderr, "wake-writer: %s: %s\n", odbox_errname(rc), e.message);
    odbox_executor_free(&exe); /* sends what is pending */
    odbox_registry_free(&r);
    return rc == ODBOX_OK ? 0 : 1;
}
