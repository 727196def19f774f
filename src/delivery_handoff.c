/* odbox — hand-offs: a fan-out round whose rows this process's handling
 * loops can take at once claims them as it writes them (lease_owner,
 * lease_until and next_retry_at set as a claim sets them, in the same
 * INSERT) and queues them here; a handling loop then reads them by id
 * instead of claiming (delivery_claim.c: odbox_handling_take). A claim
 * is a locking read and a second UPDATE of every row: measured on
 * PostgreSQL, about a third of the database's time per event of a drain.
 *
 * Nothing but the lease says whose the rows are: a hand-off that no loop
 * takes in time, or before the loops stop, is given back
 * (delivery_handling.c), and a process that dies leaves rows that are due
 * again when the lease ends, as after any claim. */
#include <stdlib.h>
#include "delivery_internal.h"

int odbox_handling_free_for(odbox_delivery *d, odbox_dshard *ds, size_t nrows)
{
    pthread_mutex_lock(&d->mu);
    int room = !ds->pending[JOB_HANDLING] && !ds->handoff &&
               (size_t)ds->idle[JOB_HANDLING] * (size_t)d->cfg.batch[JOB_HANDLING] >= nrows;
    pthread_mutex_unlock(&d->mu);
    return room;
}

int odbox_handoff_room(odbox_delivery *d, odbox_dshard *ds, int64_t busy_us)
{
    pthread_mutex_lock(&d->mu);
    int room = ds->running[JOB_HANDLING] > 0 && !ds->handoff;
    pthread_mutex_unlock(&d->mu);
    int64_t now = odbox_mono_us();
    for (int i = 0; room && i < d->cfg.loops; i++) {
        int64_t since = atomic_load(&ds->round_since_us[i]);
        room = !since || now - since <= busy_us;
    }
    return room;
}

void odbox_handoff_push(odbox_delivery *d, odbox_dshard *ds, odbox_handoff *ho)
{
    ho->next = NULL;
    ho->queued_mono_us = odbox_mono_us();
    pthread_mutex_lock(&d->mu);
    if (ds->handoff_last)
        ds->handoff_last->next = ho;
    else
        ds->handoff = ho;
    ds->handoff_last = ho;
    ds->pending[JOB_HANDLING] = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

odbox_handoff *odbox_handoff_pop(odbox_delivery *d, odbox_dshard *ds)
{
    pthread_mutex_lock(&d->mu);
    odbox_handoff *ho = ds->handoff;
    if (ho) {
        if (!(ds->handoff = ho->next))
            ds->handoff_last = NULL;
        else {
            ds->pending[JOB_HANDLING] = 1;
            pthread_cond_broadcast(&d->cv);
        }
        ho->next = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    return ho;
}

void odbox_handoff_requeue(odbox_delivery *d, odbox_dshard *ds, odbox_handoff *ho)
{
    if (odbox_mono_us() >= ho->lease_end_mono_us) {
        odbox_handoff_free(ho);
        return;
    }
    pthread_mutex_lock(&d->mu);
    if (!(ho->next = ds->handoff))
        ds->handoff_last = ho;
    ds->handoff = ho;
    pthread_mutex_unlock(&d->mu);
}

void odbox_handoff_free(odbox_handoff *ho)
{
    if (!ho)
        return;
    free(ho->ids);
    free(ho);
}
