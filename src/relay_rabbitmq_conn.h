/* odbox — the RabbitMQ relay's connections (librabbitmq): what the
 * publishing side (relay_rabbitmq_amqp.c) and the opening of one
 * (relay_rabbitmq_conn.c) share. */
#ifndef ODBOX_RELAY_RABBITMQ_CONN_H
#define ODBOX_RELAY_RABBITMQ_CONN_H

#include <amqp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "odbox/error.h"

#define CHANNEL 1
#define CHECK_CHANNEL 2 /* the exchanges' checks: a 404 closes this one */
/* exchanges a connection remembers as there (then the oldest is asked again) */
#define KNOWN_MAX 16

/* A publish waiting for its confirm (its publisher's). Its publisher's
 * condition variable: the reader wakes the waiters it settled and the
 * one that reads next, not every thread on the connection; the waiters
 * of one thread's batch share one, so that waking any of them wakes the
 * thread, whichever of them it waits for. */
typedef struct waiter {
    uint64_t tag;
    const char *id; /* the event's: a basic.return names its message by it */
    int done, rc;
    int returned; /* the broker returned it (why says so): its ack fails it */
    char why[300];
    pthread_cond_t *cv; /* settled, or the reader's role is free */
    struct waiter *next;
} waiter;

typedef struct rconn {
    amqp_connection_state_t st;
    pthread_mutex_t mu;  /* every librabbitmq call on st, and the fields below */
    uint64_t tag;        /* the delivery tag of the last publish on the channel */
    waiter *waiting;     /* unsettled publishes */
    int reading;         /* a waiter is the reader */
    /* set under mu; read without it by the pool, which must not wait for
     * a publish blocked in a send or an RPC under mu */
    atomic_int broken;
    char why[300];       /* why it broke: a row failing on it later names it */
    /* since when the node owes a confirm and has sent nothing (its last
     * frame, or the send that found nothing owed): timeout_ms of it is a
     * stall, which breaks the connection. A publish whose own call ran
     * out first leaves alone, its confirm still owed (abandoned: the
     * next send does not restart the count; the next frame does) */
    int64_t silent_since_us;
    int abandoned;
    int returning;       /* a basic.return was read: its header frame names the message */
    char returned[200];  /* ... and why the broker returned it */
    int users;           /* publishes holding it: under the broker's mutex */
    int retired;         /* out of the pool: under the broker's mutex */
    int check_open;      /* CHECK_CHANNEL is open */
    char *known[KNOWN_MAX]; /* exchanges found there */
    int nknown, next_known;
} rconn;

/* A failed RPC reply as text into buf. */
const char *odbox_rabbitmq_reply_text(amqp_rpc_reply_t r, char *buf, size_t cap);

/* 1 when r is librabbitmq's timeout: no answer within the bound set. */
int odbox_rabbitmq_timed_out(amqp_rpc_reply_t r);

/* A connection to info's node, channel CHANNEL open in confirm mode, every
 * step (the host name's lookup included) done by end_us (odbox_mono_us:
 * the publish's deadline, its timeout_ms from its start); ODBOX_ECONNECT
 * naming the host and the step that failed. timeout_ms is the
 * connection's own bound for a send (TCP_USER_TIMEOUT). */
int odbox_rabbitmq_conn_open(const struct amqp_connection_info *info, int timeout_ms, int64_t end_us, rconn **out,
                             odbox_error *err);

/* Milliseconds left until end_us (odbox_mono_us), rounded up; 0 once it
 * has passed. */
int odbox_rabbitmq_left_ms(int64_t end_us);

/* Without the goodbye handshake; NULL is accepted. */
void odbox_rabbitmq_conn_free(rconn *c);

#endif
