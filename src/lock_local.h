/* odbox — keyed locks held in this process, for dialects whose server has
 * no session locks (lock_key_form ODBOX_LOCK_KEY_NONE: SQLite). Not
 * installed.
 *
 * They behave as the session locks of src/db/lock.c do: a lock belongs to
 * the connection that took it, taking it again on that connection counts
 * up (each take needs its release), and closing the connection releases
 * what it still holds. Two connections conflict when the dialect's
 * lock_scope_sql names the same database for both; a database private to
 * its connection ('': SQLite :memory:) conflicts with nobody. Other
 * processes do not see these locks. Thread-safe. */
#ifndef ODBOX_LOCK_LOCAL_H
#define ODBOX_LOCK_LOCAL_H

#include "odbox/db.h"

/* Takes key for c when no other connection to the same database holds it:
 * *taken (may be NULL) 1, else 0. Never waits. */
int odbox_local_lock_try(odbox_conn *c, const char *key, int *taken, odbox_error *err);

/* Releases one take of key by c; ODBOX_ESTATE when c does not hold it. */
int odbox_local_lock_release(const odbox_conn *c, const char *key, odbox_error *err);

/* Drops every lock c holds (c is closing). */
void odbox_local_lock_release_all(const odbox_conn *c);

#endif
