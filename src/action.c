/* odbox — plans, contexts and the executor: the outbox guarantee. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "action_internal.h"
#include "callbacks.h"
#include "idempotency.h"
#include "registry_internal.h"
#include "wake.h"
#include "odbox/uuid.h"

#define NAME_MAX_LEN 255

struct odbox_context {
    odbox_executor *exe;
    char action_id[37];
    int attempt;
};

struct odbox_executor {
    char *ns;
    odbox_registry *registry;
    odbox_exec_config defaults;
    pthread_rwlock_t mu;             /* the type lists and hook: read on every execute */
    const odbox_model_type **models;
    size_t nmodels;
    const odbox_event_type **events;
    size_t nevents;
    odbox_hook_fn hook;
    void *hook_ud;
    int claim_keys_first;            /* odbox_executor_claim_keys_first */
    odbox_callbacks listeners;       /* odbox_commit_fn, tag 0 */
    /* NOTIFY after commits with events, for workers in other processes
     * (where the dialect can and the DSN does not say notify=off) */
    odbox_notifier *notifier;
};

/* ---- names ----------------------------------------------------------------- */

/* ^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$ : Ekbatan's namespace
 * rule (it becomes a topic root and a package name: no hyphens). */
static int dotted_name(const char *s)
{
    if (!s || !*s || strlen(s) > NAME_MAX_LEN)
        return 0;
    int at_start = 1;
    for (const char *p = s; *p; p++) {
        char ch = *p;
        int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
        int digit = ch >= '0' && ch <= '9';
        if (ch == '.') {
            if (at_start)
                return 0;
            at_start = 1;
        } else if (at_start ? !alpha : !(alpha || digit)) {
            return 0;
        } else {
            at_start = 0;
        }
    }
    return !at_start;
}

/* ---- configuration ------------------------------------------------------- */

void odbox_exec_config_default(odbox_exec_config *cfg)
{
    if (!cfg) /* nothing to fill: like odbox_error_clear and odbox_result_clear */
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->retries[0] = (odbox_retry_rule){ODBOX_ESTALE, 1, 100};
    cfg->nretries = 1;
}

static int check_config(const odbox_exec_config *cfg, odbox_error *err)
{
    if (cfg->nretries < 0 || cfg->nretries > ODBOX_MAX_RETRY_RULES)
        return odbox_fail(err, ODBOX_EINVAL, "execution config: %d retry rules (0..%d)", cfg->nretries,
                          ODBOX_MAX_RETRY_RULES);
    for (int i = 0; i < cfg->nretries; i++) {
        const odbox_retry_rule *r = &cfg->retries[i];
        if (r->code >= 0 || r->max_retries < 0 || r->delay_ms < 0)
            return odbox_fail(err, ODBOX_EINVAL, "execution config: retry rule %d needs a negative code and "
                                                 "non-negative max_retries and delay_ms", i);
        if (r->code == ODBOX_EINDOUBT || r->code == ODBOX_EPARTIAL)
            return odbox_fail(err, ODBOX_EINVAL, "execution config: retry rule %d: %s is never retried (a shard "
                                                 "has or may have committed)", i, odbox_errname(r->code));
        for (int j = 0; j < i; j++)
            if (cfg->retries[j].code == r->code)
                return odbox_fail(err, ODBOX_EINVAL, "execution config: two retry rules for %s",
                                  odbox_errname(r->code));
    }
    return ODBOX_OK;
}

void odbox_result_clear(odbox_result *res)
{
    if (!res)
        return;
    if (res->value)
        json_object_put(res->value);
    memset(res, 0, sizeof *res);
}

/* ---- the executor ---------------------------------------------------------- */

int odbox_executor_open(const char *ns, odbox_registry *registry, const odbox_exec_config *defaults,
                        odbox_executor **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "executor: out is NULL");
    *out = NULL;
    if (!dotted_name(ns))
        return odbox_fail(err, ODBOX_EINVAL,
                          "executor: namespace '%.80s' must be dotted identifiers such as com.example.shop "
                          "(letters, digits, '_'; no hyphens; at most %d)", ns ? ns : "(null)", NAME_MAX_LEN);
    if (!registry)
        return odbox_fail(err, ODBOX_EINVAL, "executor: registry is NULL");
    odbox_exec_config cfg;
    if (defaults)
        cfg = *defaults;
    else
        odbox_exec_config_default(&cfg);
    int rc = check_config(&cfg, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_executor *e = calloc(1, sizeof *e);
    if (!e || !(e->ns = strdup(ns))) {
        free(e);
        return odbox_fail(err, ODBOX_ENOMEM, "executor: out of memory");
    }
    if ((rc = odbox_notifier_open(registry, &e->notifier, err)) != ODBOX_OK) {
        free(e->ns);
        free(e);
        return rc;
    }
    e->registry = registry;
    e->defaults = cfg;
    pthread_rwlock_init(&e->mu, NULL);
    odbox_callbacks_init(&e->listeners);
    *out = e;
    return ODBOX_OK;
}

void odbox_executor_free(odbox_executor **ep)
{
    if (!ep || !*ep)
        return;
    odbox_executor *e = *ep;
    odbox_notifier_free(&e->notifier);
    pthread_rwlock_destroy(&e->mu);
    odbox_callbacks_destroy(&e->listeners);
    free(e->models);
    free(e->events);
    free(e->ns);
    free(e);
    *ep = NULL;
}

void odbox_executor_set_hook(odbox_executor *exe, odbox_hook_fn hook, void *ud)
{
    if (!exe)
        return;
    pthread_rwlock_wrlock(&exe->mu);
    exe->hook = hook;
    exe->hook_ud = ud;
    pthread_rwlock_unlock(&exe->mu);
}

void odbox_executor_claim_keys_first(odbox_executor *exe, int on)
{
    if (!exe)
        return;
    pthread_rwlock_wrlock(&exe->mu);
    exe->claim_keys_first = on != 0;
    pthread_rwlock_unlock(&exe->mu);
}

int odbox_executor_add_commit_listener(odbox_executor *exe, odbox_commit_fn fn, void *ud, odbox_error *err)
{
    if (!exe || !fn)
        return odbox_fail(err, ODBOX_EINVAL, "commit listener: executor or callback is NULL");
    int rc = odbox_callbacks_add(&exe->listeners, 0, (odbox_callback_fn)fn, ud);
    if (rc == ODBOX_EINVAL)
        return odbox_fail(err, rc, "commit listener: this callback and user data are added already");
    return rc == ODBOX_OK ? rc : odbox_fail(err, rc, "commit listener: out of memory");
}

int odbox_executor_remove_commit_listener(odbox_executor *exe, odbox_commit_fn fn, void *ud)
{
    return exe ? odbox_callbacks_remove(&exe->listeners, 0, (odbox_callback_fn)fn, ud) : ODBOX_EINVAL;
}

const char *odbox_executor_ns(const odbox_executor *exe) { return exe->ns; }
odbox_registry *odbox_executor_registry(const odbox_executor *exe) { return exe->registry; }

void odbox_executor_hook(odbox_executor *exe, odbox_hook_fn *hook, void **ud)
{
    pthread_rwlock_rdlock(&exe->mu);
    *hook = exe->hook;
    *ud = exe->hook_ud;
    pthread_rwlock_unlock(&exe->mu);
}

/* After shard s committed: the commit listeners, then a NOTIFY for other
 * processes when it wrote events (the sentinel row is nothing to deliver). */
static void committed(odbox_executor *exe, const odbox_plan *p, odbox_shard *s)
{
    size_t nevents = 0;
    for (size_t k = 0; k < p->nevents; k++)
        nevents += p->events[k].shard == s;
    odbox_executor_committed(exe, s, nevents);
}

void odbox_executor_committed(odbox_executor *exe, odbox_shard *s, size_t nevents)
{
    odbox_shard_id id = odbox_shard_get_id(s);
    size_t n;
    const odbox_callback *cb = odbox_callbacks_begin(&exe->listeners, &n);
    for (size_t i = 0; i < n; i++)
        ((odbox_commit_fn)cb[i].fn)(cb[i].ud, id, nevents);
    odbox_callbacks_end(&exe->listeners);
    if (nevents > 0)
        odbox_notifier_post(exe->notifier, s, ODBOX_WAKE_EVENTS);
}

static int append_ptr(const void ***list, size_t *n, const void *p)
{
    const void **g = realloc(*list, (*n + 1) * sizeof *g);
    if (!g)
        return ODBOX_ENOMEM;
    g[(*n)++] = p;
    *list = g;
    return ODBOX_OK;
}

int odbox_executor_register_model(odbox_executor *exe, const odbox_model_type *t, odbox_error *err)
{
    if (!exe)
        return odbox_fail(err, ODBOX_EINVAL, "executor is NULL");
    int rc = odbox_model_type_check(t, err);
    if (rc != ODBOX_OK)
        return rc;
    pthread_rwlock_wrlock(&exe->mu);
    for (size_t i = 0; i < exe->nmodels && rc == ODBOX_OK; i++) {
        if (exe->models[i] == t)
            goto out;
        if (!strcmp(exe->models[i]->name, t->name))
            rc = odbox_fail(err, ODBOX_EINVAL, "executor: another model type is already named %s", t->name);
    }
    if (rc == ODBOX_OK && append_ptr((const void ***)&exe->models, &exe->nmodels, t) != ODBOX_OK)
        rc = odbox_fail(err, ODBOX_ENOMEM, "executor: out of memory");
out:
    pthread_rwlock_unlock(&exe->mu);
    return rc;
}

static int model_registered(odbox_executor *exe, const odbox_model_type *t)
{
    int found = 0;
    pthread_rwlock_rdlock(&exe->mu);
    for (size_t i = 0; i < exe->nmodels && !found; i++)
        found = exe->models[i] == t;
    pthread_rwlock_unlock(&exe->mu);
    return found;
}

/* 1: et is registered; -1: another type has its name; 0: neither.
 * Called with the lock held. */
static int find_event(odbox_executor *exe, const odbox_event_type *et)
{
    for (size_t i = 0; i < exe->nevents; i++) {
        if (exe->events[i] == et)
            return 1;
        if (!strcmp(exe->events[i]->name, et->name))
            return -1;
    }
    return 0;
}

int odbox_executor_register_event(odbox_executor *exe, const odbox_event_type *et, odbox_error *err)
{
    if (!exe || !et)
        return odbox_fail(err, ODBOX_EINVAL, "register event: executor or event type is NULL");
    if (!odbox_is_type_name(et->name, ODBOX_TYPE_NAME_MAX))
        return odbox_fail(err, ODBOX_EINVAL, "event type name '%.80s' must match [A-Za-z_][A-Za-z0-9_]* (at most %d)",
                          et->name ? et->name : "(null)", ODBOX_TYPE_NAME_MAX);
    /* Emitting registers too, on every event: the common case, a type
     * already known, takes only the read lock. */
    pthread_rwlock_rdlock(&exe->mu);
    int known = find_event(exe, et);
    pthread_rwlock_unlock(&exe->mu);
    if (known == 0) {
        pthread_rwlock_wrlock(&exe->mu);
        known = find_event(exe, et);
        if (known == 0 && append_ptr((const void ***)&exe->events, &exe->nevents, et) != ODBOX_OK)
            known = -2;
        pthread_rwlock_unlock(&exe->mu);
    }
    if (known == -1)
        return odbox_fail(err, ODBOX_EINVAL,
                          "event type name collision: two different event types are named %s; "
                          "event_type rows would be ambiguous", et->name);
    if (known == -2)
        return odbox_fail(err, ODBOX_ENOMEM, "executor: out of memory");
    return ODBOX_OK;
}

/* ---- plans ------------------------------------------------------------------ */

static void plan_free(odbox_plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        odbox_model_free(&p->items[i].m);
    for (size_t i = 0; i < p->nevents; i++) {
        free(p->events[i].payload);
        free(p->events[i].model_id);
    }
    free(p->items);
    free(p->events);
    if (p->result)
        json_object_put(p->result);
    memset(p, 0, sizeof *p);
}

static int stage(odbox_plan *p, stage_op op, const odbox_model *m, odbox_error *err)
{
    const char *what = op == STAGE_ADD ? "plan add" : "plan update";
    if (!p || !m)
        return odbox_fail(err, ODBOX_EINVAL, "%s: plan or model is NULL", what);
    if (!model_registered(p->exe, m->type))
        return odbox_fail(err, ODBOX_EINVAL, "%s: model type %s is not registered with the executor", what,
                          m->type->name);
    /* the database would refuse the NULL, after the transaction began,
     * in words of its own */
    for (size_t i = 0; i < m->type->ncolumns; i++)
        if (!m->type->columns[i].nullable && m->values[i].is_null)
            return odbox_fail(err, ODBOX_EINVAL, "%s: %s %s: column %s is NOT NULL and was never set", what,
                              m->type->name, m->id, m->type->columns[i].name);
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->items[i].m->id, m->id))
            return odbox_fail(err, ODBOX_EINVAL, "%s: %s %s is already staged in this plan", what, m->type->name,
                              m->id);
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        staged *g = realloc(p->items, cap * sizeof *g);
        if (!g)
            return odbox_fail(err, ODBOX_ENOMEM, "%s: out of memory", what);
        p->items = g;
        p->cap = cap;
    }
    odbox_model *copy = odbox_model_copy(m);
    if (!copy)
        return odbox_fail(err, ODBOX_ENOMEM, "%s: out of memory", what);
    p->items[p->n++] = (staged){op, copy, odbox_registry_shard_for_id(p->exe->registry, m->id)};
    return ODBOX_OK;
}

int odbox_plan_add(odbox_plan *p, const odbox_model *m, odbox_error *err)
{
    return stage(p, STAGE_ADD, m, err);
}

int odbox_plan_update(odbox_plan *p, const odbox_model *m, int64_t *next_version, odbox_error *err)
{
    int rc = stage(p, STAGE_UPDATE, m, err);
    if (rc == ODBOX_OK && next_version)
        *next_version = m->version + 1;
    return rc;
}

int odbox_plan_emit(odbox_plan *p, const odbox_model *m, const odbox_event_type *et, json_object *payload,
                    odbox_error *err)
{
    return odbox_plan_emit_after(p, m, et, payload, 0, err);
}

int odbox_plan_emit_after(odbox_plan *p, const odbox_model *m, const odbox_event_type *et, json_object *payload,
                          int64_t deliver_after_us, odbox_error *err)
{
    if (deliver_after_us < 0)
        return odbox_fail(err, ODBOX_EINVAL, "emit: deliver_after %lld is negative", (long long)deliver_after_us);
    if (!p || !m || !et)
        return odbox_fail(err, ODBOX_EINVAL, "emit: plan, model or event type is NULL");
    if (m->type->kind != ODBOX_KIND_MODEL)
        return odbox_fail(err, ODBOX_EINVAL, "emit: %s is an entity; only models emit events", m->type->name);
    if (!model_registered(p->exe, m->type))
        return odbox_fail(err, ODBOX_EINVAL, "emit: model type %s is not registered with the executor",
                          m->type->name);
    if (!json_object_is_type(payload, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "emit %s: the payload must be a JSON object", et->name ? et->name : "");
    int rc = odbox_executor_register_event(p->exe, et, err);
    if (rc != ODBOX_OK)
        return rc;
    if (p->nevents == p->evcap) {
        size_t cap = p->evcap ? p->evcap * 2 : 8;
        staged_event *g = realloc(p->events, cap * sizeof *g);
        if (!g)
            return odbox_fail(err, ODBOX_ENOMEM, "emit: out of memory");
        p->events = g;
        p->evcap = cap;
    }
    staged_event *ev = &p->events[p->nevents];
    ev->model_type = m->type->name;
    ev->et = et;
    ev->deliver_after_us = deliver_after_us;
    ev->shard = odbox_registry_shard_for_id(p->exe->registry, m->id);
    ev->model_id = strdup(m->id);
    ev->payload = strdup(json_object_to_json_string_ext(payload, JSON_C_TO_STRING_PLAIN));
    rc = !ev->model_id || !ev->payload
             ? odbox_fail(err, ODBOX_ENOMEM, "emit: out of memory")
             : odbox_json_storable(ev->payload, "emit", et->name ? et->name : "", "the payload", 0, err);
    if (rc != ODBOX_OK) {
        free(ev->model_id);
        free(ev->payload);
        return rc;
    }
    p->nevents++;
    return ODBOX_OK;
}

void odbox_plan_set_result(odbox_plan *p, json_object *result)
{
    if (!p) {
        json_object_put(result);
        return;
    }
    if (p->result)
        json_object_put(p->result);
    p->result = result;
}

odbox_registry *odbox_context_registry(odbox_context *ctx) { return ctx ? ctx->exe->registry : NULL; }
const char *odbox_context_action_id(odbox_context *ctx) { return ctx ? ctx->action_id : NULL; }
int odbox_context_attempt(odbox_context *ctx) { return ctx ? ctx->attempt : -1; }

/* ---- persisting ------------------------------------------------------------ */

static void shard_name(odbox_shard *s, char *buf, size_t cap)
{
    odbox_shard_id id = odbox_shard_get_id(s);
    snprintf(buf, cap, "%d.%d", id.group, id.member);
}

/* Groups the plan by shard (first-seen order) and commits shard by shard. */
static int persist(const run *rn, const odbox_exec_config *cfg, odbox_result *res, odbox_error *err)
{
    odbox_plan *p = rn->plan;
    odbox_shard **shards = malloc((p->n + p->nevents + 1) * sizeof *shards);
    if (!shards)
        return odbox_fail(err, ODBOX_ENOMEM, "persist: out of memory");
    size_t ns = 0;
    for (size_t i = 0; i < p->n + p->nevents; i++) {
        odbox_shard *s = i < p->n ? p->items[i].shard : p->events[i - p->n].shard;
        size_t k = 0;
        while (k < ns && shards[k] != s)
            k++;
        if (k == ns)
            shards[ns++] = s;
    }
    if (ns == 0)
        shards[ns++] = odbox_registry_default_shard(p->exe->registry);
    int rc = ODBOX_OK;
    if (ns > 1 && !cfg->allow_cross_shard) {
        char a[16], b[16];
        shard_name(shards[0], a, sizeof a);
        shard_name(shards[1], b, sizeof b);
        rc = odbox_fail(err, ODBOX_ECROSSSHARD,
                        "action %s touches %zu shards (%s, %s, ...); refused before any write "
                        "(allow_cross_shard commits each shard separately, without atomicity across them)",
                        rn->action->name, ns, a, b);
    }
    odbox_shard *home = odbox_registry_default_shard(p->exe->registry);
    if (rc == ODBOX_OK && rn->key && (ns > 1 || shards[0] != home))
        rc = odbox_fail(err, ODBOX_ECROSSSHARD,
                        "action %s has an idempotency key and writes on %s: a keyed action writes only on the "
                        "default shard, where its key is kept; refused before any write",
                        rn->action->name, ns > 1 ? "several shards" : "another shard than the default");
    /* Before any shard commits: each eventlog is this application's and
     * each table has its type's columns (checked once per shard). */
    for (size_t i = 0; i < ns && rc == ODBOX_OK; i++) {
        rc = odbox_shard_check_eventlog(shards[i], err);
        for (size_t k = 0; k < p->n && rc == ODBOX_OK; k++)
            if (p->items[k].shard == shards[i])
                rc = odbox_shard_check_model(shards[i], p->items[k].m->type, err);
    }
    if (ns > 1 && rc == ODBOX_OK)
        odbox_log(ODBOX_LOG_WARN, "action %s (action_id %s) spans %zu shards: each commits on its own, "
                                  "without atomicity across them", rn->action->name, rn->action_id, ns);
    for (size_t i = 0; i < ns && rc == ODBOX_OK; i++) {
        rc = odbox_persist_shard(rn, shards[i], err);
        if (rc == ODBOX_OK) {
            committed(p->exe, p, shards[i]);
            if (res && res->ncommitted < ODBOX_MAX_RESULT_SHARDS)
                res->committed[res->ncommitted++] = odbox_shard_get_id(shards[i]);
            continue;
        }
        if (res) {
            res->failed_shard = odbox_shard_get_id(shards[i]);
            res->has_failed_shard = 1;
        }
        if (i > 0) {
            char failed[16], committed[256] = "";
            shard_name(shards[i], failed, sizeof failed);
            for (size_t k = 0; k < i; k++) {
                char one[16];
                shard_name(shards[k], one, sizeof one);
                snprintf(committed + strlen(committed), sizeof committed - strlen(committed), "%s%s", k ? ", " : "",
                         one);
            }
            odbox_error_prefix(err, rc, "PARTIALLY COMMITTED: action %s (action_id %s) committed on shard(s) %s "
                                        "and failed on shard %s (%s)",
                               rn->action->name, rn->action_id, committed, failed, odbox_errname(rc));
            rc = ODBOX_EPARTIAL;
            if (err)
                err->code = rc;
            odbox_log(ODBOX_LOG_ERROR, "CRITICAL: %s", err ? err->message : "partial commit");
        } else if (rc == ODBOX_EINDOUBT) {
            char name[16];
            shard_name(shards[i], name, sizeof name);
            odbox_error_prefix(err, rc, "action %s (action_id %s) on shard %s", rn->action->name, rn->action_id,
                               name);
            odbox_log(ODBOX_LOG_ERROR, "%s", err ? err->message : "commit in doubt");
        }
    }
    free(shards);
    return rc;
}

/* [A-Za-z_][A-Za-z0-9_.]*, as action.h says (Ekbatan uses the class name;
 * dots let a service prefix its module). */
int odbox_action_name_valid(const char *s)
{
    if (!s || !*s || strlen(s) > NAME_MAX_LEN)
        return 0;
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '.'))
            return 0;
    return 1;
}

typedef struct keyed {
    const char *key;    /* NULL: none */
    const char *action; /* the action's name, which the key row records */
    char sha[65];
    int taken;
} keyed;

/* A key's stored outcome, read on the default shard (where keys are
 * kept): *found 0, or 1 and either res filled as the first execution left
 * it (replayed) or ODBOX_EUNIQUE for another action or other parameters. */
static int replay(odbox_executor *exe, const keyed *k, odbox_result *res, int *found, odbox_error *err)
{
    odbox_shard *shard = odbox_registry_default_shard(exe->registry);
    const char *key = k->key;
    odbox_idem_outcome o;
    int rc = odbox_idem_lookup(shard, exe->ns, key, k->action, k->sha, &o, found, err);
    if (rc != ODBOX_OK || !*found)
        return rc;
    if (res) {
        odbox_result kept = *res; /* this call's attempts and retries */
        memset(res, 0, sizeof *res);
        memcpy(res->action_id, o.action_id, sizeof res->action_id);
        res->attempts = kept.attempts;
        memcpy(res->retries, kept.retries, sizeof res->retries);
        res->committed[0] = odbox_shard_get_id(shard);
        res->ncommitted = 1;
        res->replayed = 1;
        if (o.result && !(res->value = json_tokener_parse(o.result)))
            rc = odbox_fail(err, ODBOX_EDB, "idempotency key '%.80s': the stored result is not JSON", key);
    }
    odbox_idem_outcome_clear(&o);
    if (rc == ODBOX_OK)
        odbox_error_clear(err); /* the answer: a conflict that led here is no error of the call's */
    return rc;
}

/* asked: odbox_executor_claim_keys_first */
static int claims_first(odbox_executor *exe, int asked)
{
    const odbox_dialect *d = odbox_pool_dialect(odbox_shard_primary(odbox_registry_default_shard(exe->registry)));
    /* d NULL: a raw DSN not connected yet; the read first is right anywhere */
    return asked || (d && d->claims_keys_first);
}

/* Where keys are claimed first (the dialect's way, or asked for): the
 * default shard's transaction begins here with the key's INSERT, and
 * perform's reads of that shard borrow its connection (odbox_pool_lend). *conn NULL and *found 1: the
 * key was taken, res holds its outcome. */
static int claim_first(odbox_executor *exe, const keyed *k, const char *action_id, odbox_conn **conn,
                       odbox_result *res, int *found, odbox_error *err)
{
    odbox_shard *home = odbox_registry_default_shard(exe->registry);
    int taken = 0;
    odbox_idem_spend sp = {.action_name = k->action, .params_sha256 = k->sha, .action_id = action_id};
    int rc = odbox_idem_begin(home, exe->ns, k->key, &sp, conn, &taken, err);
    if (rc == ODBOX_OK) {
        odbox_pool_lend(odbox_shard_primary(home), *conn);
        return ODBOX_OK;
    }
    if (taken && (rc = replay(exe, k, res, found, err)) == ODBOX_OK && !*found)
        rc = odbox_fail(err, ODBOX_EDEADLOCK, "idempotency key '%.80s' was taken and then released by a concurrent "
                                              "execution; execute again", k->key);
    return rc;
}

static void end_claim(odbox_executor *exe, odbox_conn **conn)
{
    if (!*conn)
        return;
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(exe->registry));
    odbox_pool_lend(NULL, NULL);
    odbox_pool_release(pool, conn); /* rolls back what did not commit */
}

/* One attempt: perform, then persist; fills res. With a key, a stored
 * outcome is returned first (perform does not run), and a key taken by a
 * concurrent execution at the claim is answered from its outcome. */
static int attempt_once(odbox_executor *exe, const odbox_action *action, json_object *prm, const char *params_json,
                        const odbox_exec_config *cfg, int attempt, const int *retries, keyed *k, odbox_result *res,
                        odbox_error *err)
{
    odbox_context ctx = {.exe = exe, .attempt = attempt};
    odbox_uuid_v4(ctx.action_id);
    odbox_plan plan = {.exe = exe};
    pthread_rwlock_rdlock(&exe->mu);
    run rn = {exe->ns, action, params_json, ctx.action_id, odbox_now_us(), &plan, exe->hook, exe->hook_ud,
              k->key, k->sha, NULL, &k->taken, NULL};
    int claim_asked = exe->claim_keys_first;
    pthread_rwlock_unlock(&exe->mu);
    odbox_result attempt_res = {0};
    odbox_error_clear(err);
    int found = 0, rc = ODBOX_OK;
    if (k->key && claims_first(exe, claim_asked))
        rc = claim_first(exe, k, ctx.action_id, &rn.key_conn, res, &found, err);
    else if (k->key)
        rc = replay(exe, k, res, &found, err);
    if (rc != ODBOX_OK || found)
        return rc;
    rc = action->perform(&ctx, prm, &plan, action->user, err);
    if (rc > 0 || (rc < 0 && err && err->code == 0))
        rc = odbox_fail(err, rc < 0 ? rc : ODBOX_EINVAL, "action %s failed (%s) without a message", action->name,
                        odbox_errname(rc < 0 ? rc : ODBOX_EINVAL));
    char *result_json = NULL;
    if (rc == ODBOX_OK && k->key && plan.result &&
        !(result_json = strdup(json_object_to_json_string_ext(plan.result, JSON_C_TO_STRING_PLAIN))))
        rc = odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
    long bad = result_json ? odbox_utf8_bad_at(result_json) : -1; /* the key's row keeps it as text */
    if (rc == ODBOX_OK && bad >= 0)
        rc = odbox_fail(err, ODBOX_EINVAL, "action %s: its result is not valid UTF-8 (byte %ld of its JSON text), "
                                           "which the idempotency key's row cannot keep on PostgreSQL and "
                                           "MySQL/MariaDB: nothing written, the key unspent", action->name, bad);
    int depth = result_json ? odbox_json_depth(result_json) : 0;
    if (rc == ODBOX_OK && depth > ODBOX_JSON_DEPTH_MAX)
        rc = odbox_fail(err, ODBOX_EINVAL, "action %s: its result is nested %d levels deep; at most %d can be read "
                                           "back from the idempotency key's row: nothing written, the key unspent",
                        action->name, depth, ODBOX_JSON_DEPTH_MAX);
    rn.result_json = result_json;
    if (rc == ODBOX_OK)
        rc = persist(&rn, cfg, &attempt_res, err);
    end_claim(exe, &rn.key_conn);
    free(result_json);
    if (res) {
        memcpy(res->action_id, ctx.action_id, sizeof res->action_id);
        res->attempts = attempt + 1;
        memcpy(res->committed, attempt_res.committed, sizeof res->committed);
        res->ncommitted = attempt_res.ncommitted;
        res->failed_shard = attempt_res.failed_shard;
        res->has_failed_shard = attempt_res.has_failed_shard;
        memcpy(res->retries, retries, sizeof res->retries);
        if (rc == ODBOX_OK) {
            res->value = plan.result;
            plan.result = NULL;
        }
    }
    plan_free(&plan);
    /* A unique conflict at the claim, or (PostgreSQL's one statement) a
     * version gone stale under a concurrent execution of the same key:
     * when the key is now there, its outcome is the answer. */
    if (k->key && (k->taken || rc == ODBOX_ESTALE)) {
        odbox_error first = *err;
        int was = rc;
        k->taken = 0;
        if ((rc = replay(exe, k, res, &found, err)) == ODBOX_OK && !found) {
            *err = first;
            rc = was;
        }
    }
    return rc;
}

static int execute(odbox_executor *exe, const odbox_action *action, json_object *params, const char *key,
                   const odbox_exec_config *cfg, odbox_result *res, odbox_error *err)
{
    if (res)
        memset(res, 0, sizeof *res);
    if (!exe || !action)
        return odbox_fail(err, ODBOX_EINVAL, "execute: executor or action is NULL");
    if (!odbox_action_name_valid(action->name))
        return odbox_fail(err, ODBOX_EINVAL, "execute: action name '%.80s' must be an identifier (dots allowed, at most %d)",
                          action->name ? action->name : "(null)", NAME_MAX_LEN);
    if (!action->perform)
        return odbox_fail(err, ODBOX_EINVAL, "execute %s: no perform callback", action->name);
    if (params && !json_object_is_type(params, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "execute %s: params must be a JSON object", action->name);
    if (!cfg)
        cfg = &exe->defaults;
    int rc = check_config(cfg, err);
    if (rc != ODBOX_OK)
        return rc;
    json_object *own = params ? NULL : json_object_new_object();
    json_object *prm = params ? params : own;
    if (!prm)
        return odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory");
    /* A copy: perform may serialise params itself, which reuses the
     * object's string buffer. */
    char *params_json = strdup(json_object_to_json_string_ext(prm, JSON_C_TO_STRING_PLAIN));
    rc = !params_json ? odbox_fail(err, ODBOX_ENOMEM, "execute: out of memory")
                      : odbox_json_storable(params_json, "execute", action->name, "params", 1, err);
    if (rc != ODBOX_OK) {
        if (own)
            json_object_put(own);
        free(params_json);
        return rc;
    }
    odbox_error local;
    if (!err)
        err = &local; /* perform reports through it */
    keyed k = {.key = key, .action = action->name};
    if (key)
        odbox_idem_params_sha256(params_json, k.sha);

    int retries[ODBOX_MAX_RETRY_RULES] = {0};
    for (int attempt = 0;; attempt++) {
        rc = attempt_once(exe, action, prm, params_json, cfg, attempt, retries, &k, res, err);
        if (rc == ODBOX_OK || rc == ODBOX_EINDOUBT || (res && res->ncommitted > 0))
            break;
        int rule = -1;
        for (int i = 0; i < cfg->nretries && rule < 0; i++)
            if (cfg->retries[i].code == rc)
                rule = i;
        if (rule < 0 || retries[rule] >= cfg->retries[rule].max_retries)
            break;
        retries[rule]++;
        if (res)
            res->retries[rule] = retries[rule];
        odbox_log(ODBOX_LOG_WARN, "retrying %s (retry %d/%d for %s, after %d ms): %s", action->name, retries[rule],
                  cfg->retries[rule].max_retries, odbox_errname(rc), cfg->retries[rule].delay_ms,
                  err ? err->message : "");
        if (cfg->retries[rule].delay_ms > 0)
            odbox_sleep_ms(cfg->retries[rule].delay_ms);
    }
    if (own)
        json_object_put(own);
    free(params_json);
    return rc;
}

int odbox_execute(odbox_executor *exe, const odbox_action *action, json_object *params,
                  const odbox_exec_config *cfg, odbox_result *res, odbox_error *err)
{
    return execute(exe, action, params, NULL, cfg, res, err);
}

int odbox_execute_keyed(odbox_executor *exe, const odbox_action *action, json_object *params, const char *key,
                        const odbox_exec_config *cfg, odbox_result *res, odbox_error *err)
{
    if (res)
        memset(res, 0, sizeof *res);
    int rc = odbox_idem_key_check("execute", key, err);
    return rc == ODBOX_OK ? execute(exe, action, params, key, cfg, res, err) : rc;
}
