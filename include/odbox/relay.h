/* odbox — relays: subscriptions whose call publishes the event to a
 * broker (NATS JetStream, RabbitMQ, Kafka) and succeeds only once the
 * broker has confirmed it. A relay is a handler like any other: a durable
 * name and event types, its own notifications, retries, backoff, expiry,
 * metrics and rows in `odbox handlers`; only its call is odbox's.
 *
 * The message body is the event as JSON, schema version 1 (odbox_relay(3)):
 *   {"schema_version": 1, "id": <event id>, "aggregatetype": <model type>,
 *    "aggregateid": <model id>, "type": <event type>, "payload": {...},
 *    "namespace": ..., "action_id": ..., "action_name": ...,
 *    "event_date": "2026-01-01T00:00:00.000000Z"}
 * id, aggregatetype, aggregateid, type and payload are the names
 * Debezium's outbox event router reads, so a consumer of a Debezium setup
 * reads these messages too. A model type or id the event has none of is
 * JSON null; so is a payload the row has none of. */
#ifndef ODBOX_RELAY_H
#define ODBOX_RELAY_H

#include "handlers.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODBOX_RELAY_SCHEMA_VERSION 1

/* The message body of env's event, as above: *out is malloc'd JSON text
 * (free it), *len its length. */
int odbox_relay_body(const odbox_envelope *env, char **out, size_t *len, odbox_error *err);

/* Templates name where a message goes (a subject, a routing key, a topic):
 * text with placeholders {namespace}, {action_name}, {action_id},
 * {model_type}, {model_id}, {event_type}, {event_id} and {handler}; "{{"
 * and "}}" stand for "{" and "}". A placeholder whose value the event
 * lacks (no model) expands to "". check: ODBOX_EINVAL for an unknown
 * placeholder or an unpaired brace, naming it. expand: *out malloc'd. */
int odbox_relay_template_check(const char *tmpl, odbox_error *err);
int odbox_relay_expand(const char *tmpl, const odbox_envelope *env, char **out, odbox_error *err);

/* A broker's side of a relay (versioned, as odbox's other method tables:
 * version 1 tables, without publish_batch, are still taken). */
#define ODBOX_RELAY_OPS_VERSION 2
typedef struct odbox_relay_ops {
    int version;        /* ODBOX_RELAY_OPS_VERSION */
    const char *kind;   /* "nats", "rabbitmq", "kafka" */
    /* Publishes body (len bytes) for env and returns 0 once the broker
     * has confirmed it; a negative ODBOX_E* code with err set otherwise
     * (the row is retried with backoff; ODBOX_EDISCARD, for a message
     * that cannot be sent with these settings whatever the broker's
     * state, gives the row up at once). Called on the delivery's worker
     * threads, several at once. */
    int (*publish)(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err);
    /* Closes the broker connection; NULL-safe on broker. */
    void (*close)(void *broker);
    /* Version 2; may be NULL. Publishes n events at once (bodies[i],
     * lens[i] for envs[i]) and returns once the broker has answered each
     * of them or the wait for the answers ended: rcs[i] 0 when confirmed,
     * else a negative ODBOX_E* code with errs[i] set. Where it is given,
     * a handling round hands a relay all of its rows in one call, on one
     * worker thread, so that their confirms are awaited together instead
     * of one after another; the round's handler_timeout_ms bounds the
     * call as a whole. */
    void (*publish_batch)(void *broker, size_t n, const odbox_envelope *const *envs, const char *const *bodies,
                          const size_t *lens, int *rcs, odbox_error *errs);
} odbox_relay_ops;

typedef struct odbox_relay_config {
    const char *name;                /* the subscription's durable name (an odbox_handler name) */
    const char *const *event_types;  /* NULL-terminated, at least one */
    const char *const *former_names; /* may be NULL */
    /* Per model_id order: at most one unconfirmed message per model_id
     * (odbox_handler_options.ordered). */
    int ordered;
    int max_in_flight;               /* odbox_handler_options.max_in_flight; 0: none */
} odbox_relay_config;

typedef struct odbox_relay odbox_relay;

/* Adds a relay to h: a handler named cfg->name whose call publishes the
 * event's body through ops (broker: the ops' own state). The relay takes
 * broker: odbox_relay_free closes it, as does a failed add (but for ops
 * NULL or without close: then broker stays the caller's). *out is the
 * relay (free it after every delivery using h is freed). ODBOX_EINVAL for
 * bad arguments (as odbox_handlers_add), ODBOX_ESTATE once a delivery uses
 * h; *out is then NULL, except when the handler was added and its options
 * were refused (not expected: they are checked first), when *out is set
 * and is the caller's to free. */
int odbox_relay_add(odbox_handlers *h, const odbox_relay_config *cfg, const odbox_relay_ops *ops, void *broker,
                    odbox_relay **out, odbox_error *err);

/* Messages the relay published and the broker confirmed, and publishes
 * that failed, since it was added. */
int64_t odbox_relay_published(const odbox_relay *r);
int64_t odbox_relay_failed(const odbox_relay *r);

/* Publish calls running now (a round's batch is one call), abandoned ones
 * included until they return: while it is not 0 the rows of those calls
 * are claimed, not due, and not yet written. 0 for NULL. */
int odbox_relay_calls_running(const odbox_relay *r);

/* Closes the broker and frees. After every delivery using the relay's
 * handlers is freed; a call such a delivery abandoned (still running at
 * handler_timeout_ms) may outlive it: the broker is then closed, and the
 * relay freed, when that call returns. NULL-safe; sets *r = NULL. */
void odbox_relay_free(odbox_relay **r);

#ifdef __cplusplus
}
#endif

#endif
