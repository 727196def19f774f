/* odbox — retention: deleting what the outbox is done with (and the
 * rows of processes long gone), in bounded batches, by a call or as a
 * job (see odbox/notifications.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "delivery_internal.h"
#include "notifications_internal.h"
#include "jobs_internal.h"

#define DEFAULT_BATCH 1000
#define MAX_BATCH 100000
#define MAX_DURATION_US (INT64_C(100) * 366 * 86400 * 1000000)

int odbox_duration_parse(const char *text, int64_t *us, odbox_error *err)
{
    if (!text || !us)
        return odbox_fail(err, ODBOX_EINVAL, "duration: text or us is NULL");
    const char *p = text;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > MAX_DURATION_US / 10)
            return odbox_fail(err, ODBOX_EINVAL, "duration: '%.40s' is more than 100 years", text);
        v = v * 10 + (*p - '0');
    }
    int64_t unit = !strcmp(p, "s") ? 1 : !strcmp(p, "m") ? 60 : !strcmp(p, "h") ? 3600 : !strcmp(p, "d") ? 86400 : 0;
    if (p == text || !unit)
        return odbox_fail(err, ODBOX_EINVAL,
                          "duration: '%.40s' is not a whole number and a unit (30d, 12h, 90m, 3600s)", text);
    if (v == 0)
        return odbox_fail(err, ODBOX_EINVAL, "duration: '%.40s' is zero", text);
    if (v > MAX_DURATION_US / (unit * 1000000))
        return odbox_fail(err, ODBOX_EINVAL, "duration: '%.40s' is more than 100 years", text);
    *us = v * unit * 1000000;
    return ODBOX_OK;
}

static int options_ok(const odbox_purge_options *o, odbox_error *err)
{
    if (!o)
        return odbox_fail(err, ODBOX_EINVAL, "purge: options are NULL (older_than_us is required)");
    if (o->older_than_us <= 0 || o->older_than_us > MAX_DURATION_US)
        return odbox_fail(err, ODBOX_EINVAL, "purge: older_than_us %lld is not in 1 us .. 100 years",
                          (long long)o->older_than_us);
    if (o->keys_older_than_us < 0 || o->keys_older_than_us > MAX_DURATION_US)
        return odbox_fail(err, ODBOX_EINVAL, "purge: keys_older_than_us %lld is not in 0 (7 days) .. 100 years",
                          (long long)o->keys_older_than_us);
    if (o->batch_size < 0 || o->batch_size > MAX_BATCH)
        return odbox_fail(err, ODBOX_EINVAL, "purge: a batch of %d rows (1..%d, 0: %d)", o->batch_size, MAX_BATCH,
                          DEFAULT_BATCH);
    return ODBOX_OK;
}

/* When to stop between two batches (the job's shutdown); NULL: never. */
typedef struct purge_stop {
    int (*now)(void *ud);
    void *ud;
} purge_stop;

static int stopping(const purge_stop *st) { return st && st->now(st->ud); }

/* Which rows go, one pass each, oldest first: each condition is a range
 * of one index, read in its order (V5 and V1), so a batch reads and locks
 * only the rows it deletes. SQLite uses a partial index only when the
 * query repeats its condition, hence the IN before the state; finished
 * states go one at a time, since MySQL/MariaDB would sort the rows of
 * both to order them. The guard is what a row must still be when it is
 * deleted: one requeued meanwhile stays. An undelivered event with a
 * type is never touched. */
enum { NOTIFICATIONS, EVENTS, SENTINELS, KEYS };

/* Finished notifications: by updated_date where a partial index holds
 * them (event_notifications_finished), else through the due index
 * (state, next_retry_at), as a finishing outcome sets next_retry_at to
 * the finish time (V13); a row finished before V13 has an earlier
 * next_retry_at, so updated_date is tested too. */
#define FINISHED_BEFORE "next_retry_at < ? AND updated_date < ?"
#define FINISHED_ORDER NULL

static const struct pass {
    int what;
    const char *where; /* the cutoff is each of its parameters */
    const char *order; /* FINISHED_ORDER: the finished rows' */
    const char *guard;
    /* where no partial index holds the rows, one range per event type
     * (the type bound first) of the index that leads (delivered,
     * event_type): NULL, where for every dialect */
    const char *where_per_type;
} passes[] = {
    {NOTIFICATIONS, "state IN ('SUCCEEDED', 'EXPIRED') AND state = 'SUCCEEDED' AND " FINISHED_BEFORE,
     FINISHED_ORDER, "state = 'SUCCEEDED'", NULL},
    {NOTIFICATIONS, "state IN ('SUCCEEDED', 'EXPIRED') AND state = 'EXPIRED' AND " FINISHED_BEFORE,
     FINISHED_ORDER, "state = 'EXPIRED'", NULL},
    /* events_delivered (event_date) WHERE delivered; MySQL/MariaDB, which
     * would keep it over every event and move its entry at every flip,
     * have none since V13: events_undelivered (delivered, event_type,
     * event_date), type by type */
    {EVENTS, "delivered = TRUE AND event_date < ?", " ORDER BY event_date", "delivered = TRUE",
     "delivered = TRUE AND event_type = ? AND event_date < ?"},
    /* sentinels, which no handler takes: events_undelivered (event_type,
     * event_date), whose range is read oldest first; no ORDER BY, as
     * PostgreSQL and MySQL/MariaDB would sort the whole range after an
     * IS NULL */
    {SENTINELS, "delivered = FALSE AND event_type IS NULL AND event_date < ?", "",
     "delivered = FALSE AND event_type IS NULL", NULL},
    /* idempotency keys (V11): idempotency_keys_created; a key is written
     * once and never changed */
    {KEYS, "created_date < ?", " ORDER BY created_date", "1 = 1", NULL},
};

/* Undelivered events of a type no subscription takes (odbox_purge_unsubscribed_run):
 * type by type, each a range of events_undelivered (event_type,
 * event_date), oldest first. */
static const struct pass unsubscribed_pass = {EVENTS, NULL, "", "delivered = FALSE",
                                              "delivered = FALSE AND event_type = ? AND event_date < ?"};

/* A DELETE that loses a deadlock (against a handling round's outcomes
 * or a fan-out's writes, in another order) was rolled back whole: it runs
 * again, up to this many times in all, rather than ending the purge. */
#define DELETE_TRIES 5

/* DELETEs of at most batch rows of pass p (of event type type, where
 * not NULL: bound first, then the cutoff) until one removes fewer, each
 * in autocommit: its own short transaction. */
static int delete_batches(odbox_conn *c, const char *table, const struct pass *p, const char *type, int64_t cutoff,
                          int batch, const purge_stop *st, int64_t *removed, int64_t *batches, odbox_error *err)
{
    char sql[1024];
    const odbox_dialect *d = odbox_conn_dialect(c);
    const char *order = p->order ? p->order : d->has_partial_indexes ? " ORDER BY updated_date" : " ORDER BY next_retry_at";
    const char *where = type ? p->where_per_type : p->where;
    snprintf(sql, sizeof sql, d->delete_batch_fmt, table, where, order, p->guard);
    int nparams = 0;
    for (const char *q = where; (q = strchr(q, '?')); q++)
        nparams++;
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    while (rc == ODBOX_OK) {
        int idx = 1;
        if (type)
            rc = odbox_stmt_bind_text(s, idx++, type, err);
        while (idx <= nparams && rc == ODBOX_OK)
            rc = odbox_stmt_bind_timestamp(s, idx++, cutoff, err);
        if (rc != ODBOX_OK || (rc = odbox_stmt_bind_int64(s, idx, batch, err)) != ODBOX_OK ||
            (rc = odbox_stmt_execute_autocommit(s, DELETE_TRIES, NULL, err)) != ODBOX_OK)
            break;
        int64_t k = odbox_stmt_rows_affected(s);
        if (k < 0) {
            rc = odbox_fail(err, ODBOX_EDB, "purge: the driver did not tell how many rows a DELETE removed");
            break;
        }
        *removed += k;
        (*batches)++;
        if (k < batch || stopping(st))
            break;
    }
    odbox_stmt_free(&s);
    return rc;
}

/* The rows of subscription_processes not seen since cutoff. A process
 * (a delivery) writes one per handler and shard and refreshes them at
 * every heartbeat, so a row older than the window is a process long
 * gone; a live one's removed by a window shorter than its heartbeat's
 * period is written again at its next heartbeat (its UPDATE finds fewer
 * rows than it has handlers and inserts the missing ones). No index
 * leads with last_seen (the key is (name, process), and a migration is
 * not worth it for a table this small once purged), so the batches walk
 * the key: the next at most batch old rows after the last key, read in
 * key order, then one DELETE of that key range guarded by the age (a row
 * seen meanwhile stays). Dialect-neutral: no id column for
 * delete_batch_fmt. */
#define PROCS_AFTER " AND (name > ? OR (name = ? AND process > ?))"
#define PROCS_UPTO " AND (name < ? OR (name = ? AND process <= ?))"

typedef struct proc_key {
    char *name, *process; /* NULL: before the first */
} proc_key;

static int bind_key(odbox_stmt *s, int *idx, const proc_key *k, odbox_error *err)
{
    int rc = odbox_stmt_bind_text(s, (*idx)++, k->name, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, (*idx)++, k->name, err)) == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, (*idx)++, k->process, err);
    return rc;
}

/* The last key of the next batch after *after into *last; *found rows. */
static int next_processes(odbox_conn *c, const char *table, int64_t cutoff, const proc_key *after, int batch,
                          proc_key *last, int *found, odbox_error *err)
{
    char sql[ODBOX_NAME_MAX * 2 + 256];
    snprintf(sql, sizeof sql, "SELECT name, process FROM %s WHERE last_seen < ?%s ORDER BY name, process LIMIT ?",
             table, after->name ? PROCS_AFTER : "");
    odbox_stmt *s = NULL;
    int idx = 1;
    *found = 0;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_timestamp(s, idx++, cutoff, err)) == ODBOX_OK && after->name)
        rc = bind_key(s, &idx, after, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_int64(s, idx, batch, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *name = NULL, *process = NULL;
        if ((rc = odbox_stmt_get_text(s, 1, &name, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &process, NULL, err)) != ODBOX_OK)
            break;
        free(last->name);
        free(last->process);
        last->name = strdup(name);
        last->process = strdup(process);
        if (!last->name || !last->process)
            rc = odbox_fail(err, ODBOX_ENOMEM, "purge: out of memory");
        (*found)++;
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

static int delete_processes(odbox_conn *c, const char *table, int64_t cutoff, int batch, const purge_stop *st,
                            int64_t *removed, int64_t *batches, odbox_error *err)
{
    proc_key after = {NULL, NULL}, last = {NULL, NULL};
    int rc = ODBOX_OK, found = 0;
    while (rc == ODBOX_OK && (rc = next_processes(c, table, cutoff, &after, batch, &last, &found, err)) == ODBOX_OK &&
           found) {
        char sql[ODBOX_NAME_MAX * 2 + 256];
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE last_seen < ?%s" PROCS_UPTO, table,
                 after.name ? PROCS_AFTER : "");
        odbox_stmt *s = NULL;
        int idx = 1;
        if ((rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_timestamp(s, idx++, cutoff, err)) == ODBOX_OK &&
            (!after.name || (rc = bind_key(s, &idx, &after, err)) == ODBOX_OK) &&
            (rc = bind_key(s, &idx, &last, err)) == ODBOX_OK &&
            (rc = odbox_stmt_execute_autocommit(s, DELETE_TRIES, NULL, err)) == ODBOX_OK) {
            int64_t k = odbox_stmt_rows_affected(s);
            if (k < 0)
                rc = odbox_fail(err, ODBOX_EDB, "purge: the driver did not tell how many rows a DELETE removed");
            else
                *removed += k, (*batches)++;
        }
        odbox_stmt_free(&s);
        free(after.name);
        free(after.process);
        after = last;
        last = (proc_key){NULL, NULL};
        if (found < batch || stopping(st))
            break;
    }
    free(after.name);
    free(after.process);
    free(last.name);
    free(last.process);
    return rc;
}

/* The event types of the delivered (or undelivered) events, one index
 * seek each (where the index leads (delivered, event_type), or is
 * (event_type, event_date) over the undelivered ones: the next type after
 * the last, as a loose index scan would read them; a DISTINCT reads every
 * entry). Two statements, each prepared once: the first type, and the
 * next. MIN leaves out the sentinels' NULL. */
static int event_types(odbox_conn *c, const char *events, int delivered, char ***types, size_t *n,
                       odbox_error *err)
{
    char first[ODBOX_NAME_MAX * 2 + 96], after[ODBOX_NAME_MAX * 2 + 128];
    snprintf(first, sizeof first, "SELECT MIN(event_type) FROM %s WHERE delivered = %s", events,
             delivered ? "TRUE" : "FALSE");
    snprintf(after, sizeof after, "%s AND event_type > ?", first);
    odbox_stmt *s0 = NULL, *s1 = NULL;
    int rc = odbox_stmt_prepare(c, first, &s0, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_prepare(c, after, &s1, err);
    size_t cap = 0;
    for (int null = 0; rc == ODBOX_OK && !null;) {
        odbox_stmt *s = *n ? s1 : s0;
        const char *t = NULL;
        null = 1;
        if (*n)
            rc = odbox_stmt_bind_text(s, 1, (*types)[*n - 1], err);
        if (rc == ODBOX_OK)
            rc = odbox_stmt_execute(s, err);
        if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
            rc = odbox_stmt_get_text(s, 1, &t, &null, err);
        if (rc == ODBOX_OK && !null && *n == cap) {
            char **grown = realloc(*types, (cap = cap ? 2 * cap : 8) * sizeof *grown);
            if (grown)
                *types = grown;
            else
                rc = odbox_fail(err, ODBOX_ENOMEM, "purge: out of memory");
        }
        if (rc == ODBOX_OK && !null && !((*types)[(*n)++] = strdup(t)))
            rc = odbox_fail(err, ODBOX_ENOMEM, "purge: out of memory");
    }
    odbox_stmt_free(&s0);
    odbox_stmt_free(&s1);
    return rc < 0 ? rc : ODBOX_OK;
}

/* Pass p's batches type by type over the (un)delivered events' types,
 * but those of skip (nskip of them). */
static int delete_by_type(odbox_conn *c, const char *events, const struct pass *p, int delivered,
                          const odbox_subtype *skip, size_t nskip, int64_t cutoff, int batch, const purge_stop *st,
                          int64_t *removed, int64_t *batches, odbox_error *err)
{
    char **types = NULL;
    size_t ntypes = 0;
    int rc = event_types(c, events, delivered, &types, &ntypes, err);
    for (size_t k = 0; rc == ODBOX_OK && k < ntypes && !stopping(st); k++) {
        size_t j = 0;
        while (j < nskip && strcmp(skip[j].name, types[k]))
            j++;
        if (j == nskip)
            rc = delete_batches(c, events, p, types[k], cutoff, batch, st, removed, batches, err);
    }
    for (size_t k = 0; k < ntypes; k++)
        free(types[k]);
    free(types);
    return rc;
}

/* The undelivered events older than cutoff of every type no subscription
 * takes that is not retired: the types the fan-out reads for its rounds
 * (odbox_subs_read_types), so none of what it would fan out goes. */
static int delete_unsubscribed(odbox_conn *c, const odbox_shard *sh, const char *events, int64_t cutoff, int batch,
                               const purge_stop *st, int64_t *removed, int64_t *batches, odbox_error *err)
{
    size_t nsubscribed = 0;
    odbox_subtype *subscribed = NULL;
    int64_t db_now = 0;
    int rc = odbox_subs_read_types(c, odbox_shard_eventlog(sh), &subscribed, &nsubscribed, &db_now, err);
    if (rc == ODBOX_OK)
        rc = delete_by_type(c, events, &unsubscribed_pass, 0, subscribed, nsubscribed, cutoff, batch, st, removed,
                            batches, err);
    odbox_subs_types_free(subscribed, nsubscribed);
    return rc;
}

/* What a purge of a shard deletes: the finished rows older than
 * older_than (0: none of them) with keys by their own age, and the
 * unsubscribed events older than unsubscribed (0: none). */
typedef struct purge_ages {
    int64_t older_than, keys_older_than, unsubscribed;
} purge_ages;

/* now is a clock's value, or ODBOX_OPS_DB_NOW: the shard's database's
 * time, read once on its connection. The rows' dates are written by many
 * processes (a key's created_date by the database itself), whose clocks
 * may disagree with this one's: without a clock configured, their age is
 * measured in the database's time. */
static int purge_shard(const odbox_shard *sh, int64_t now, const purge_ages *ages, int batch, const purge_stop *st,
                       odbox_purge_result *res, int64_t *unsubscribed, odbox_error *err)
{
    odbox_conn *c = NULL;
    char notifications[ODBOX_NAME_MAX * 2 + 32], events[ODBOX_NAME_MAX * 2 + 32], keys[ODBOX_NAME_MAX * 2 + 32];
    int rc = odbox_ops_connect(sh, "event_notifications", &c, notifications, sizeof notifications, err);
    if (rc != ODBOX_OK)
        return rc;
    if ((rc = odbox_ops_now(c, now, &now, err)) != ODBOX_OK) {
        odbox_ops_release(sh, &c);
        return odbox_ops_shard_error(sh, odbox_error_prefix(err, rc, "purge"), err);
    }
    int64_t cutoff = now - ages->older_than, keys_cutoff = now - ages->keys_older_than;
    odbox_dialect_eventlog_table(odbox_conn_dialect(c), odbox_shard_eventlog(sh), "events", events, sizeof events);
    odbox_dialect_eventlog_table(odbox_conn_dialect(c), odbox_shard_eventlog(sh), "idempotency_keys", keys,
                                 sizeof keys);
    size_t npasses = ages->older_than ? sizeof passes / sizeof passes[0] : 0;
    for (size_t i = 0; rc == ODBOX_OK && i < npasses && !(i && stopping(st)); i++) {
        const struct pass *p = &passes[i];
        int64_t *removed = p->what == NOTIFICATIONS ? &res->notifications
                           : p->what == EVENTS      ? &res->events
                           : p->what == KEYS        ? &res->keys
                                                    : &res->sentinels;
        const char *table = p->what == NOTIFICATIONS ? notifications : p->what == KEYS ? keys : events;
        int64_t at = p->what == KEYS ? keys_cutoff : cutoff;
        if (!p->where_per_type || odbox_conn_dialect(c)->has_partial_indexes)
            rc = delete_batches(c, table, p, NULL, at, batch, st, removed, &res->batches, err);
        else
            rc = delete_by_type(c, table, p, 1, NULL, 0, at, batch, st, removed, &res->batches, err);
    }
    if (rc == ODBOX_OK && ages->unsubscribed && !stopping(st))
        rc = delete_unsubscribed(c, sh, events, now - ages->unsubscribed, batch, st, unsubscribed,
                                 &res->batches, err);
    if (rc == ODBOX_OK && npasses && !stopping(st)) {
        char procs[ODBOX_NAME_MAX * 2 + 32];
        odbox_dialect_eventlog_table(odbox_conn_dialect(c), odbox_shard_eventlog(sh), "subscription_processes",
                                     procs, sizeof procs);
        rc = delete_processes(c, procs, cutoff, batch, st, &res->processes, &res->batches, err);
    }
    odbox_ops_release(sh, &c);
    return rc == ODBOX_OK ? rc : odbox_ops_shard_error(sh, rc, err);
}

/* *unsubscribed (may be NULL) gets the unsubscribed events removed,
 * summed over the shards; a run of those alone counts them per shard, in
 * events. */
static int purge(const odbox_registry *r, const odbox_purge_options *o, const purge_ages *ages, int64_t now,
                 const purge_stop *st, odbox_purge_result **results, size_t *n, int64_t *unsubscribed,
                 odbox_error *err)
{
    size_t ns = odbox_ops_shard_count(r, o->shard);
    odbox_purge_result *res = calloc(ns ? ns : 1, sizeof *res);
    if (!res)
        return odbox_fail(err, ODBOX_ENOMEM, "purge: out of memory");
    int batch = o->batch_size ? o->batch_size : DEFAULT_BATCH, rc = ODBOX_OK;
    size_t done = 0;
    for (; done < ns && rc == ODBOX_OK && !stopping(st); done++) {
        const odbox_shard *sh = odbox_ops_shard_at(r, o->shard, done);
        res[done].shard = odbox_shard_get_id(sh);
        int64_t gone = 0;
        rc = purge_shard(sh, now, ages, batch, st, &res[done], ages->older_than ? &gone : &res[done].events, err);
        if (unsubscribed)
            *unsubscribed += gone;
    }
    *results = res;
    *n = done;
    return rc;
}

static purge_ages ages_of(const odbox_purge_options *o)
{
    return (purge_ages){o->older_than_us, o->keys_older_than_us ? o->keys_older_than_us : ODBOX_PURGE_KEYS_DEFAULT_US,
                        0};
}

int odbox_purge_run(const odbox_registry *r, const odbox_purge_options *o, odbox_purge_result **results,
                    size_t *n, odbox_error *err)
{
    if (!r || !results || !n)
        return odbox_fail(err, ODBOX_EINVAL, "purge: registry, results or n is NULL");
    *results = NULL;
    *n = 0;
    int rc = options_ok(o, err);
    if (rc != ODBOX_OK)
        return rc;
    purge_ages ages = ages_of(o);
    return purge(r, o, &ages, odbox_ops_given_now(o->clock), NULL, results, n, NULL, err);
}

int odbox_purge_unsubscribed_run(const odbox_registry *r, const odbox_purge_options *o,
                                 odbox_purge_result **results, size_t *n, odbox_error *err)
{
    if (!r || !results || !n)
        return odbox_fail(err, ODBOX_EINVAL, "purge unsubscribed: registry, results or n is NULL");
    *results = NULL;
    *n = 0;
    int rc = options_ok(o, err);
    if (rc != ODBOX_OK)
        return rc;
    purge_ages ages = {0, 0, o->older_than_us};
    return purge(r, o, &ages, odbox_ops_given_now(o->clock), NULL, results, n, NULL, err);
}

void odbox_purge_results_free(odbox_purge_result **results)
{
    if (results) {
        free(*results);
        *results = NULL;
    }
}

/* ---- the job ---------------------------------------------------------- */

typedef struct purge_job {
    const odbox_registry *r;
    odbox_purge_options o;
    int64_t unsubscribed_us; /* odbox_purge_job_unsubscribed; 0: none */
    char name[ODBOX_JOB_NAME_MAX + 1]; /* per eventlog: odbox_job_name_for */
} purge_job;

/* Stop when the job registry stops, or before this run is taken for dead
 * (db-scheduler's advice: above half the dead window). */
static int job_stopping(void *ud)
{
    odbox_job_context *ctx = ud;
    return odbox_job_context_shutting_down(ctx) || odbox_job_context_fraction_dead(ctx) > 0.5;
}

static int run_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    purge_job *pj = user;
    purge_stop st = {job_stopping, ctx};
    odbox_purge_result *res = NULL;
    size_t n = 0;
    purge_ages ages = ages_of(&pj->o);
    ages.unsubscribed = pj->unsubscribed_us;
    int64_t unsubscribed = 0;
    int rc = purge(pj->r, &pj->o, &ages, odbox_job_context_stmt_now(ctx), &st, &res, &n, &unsubscribed, err);
    for (size_t i = 0; i < n; i++)
        odbox_log(ODBOX_LOG_INFO,
                  "purge: shard %d.%d: removed %lld notification(s), %lld event(s), %lld sentinel row(s), "
                  "%lld idempotency key(s) and %lld process row(s) in %lld batch(es)",
                  res[i].shard.group, res[i].shard.member, (long long)res[i].notifications, (long long)res[i].events,
                  (long long)res[i].sentinels, (long long)res[i].keys, (long long)res[i].processes,
                  (long long)res[i].batches);
    if (pj->unsubscribed_us)
        odbox_log(ODBOX_LOG_INFO, "purge: removed %lld undelivered event(s) of types no subscription takes",
                  (long long)unsubscribed);
    if (rc == ODBOX_OK && job_stopping(ctx))
        odbox_log(ODBOX_LOG_INFO, "purge: stopped early (shutdown or a late heartbeat); the next run goes on");
    odbox_purge_results_free(&res);
    return rc;
}

int odbox_purge_job(const odbox_registry *r, const odbox_purge_options *o, odbox_schedule schedule,
                    odbox_job *job, odbox_error *err)
{
    if (!r || !job)
        return odbox_fail(err, ODBOX_EINVAL, "purge job: registry or job is NULL");
    memset(job, 0, sizeof *job);
    int rc = options_ok(o, err);
    if (rc != ODBOX_OK)
        return rc;
    if (schedule.kind != ODBOX_SCHEDULE_FIXED_DELAY && schedule.kind != ODBOX_SCHEDULE_CRON)
        return odbox_fail(err, ODBOX_EINVAL, "purge job: no schedule");
    if (schedule.kind == ODBOX_SCHEDULE_FIXED_DELAY && schedule.delay_ms <= 0)
        return odbox_fail(err, ODBOX_EINVAL, "purge job: a fixed delay of %lld ms", (long long)schedule.delay_ms);
    purge_job *pj = malloc(sizeof *pj);
    if (!pj)
        return odbox_fail(err, ODBOX_ENOMEM, "purge job: out of memory");
    pj->r = r;
    pj->o = *o;
    pj->o.clock = NULL;
    pj->unsubscribed_us = 0;
    if ((rc = odbox_job_name_for(ODBOX_PURGE_JOB_NAME, r, pj->name, sizeof pj->name, err)) != ODBOX_OK) {
        free(pj);
        return rc;
    }
    job->name = pj->name;
    job->schedule = schedule;
    job->execute = run_job;
    job->user = pj;
    return ODBOX_OK;
}

int odbox_purge_job_unsubscribed(odbox_job *job, int64_t older_than_us, odbox_error *err)
{
    if (!job || job->execute != run_job || !job->user)
        return odbox_fail(err, ODBOX_EINVAL, "purge job unsubscribed: not a job odbox_purge_job filled");
    if (older_than_us < 0 || older_than_us > MAX_DURATION_US)
        return odbox_fail(err, ODBOX_EINVAL, "purge job unsubscribed: older_than_us %lld is not in 0 (none) .. 100 years",
                          (long long)older_than_us);
    ((purge_job *)job->user)->unsubscribed_us = older_than_us;
    return ODBOX_OK;
}

void odbox_purge_job_free(odbox_job *job)
{
    if (!job)
        return;
    free(job->user);
    memset(job, 0, sizeof *job);
}
