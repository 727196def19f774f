/* odbox — relays (see odbox/relay.h): the message body, templates, and the
 * handler that publishes through a broker's ops. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "delivery_internal.h"
#include "odbox/relay.h"

struct odbox_relay {
    const odbox_relay_ops *ops;
    void *broker;
    atomic_llong published, failed;
    /* its owner's, and one per call running: a call its delivery
     * abandoned (handler_timeout_ms) may return after the owner freed
     * the relay; the last one closes the broker and frees */
    atomic_int refs;
};

static void relay_drop(odbox_relay *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    r->ops->close(r->broker);
    free(r);
}

/* ---- the body ------------------------------------------------------------------ */

/* UTC microseconds as 2026-01-01T00:00:00.000000Z into out (32 bytes). */
static void iso_utc(int64_t us, char *out, size_t cap)
{
    int64_t s = us / 1000000, frac = us % 1000000;
    if (frac < 0)
        frac += 1000000, s--;
    time_t t = (time_t)s;
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (long long)frac);
}

static json_object *str_or_null(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

int odbox_relay_body(const odbox_envelope *env, char **out, size_t *len, odbox_error *err)
{
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!env || !out || !len || !env->event_id || !env->event_type)
        return odbox_fail(err, ODBOX_EINVAL, "relay body: a NULL argument, event id or event type");
    char date[96];
    iso_utc(env->event_us, date, sizeof date);
    json_object *o = json_object_new_object();
    if (!o)
        return odbox_fail(err, ODBOX_ENOMEM, "relay body: out of memory");
    json_object_object_add(o, "schema_version", json_object_new_int(ODBOX_RELAY_SCHEMA_VERSION));
    json_object_object_add(o, "id", json_object_new_string(env->event_id));
    json_object_object_add(o, "aggregatetype", str_or_null(env->model_type));
    json_object_object_add(o, "aggregateid", str_or_null(env->model_id));
    json_object_object_add(o, "type", json_object_new_string(env->event_type));
    json_object_object_add(o, "payload", env->payload ? json_object_get(env->payload) : NULL);
    json_object_object_add(o, "namespace", str_or_null(env->ns));
    json_object_object_add(o, "action_id", str_or_null(env->action_id));
    json_object_object_add(o, "action_name", str_or_null(env->action_name));
    json_object_object_add(o, "event_date", json_object_new_string(date));
    size_t n = 0;
    const char *text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                         &n);
    char *copy = text ? malloc(n + 1) : NULL;
    if (copy)
        memcpy(copy, text, n + 1);
    json_object_put(o);
    if (!copy)
        return odbox_fail(err, ODBOX_ENOMEM, "relay body: out of memory");
    *out = copy;
    *len = n;
    return ODBOX_OK;
}

/* ---- templates --------------------------------------------------------------------- */

static const char *const placeholders[] = {"namespace", "action_name", "action_id", "model_type",
                                           "model_id",  "event_type",  "event_id",  "handler"};
enum { NPLACEHOLDERS = sizeof placeholders / sizeof placeholders[0] };

static const char *field(const odbox_envelope *env, int i)
{
    const char *v[NPLACEHOLDERS] = {env->ns,         env->action_name, env->action_id, env->model_type,
                                    env->model_id,   env->event_type,  env->event_id,  env->handler_name};
    return v[i] ? v[i] : "";
}

/* Walks tmpl: appends to b (when env is given) or only checks. */
static int walk(const char *tmpl, const odbox_envelope *env, odbox_buf *b, odbox_error *err)
{
    if (!tmpl)
        return odbox_fail(err, ODBOX_EINVAL, "relay template: NULL");
    for (const char *p = tmpl; *p;) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            if (b)
                odbox_buf_appendn(b, p, 1);
            p += 2;
            continue;
        }
        if (*p == '}')
            return odbox_fail(err, ODBOX_EINVAL, "relay template '%.200s': a '}' without its '{' (write '}}' for one)",
                              tmpl);
        if (*p != '{') {
            const char *q = p;
            while (*q && *q != '{' && *q != '}')
                q++;
            if (b)
                odbox_buf_appendn(b, p, (size_t)(q - p));
            p = q;
            continue;
        }
        const char *end = strchr(p, '}');
        if (!end)
            return odbox_fail(err, ODBOX_EINVAL, "relay template '%.200s': a '{' without its '}' (write '{{' for one)",
                              tmpl);
        size_t n = (size_t)(end - p - 1);
        int found = -1;
        for (int i = 0; i < NPLACEHOLDERS && found < 0; i++)
            if (strlen(placeholders[i]) == n && !strncmp(p + 1, placeholders[i], n))
                found = i;
        if (found < 0)
            return odbox_fail(err, ODBOX_EINVAL,
                              "relay template '%.200s': unknown placeholder {%.*s} (known: {namespace}, "
                              "{action_name}, {action_id}, {model_type}, {model_id}, {event_type}, {event_id}, "
                              "{handler})",
                              tmpl, (int)(n > 64 ? 64 : n), p + 1);
        if (b)
            odbox_buf_append(b, field(env, found));
        p = end + 1;
    }
    return ODBOX_OK;
}

int odbox_relay_template_check(const char *tmpl, odbox_error *err)
{
    return walk(tmpl, NULL, NULL, err);
}

int odbox_relay_fixed_text(const char *tmpl, char **fixed, odbox_error *err)
{
    /* expanded with every placeholder "" and then "x": the same text
     * both times only without a placeholder */
    static const char *const fills[2] = {"", "x"};
    char *as[2] = {NULL, NULL};
    int rc = ODBOX_OK;
    *fixed = NULL;
    for (int i = 0; i < 2 && rc == ODBOX_OK; i++) {
        const char *f = fills[i];
        odbox_envelope e = {.event_id = f, .ns = f, .action_id = f, .action_name = f, .model_id = f,
                            .model_type = f, .event_type = f, .handler_name = f};
        rc = odbox_relay_expand(tmpl, &e, &as[i], err);
    }
    if (rc == ODBOX_OK && !strcmp(as[0], as[1]))
        *fixed = as[0], as[0] = NULL;
    free(as[0]);
    free(as[1]);
    return rc;
}

int odbox_relay_expand(const char *tmpl, const odbox_envelope *env, char **out, odbox_error *err)
{
    if (out)
        *out = NULL;
    if (!env || !out)
        return odbox_fail(err, ODBOX_EINVAL, "relay template: envelope or out is NULL");
    odbox_buf b = {0};
    int rc = walk(tmpl, env, &b, err);
    if (rc != ODBOX_OK) {
        odbox_buf_reset(&b);
        return rc;
    }
    odbox_buf_append(&b, ""); /* an empty expansion is "", not NULL */
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "relay template: out of memory");
    return ODBOX_OK;
}

/* ---- the relay ------------------------------------------------------------------------ */

static int relay_call(const odbox_envelope *env, void *user, odbox_error *err)
{
    odbox_relay *r = user;
    atomic_fetch_add(&r->refs, 1); /* the owner's is held while a delivery calls it */
    char *body = NULL;
    size_t len = 0;
    int rc = odbox_relay_body(env, &body, &len, err);
    if (rc == ODBOX_OK)
        rc = r->ops->publish(r->broker, env, body, len, err);
    free(body);
    if (rc == ODBOX_OK)
        atomic_fetch_add(&r->published, 1);
    else
        atomic_fetch_add(&r->failed, 1);
    relay_drop(r);
    return rc;
}

/* A round's rows at once, through ops->publish_batch: the bodies first
 * (a row whose body cannot be made fails alone). */
static void relay_batch(void *user, size_t n, const odbox_envelope *const *envs, int *rcs, odbox_error *errs)
{
    odbox_relay *r = user;
    atomic_fetch_add(&r->refs, 1);
    const odbox_envelope **penvs = malloc(n * sizeof *penvs);
    char **bodies = calloc(n, sizeof *bodies);
    size_t *lens = malloc(n * sizeof *lens), *at = malloc(n * sizeof *at), np = 0;
    int *prcs = calloc(n, sizeof *prcs);
    odbox_error *perrs = calloc(n, sizeof *perrs);
    int oom = !penvs || !bodies || !lens || !at || !prcs || !perrs;
    for (size_t i = 0; i < n; i++) {
        rcs[i] = oom ? odbox_fail(&errs[i], ODBOX_ENOMEM, "relay: out of memory")
                     : odbox_relay_body(envs[i], &bodies[np], &lens[np], &errs[i]);
        if (rcs[i] == ODBOX_OK) {
            penvs[np] = envs[i];
            at[np++] = i;
        }
    }
    if (np)
        r->ops->publish_batch(r->broker, np, penvs, (const char *const *)bodies, lens, prcs, perrs);
    for (size_t k = 0; k < np; k++) {
        rcs[at[k]] = prcs[k];
        if (prcs[k] != ODBOX_OK)
            errs[at[k]] = perrs[k];
        free(bodies[k]);
    }
    for (size_t i = 0; i < n; i++)
        atomic_fetch_add(rcs[i] == ODBOX_OK ? &r->published : &r->failed, 1);
    free(penvs);
    free(bodies);
    free(lens);
    free(at);
    free(prcs);
    free(perrs);
    relay_drop(r);
}

int odbox_relay_add(odbox_handlers *h, const odbox_relay_config *cfg, const odbox_relay_ops *ops, void *broker,
                    odbox_relay **out, odbox_error *err)
{
    int rc = ODBOX_OK;
    if (out)
        *out = NULL;
    if (!h || !cfg || !ops || !out)
        rc = odbox_fail(err, ODBOX_EINVAL, "relay add: handlers, config, ops or out is NULL");
    else if (ops->version < 1 || ops->version > ODBOX_RELAY_OPS_VERSION || !ops->publish || !ops->close)
        rc = odbox_fail(err, ODBOX_EINVAL, "relay add: ops of version %d without publish or close (want version 1 to %d)",
                        ops->version, ODBOX_RELAY_OPS_VERSION);
    else if (!cfg->event_types || !cfg->event_types[0])
        rc = odbox_fail(err, ODBOX_EINVAL, "relay add: %.80s: no event types", cfg->name ? cfg->name : "(null)");
    else if (cfg->max_in_flight < 0)
        rc = odbox_fail(err, ODBOX_EINVAL, "relay add: %.80s: max_in_flight %d is negative",
                        cfg->name ? cfg->name : "(null)", cfg->max_in_flight);
    odbox_relay *r = rc == ODBOX_OK ? calloc(1, sizeof *r) : NULL;
    if (rc == ODBOX_OK && !r)
        rc = odbox_fail(err, ODBOX_ENOMEM, "relay add: out of memory");
    if (rc != ODBOX_OK) {
        if (ops && ops->close)
            ops->close(broker);
        return rc;
    }
    r->ops = ops;
    r->broker = broker;
    atomic_init(&r->published, 0);
    atomic_init(&r->failed, 0);
    atomic_init(&r->refs, 1);
    odbox_handler hd = {.name = cfg->name, .former_names = cfg->former_names, .handle = relay_call, .user = r};
    if (cfg->event_types[1])
        hd.event_types = cfg->event_types;
    else
        hd.event_type = cfg->event_types[0];
    if ((rc = odbox_handlers_add(h, &hd, err)) != ODBOX_OK) {
        odbox_relay_free(&r);
        return odbox_error_prefix(err, rc, "relay add");
    }
    if (ops->version >= 2 && ops->publish_batch)
        h->v[h->n - 1].batch = relay_batch; /* the entry just added */
    /* the handler calls r from now on: r is the caller's even if the
     * options are refused (they were checked above: not expected) */
    *out = r;
    odbox_handler_options o = {.max_in_flight = cfg->max_in_flight, .ordered = cfg->ordered};
    if (o.ordered || o.max_in_flight)
        rc = odbox_handlers_set_options(h, cfg->name, &o, err);
    return rc == ODBOX_OK ? rc : odbox_error_prefix(err, rc, "relay add");
}

int64_t odbox_relay_published(const odbox_relay *r)
{
    return r ? atomic_load(&((odbox_relay *)r)->published) : 0;
}

int64_t odbox_relay_failed(const odbox_relay *r)
{
    return r ? atomic_load(&((odbox_relay *)r)->failed) : 0;
}

int odbox_relay_calls_running(const odbox_relay *r)
{
    return r ? atomic_load(&((odbox_relay *)r)->refs) - 1 : 0; /* each call holds one reference, the owner one */
}

void odbox_relay_free(odbox_relay **rp)
{
    if (!rp || !*rp)
        return;
    odbox_relay *r = *rp;
    *rp = NULL;
    relay_drop(r);
}
