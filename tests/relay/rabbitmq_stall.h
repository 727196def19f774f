/* odbox — rabbitmq-check's stall mode (tests/relay/rabbitmq_stall.c). */
#ifndef ODBOX_TEST_RABBITMQ_STALL_H
#define ODBOX_TEST_RABBITMQ_STALL_H

/* A publish to a node whose processes are stopped fails within about
 * its timeout: 0 when it did and a publish after the resume succeeded. */
int rabbit_stall(const char *url);

#endif
