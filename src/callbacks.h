/* odbox — a thread-safe list of callbacks, each a function, its user data
 * and a tag (what it is for: a signal, or 0), for the executor's commit
 * listeners and the wake-up subscribers. Not installed.
 *
 * Calls run between odbox_callbacks_begin and _end, under a read lock, so
 * odbox_callbacks_remove returns once no call of the removed callback is
 * running, and a caller may then free its user data. A callback must not
 * add or remove callbacks of its own list. */
#ifndef ODBOX_CALLBACKS_H
#define ODBOX_CALLBACKS_H

#include <pthread.h>
#include <stddef.h>

/* Any function: each list casts back to its own type. */
typedef void (*odbox_callback_fn)(void);

typedef struct odbox_callback {
    int tag;
    odbox_callback_fn fn;
    void *ud;
} odbox_callback;

typedef struct odbox_callbacks {
    pthread_rwlock_t mu;
    odbox_callback *v;
    size_t n;
} odbox_callbacks;

void odbox_callbacks_init(odbox_callbacks *l);
void odbox_callbacks_destroy(odbox_callbacks *l);

/* ODBOX_EINVAL when (tag, fn, ud) is in the list already, ODBOX_ENOMEM. */
int odbox_callbacks_add(odbox_callbacks *l, int tag, odbox_callback_fn fn, void *ud);
/* ODBOX_ENOTFOUND when (tag, fn, ud) is not in the list. */
int odbox_callbacks_remove(odbox_callbacks *l, int tag, odbox_callback_fn fn, void *ud);

/* The callbacks, read-locked until odbox_callbacks_end. */
const odbox_callback *odbox_callbacks_begin(odbox_callbacks *l, size_t *n);
void odbox_callbacks_end(odbox_callbacks *l);

#endif
