/* odbox — a thread-safe list of callbacks (see callbacks.h). */
#include <stdlib.h>
#include <string.h>
#include "callbacks.h"
#include "odbox/error.h"

void odbox_callbacks_init(odbox_callbacks *l)
{
    memset(l, 0, sizeof *l);
    pthread_rwlock_init(&l->mu, NULL);
}

void odbox_callbacks_destroy(odbox_callbacks *l)
{
    pthread_rwlock_destroy(&l->mu);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static size_t find(const odbox_callbacks *l, int tag, odbox_callback_fn fn, void *ud)
{
    size_t i = 0;
    while (i < l->n && !(l->v[i].tag == tag && l->v[i].fn == fn && l->v[i].ud == ud))
        i++;
    return i;
}

int odbox_callbacks_add(odbox_callbacks *l, int tag, odbox_callback_fn fn, void *ud)
{
    int rc = ODBOX_OK;
    pthread_rwlock_wrlock(&l->mu);
    if (find(l, tag, fn, ud) < l->n) {
        rc = ODBOX_EINVAL;
    } else {
        odbox_callback *g = realloc(l->v, (l->n + 1) * sizeof *g);
        if (g) {
            g[l->n++] = (odbox_callback){tag, fn, ud};
            l->v = g;
        } else {
            rc = ODBOX_ENOMEM;
        }
    }
    pthread_rwlock_unlock(&l->mu);
    return rc;
}

int odbox_callbacks_remove(odbox_callbacks *l, int tag, odbox_callback_fn fn, void *ud)
{
    pthread_rwlock_wrlock(&l->mu); /* waits for running calls */
    size_t i = find(l, tag, fn, ud);
    int rc = i < l->n ? ODBOX_OK : ODBOX_ENOTFOUND;
    if (i < l->n) {
        memmove(&l->v[i], &l->v[i + 1], (l->n - i - 1) * sizeof *l->v);
        l->n--;
    }
    pthread_rwlock_unlock(&l->mu);
    return rc;
}

const odbox_callback *odbox_callbacks_begin(odbox_callbacks *l, size_t *n)
{
    pthread_rwlock_rdlock(&l->mu);
    *n = l->n;
    return l->v;
}

void odbox_callbacks_end(odbox_callbacks *l)
{
    pthread_rwlock_unlock(&l->mu);
}
