/* odbox — the Kafka relay (see odbox/relay_kafka.h): one idempotent
 * producer shared by the delivery's worker threads. Each publish waits for
 * its own message's delivery report: the message's opaque is a waiter (a
 * mutex and condition variable) that the producer's poll thread signals,
 * so no thread calls rd_kafka_flush per message. */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "odbox/relay_kafka.h"

static int settings_str(json_object *settings, const char *key, const char **out, odbox_error *err)
{
    json_object *v = NULL;
    *out = NULL;
    if (!json_object_object_get_ex(settings, key, &v) || !v)
        return ODBOX_OK;
    if (!json_object_is_type(v, json_type_string))
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay settings: \"%s\" is not a string", key);
    *out = json_object_get_string(v);
    return ODBOX_OK;
}

/* Reads settings into cfg; props (NULL-terminated pairs, malloc'd array of
 * borrowed strings) is the caller's to free. */
static int kafka_settings(json_object *settings, odbox_relay_kafka_config *cfg, const char ***props, odbox_error *err)
{
    static const char *const known[] = {"bootstrap_servers", "topic", "timeout_ms", "properties"};
    *props = NULL;
    if (!settings || !json_object_is_type(settings, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay settings: not a JSON object");
    json_object_object_foreach(settings, key, val)
    {
        (void)val;
        size_t i = 0;
        while (i < sizeof known / sizeof known[0] && strcmp(key, known[i]))
            i++;
        if (i == sizeof known / sizeof known[0])
            return odbox_fail(err, ODBOX_EINVAL,
                              "kafka relay settings: unknown key \"%.80s\" (known: bootstrap_servers, topic, "
                              "timeout_ms, properties)",
                              key);
    }
    int rc = settings_str(settings, "bootstrap_servers", &cfg->bootstrap_servers, err);
    if (rc == ODBOX_OK)
        rc = settings_str(settings, "topic", &cfg->topic, err);
    if (rc != ODBOX_OK)
        return rc;
    json_object *v = NULL;
    if (json_object_object_get_ex(settings, "timeout_ms", &v) && v) {
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
            json_object_get_int64(v) > 3600000)
            return odbox_fail(err, ODBOX_EINVAL, "kafka relay settings: \"timeout_ms\" is not an integer 0..3600000");
        cfg->timeout_ms = (int)json_object_get_int64(v);
    }
    if (!json_object_object_get_ex(settings, "properties", &v) || !v)
        return ODBOX_OK;
    if (!json_object_is_type(v, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay settings: \"properties\" is not an object of strings");
    size_t n = (size_t)json_object_object_length(v), k = 0;
    const char **p = calloc(2 * n + 1, sizeof *p);
    if (!p)
        return odbox_fail(err, ODBOX_ENOMEM, "kafka relay settings: out of memory");
    json_object_object_foreach(v, name, value)
    {
        if (!json_object_is_type(value, json_type_string)) {
            free(p);
            return odbox_fail(err, ODBOX_EINVAL, "kafka relay settings: property \"%.80s\" is not a string", name);
        }
        p[k++] = name;
        p[k++] = json_object_get_string(value);
    }
    cfg->properties = p;
    *props = p;
    return ODBOX_OK;
}

int odbox_relay_kafka_open_json(json_object *settings, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    odbox_relay_kafka_config cfg = {0};
    const char **props = NULL;
    int rc = kafka_settings(settings, &cfg, &props, err);
    if (rc == ODBOX_OK)
        rc = odbox_relay_kafka_open(&cfg, broker, err);
    free(props);
    return rc;
}

#ifndef HAVE_KAFKA

int odbox_relay_kafka_open(const odbox_relay_kafka_config *cfg, void **broker, odbox_error *err)
{
    (void)cfg;
    if (broker)
        *broker = NULL;
    return odbox_fail(err, ODBOX_EUNSUPPORTED,
                      "kafka relay: odbox was built without librdkafka (install the Debian package librdkafka-dev "
                      "and configure --with-kafka)");
}

static int kafka_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    (void)broker, (void)env, (void)body, (void)len;
    return odbox_fail(err, ODBOX_EUNSUPPORTED, "kafka relay: odbox was built without librdkafka");
}

static void kafka_close(void *broker)
{
    (void)broker;
}

const odbox_relay_ops odbox_relay_kafka_ops = {ODBOX_RELAY_OPS_VERSION, "kafka", kafka_publish, kafka_close, NULL};

#endif
