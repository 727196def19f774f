/* odbox — the Kafka relay (librdkafka): a broker for odbox_relay_add whose
 * publish produces the event's body and returns once Kafka acknowledged it
 * (acks=all on an idempotent producer).
 *
 * Each message: topic from a template (odbox/relay.h), key = the event's
 * model id (no key when the event has none), headers "id" (event id),
 * "type" (event type) and "action_id", value = odbox_relay_body's JSON.
 * The partitioner is murmur2_random, Java's default for keyed messages,
 * so producers and consumers in other languages agree on a key's partition.
 *
 * Built when configure finds librdkafka (Debian librdkafka-dev; --with-kafka,
 * --without-kafka). Without it these functions exist and return
 * ODBOX_EUNSUPPORTED. man odbox_relay_kafka(3), docs/relays.md. */
#ifndef ODBOX_RELAY_KAFKA_H
#define ODBOX_RELAY_KAFKA_H

#include <json-c/json.h>
#include "relay.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_relay_kafka_config {
    const char *bootstrap_servers; /* "host:port,host:port" */
    const char *topic;             /* a template, e.g. "{model_type}" */
    /* Extra librdkafka settings: NULL-terminated name, value, name, value...;
     * may be NULL. bootstrap.servers, enable.idempotence, acks,
     * partitioner, the message timeouts and delivery.report.only.error
     * (a publish succeeds only on its delivery report) are odbox's:
     * refused here, under librdkafka's aliases (metadata.broker.list,
     * request.required.acks, delivery.timeout.ms) and as "topic." and
     * the name (topic.acks) too. */
    const char *const *properties;
    int timeout_ms; /* a publish waits at most this for Kafka's acknowledgement; 0: 10000; at most 3600000 */
} odbox_relay_kafka_config;

/* Creates the producer (copied settings). It connects in the background
 * from here on and does not wait for it: an unreachable cluster shows as
 * publishes that fail after timeout_ms. ODBOX_EINVAL for a missing or bad
 * setting or topic template (odbox_relay_template_check; one without a
 * placeholder must be a legal topic name), naming it.
 * *broker goes to odbox_relay_add with &odbox_relay_kafka_ops. */
int odbox_relay_kafka_open(const odbox_relay_kafka_config *cfg, void **broker, odbox_error *err);

/* The same from a relay's "settings" object of a JSON config file:
 * {"bootstrap_servers": "...", "topic": "...", "timeout_ms": 10000,
 *  "properties": {"linger.ms": "5"}}; an unknown key is refused by name. */
int odbox_relay_kafka_open_json(json_object *settings, void **broker, odbox_error *err);

/* publish: thread-safe (one producer for every worker thread); 0 once the
 * message's delivery report says Kafka stored it; returns within
 * timeout_ms and 2 s. After a fatal producer error the publishes in flight
 * fail (ODBOX_ECONNLOST, naming it) and the producer is replaced by a new
 * one. close: flushes for at most timeout_ms, then destroys the producer
 * (and waits for replaced ones' destruction); NULL-safe. */
extern const odbox_relay_ops odbox_relay_kafka_ops;

#ifdef __cplusplus
}
#endif

#endif
