/* odbox-wallet — the statement and audit handlers, and the backlog the
 * worker's --until-idle waits on. Public API only: each call takes a
 * connection of the event's shard's primary, and the SQL is the same on
 * every database but for what the dialect supplies (insert-ignore, the
 * eventlog's table names). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "wallet.h"
#include "wallet_handlers.h"

/* The money events: their statement kind and the sign of their amount. */
static const struct {
    const char *type, *kind;
    int sign;
} money_kinds[] = {
    {"WalletMoneyDepositedEvent", "deposit", +1},
    {"WalletMoneyWithdrawnEvent", "withdrawal", -1},
    {"WalletTransferSentEvent", "transfer_out", -1},
    {"WalletTransferReceivedEvent", "transfer_in", +1},
};
#define NMONEY (sizeof money_kinds / sizeof money_kinds[0])

/* The money kind of an event type, or -1. */
static int money_kind(const char *type)
{
    for (size_t i = 0; i < NMONEY; i++)
        if (!strcmp(money_kinds[i].type, type))
            return (int)i;
    return -1;
}

/* splitmix64 over an atomic counter: thread-safe, no lock. */
static double next_uniform(wallet_handlers_state *st)
{
    uint64_t z = atomic_fetch_add(&st->rng, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / (double)(1ull << 53);
}

static int with_conn(wallet_handlers_state *st, odbox_shard_id shard, odbox_conn **c, odbox_pool **pool,
                     odbox_error *err)
{
    odbox_shard *s = odbox_registry_shard(st->registry, shard);
    if (!s)
        return odbox_error_set(err, ODBOX_ENOTFOUND, "no shard %d.%d in the registry", shard.group, shard.member);
    *pool = odbox_shard_primary(s);
    return odbox_pool_acquire(*pool, c, err);
}

static void give_back(odbox_pool *pool, odbox_conn **c)
{
    if (*c && odbox_conn_is_dead(*c))
        odbox_pool_discard(pool, c);
    else
        odbox_pool_release(pool, c);
}

static int exec_bound(odbox_conn *c, const char *sql, const char *t1, const char *uuid, odbox_error *err)
{
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, t1, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_uuid(s, 2, uuid, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    return rc;
}

/* calls + 1 for (handler, event): the row is made first (a duplicate is
 * skipped), so that the increment never depends on a row count. */
static int count_call(odbox_conn *c, const char *handler, const char *event_id, odbox_error *err)
{
    char sql[256];
    snprintf(sql, sizeof sql, odbox_conn_dialect(c)->insert_ignore_fmt, "wallet_handler_calls",
             "handler_name, event_id, calls", "(?, ?, 0)", "handler_name");
    int rc = exec_bound(c, sql, handler, event_id, err);
    if (rc == ODBOX_OK)
        rc = exec_bound(c,
                        "UPDATE wallet_handler_calls SET calls = calls + 1 WHERE handler_name = ? AND event_id = ?",
                        handler, event_id, err);
    return rc;
}

static int insert_statement_row(odbox_conn *c, const odbox_envelope *env, odbox_error *err)
{
    json_object *amount = NULL, *balance = NULL;
    int k = money_kind(env->event_type);
    if (k < 0)
        return odbox_error_set(err, ODBOX_EINVAL, "statement: event %s is a %s, not a money event", env->event_id,
                               env->event_type);
    if (!env->model_id || !env->payload || !json_object_object_get_ex(env->payload, "amount", &amount) ||
        !json_object_object_get_ex(env->payload, "balance", &balance))
        return odbox_error_set(err, ODBOX_EINVAL, "statement: event %s has no wallet, amount or balance",
                               env->event_id);
    char sql[256];
    snprintf(sql, sizeof sql, odbox_conn_dialect(c)->insert_ignore_fmt, "wallet_statement",
             "event_id, wallet_id, kind, amount, balance_after, event_us", "(?, ?, ?, ?, ?, ?)", "event_id");
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_uuid(s, 1, env->event_id, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_uuid(s, 2, env->model_id, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 3, money_kinds[k].kind, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 4, money_kinds[k].sign * json_object_get_int64(amount), err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 5, json_object_get_int64(balance), err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 6, env->event_us, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    return rc;
}

/* The injected failure, if this call gets one. */
static int fault(wallet_handlers_state *st, const odbox_envelope *env, int audit, odbox_error *err)
{
    const wallet_faults *f = &st->faults;
    int hit = f->fail_rate > 0 && next_uniform(st) < f->fail_rate;
    if (audit && f->audit_fail_every > 0 && env->attempt <= f->audit_fail_attempts) {
        unsigned h = 0;
        for (const char *p = env->event_id; *p; p++)
            h = h * 31u + (unsigned char)*p;
        hit = hit || h % (unsigned)f->audit_fail_every == 0;
    }
    if (!hit)
        return ODBOX_OK;
    atomic_fetch_add(&st->injected, 1);
    return odbox_error_set(err, ODBOX_EDB, "%s: injected failure after the effect (event %s, attempt %d)",
                           audit ? "audit" : "statement", env->event_id, env->attempt);
}

/* now - the action's completion, into the first lag_cap slots of v */
static void record_lag(const wallet_handlers_state *st, const odbox_envelope *env, int64_t *v, atomic_size_t *n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t i = atomic_fetch_add(n, 1);
    if (i < st->lag_cap)
        v[i] = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 - env->completion_us;
}

static int handle(const odbox_envelope *env, wallet_handlers_state *st, int statement, odbox_error *err)
{
    odbox_conn *c = NULL;
    odbox_pool *pool = NULL;
    if (st->start_lag_us && env->attempt == 1)
        record_lag(st, env, st->start_lag_us, &st->nstart);
    atomic_fetch_add(&st->calls, 1);
    int rc = with_conn(st, env->shard, &c, &pool, err);
    if (rc == ODBOX_OK && statement)
        rc = insert_statement_row(c, env, err);
    if (rc == ODBOX_OK)
        rc = count_call(c, statement ? "statement" : "audit", env->event_id, err);
    if (c)
        give_back(pool, &c);
    if (rc != ODBOX_OK) {
        atomic_fetch_add(&st->errors, 1);
        return rc;
    }
    if ((rc = fault(st, env, !statement, err)) == ODBOX_OK && st->lag_us)
        record_lag(st, env, st->lag_us, &st->nlag);
    return rc;
}

static int handle_statement(const odbox_envelope *env, void *user, odbox_error *err)
{
    return handle(env, user, 1, err);
}

static int handle_audit(const odbox_envelope *env, void *user, odbox_error *err)
{
    return handle(env, user, 0, err);
}

int wallet_handlers_add(odbox_handlers *h, odbox_registry *r, const wallet_faults *faults,
                        wallet_handlers_state *st, odbox_error *err)
{
    if (!h || !r || !st)
        return odbox_error_set(err, ODBOX_EINVAL, "wallet handlers: a NULL argument");
    if (faults && !(faults->fail_rate >= 0 && faults->fail_rate <= 1))
        return odbox_error_set(err, ODBOX_EINVAL, "wallet handlers: fail rate must be within 0..1");
    memset(st, 0, sizeof *st);
    st->registry = r;
    if (faults)
        st->faults = *faults;
    atomic_store(&st->rng, (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid() << 20);
    const char *money[NMONEY + 1] = {0}, *every[WALLET_NEVENT_TYPES + 1] = {0};
    for (size_t i = 0; i < NMONEY; i++)
        money[i] = money_kinds[i].type;
    for (size_t i = 0; i < WALLET_NEVENT_TYPES; i++)
        every[i] = wallet_event_types[i]->name;
    odbox_handler statement = {.name = "statement", .event_types = money, .handle = handle_statement, .user = st};
    odbox_handler audit = {.name = "audit", .event_types = every, .handle = handle_audit, .user = st};
    int rc = odbox_handlers_add(h, &statement, err);
    return rc == ODBOX_OK ? odbox_handlers_add(h, &audit, err) : rc;
}

int wallet_events_count(odbox_shard *s, int undelivered_only, int64_t *n, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(s);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    char events[2 * ODBOX_NAME_MAX + 8], sql[512];
    odbox_dialect_eventlog_table(odbox_conn_dialect(c), odbox_shard_eventlog(s), "events", events, sizeof events);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE %sevent_type IN (?, ?, ?, ?, ?)", events,
             undelivered_only ? "delivered IS NOT TRUE AND " : "");
    odbox_stmt *st = NULL;
    if ((rc = odbox_stmt_prepare(c, sql, &st, err)) == ODBOX_OK) {
        for (int i = 0; rc == ODBOX_OK && i < WALLET_NEVENT_TYPES; i++)
            rc = odbox_stmt_bind_text(st, i + 1, wallet_event_types[i]->name, err);
        if (rc == ODBOX_OK && (rc = odbox_stmt_execute(st, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(st, err)) == 1)
            rc = odbox_stmt_get_int64(st, 1, n, NULL, err);
        else if (rc == 0)
            rc = odbox_error_set(err, ODBOX_EDB, "COUNT(*) returned no row");
    }
    odbox_stmt_free(&st);
    give_back(pool, &c);
    return rc;
}

int wallet_backlog_read(odbox_registry *r, wallet_backlog *out, odbox_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = ODBOX_OK;
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_registry_shard_count(r); i++) {
        int64_t n = 0;
        rc = wallet_events_count(odbox_registry_shard_at(r, i), 1, &n, err);
        out->undelivered += n;
    }
    odbox_notification_stats *stats = NULL;
    size_t nstats = 0;
    if (rc == ODBOX_OK && (rc = odbox_notifications_count(r, &(odbox_notification_filter){0}, &stats, &nstats, err)) == ODBOX_OK)
        for (size_t i = 0; i < nstats; i++) {
            out->pending += stats[i].pending;
            out->failed += stats[i].failed;
        }
    odbox_notification_stats_free(&stats, nstats);
    return rc;
}
