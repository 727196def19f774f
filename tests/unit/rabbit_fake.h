/* odbox — a fake AMQP 0-9-1 node for the RabbitMQ relay's unit tests
 * (rabbit_fake.c): it logs in any client on 127.0.0.1, acks every
 * publish, and misbehaves as a script says, at moments a real node
 * cannot be made to pick. Built with librabbitmq only. */
#ifndef ODBOX_TESTS_RABBIT_FAKE_H
#define ODBOX_TESTS_RABBIT_FAKE_H

#include <check.h>

typedef struct rabbit_fake_script {
    /* connection.close 320 CONNECTION_FORCED instead of the ack of the
     * first connection's Nth publish (0: never) */
    int close_on_publish;
    /* ... or as the answer to an exchange.declare of this name */
    const char *close_on_declare;
    /* the first publish's ack is held; an exchange.declare of slow_declare
     * is answered slow_declare_ms after that publish, the held ack sent
     * just before the answer (so the client reads the ack in that RPC) */
    const char *slow_declare;
    int slow_declare_ms;
    /* channel.open-ok and confirm.select-ok each come this late */
    int slow_open_ms;
    /* the first connection's first publish is not acked: the node closes
     * that connection (320 CONNECTION_FORCED) this long after it (0: no) */
    int close_after_ms;
    /* no publish is acked (a node that stalled), close_after_ms's close
     * aside */
    int never_ack;
} rabbit_fake_script;

typedef struct rabbit_fake rabbit_fake;

/* Listening on 127.0.0.1 (a free port) until rabbit_fake_stop; NULL when
 * that failed. */
rabbit_fake *rabbit_fake_start(const rabbit_fake_script *script);
int rabbit_fake_port(const rabbit_fake *f);
/* "amqp://guest:guest@127.0.0.1:PORT/" */
const char *rabbit_fake_url(const rabbit_fake *f);
/* basic.publish frames read on the k-th connection accepted (from 0) */
int rabbit_fake_published(rabbit_fake *f, int k);
/* connections accepted so far */
int rabbit_fake_connections(rabbit_fake *f);
void rabbit_fake_stop(rabbit_fake *f);

/* test_relay_rabbitmq_pool.c: the pool against the fake node */
TCase *relay_rabbitmq_pool_tcase(void);

#endif
