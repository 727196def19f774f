/* odbox — the RabbitMQ relay (see odbox/relay_rabbitmq.h): with
 * librabbitmq, a pool of up to max_connections connections publishing
 * with confirms, each carrying up to max_in_flight_per_connection
 * unconfirmed publishes of several threads (this file: open_json and the
 * build without librabbitmq; relay_rabbitmq_settings.c: parsing and
 * checks; relay_rabbitmq_amqp.c: the pool and the publishing;
 * relay_rabbitmq_conn.c: opening a connection). */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "relay_rabbitmq_internal.h"

int odbox_relay_rabbitmq_open_json(json_object *settings, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    if (!broker)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay settings: broker is NULL");
    odbox_rabbitmq_settings s;
    int rc = odbox_relay_rabbitmq_parse(settings, &s, err);
    return rc == ODBOX_OK ? odbox_relay_rabbitmq_open_settings(&s, broker, err) : rc;
}

int odbox_relay_rabbitmq_open(const odbox_relay_rabbitmq_config *cfg, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    if (!cfg || !broker)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: config or broker is NULL");
    odbox_rabbitmq_settings s = {.cfg = *cfg};
    return odbox_relay_rabbitmq_open_settings(&s, broker, err);
}

#ifndef HAVE_RABBITMQ

int odbox_relay_rabbitmq_open_settings(const odbox_rabbitmq_settings *s, void **broker, odbox_error *err)
{
    *broker = NULL;
    int rc = odbox_relay_rabbitmq_check(s, err);
    return rc != ODBOX_OK ? rc
                          : odbox_fail(err, ODBOX_EUNSUPPORTED,
                                       "rabbitmq relay: odbox was built without librabbitmq (install the Debian "
                                       "package librabbitmq-dev and configure --with-rabbitmq)");
}

static int unsupported_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    return odbox_fail(err, ODBOX_EUNSUPPORTED, "rabbitmq relay: odbox was built without librabbitmq");
}

static void unsupported_close(void *broker)
{
}

const odbox_relay_ops odbox_relay_rabbitmq_ops = {ODBOX_RELAY_OPS_VERSION, "rabbitmq", unsupported_publish,
                                                  unsupported_close, NULL};

#endif /* the publishing side with librabbitmq: relay_rabbitmq_amqp.c */
