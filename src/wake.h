/* odbox — wake-up signals: telling delivery at once that a shard has
 * work, so that it need not wait for its poll delay. Not installed.
 *
 * Two signals per shard: EVENTS (events were committed: the fan-out has
 * work) and NOTIFICATIONS (the fan-out created notifications: the
 * handling job has work).
 *
 *  - Within a process (odbox_wake): raising a signal sets its flag and
 *    calls the callbacks subscribed to it, at once, on the raising thread.
 *    odbox_wake_on_commit, added as an executor's commit listener, raises
 *    EVENTS for every commit that wrote events.
 *  - Across processes, where the shard's dialect can (PostgreSQL): a
 *    notifier (odbox_notifier) sends a NOTIFY on the signal's channel
 *    after the commit, never inside the action's transaction (a pending
 *    NOTIFY takes a global lock at commit and serialises committers), from
 *    a thread of its own on a connection of its own, at most one per
 *    channel per the shard's notify interval however many commits ask.
 *    Every executor has one, on unless the shard's DSN says notify=off.
 *    A listener thread per shard (odbox_wake_start) LISTENs on the
 *    channels and raises the signals in its process.
 * Either way it is a hint: a lost one costs at most a poll delay, so
 * delivery always polls as well. */
#ifndef ODBOX_WAKE_H
#define ODBOX_WAKE_H

#include <stddef.h>
#include "odbox/registry.h"

typedef enum odbox_wake_signal {
    ODBOX_WAKE_EVENTS = 0,
    ODBOX_WAKE_NOTIFICATIONS = 1
} odbox_wake_signal;

#define ODBOX_WAKE_NSIGNALS 2

/* "events", "notifications"; NULL for anything else. */
const char *odbox_wake_signal_name(odbox_wake_signal sig);

/* The channel of sig for a shard whose eventlog is eventlog:
 * "<eventlog>_<signal>", e.g. "eventlog_events". Where that would be
 * longer than PostgreSQL's 63-character identifiers (which it would cut,
 * so that two long eventlogs could share a channel), the eventlog is cut
 * and followed by 8 hex digits of its SHA-256: "<prefix>_<hash>_<signal>".
 * ODBOX_EINVAL for an eventlog that is not a valid name or a bad sig. */
int odbox_wake_channel(const char *eventlog, odbox_wake_signal sig, char out[ODBOX_NAME_MAX], odbox_error *err);

/* ---- the notifier: NOTIFY after commits ----------------------------------- */

typedef struct odbox_notifier odbox_notifier;

/* For the shards of r (borrowed; it must outlive the notifier). Allocates
 * only: the thread starts at the first post that needs it. */
int odbox_notifier_open(odbox_registry *r, odbox_notifier **out, odbox_error *err);

/* Asks for a NOTIFY of sig on shard's channel, sent by the notifier's
 * thread after this call. Cheap and never blocks: an atomic flag, and a
 * short mutex when the flag was clear (the first call also starts the
 * thread); many posts within an interval make one NOTIFY. A no-op for a
 * shard whose dialect has no notify_sql, whose DSN says notify=off, or
 * that is not r's. Thread-safe. */
void odbox_notifier_post(odbox_notifier *n, odbox_shard *shard, odbox_wake_signal sig);

/* Sends what is pending, stops the thread and closes its connections.
 * Bounded by one NOTIFY per pending channel (each bounded by the DSN's
 * connect and read timeouts). NULL-safe; sets *n = NULL. */
void odbox_notifier_free(odbox_notifier **n);

/* ---- in-process signals and the listeners ------------------------------------ */

typedef struct odbox_wake odbox_wake;

/* Called on the thread that raised sig (a committer, a listener, the
 * fan-out): it must be cheap, must not block, and must not call
 * odbox_wake_subscribe/unsubscribe/stop/free. */
typedef void (*odbox_wake_fn)(void *ud, odbox_shard_id shard, odbox_wake_signal sig);

typedef struct odbox_wake_config {
    int listen;             /* 0: LISTEN on every shard whose dialect can and whose
                               DSN does not say notify=off; -1: never (a pooler in
                               transaction mode drops LISTEN) */
    int connect_timeout_ms; /* one connect and LISTEN; 0: 10000 */
    int backoff_min_ms;     /* wait after a failed or lost session; 0: 100 */
    int backoff_max_ms;     /* doubled per failure up to this; 0: 5000 */
} odbox_wake_config;

/* Signals for every shard of r (borrowed; it must outlive the wake). cfg
 * may be NULL (defaults). Starts nothing. */
int odbox_wake_open(odbox_registry *r, const odbox_wake_config *cfg, odbox_wake **out, odbox_error *err);

/* Calls fn(ud, shard, sig) whenever sig is raised on any shard. A pair
 * (fn, ud) subscribes once per signal (ODBOX_EINVAL for a second time).
 * unsubscribe returns once no call of fn is running, and fn is not
 * called again (ODBOX_ENOTFOUND when it was not subscribed). Thread-safe. */
int odbox_wake_subscribe(odbox_wake *w, odbox_wake_signal sig, odbox_wake_fn fn, void *ud, odbox_error *err);
int odbox_wake_unsubscribe(odbox_wake *w, odbox_wake_signal sig, odbox_wake_fn fn, void *ud);

/* Raises sig on shard: sets its flag and calls the subscribers. With
 * across_processes, also asks for a NOTIFY (as odbox_notifier_post), so
 * that other processes' listeners raise it too. ODBOX_ENOTFOUND for a
 * shard not in the registry, ODBOX_EINVAL for a bad sig. Thread-safe. */
int odbox_wake_raise(odbox_wake *w, odbox_shard_id shard, odbox_wake_signal sig, int across_processes);

/* 1 when sig was raised on shard since the last take (and clears it),
 * else 0; negative as odbox_wake_raise. Thread-safe. */
int odbox_wake_take(odbox_wake *w, odbox_shard_id shard, odbox_wake_signal sig);

/* A commit listener (odbox_executor_add_commit_listener with the wake as
 * ud): raises EVENTS in this process on a shard that committed events.
 * The executor's own notifier already tells other processes. */
void odbox_wake_on_commit(void *wake, odbox_shard_id shard, size_t nevents);

/* Starts a listener thread per shard that can listen (see
 * odbox_wake_config.listen); others are left to polling, said once in the
 * log. A raw ODBC DSN's dialect is learnt here by connecting once through
 * the shard's primary pool. A listener reconnects after a lost session
 * with a doubling backoff, and then raises both signals on its shard
 * (what was notified while it was away is lost). ODBOX_ESTATE when
 * started already. */
int odbox_wake_start(odbox_wake *w, odbox_error *err);

/* Stops the listeners: prompt (each wait watches a stop pipe), well
 * under a second. The wake may be started again. NULL-safe. */
void odbox_wake_stop(odbox_wake *w);

/* 1 while shard's listener has a session that LISTENs, else 0 (none
 * started, connecting, lost). */
int odbox_wake_listening(odbox_wake *w, odbox_shard_id shard);

/* Stops and frees. NULL-safe; sets *w = NULL. */
void odbox_wake_free(odbox_wake **w);

#endif
