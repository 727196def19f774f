/* odbox — the RabbitMQ relay (odbox/relay.h): publishes each event to an
 * exchange with publisher confirms and persistent messages (delivery mode
 * 2), message_id = the event id, content_type application/json, type =
 * the event type; mandatory: a message no queue takes fails its row
 * (unroutable) instead of being confirmed and lost. Present in every build; without librabbitmq (configure
 * --without-rabbitmq, or librabbitmq-dev missing) open and open_json
 * return ODBOX_EUNSUPPORTED. See odbox_relay_rabbitmq(3), docs/relays.md. */
#ifndef ODBOX_RELAY_RABBITMQ_H
#define ODBOX_RELAY_RABBITMQ_H

#include <json-c/json.h>
#include "relay.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_relay_rabbitmq_config {
    /* amqp://user:pass@host:port/vhost (amqps:// is refused); NULL: amqp://guest:guest@localhost:5672/ */
    const char *url;
    /* template (odbox_relay_template_check); "" is the default exchange,
     * which routes by queue name; a template that expands to "" fails
     * its row (ODBOX_EINVAL) */
    const char *exchange;
    const char *routing_key;  /* template, e.g. "{model_type}.{event_type}" */
    int max_connections;      /* connections at most, opened as needed; 0: 8 */
    /* one bound for a publish call, all its waits together (a place,
     * the connect and login, the confirm); 0: 10000; at most 3600000 */
    int timeout_ms;
    /* unconfirmed publishes one connection carries at once (from several
     * threads; a round's batch of publishes counts as one); a new
     * connection opens when all are full; 0: 16 */
    int max_in_flight_per_connection;
} odbox_relay_rabbitmq_config;

/* Checks cfg and makes *broker (for odbox_relay_add with
 * odbox_relay_rabbitmq_ops). Connects lazily: the first publish opens a
 * connection, so a broker that is down makes publishes fail (and rows
 * retry), not the open. ODBOX_EINVAL for a bad url or template. Each
 * connection checks an exchange once before its first publish to it: the
 * rows of one that does not exist fail alone (ODBOX_ENOTFOUND). */
int odbox_relay_rabbitmq_open(const odbox_relay_rabbitmq_config *cfg, void **broker, odbox_error *err);

/* The same from a JSON object {"url", "exchange", "routing_key",
 * "max_connections", "timeout_ms", "max_in_flight_per_connection",
 * "max_message_bytes"} (the "settings" of a relay in a config file); an
 * unknown key or a value of the wrong type is ODBOX_EINVAL, naming it.
 * max_message_bytes, only here (odbox_relay_rabbitmq_open takes its
 * default): the longest body published, 0: 16777216 (RabbitMQ 4's
 * max_message_size), at most 536870912; a longer body fails its row
 * (ODBOX_EINVAL) before anything is sent, since a body over the node's
 * max_message_size makes the server close the channel, and with it
 * every other publish in flight on the connection. Set it to the node's
 * max_message_size (RabbitMQ 3.x: 128 MiB). */
int odbox_relay_rabbitmq_open_json(json_object *settings, void **broker, odbox_error *err);

extern const odbox_relay_ops odbox_relay_rabbitmq_ops;

#ifdef __cplusplus
}
#endif

#endif
