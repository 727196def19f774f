/* odbox — the RabbitMQ relay's parts: settings (relay_rabbitmq_settings.c),
 * open_json and the build without librabbitmq (relay_rabbitmq.c), and
 * publishing with librabbitmq (relay_rabbitmq_amqp.c, relay_rabbitmq_conn.c). */
#ifndef ODBOX_RELAY_RABBITMQ_INTERNAL_H
#define ODBOX_RELAY_RABBITMQ_INTERNAL_H

#include "odbox/relay_rabbitmq.h"

#define ODBOX_RABBITMQ_DEFAULT_URL "amqp://guest:guest@localhost:5672/"
#define ODBOX_RABBITMQ_DEFAULT_TIMEOUT_MS 10000
#define ODBOX_RABBITMQ_DEFAULT_MAX_CONNECTIONS 8
#define ODBOX_RABBITMQ_DEFAULT_IN_FLIGHT 16
/* bounds of max_connections and max_in_flight_per_connection */
#define ODBOX_RABBITMQ_MAX_CONNECTIONS 1024
#define ODBOX_RABBITMQ_MAX_IN_FLIGHT 65535
/* max_message_bytes: RabbitMQ 4's default max_message_size, and the
 * largest the server allows */
#define ODBOX_RABBITMQ_DEFAULT_MAX_MESSAGE 16777216
#define ODBOX_RABBITMQ_MAX_MESSAGE 536870912

/* A relay's settings: the public config, and what only the JSON settings
 * take (odbox_relay_rabbitmq_config's size is ABI). */
typedef struct odbox_rabbitmq_settings {
    odbox_relay_rabbitmq_config cfg;
    int max_message_bytes; /* 0: ODBOX_RABBITMQ_DEFAULT_MAX_MESSAGE */
} odbox_rabbitmq_settings;

/* s from a relay's JSON settings (strings point into settings);
 * ODBOX_EINVAL for an unknown key or a wrong type, naming it. */
int odbox_relay_rabbitmq_parse(json_object *settings, odbox_rabbitmq_settings *s, odbox_error *err);

/* Checks the templates and numbers (in every build, so a config file is
 * judged the same with or without librabbitmq). */
int odbox_relay_rabbitmq_check(const odbox_rabbitmq_settings *s, odbox_error *err);

/* odbox_relay_rabbitmq_open with all the settings. */
int odbox_relay_rabbitmq_open_settings(const odbox_rabbitmq_settings *s, void **broker, odbox_error *err);

/* Tests only (NULL otherwise; with librabbitmq): called by a publish
 * whose connection broke, just before it leaves the connection, so that
 * a test can publish in the moment another thread's publish would meet
 * the broken connection (tests/unit/test_relay_rabbitmq_pool.c). */
extern void (*odbox_relay_rabbitmq_test_leaving_broken)(void *broker);

#endif
