/* odbox — what tests/relay/rabbitmq_check.c shares with the modes of
 * rabbitmq-check in other files (rabbitmq_route.c). */
#ifndef ODBOX_TEST_RABBITMQ_CHECK_H
#define ODBOX_TEST_RABBITMQ_CHECK_H

#include <stdio.h>
#include <amqp.h>

/* a topic exchange bound to the durable queue QUEUE with "#" (declare) */
#define EXCHANGE "odbox-test"
#define QUEUE "odbox-q"

extern const char *url; /* the broker's, from the command line */
extern int failures;

#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            failures++;                                                                                               \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                                      \
        }                                                                                                             \
    } while (0)

/* A connection to url with channel 1 open; exits 1 when there is none. */
amqp_connection_state_t amqp_connect_or_die(void);
void close_amqp(amqp_connection_state_t st);
/* EXCHANGE and QUEUE declared and bound, the queue purged. */
void declare(void);

/* rabbitmq-check route (rabbitmq_route.c): where each row of a round goes;
 * 0 when its checks hold. */
int rabbit_route(void);

#endif
