/* odbox — the registry of in-process event handlers (see odbox/handlers.h). */
#include <stdlib.h>
#include <string.h>
#include "delivery_internal.h"
#include "model_internal.h"

int odbox_handlers_new(odbox_handlers **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "handlers: out is NULL");
    if (!(*out = calloc(1, sizeof **out)))
        return odbox_fail(err, ODBOX_ENOMEM, "handlers: out of memory");
    atomic_init(&(*out)->frozen, 0);
    return ODBOX_OK;
}

/* [A-Za-z0-9][A-Za-z0-9_.:-]*, at most ODBOX_HANDLER_NAME_MAX: what a
 * command line, a log line and a metric label take without quoting. */
static int name_valid(const char *s)
{
    if (!s || !*s || strlen(s) > ODBOX_HANDLER_NAME_MAX)
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (p == s || !strchr("_.:-", c)))
            return 0;
    }
    return 1;
}

/* Also an entry that odbox_handlers_add could not fill: its counts are
 * set before its arrays exist. */
static void entry_clear(odbox_hentry *e)
{
    for (size_t i = 0; e->former && i < e->nformer; i++)
        free(e->former[i]);
    free(e->former);
    free(e->name);
    for (size_t i = 0; e->types && i < e->ntypes; i++)
        free(e->types[i]);
    free(e->types);
    memset(e, 0, sizeof *e);
}

int odbox_handlers_find(const odbox_handlers *h, const char *name)
{
    for (size_t i = 0; h && name && i < h->n; i++) {
        if (!strcmp(h->v[i].name, name))
            return (int)i;
        for (size_t k = 0; k < h->v[i].nformer; k++)
            if (!strcmp(h->v[i].former[k], name))
                return (int)i;
    }
    return -1;
}

int odbox_handlers_takes(const odbox_handlers *h, int k, const char *event_type)
{
    const odbox_hentry *e = &h->v[k];
    for (size_t t = 0; event_type && t < e->ntypes; t++)
        if (!strcmp(e->types[t], event_type))
            return 1;
    return 0;
}

/* A name the new handler brings: its own (former < 0) or former name
 * number `former`. Valid, not taken by another handler, and not given
 * twice by this one. */
static int check_name(const odbox_handlers *h, const odbox_handler *nh, int former, odbox_error *err)
{
    const char *name = former < 0 ? nh->name : nh->former_names[former];
    if (!name_valid(name))
        return odbox_fail(err, ODBOX_EINVAL,
                          "handlers: %s%sname '%.80s' must be [A-Za-z0-9][A-Za-z0-9_.:-]*, at most %d characters",
                          former < 0 ? "" : nh->name, former < 0 ? "" : ": former ", name ? name : "(null)",
                          ODBOX_HANDLER_NAME_MAX);
    int at = odbox_handlers_find(h, name);
    if (at >= 0)
        return odbox_fail(err, ODBOX_EINVAL, "handlers: the name '%s' is taken by handler %s (names and former "
                                             "names are one namespace)", name, h->v[at].name);
    if (former >= 0 && !strcmp(name, nh->name))
        return odbox_fail(err, ODBOX_EINVAL, "handlers: %s lists its own name among its former names", name);
    for (int k = 0; k < former; k++)
        if (!strcmp(nh->former_names[k], name))
            return odbox_fail(err, ODBOX_EINVAL, "handlers: %s lists the former name %s twice", nh->name, name);
    return ODBOX_OK;
}

/* Exactly one of event_type and event_types; every type a valid name,
 * none twice. *n: how many. */
static int check_types(const odbox_handler *nh, size_t *n, odbox_error *err)
{
    if (nh->event_type && nh->event_types)
        return odbox_fail(err, ODBOX_EINVAL, "handlers: %s gives both event_type and event_types (one or the other)",
                          nh->name);
    if (nh->event_types && !nh->event_types[0])
        return odbox_fail(err, ODBOX_EINVAL, "handlers: %s: event_types is empty", nh->name);
    const char *const one[] = {nh->event_type, NULL};
    const char *const *types = nh->event_types ? nh->event_types : one;
    size_t k = 0;
    for (; k == 0 || types[k]; k++) {
        if (!odbox_is_type_name(types[k], ODBOX_TYPE_NAME_MAX))
            return odbox_fail(err, ODBOX_EINVAL,
                              "handlers: %s: event type '%.80s' must match [A-Za-z_][A-Za-z0-9_]* (at most %d)",
                              nh->name, types[k] ? types[k] : "(null)", ODBOX_TYPE_NAME_MAX);
        for (size_t j = 0; j < k; j++)
            if (!strcmp(types[j], types[k]))
                return odbox_fail(err, ODBOX_EINVAL, "handlers: %s lists the event type %s twice", nh->name,
                                  types[k]);
    }
    *n = k;
    return ODBOX_OK;
}

int odbox_handlers_add(odbox_handlers *h, const odbox_handler *nh, odbox_error *err)
{
    if (!h || !nh)
        return odbox_fail(err, ODBOX_EINVAL, "handlers add: registry or handler is NULL");
    if (atomic_load(&h->frozen))
        return odbox_fail(err, ODBOX_ESTATE, "handlers add: %.80s: a delivery uses these handlers already",
                          nh->name ? nh->name : "(null)");
    int rc = check_name(h, nh, -1, err);
    size_t nformer = 0;
    while (rc == ODBOX_OK && nh->former_names && nh->former_names[nformer]) {
        rc = check_name(h, nh, (int)nformer, err);
        nformer++;
    }
    if (rc != ODBOX_OK)
        return rc;
    size_t ntypes = 0;
    if ((rc = check_types(nh, &ntypes, err)) != ODBOX_OK)
        return rc;
    if (!nh->handle)
        return odbox_fail(err, ODBOX_EINVAL, "handlers: %s has no callback", nh->name);
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 8;
        odbox_hentry *g = realloc(h->v, cap * sizeof *g);
        if (!g)
            return odbox_fail(err, ODBOX_ENOMEM, "handlers: out of memory");
        h->v = g;
        h->cap = cap;
    }
    odbox_hentry e = {.fn = nh->handle, .user = nh->user, .nformer = nformer, .ntypes = ntypes};
    int oom = !(e.name = odbox_strdup(nh->name)) || !(e.types = calloc(ntypes, sizeof *e.types)) ||
              (nformer && !(e.former = calloc(nformer, sizeof *e.former)));
    for (size_t k = 0; !oom && k < nformer; k++)
        oom = !(e.former[k] = odbox_strdup(nh->former_names[k]));
    for (size_t k = 0; !oom && k < ntypes; k++)
        oom = !(e.types[k] = odbox_strdup(nh->event_type ? nh->event_type : nh->event_types[k]));
    if (oom) {
        entry_clear(&e);
        return odbox_fail(err, ODBOX_ENOMEM, "handlers: out of memory");
    }
    h->v[h->n++] = e;
    return ODBOX_OK;
}

/* The index of the handler named name (not a former name) whose settings
 * may still change, or a negative code with err set; what names the call. */
static int settable(odbox_handlers *h, const char *name, const char *what, odbox_error *err)
{
    if (atomic_load(&h->frozen))
        return odbox_fail(err, ODBOX_ESTATE, "handlers %s: %.80s: a delivery uses these handlers already", what,
                          name);
    int at = odbox_handlers_find(h, name);
    if (at < 0 || strcmp(h->v[at].name, name))
        return odbox_fail(err, ODBOX_EINVAL, "handlers %s: no handler is named '%.80s'%s", what, name,
                          at < 0 ? "" : " (that is a former name)");
    return at;
}

int odbox_handlers_set_options(odbox_handlers *h, const char *name, const odbox_handler_options *o,
                               odbox_error *err)
{
    if (!h || !name || !o)
        return odbox_fail(err, ODBOX_EINVAL, "handlers set options: registry, name or options is NULL");
    int at = settable(h, name, "set options", err);
    if (at < 0)
        return at;
    if (o->max_in_flight < 0)
        return odbox_fail(err, ODBOX_EINVAL, "handlers set options: %s: max_in_flight %d is negative", name,
                          o->max_in_flight);
    h->v[at].options = *o;
    return ODBOX_OK;
}

int odbox_handlers_set_max_attempts(odbox_handlers *h, const char *name, int max_attempts, odbox_error *err)
{
    if (!h || !name)
        return odbox_fail(err, ODBOX_EINVAL, "handlers set max attempts: registry or name is NULL");
    int at = settable(h, name, "set max attempts", err);
    if (at < 0)
        return at;
    if (max_attempts < 0)
        return odbox_fail(err, ODBOX_EINVAL, "handlers set max attempts: %s: %d is negative (0: no limit)", name,
                          max_attempts);
    h->v[at].max_attempts = max_attempts;
    return ODBOX_OK;
}

size_t odbox_handlers_count(const odbox_handlers *h) { return h ? h->n : 0; }

void odbox_handlers_free(odbox_handlers **hp)
{
    if (!hp || !*hp)
        return;
    odbox_handlers *h = *hp;
    for (size_t i = 0; i < h->n; i++)
        entry_clear(&h->v[i]);
    free(h->v);
    free(h);
    *hp = NULL;
}
