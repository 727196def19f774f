/* odbox — rabbitmq-check stall (tests/relay/rabbitmq.test): a peer that
 * stops reading mid-publish. The node's processes are stopped
 * ($RABBIT_STALL_CMD: SIGSTOP, so its sockets stay open and the kernel
 * stops acknowledging once its buffers are full) while the relay sends a
 * message bigger than those buffers. librabbitmq's send has no deadline:
 * the publish must still fail within about timeout_ms (TCP_USER_TIMEOUT
 * on the relay's socket), not block for ever holding the connection.
 * After $RABBIT_RESUME_CMD a publish succeeds on a new connection. An
 * alarm fails the check instead of hanging when the publish blocks. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "odbox/odbox.h"
#include "rabbitmq_stall.h"

enum { STALL_TIMEOUT_MS = 2000, STALL_BODY = 32 << 20, STALL_ALARM_S = 30 };

static double stall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: stall: the publish to the stopped node still blocks after 30 s\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(1);
    _exit(1);
}

int rabbit_stall(const char *url)
{
    const char *stall = getenv("RABBIT_STALL_CMD"), *resume = getenv("RABBIT_RESUME_CMD");
    if (!stall || !resume) {
        fprintf(stderr, "rabbitmq-check stall: RABBIT_STALL_CMD and RABBIT_RESUME_CMD must be set\n");
        return 2;
    }
    odbox_error e = {0};
    void *b = NULL;
    /* the default exchange and rabbitmq-check's queue (declared first; its
     * next mode purges it): a message no queue took would fail */
    /* max_message_bytes (JSON settings only): the 32 MB body is over the
     * default 16 MiB (RabbitMQ 4's max_message_size), within 3.x's 128 MiB */
    char settings[512];
    snprintf(settings, sizeof settings,
             "{\"url\": \"%s\", \"exchange\": \"\", \"routing_key\": \"odbox-q\", \"timeout_ms\": %d, "
             "\"max_connections\": 1, \"max_message_bytes\": %d}",
             url, STALL_TIMEOUT_MS, 2 * STALL_BODY);
    json_object *so = json_tokener_parse(settings);
    odbox_envelope env = {.event_id = "stall-1", .event_type = "RabbitStall"};
    int rc = so ? odbox_relay_rabbitmq_open_json(so, &b, &e) : odbox_error_set(&e, ODBOX_EINVAL, "bad settings");
    json_object_put(so);
    if (rc == ODBOX_OK)
        rc = odbox_relay_rabbitmq_ops.publish(b, &env, "{}", 2, &e);
    if (rc != ODBOX_OK) {
        fprintf(stderr, "FAIL: stall: before the stall: %s: %s\n", odbox_errname(rc), e.message);
        return 1;
    }
    char *body = malloc(STALL_BODY);
    if (!body || system(stall) != 0) {
        fprintf(stderr, "FAIL: stall: no body or RABBIT_STALL_CMD failed\n");
        return 1;
    }
    memset(body, 'a', STALL_BODY);
    signal(SIGALRM, on_alarm);
    alarm(STALL_ALARM_S);
    double t0 = stall_now();
    rc = odbox_relay_rabbitmq_ops.publish(b, &env, body, STALL_BODY, &e);
    double secs = stall_now() - t0;
    alarm(0);
    int resumed = system(resume) == 0;
    printf("stall: a %d MB publish to the stopped node: %s after %.2f s (timeout_ms %d): %s\n", STALL_BODY >> 20,
           odbox_errname(rc), secs, STALL_TIMEOUT_MS, rc == ODBOX_OK ? "" : e.message);
    int failures = 0;
    /* ODBOX_ECONNLOST: the send itself failed (ODBOX_ETIMEDOUT would be a
     * body that fit in the sockets' buffers, then no confirm) */
    if (rc != ODBOX_ECONNLOST || secs > 3.0 * STALL_TIMEOUT_MS / 1000) {
        fprintf(stderr, "FAIL: stall: the publish gave %s after %.2f s\n", odbox_errname(rc), secs);
        failures++;
    }
    /* the node answers again: a new connection replaces the broken one */
    int again = resumed ? odbox_relay_rabbitmq_ops.publish(b, &env, "{}", 2, &e) : ODBOX_EIO;
    printf("stall: after the node resumed: %s%s%s\n", odbox_errname(again), again ? ": " : "",
           again ? e.message : "");
    if (again != ODBOX_OK) {
        fprintf(stderr, "FAIL: stall: after the node resumed: %s\n", odbox_errname(again));
        failures++;
    }
    odbox_relay_rabbitmq_ops.close(b);
    free(body);
    return failures ? 1 : 0;
}
