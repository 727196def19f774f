/* odbox — the database registry: shards and their pools. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "odbox/registry.h"
#include "odbox/dsn.h"
#include "internal.h"
#include "registry_internal.h"

struct odbox_shard {
    odbox_shard_id id;
    char eventlog[ODBOX_NAME_MAX];
    odbox_pool *primary;
    odbox_pool *replica;   /* NULL: reads use the primary */
    odbox_pool *locks;     /* keyed-lock sessions on the primary (src/lock.c) */
    char *primary_redacted;
    /* What was checked against this shard's schema (its eventlog's owner,
     * model types' tables), so that each is checked once: the registry is
     * immutable, this is a cache. */
    pthread_mutex_t verified_mu;
    const void **verified;
    size_t nverified;
    char *primary_dsn;      /* secret: the wake-up listener connects with it */
    int notify_interval_ms; /* 0: notify=off */
};

struct odbox_registry {
    odbox_shard *shards;
    size_t n;
    size_t default_index;
};

static int id_valid(odbox_shard_id id)
{
    return id.group >= 0 && id.group <= ODBOX_SHARD_GROUP_MAX && id.member >= 0 &&
           id.member <= ODBOX_SHARD_MEMBER_MAX;
}

int odbox_shard_id_parse(const char *text, odbox_shard_id *id, odbox_error *err)
{
    long g, m;
    char *end;
    /* a NULL output is the caller's mistake, not the text's: said so */
    if (!id)
        return odbox_fail(err, ODBOX_EINVAL, "shard: id is NULL");
    if (!text || !*text)
        return odbox_fail(err, ODBOX_EINVAL, "shard: expected GROUP.MEMBER, got nothing");
    if (*text < '0' || *text > '9')
        goto bad;
    g = strtol(text, &end, 10);
    if (*end != '.' || end[1] < '0' || end[1] > '9')
        goto bad;
    m = strtol(end + 1, &end, 10);
    if (*end)
        goto bad;
    if (g > ODBOX_SHARD_GROUP_MAX || m > ODBOX_SHARD_MEMBER_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "shard '%.32s': group must be 0..%d and member 0..%d",
                          text, ODBOX_SHARD_GROUP_MAX, ODBOX_SHARD_MEMBER_MAX);
    id->group = (int)g;
    id->member = (int)m;
    return ODBOX_OK;
bad:
    return odbox_fail(err, ODBOX_EINVAL, "shard '%.32s': expected GROUP.MEMBER such as 0.1", text);
}

/* The eventlog of a shard: its config's, else its primary DSN's eventlog=,
 * else "eventlog". A replica's eventlog= never names it (the replica
 * copies the primary's eventlog): it must agree with it. */
static int shard_eventlog(const odbox_shard_config *sc, char out[ODBOX_NAME_MAX], odbox_error *err)
{
    const char *dsns[2] = {sc->primary_dsn, sc->replica_dsn};
    const char *from = sc->eventlog ? "the shard's eventlog" : "the default eventlog";
    snprintf(out, ODBOX_NAME_MAX, "%s", sc->eventlog ? sc->eventlog : "");
    for (int i = 0; i < 2; i++) {
        odbox_dsn *dsn = NULL;
        int rc = ODBOX_OK;
        if (i == 1 && !*out) /* nothing named it: the default */
            snprintf(out, ODBOX_NAME_MAX, "eventlog");
        if (!dsns[i] || !*dsns[i])
            continue;
        if ((rc = odbox_dsn_parse(dsns[i], &dsn, err)) != ODBOX_OK)
            return odbox_error_prefix(err, rc, "registry: shard %d.%d %s", sc->id.group, sc->id.member,
                                      i ? "replica" : "primary");
        if (dsn->eventlog && !*out) {
            snprintf(out, ODBOX_NAME_MAX, "%s", dsn->eventlog);
            from = "the primary DSN's eventlog=";
        } else if (dsn->eventlog && strcmp(dsn->eventlog, out)) {
            rc = odbox_fail(err, ODBOX_EINVAL, "registry: shard %d.%d: %s DSN says eventlog=%s but %s is '%s'%s",
                            sc->id.group, sc->id.member, i ? "the replica" : "the primary", dsn->eventlog, from, out,
                            i ? " (the shard's eventlog is named by its config or primary DSN only)" : "");
        }
        odbox_dsn_free(&dsn);
        if (rc != ODBOX_OK)
            return rc;
    }
    return ODBOX_OK;
}

/* What cross-process wake-ups need of the shard: its primary DSN's
 * notify= and notify_interval_ms= (a replica is never notified nor
 * listened to), and that DSN to listen with. */
static int shard_notify(const odbox_shard_config *sc, odbox_shard *s, odbox_error *err)
{
    odbox_dsn *dsn = NULL;
    int rc = odbox_dsn_parse(sc->primary_dsn, &dsn, err);
    if (rc != ODBOX_OK)
        return rc;
    s->notify_interval_ms = dsn->notify_interval_ms ? atoi(dsn->notify_interval_ms) : ODBOX_NOTIFY_INTERVAL_MS;
    if (dsn->notify && odbox_strcaseeq(dsn->notify, "off"))
        s->notify_interval_ms = 0;
    odbox_dsn_free(&dsn);
    if (!(s->primary_dsn = odbox_strdup(sc->primary_dsn)))
        return odbox_fail(err, ODBOX_ENOMEM, "registry: out of memory");
    return ODBOX_OK;
}

static void shard_release(odbox_shard *s)
{
    odbox_pool_free(&s->primary);
    odbox_pool_free(&s->replica);
    odbox_pool_free(&s->locks);
    free(s->primary_redacted);
    free(s->verified);
    odbox_free_secret(s->primary_dsn);
    pthread_mutex_destroy(&s->verified_mu);
}

int odbox_registry_open(const odbox_registry_config *cfg, odbox_registry **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "registry: out is NULL");
    *out = NULL;
    if (!cfg || !cfg->shards || cfg->nshards == 0)
        return odbox_fail(err, ODBOX_EINVAL, "registry: at least one shard is required");
    /* Validate everything before any pool exists. */
    for (size_t i = 0; i < cfg->nshards; i++) {
        const odbox_shard_config *sc = &cfg->shards[i];
        if (!id_valid(sc->id))
            return odbox_fail(err, ODBOX_EINVAL,
                              "registry: shard %d.%d out of range (group 0..%d, member 0..%d)",
                              sc->id.group, sc->id.member, ODBOX_SHARD_GROUP_MAX, ODBOX_SHARD_MEMBER_MAX);
        for (size_t j = 0; j < i; j++)
            if (cfg->shards[j].id.group == sc->id.group && cfg->shards[j].id.member == sc->id.member)
                return odbox_fail(err, ODBOX_EINVAL, "registry: shard %d.%d is listed twice",
                                  sc->id.group, sc->id.member);
        if (!sc->primary_dsn || !*sc->primary_dsn)
            return odbox_fail(err, ODBOX_EINVAL, "registry: shard %d.%d has no primary DSN",
                              sc->id.group, sc->id.member);
        if (sc->eventlog && !odbox_name_is_valid(sc->eventlog))
            return odbox_fail(err, ODBOX_EINVAL,
                              "registry: shard %d.%d: eventlog name '%.80s' is not a valid identifier "
                              "([a-z_][a-z0-9_]*, at most %d characters)",
                              sc->id.group, sc->id.member, sc->eventlog, ODBOX_NAME_MAX - 1);
    }
    size_t def = 0;
    if (cfg->has_default || cfg->nshards > 1) {
        odbox_shard_id want = cfg->has_default ? cfg->default_shard : (odbox_shard_id){0, 0};
        size_t i;
        for (i = 0; i < cfg->nshards; i++)
            if (cfg->shards[i].id.group == want.group && cfg->shards[i].id.member == want.member)
                break;
        if (i == cfg->nshards)
            return odbox_fail(err, ODBOX_EINVAL, "registry: default shard %d.%d is not among the shards",
                              want.group, want.member);
        def = i;
    }

    odbox_registry *r = calloc(1, sizeof *r);
    if (!r || !(r->shards = calloc(cfg->nshards, sizeof *r->shards))) {
        free(r);
        return odbox_fail(err, ODBOX_ENOMEM, "registry: out of memory");
    }
    r->default_index = def;
    for (size_t i = 0; i < cfg->nshards; i++) {
        const odbox_shard_config *sc = &cfg->shards[i];
        odbox_shard *s = &r->shards[i];
        int rc;
        s->id = sc->id;
        if (pthread_mutex_init(&s->verified_mu, NULL) != 0) {
            odbox_registry_free(&r);
            return odbox_fail(err, ODBOX_ENOMEM, "registry: cannot create a mutex");
        }
        r->n = i + 1;
        if ((rc = shard_eventlog(sc, s->eventlog, err)) != ODBOX_OK ||
            (rc = shard_notify(sc, s, err)) != ODBOX_OK) {
            odbox_registry_free(&r);
            return rc;
        }
        if ((rc = odbox_pool_open(sc->primary_dsn, &sc->pool, &s->primary, err)) != ODBOX_OK ||
            (sc->replica_dsn && *sc->replica_dsn &&
             (rc = odbox_pool_open(sc->replica_dsn, &sc->pool, &s->replica, err)) != ODBOX_OK)) {
            odbox_error_prefix(err, rc, "registry: shard %d.%d %s", sc->id.group, sc->id.member,
                               s->primary ? "replica" : "primary");
            odbox_registry_free(&r);
            return rc;
        }
        odbox_pool_config lock_cfg;
        odbox_lock_pool_config(&sc->pool, &lock_cfg);
        if ((rc = odbox_pool_open(sc->primary_dsn, &lock_cfg, &s->locks, err)) != ODBOX_OK) {
            odbox_registry_free(&r);
            return rc;
        }
        if (!(s->primary_redacted = odbox_dsn_redact(sc->primary_dsn))) {
            odbox_registry_free(&r);
            return odbox_fail(err, ODBOX_ENOMEM, "registry: out of memory");
        }
    }
    *out = r;
    return ODBOX_OK;
}

int odbox_registry_open_dsn(const char *dsn, odbox_registry **out, odbox_error *err)
{
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = dsn};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    return odbox_registry_open(&cfg, out, err);
}

void odbox_registry_free(odbox_registry **rp)
{
    if (!rp || !*rp)
        return;
    odbox_registry *r = *rp;
    for (size_t i = 0; i < r->n; i++)
        shard_release(&r->shards[i]);
    free(r->shards);
    free(r);
    *rp = NULL;
}

size_t odbox_registry_shard_count(const odbox_registry *r) { return r ? r->n : 0; }

odbox_shard *odbox_registry_shard_at(const odbox_registry *r, size_t i)
{
    return r && i < r->n ? &r->shards[i] : NULL;
}

odbox_shard *odbox_registry_shard(const odbox_registry *r, odbox_shard_id id)
{
    for (size_t i = 0; r && i < r->n; i++)
        if (r->shards[i].id.group == id.group && r->shards[i].id.member == id.member)
            return &r->shards[i];
    return NULL;
}

odbox_shard *odbox_registry_default_shard(const odbox_registry *r)
{
    return r ? &r->shards[r->default_index] : NULL;
}

odbox_shard *odbox_registry_effective_shard(const odbox_registry *r, odbox_shard_id id)
{
    odbox_shard *s = odbox_registry_shard(r, id);
    return s ? s : odbox_registry_default_shard(r);
}

void odbox_registry_never_create(odbox_registry *r)
{
    for (size_t i = 0; r && i < r->n; i++) {
        odbox_pool_never_create(r->shards[i].primary);
        odbox_pool_never_create(r->shards[i].replica);
        odbox_pool_never_create(r->shards[i].locks);
    }
}

/* A NULL shard (odbox_registry_shard of an id no shard has) answers
 * nothing, like the registry's own lookups, rather than crash: -1.-1 (no
 * shard's id), NULL, 0. */
odbox_shard_id odbox_shard_get_id(const odbox_shard *s) { return s ? s->id : (odbox_shard_id){-1, -1}; }
const char *odbox_shard_eventlog(const odbox_shard *s) { return s ? s->eventlog : NULL; }
odbox_pool *odbox_shard_primary(const odbox_shard *s) { return s ? s->primary : NULL; }
odbox_pool *odbox_shard_replica(const odbox_shard *s) { return !s ? NULL : s->replica ? s->replica : s->primary; }
odbox_pool *odbox_shard_lock_pool(const odbox_shard *s) { return s->locks; }
int odbox_shard_has_replica(const odbox_shard *s) { return s && s->replica != NULL; }
const char *odbox_shard_primary_redacted(const odbox_shard *s) { return s ? s->primary_redacted : NULL; }

int odbox_shard_is_verified(odbox_shard *s, const void *what)
{
    int found = 0;
    pthread_mutex_lock(&s->verified_mu);
    for (size_t i = 0; i < s->nverified && !found; i++)
        found = s->verified[i] == what;
    pthread_mutex_unlock(&s->verified_mu);
    return found;
}

int odbox_shard_set_verified(odbox_shard *s, const void *what, odbox_error *err)
{
    int rc = ODBOX_OK;
    pthread_mutex_lock(&s->verified_mu);
    size_t i = 0;
    while (i < s->nverified && s->verified[i] != what)
        i++;
    if (i == s->nverified) {
        const void **g = realloc(s->verified, (s->nverified + 1) * sizeof *g);
        if (g) {
            g[s->nverified++] = what;
            s->verified = g;
        } else {
            rc = odbox_fail(err, ODBOX_ENOMEM, "shard: out of memory");
        }
    }
    pthread_mutex_unlock(&s->verified_mu);
    return rc;
}

const char *odbox_shard_primary_dsn(const odbox_shard *s) { return s->primary_dsn; }
int odbox_shard_notify_interval_ms(const odbox_shard *s) { return s->notify_interval_ms; }

/* The keyed-lock sessions' pool (src/lock.c takes its sessions from it). */
void odbox_lock_pool_config(const odbox_pool_config *shard_pool, odbox_pool_config *out)
{
    /* As many lock sessions as the shard has connections: as many keys
     * can be held at once as before the pools were split. The short wait
     * makes one try cheap; a waiter's own wait bounds the whole. */
    out->size = shard_pool ? shard_pool->size : 0;
    out->acquire_timeout_ms = ODBOX_LOCK_SESSION_WAIT_MS;
}
