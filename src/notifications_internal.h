/* odbox — what the operations on the outbox's tables share
 * (notifications.c, notifications_metrics.c, purge.c); not installed. */
#ifndef ODBOX_NOTIFICATIONS_INTERNAL_H
#define ODBOX_NOTIFICATIONS_INTERNAL_H

#include "internal.h"
#include "jobs_internal.h"
#include "odbox/dialect.h"
#include "odbox/notifications.h"

/* The shards a call covers: the one given, or every shard of r. */
size_t odbox_ops_shard_count(const odbox_registry *r, const odbox_shard *one);
odbox_shard *odbox_ops_shard_at(const odbox_registry *r, const odbox_shard *one, size_t i);

/* A connection to shard s's primary, and the SQL name of its eventlog
 * table `table` (cap bytes). Errors name the shard. */
int odbox_ops_connect(const odbox_shard *s, const char *table, odbox_conn **conn, char *name, size_t cap,
                      odbox_error *err);
void odbox_ops_release(const odbox_shard *s, odbox_conn **conn);

/* Prefixes err's message with "shard G.M" and returns rc. */
int odbox_ops_shard_error(const odbox_shard *s, int rc, odbox_error *err);

/* Appends col to b as a SELECT-list item odbox_stmt_get_timestamp reads. */
void odbox_ops_ts_col(odbox_buf *b, const odbox_dialect *d, const char *col);

/* "Now" for an operation given clock: the clock's value, or
 * ODBOX_OPS_DB_NOW when there is none: each shard's database's time then
 * decides (odbox_ops_now), since the rows' times are written by many
 * processes whose clocks may disagree with this one's. The jobs' value
 * for it, so that the purge job hands its job registry's "now" on. */
#define ODBOX_OPS_DB_NOW ODBOX_JOB_DB_NOW
int64_t odbox_ops_given_now(const odbox_clock *clock);
/* given resolved on c: given itself, or the database's time read on c
 * (once per shard: the reads of one shard share it). */
int odbox_ops_now(odbox_conn *c, int64_t given, int64_t *now, odbox_error *err);

/* A notification filter checked and normalised: state upper-cased. */
typedef struct odbox_ops_filter {
    const odbox_shard *shard;
    char state[16]; /* "" for any */
    const char *handler, *event_type;
    int64_t now_us; /* odbox_ops_given_now: resolved per shard */
} odbox_ops_filter;

int odbox_ops_filter_init(const odbox_notification_filter *f, odbox_ops_filter *out, odbox_error *err);

/* Appends " AND state = ? AND handler_name = ? ..." for what f sets. */
void odbox_ops_filter_sql(odbox_buf *b, const odbox_ops_filter *f);
/* Binds those parameters from *idx on, advancing it. */
int odbox_ops_filter_bind(odbox_stmt *s, const odbox_ops_filter *f, int *idx, odbox_error *err);

/* Handler stats as they are gathered, shard after shard. */
typedef struct odbox_ops_stats {
    odbox_notification_stats *v;
    size_t n, cap;
} odbox_ops_stats;

/* The entry of handler on shard among v's entries from `from` on, added
 * when missing; NULL (ODBOX_ENOMEM in err) when memory ran out. */
odbox_notification_stats *odbox_ops_stats_entry(odbox_ops_stats *v, size_t from, odbox_shard_id shard,
                                                const char *handler, odbox_error *err);
/* Counts and due rows of every handler on shard s (filtered by f) into
 * new entries of v; *now (may be NULL) gets the time "due" was measured
 * at (f's, resolved on the shard). */
int odbox_ops_shard_counts(const odbox_shard *s, const odbox_ops_filter *f, odbox_ops_stats *v, int64_t *now,
                           odbox_error *err);
/* Hands out v as count and metrics do: each shard's entries sorted by
 * handler; v is left empty. */
void odbox_ops_stats_finish(odbox_ops_stats *v, odbox_notification_stats **out, size_t *n);

/* The INSERT ... SELECT of notifications for nrows bound (nid, eid,
 * handler) rows: the fan-out's (delivery_fanout.c) and a replay's
 * (subscriptions.c); subscriptions: the eventlog's table of them. Its
 * parameters: created_date, updated_date, then the rows'. With handoff
 * (the fan-out's), the rows may be claimed as they are written:
 * odbox_notifications_bind_handoff's part 0 comes first, before
 * created_date, and its part 1 after updated_date. */
char *odbox_notifications_insert_sql(const odbox_dialect *d, const char *events, const char *notifications,
                                     const char *subscriptions, size_t nrows, const char *where, int handoff);

/* Binds from *idx a part of a handoff insert's parameters: the rows are
 * claimed for token, leased until until_us (the database's time), those
 * whose events are due at now_us (the time a claim compares
 * next_retry_at with). */
int odbox_notifications_bind_handoff(odbox_stmt *s, int *idx, int part, const char *token, int64_t now_us,
                                     int64_t until_us, odbox_error *err);

#endif
