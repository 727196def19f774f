/* odbox — the NATS JetStream relay (man odbox_relay_nats(3)): publishes
 * each event's body (odbox/relay.h) to a subject with JetStream and
 * succeeds only on the stream's PubAck. The header Nats-Msg-Id is the
 * event id, so the stream's duplicate window drops a redelivery (a row
 * published but not yet marked SUCCEEDED when its process died).
 *
 * Present in every build; without libnats (configure --without-nats or
 * libnats-dev missing) open returns ODBOX_EUNSUPPORTED. */
#ifndef ODBOX_RELAY_NATS_H
#define ODBOX_RELAY_NATS_H

#include <json-c/json.h>
#include "relay.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_relay_nats_config {
    const char *url;     /* e.g. nats://127.0.0.1:4222; a comma-separated list for a cluster (a ',' always
                          * separates servers: a password or token cannot hold one); NULL: that one;
                          * tls:// on any server makes TLS required; a password or token in it is ***
                          * in every message */
    const char *subject; /* template (odbox_relay_expand), e.g. "events.{model_type}.{event_type}" */
    const char *stream;  /* may be NULL: else checked to exist when the relay connects */
    int timeout_ms;      /* connect (shared by a list's servers), PubAck and stream check wait; 0: 10000;
                          * at most 3600000 */
} odbox_relay_nats_config;

/* Checks cfg (each server of the url: [nats:// or tls://][userinfo@]
 * host[:port]; the subject template, and as a subject when it has no
 * placeholder; the timeout) and makes *broker for
 * odbox_relay_add with odbox_relay_nats_ops. It connects lazily, on the
 * first publish, so a relay process starts while NATS is down: the rows
 * then fail with the connect error and are retried with backoff. Once
 * connected, libnats reconnects by itself (every 500 ms, without end);
 * a publish meanwhile waits at most timeout_ms; a connection libnats
 * closes for good (credentials refused twice, a server's -ERR) is
 * replaced by the next publish. The strings are copied.
 * ODBOX_EINVAL for a bad config, ODBOX_EUNSUPPORTED when built without
 * libnats. Thread-safe. */
int odbox_relay_nats_open(const odbox_relay_nats_config *cfg, void **broker, odbox_error *err);

/* The same from a JSON object {"url", "subject", "stream", "timeout_ms"}
 * (the "settings" of a relay in a config file); subject is required, an
 * unknown key is refused with its name. */
int odbox_relay_nats_open_json(json_object *settings, void **broker, odbox_error *err);

/* publish: thread-safe (one connection shared by the delivery's workers;
 * one that libnats closed for good is replaced on the next publish); an
 * expanded subject that is empty, has an empty token, a space or a
 * wildcard (* or >), or is over 1024 bytes, is ODBOX_EINVAL for that row.
 * close: NULL-safe. */
extern const odbox_relay_ops odbox_relay_nats_ops;

#ifdef __cplusplus
}
#endif

#endif
