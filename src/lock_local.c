/* odbox — keyed locks held in this process (see lock_local.h).
 *
 * One list of taken locks under one mutex: few locks are held at once
 * (a migrator, a job, a lease), so a walk costs less than a hash table's
 * upkeep. Keys are compared whole, not hashed: no collisions. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "lock_local.h"
#include "internal.h"
#include "db/odbc.h"
#include "odbox/dialect.h"

typedef struct entry {
    struct entry *next;
    const odbox_conn *owner;
    char *scope;  /* the database; "" when private to owner */
    char *key;
    int count;    /* takes not yet released */
} entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static entry *g_locks;

/* A fork while another thread holds g_mu would leave the child's copy
 * locked for ever. */
static void atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void atfork_release(void) { pthread_mutex_unlock(&g_mu); }
static void init_once(void) { pthread_atfork(atfork_prepare, atfork_release, atfork_release); }

/* The dialect's name for c's database, malloc'd. */
static int scope_of(odbox_conn *c, char **out, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_stmt *s = NULL;
    const char *text = NULL;
    int is_null = 0;
    *out = NULL;
    if (!d->lock_scope_sql)
        return odbox_fail(err, ODBOX_EUNSUPPORTED, "lock: dialect %s names no lock scope", d->name);
    int rc = odbox_stmt_prepare(c, d->lock_scope_sql, &s, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 0)
        rc = odbox_fail(err, ODBOX_EDB, "lock: the lock scope query returned no row");
    if (rc == 1 && (rc = odbox_stmt_get_text(s, 1, &text, &is_null, err)) == ODBOX_OK &&
        !(*out = odbox_strdup(is_null ? "" : text)))
        rc = odbox_fail(err, ODBOX_ENOMEM, "lock: out of memory");
    odbox_stmt_free(&s);
    return rc;
}

static void entry_free(entry *e)
{
    free(e->scope);
    free(e->key);
    free(e);
}

int odbox_local_lock_try(odbox_conn *c, const char *key, int *taken, odbox_error *err)
{
    int got = 0;
    if (taken)
        *taken = 0;
    if (!c || !key || !*key)
        return odbox_fail(err, ODBOX_EINVAL, "lock: connection or key missing");
    pthread_once(&g_once, init_once);
    /* closing c releases what it still holds (conn.c calls this back) */
    c->release_local_locks = odbox_local_lock_release_all;
    char *scope = NULL;
    int rc = scope_of(c, &scope, err);
    if (rc != ODBOX_OK)
        return rc;
    pthread_mutex_lock(&g_mu);
    entry *mine = NULL;
    int held_by_other = 0;
    for (entry *e = g_locks; e; e = e->next) {
        if (strcmp(e->key, key) != 0)
            continue;
        if (e->owner == c)
            mine = e;
        else if (*scope && !strcmp(e->scope, scope))
            held_by_other = 1;
    }
    if (mine) {
        mine->count++;
        got = 1;
    } else if (!held_by_other) {
        entry *e = calloc(1, sizeof *e);
        if (!e || !(e->key = strdup(key))) {
            free(e);
            rc = odbox_fail(err, ODBOX_ENOMEM, "lock: out of memory");
        } else {
            e->owner = c;
            e->scope = scope;
            scope = NULL;
            e->count = 1;
            e->next = g_locks;
            g_locks = e;
            got = 1;
        }
    }
    pthread_mutex_unlock(&g_mu);
    free(scope);
    if (taken)
        *taken = got;
    return rc;
}

int odbox_local_lock_release(const odbox_conn *c, const char *key, odbox_error *err)
{
    if (!c || !key || !*key)
        return odbox_fail(err, ODBOX_EINVAL, "unlock: connection or key missing");
    pthread_once(&g_once, init_once);
    int found = 0;
    pthread_mutex_lock(&g_mu);
    for (entry **p = &g_locks; *p; p = &(*p)->next) {
        entry *e = *p;
        if (e->owner != c || strcmp(e->key, key) != 0)
            continue;
        found = 1;
        if (--e->count == 0) {
            *p = e->next;
            entry_free(e);
        }
        break;
    }
    pthread_mutex_unlock(&g_mu);
    if (!found)
        return odbox_fail(err, ODBOX_ESTATE, "unlock: lock '%.64s' was not held by this connection", key);
    return ODBOX_OK;
}

void odbox_local_lock_release_all(const odbox_conn *c)
{
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_mu);
    for (entry **p = &g_locks; *p;) {
        entry *e = *p;
        if (e->owner == c) {
            *p = e->next;
            entry_free(e);
        } else {
            p = &e->next;
        }
    }
    pthread_mutex_unlock(&g_mu);
}
