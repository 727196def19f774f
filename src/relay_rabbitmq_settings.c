/* odbox — the RabbitMQ relay's settings: from JSON, and checked (in every
 * build, so a config file is judged the same with or without librabbitmq). */
#include <string.h>
#include <strings.h>
#include "internal.h"
#include "relay_rabbitmq_internal.h"

static int json_str(json_object *v, const char *key, const char **out, odbox_error *err)
{
    if (!json_object_is_type(v, json_type_string))
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay settings: \"%s\" must be a string", key);
    *out = json_object_get_string(v);
    return ODBOX_OK;
}

static int json_int(json_object *v, const char *key, int max, int *out, odbox_error *err)
{
    if (!json_object_is_type(v, json_type_int))
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay settings: \"%s\" must be an integer", key);
    int64_t n = json_object_get_int64(v);
    if (n < 0 || n > max)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay settings: \"%s\" %lld is out of range (0..%d)", key,
                          (long long)n, max);
    *out = (int)n;
    return ODBOX_OK;
}

int odbox_relay_rabbitmq_parse(json_object *settings, odbox_rabbitmq_settings *s, odbox_error *err)
{
    memset(s, 0, sizeof *s);
    odbox_relay_rabbitmq_config *cfg = &s->cfg;
    if (!json_object_is_type(settings, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay settings: not a JSON object");
    int rc = ODBOX_OK;
    json_object_object_foreach(settings, key, v)
    {
        if (rc != ODBOX_OK)
            break;
        if (!strcmp(key, "url"))
            rc = json_str(v, key, &cfg->url, err);
        else if (!strcmp(key, "exchange"))
            rc = json_str(v, key, &cfg->exchange, err);
        else if (!strcmp(key, "routing_key"))
            rc = json_str(v, key, &cfg->routing_key, err);
        else if (!strcmp(key, "max_connections"))
            rc = json_int(v, key, 3600000, &cfg->max_connections, err);
        else if (!strcmp(key, "timeout_ms"))
            rc = json_int(v, key, 3600000, &cfg->timeout_ms, err);
        else if (!strcmp(key, "max_in_flight_per_connection"))
            rc = json_int(v, key, 3600000, &cfg->max_in_flight_per_connection, err);
        else if (!strcmp(key, "max_message_bytes"))
            rc = json_int(v, key, ODBOX_RABBITMQ_MAX_MESSAGE, &s->max_message_bytes, err);
        else
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "rabbitmq relay settings: unknown key \"%.80s\" (known: url, exchange, routing_key, "
                            "max_connections, max_in_flight_per_connection, max_message_bytes, timeout_ms)",
                            key);
    }
    return rc;
}

int odbox_relay_rabbitmq_check(const odbox_rabbitmq_settings *s, odbox_error *err)
{
    const odbox_relay_rabbitmq_config *cfg = &s->cfg;
    int rc = ODBOX_OK;
    if (!cfg->routing_key)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: no routing_key (a template, e.g. {model_type}.{event_type})");
    if ((rc = odbox_relay_template_check(cfg->exchange ? cfg->exchange : "", err)) != ODBOX_OK)
        return odbox_error_prefix(err, rc, "rabbitmq relay: exchange");
    if ((rc = odbox_relay_template_check(cfg->routing_key, err)) != ODBOX_OK)
        return odbox_error_prefix(err, rc, "rabbitmq relay: routing_key");
    if (cfg->timeout_ms < 0)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: timeout_ms %d is negative", cfg->timeout_ms);
    if (cfg->timeout_ms > ODBOX_RELAY_TIMEOUT_MAX_MS)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: timeout_ms %d is over %d (an hour)", cfg->timeout_ms,
                          ODBOX_RELAY_TIMEOUT_MAX_MS);
    /* librabbitmq would take the URL and open a plain TCP socket: a broker
     * that wants TLS refuses it, one that offers both gets the password in
     * clear */
    if (cfg->url && !strncasecmp(cfg->url, "amqps://", 8))
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: amqps (TLS) is not supported: use amqp://");
    if (cfg->max_connections < 0 || cfg->max_connections > ODBOX_RABBITMQ_MAX_CONNECTIONS)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: max_connections %d is out of range (0..%d)",
                          cfg->max_connections, ODBOX_RABBITMQ_MAX_CONNECTIONS);
    if (cfg->max_in_flight_per_connection < 0 || cfg->max_in_flight_per_connection > ODBOX_RABBITMQ_MAX_IN_FLIGHT)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: max_in_flight_per_connection %d is out of range (0..%d)",
                          cfg->max_in_flight_per_connection, ODBOX_RABBITMQ_MAX_IN_FLIGHT);
    if (s->max_message_bytes < 0 || s->max_message_bytes > ODBOX_RABBITMQ_MAX_MESSAGE)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: max_message_bytes %d is out of range (0..%d)",
                          s->max_message_bytes, ODBOX_RABBITMQ_MAX_MESSAGE);
    return ODBOX_OK;
}

