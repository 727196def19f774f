/* odbox — fixtures of the Kafka relay tests (see kafka_fx.h). */
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kafka_fx.h"

typedef struct writer_arg {
    kfx *f;
    const char *key;
    int seq;
} writer_arg;

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    writer_arg *a = user;
    odbox_model *m = NULL;
    int rc = odbox_model_new(&a->f->model, a->key, &m, err);
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "seq", json_object_new_int(a->seq));
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &a->f->event, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

int kfx_run_id(void)
{
    const char *run = getenv("KAFKA_TEST_RUN");
    return run && *run ? atoi(run) : (int)getpid();
}

void kfx_open(kfx *f, const char *dsn, const char *tag)
{
    memset(f, 0, sizeof *f);
    odbox_error e = {0};
    snprintf(f->model_name, sizeof f->model_name, "%sModel%d", tag, kfx_run_id());
    snprintf(f->event_name, sizeof f->event_name, "%sEvt%d", tag, kfx_run_id());
    f->model.name = f->model_name;
    f->model.table = "kafka_probes"; /* never written: the events only name it */
    f->model.kind = ODBOX_KIND_MODEL;
    f->event.name = f->event_name;
    KOK(odbox_registry_open_dsn(dsn, &f->reg, &e), e);
    KOK(odbox_migrate_registry(f->reg, NULL, &e), e);
    KOK(odbox_executor_open("com.example.kafka_test", f->reg, NULL, &f->exe, &e), e);
    KOK(odbox_executor_register_model(f->exe, &f->model, &e), e);
    f->shard = odbox_registry_default_shard(f->reg);
}

void kfx_close(kfx *f)
{
    odbox_executor_free(&f->exe);
    odbox_registry_free(&f->reg);
}

int g_write_pause_us;

void kfx_write(kfx *f, int n, int keys)
{
    for (int i = 0; i < n; i++) {
        char key[40];
        snprintf(key, sizeof key, "00000000-0000-4000-8000-%012d", i % keys);
        writer_arg a = {f, key, i / keys};
        const odbox_action action = {"KafkaWrite", perform, &a};
        odbox_result res;
        odbox_error e = {0};
        int rc = odbox_execute(f->exe, &action, NULL, NULL, &res, &e);
        odbox_result_clear(&res);
        KOK(rc, e);
        if (g_write_pause_us)
            usleep((useconds_t)g_write_pause_us);
    }
}

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long kfx_drain(kfx *f, odbox_delivery *d, int max_ms)
{
    long ok = 0, until = mono_ms() + max_ms;
    odbox_error e = {0};
    while (mono_ms() < until) {
        odbox_delivery_round fr = {0}, hr = {0};
        KOK(odbox_delivery_fanout_round(d, f->shard, &fr, &e), e);
        KOK(odbox_delivery_handling_round(d, f->shard, &hr, &e), e);
        ok += (long)hr.succeeded;
        if (!fr.read && !hr.read)
            break;
    }
    return ok;
}

long kfx_count(kfx *f, const char *handler, const char *state)
{
    odbox_notification_filter flt = {.handler = handler, .state = state};
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    odbox_error e = {0};
    KOK(odbox_notifications_count(f->reg, &flt, &st, &n, &e), e);
    long total = 0;
    for (size_t i = 0; i < n; i++)
        total += (long)(st[i].pending + st[i].failed + st[i].succeeded + st[i].expired);
    odbox_notification_stats_free(&st, n);
    return total;
}

static char *dup_n(const void *p, size_t n)
{
    if (!p)
        return NULL;
    char *s = malloc(n + 1);
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

static char *header(rd_kafka_message_t *m, const char *name)
{
    rd_kafka_headers_t *h = NULL;
    const void *v = NULL;
    size_t n = 0;
    if (rd_kafka_message_headers(m, &h) || rd_kafka_header_get_last(h, name, &v, &n))
        return NULL;
    return dup_n(v, n);
}

static rd_kafka_t *consumer(const char *bootstraps, const char *topic)
{
    char errstr[512], group[64];
    snprintf(group, sizeof group, "odbox-test-%d-%ld", (int)getpid(), mono_ms());
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    const char *kv[] = {"bootstrap.servers", bootstraps, "group.id", group, "enable.auto.commit", "false",
                        "auto.offset.reset", "earliest", "log_level", "2", NULL};
    for (int i = 0; kv[i]; i += 2)
        KCHECK(rd_kafka_conf_set(c, kv[i], kv[i + 1], errstr, sizeof errstr) == RD_KAFKA_CONF_OK, "%s", errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, errstr, sizeof errstr);
    KCHECK(rk, "consumer: %s", errstr);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(KFX_PARTITIONS);
    for (int p = 0; p < KFX_PARTITIONS; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    KCHECK(!rd_kafka_assign(rk, parts), "assign");
    rd_kafka_topic_partition_list_destroy(parts);
    return rk;
}

size_t kfx_consume(const char *bootstraps, const char *topic, size_t want, int max_ms, kmsg **out)
{
    rd_kafka_t *rk = consumer(bootstraps, topic);
    size_t n = 0, cap = want + 16;
    kmsg *v = calloc(cap, sizeof *v);
    long until = mono_ms() + max_ms, quiet_since = mono_ms();
    while (mono_ms() < until && !(n >= want && mono_ms() - quiet_since > 1000)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        v[n] = (kmsg){dup_n(m->key, m->key_len), dup_n(m->payload, m->len), header(m, "id"), header(m, "type"),
                      header(m, "action_id"), (int)m->partition, (long long)m->offset};
        n++;
        quiet_since = mono_ms();
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    *out = v;
    return n;
}

void kfx_msgs_free(kmsg *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].key);
        free(m[i].value);
        free(m[i].h_id);
        free(m[i].h_type);
        free(m[i].h_action);
    }
    free(m);
}

/* Java's Utils.murmur2 (seed 0x9747b28c), on unsigned 32-bit arithmetic
 * as Java's int wraps. */
int32_t kfx_murmur2(const void *data, size_t len)
{
    const unsigned char *d = data;
    const uint32_t m = 0x5bd1e995;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    size_t n4 = len / 4;
    for (size_t i = 0; i < n4; i++) {
        size_t i4 = i * 4;
        uint32_t k = (uint32_t)d[i4] | (uint32_t)d[i4 + 1] << 8 | (uint32_t)d[i4 + 2] << 16 |
                     (uint32_t)d[i4 + 3] << 24;
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (len % 4) {
    case 3:
        h ^= (uint32_t)d[(len & ~(size_t)3) + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)d[(len & ~(size_t)3) + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)d[len & ~(size_t)3];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

int kfx_java_partition(const char *key, int partitions)
{
    /* Utils.toPositive: x & 0x7fffffff, then mod */
    return (int)(((uint32_t)kfx_murmur2(key, strlen(key)) & 0x7fffffffu) % (uint32_t)partitions);
}
