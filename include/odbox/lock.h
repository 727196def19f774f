/* odbox — keyed locks: cluster-wide mutual exclusion on a string key,
 * held by a database session (PostgreSQL advisory locks, MySQL/MariaDB
 * GET_LOCK) on one shard's primary.
 *
 * The key is hashed with SHA-256; the first 8 bytes, big-endian, are the
 * 64-bit lock id (PostgreSQL) or, as lower-case hex, the lock name
 * (MySQL/MariaDB) — the same ids Ekbatan uses, so both can share locks.
 *
 * Locks take their sessions from a pool of their own per shard (as many
 * sessions as the shard's pool size, opened on demand), never from the
 * pool odbox_execute writes through, so holders and waiters cannot starve
 * an execute. A lease keeps one session until it is released; a waiter
 * borrows one only for each try. Re-entrant per
 * (thread, key, shard): acquiring a key this thread already holds counts
 * up without touching the database, and the lock is released when the
 * outermost lease is released. A lease held longer than max_hold_ms is
 * force-released by a watchdog (odbox_lock_is_held then answers 0).
 *
 * Acquire around odbox_execute, not inside an action's perform: a lock
 * taken in perform would end before the commit. Thread-safe. */
#ifndef ODBOX_LOCK_H
#define ODBOX_LOCK_H

#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_lease odbox_lease;

/* Waits up to wait_ms for the lock (0: try once). Contention is not an
 * error: *lease is set to NULL and ODBOX_EBUSY returned (ODBOX_ETIMEDOUT
 * when wait_ms > 0 elapsed). That includes every lock session of the
 * shard being in use (as many locks held as its pool size): the message
 * says which. max_hold_ms must be > 0. Backend failures return their own
 * codes (ODBOX_ECONNECT, ODBOX_EDB, ...). Waiting tries every 50 ms, one
 * round trip each: waiters are not queued, and a released lock goes to
 * whichever waiter tries first. */
int odbox_lock_try_acquire(odbox_shard *shard, const char *key, int wait_ms, int max_hold_ms,
                           odbox_lease **lease, odbox_error *err);

/* Waits as long as it takes, also for a free lock session. */
int odbox_lock_acquire(odbox_shard *shard, const char *key, int max_hold_ms, odbox_lease **lease,
                       odbox_error *err);

/* 1 while the lease holds its lock (0 after the watchdog released it). */
int odbox_lock_is_held(const odbox_lease *lease);

/* Releases (the outermost release unlocks and returns the connection).
 * NULL-safe, sets *lease = NULL. Must be called by the acquiring thread. */
void odbox_lock_release(odbox_lease **lease);

#ifdef __cplusplus
}
#endif
#endif
