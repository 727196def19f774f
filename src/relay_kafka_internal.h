/* odbox — the Kafka relay's test hook; not in the ABI (the tests link the
 * library statically). */
#ifndef ODBOX_RELAY_KAFKA_INTERNAL_H
#define ODBOX_RELAY_KAFKA_INTERNAL_H

/* Raises a fatal error (librdkafka's rd_kafka_test_fatal_error, as
 * OUT_OF_ORDER_SEQUENCE_NUMBER with reason) on broker's current producer,
 * as a broken idempotent producer would: the relay must replace it. */
int odbox_relay_kafka_test_fatal(void *broker, const char *reason);

#endif
