/* odbox — the Kafka relay's test hooks; not in the ABI (the tests link the
 * library statically). */
#ifndef ODBOX_RELAY_KAFKA_INTERNAL_H
#define ODBOX_RELAY_KAFKA_INTERNAL_H

#include <stddef.h>

/* Raises a fatal error (librdkafka's rd_kafka_test_fatal_error, as
 * OUT_OF_ORDER_SEQUENCE_NUMBER with reason) on broker's current producer,
 * as a broken idempotent producer would: the relay must replace it. */
int odbox_relay_kafka_test_fatal(void *broker, const char *reason);
/* The setting name of broker's current producer, as librdkafka reads it
 * back (rd_kafka_conf_get), into out: ODBOX_ENOTFOUND without a producer
 * or such a setting. */
int odbox_relay_kafka_test_setting(void *broker, const char *name, char *out, size_t cap);

#endif
