/* odbox — unit tier: Check suites that need no server. */
#ifndef ODBOX_TESTS_UNIT_H
#define ODBOX_TESTS_UNIT_H

#include <check.h>

Suite *dsn_suite(void);
Suite *basics_suite(void);
Suite *registry_config_suite(void);
Suite *uuid_suite(void);
Suite *dialect_sqlite_suite(void);
Suite *jobs_suite(void);
Suite *drivers_suite(void);
Suite *wake_suite(void);
Suite *ops_suite(void);
Suite *handlers_suite(void);
Suite *relay_suite(void);
Suite *relay_nats_suite(void);
Suite *relay_kafka_suite(void);
Suite *relay_rabbitmq_suite(void);
Suite *refusals_suite(void);
Suite *keys_suite(void);

#endif
