/* odbox — `odbox status`: per shard, the server, the eventlog and its
 * owner, the migrations and the counts of events and notifications. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ops_cli.h"

const char usage_status[] =
    "usage: odbox status (--dsn DSN | --config FILE) [options]\n"
    "\n"
    "Shows, per shard, the dialect, the server version, the eventlog and the\n"
    "application database (or schema) that owns it, applied, failed and pending\n"
    "migrations, the counts of events and notifications by state, and per handler\n"
    "the notifications by state, the backlog, the due ones and the oldest due age,\n"
    "and the delivery lag of the last 10 minutes (as `odbox metrics`).\n"
    "\n";

/* *exists = 1 when eventlog has table `table`, whose SQL name goes to sql_name. */
static int eventlog_table(odbox_conn *conn, const char *eventlog, const char *table, char *sql_name, size_t cap,
                          int *exists, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(conn);
    const char *container;
    char name[ODBOX_NAME_MAX * 2];
    /* eventlog is a validated name: both fit */
    odbox_dialect_eventlog_table(d, eventlog, table, sql_name, cap);
    odbox_dialect_eventlog_locate(d, eventlog, table, &container, name, sizeof name);
    return odbox_conn_table_exists(conn, container, name, exists, err);
}

/* Adds {"total","undelivered","sentinel"} and {"<STATE>": n} counts. */
static int shard_counts(odbox_conn *conn, const char *eventlog, json_object *out, odbox_error *err)
{
    char sql[512], events[ODBOX_NAME_MAX * 2], notifications[ODBOX_NAME_MAX * 2];
    int exists = 0, rc;
    odbox_stmt *s = NULL;
    if ((rc = eventlog_table(conn, eventlog, "events", events, sizeof events, &exists, err)) != ODBOX_OK)
        return rc;
    if (exists) {
        int64_t total = 0, undelivered = 0, sentinel = 0;
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*), COALESCE(SUM(CASE WHEN delivered THEN 0 ELSE 1 END), 0), "
                 "COALESCE(SUM(CASE WHEN event_type IS NULL THEN 1 ELSE 0 END), 0) FROM %s",
                 events);
        if ((rc = odbox_stmt_prepare(conn, sql, &s, err)) == ODBOX_OK &&
            (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1 &&
            (rc = odbox_stmt_get_int64(s, 1, &total, NULL, err)) == ODBOX_OK &&
            (rc = odbox_stmt_get_int64(s, 2, &undelivered, NULL, err)) == ODBOX_OK)
            rc = odbox_stmt_get_int64(s, 3, &sentinel, NULL, err);
        odbox_stmt_free(&s);
        if (rc < 0)
            return rc;
        json_object *ev = json_object_new_object();
        json_object_object_add(ev, "total", json_object_new_int64(total));
        json_object_object_add(ev, "undelivered", json_object_new_int64(undelivered));
        json_object_object_add(ev, "delivered", json_object_new_int64(total - undelivered));
        json_object_object_add(ev, "sentinel", json_object_new_int64(sentinel));
        json_object_object_add(out, "events", ev);
    }
    if ((rc = eventlog_table(conn, eventlog, "event_notifications", notifications, sizeof notifications, &exists,
                             err)) != ODBOX_OK)
        return rc;
    if (exists) {
        json_object *no = json_object_new_object();
        snprintf(sql, sizeof sql, "SELECT state, COUNT(*) FROM %s GROUP BY state ORDER BY state",
                 notifications);
        if ((rc = odbox_stmt_prepare(conn, sql, &s, err)) == ODBOX_OK)
            rc = odbox_stmt_execute(s, err);
        while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
            const char *state;
            int64_t n;
            if ((rc = odbox_stmt_get_text(s, 1, &state, NULL, err)) == ODBOX_OK &&
                (rc = odbox_stmt_get_int64(s, 2, &n, NULL, err)) == ODBOX_OK)
                json_object_object_add(no, state, json_object_new_int64(n));
        }
        odbox_stmt_free(&s);
        json_object_object_add(out, "notifications", no);
        if (rc < 0)
            return rc;
    }
    return ODBOX_OK;
}

/* "PostgreSQL 15.18": the server's own answer, cut after the number
 * ("15.18 (Debian ...)", "10.11.19-MariaDB-..."). The driver's
 * SQL_DBMS_VER pads the parts ("15.0.18", "10.11.000019"). */
static int server_text(odbox_conn *conn, char *out, size_t cap, odbox_error *err)
{
    odbox_stmt *s = NULL;
    const char *v = "";
    int rc = odbox_stmt_prepare(conn, odbox_conn_dialect(conn)->server_version_sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
        rc = odbox_stmt_get_text(s, 1, &v, NULL, err);
    if (rc >= 0) {
        size_t n = strspn(v, "0123456789.");
        while (n > 0 && v[n - 1] == '.')
            n--;
        snprintf(out, cap, "%s %.*s", odbox_conn_server_name(conn), (int)(n ? n : strlen(v)), v);
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

static void print_time(int64_t us, char *buf, size_t cap)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

static const char *state_of(const odbox_migration_info *mi)
{
    return mi->missing ? "missing" : mi->failed ? "failed" : mi->changed ? "changed" : mi->applied ? "applied"
                                                                                                  : "pending";
}

static json_object *migration_json(const odbox_migration_info *mi)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "set", json_object_new_string(mi->set));
    json_object_object_add(e, "version", json_object_new_string(mi->version));
    json_object_object_add(e, "description", json_object_new_string(mi->description));
    json_object_object_add(e, "applied", json_object_new_boolean(mi->applied));
    json_object_object_add(e, "state", json_object_new_string(state_of(mi)));
    if (mi->failed)
        json_object_object_add(e, "error", json_object_new_string(mi->error));
    if (mi->installed_on_us) {
        char ts[40];
        print_time(mi->installed_on_us, ts, sizeof ts);
        json_object_object_add(e, "installed_on", json_object_new_string(ts));
    }
    return e;
}

static const char *get_string(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* The delivery lag's window in status (the metrics' default). */
#define LAG_WINDOW_S 600

static double get_double(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

/* "  handler audit: 1 pending, ...; delivery lag p50 0.2s p99 0.3s max 0.3s (3 in 600s)" */
static void print_handler_text(json_object *h)
{
    json_object *lag;
    printf("  handler %s: %.0f pending, %.0f failed, %.0f succeeded, %.0f expired; backlog %.0f, due %.0f",
           get_string(h, "handler"), get_double(h, "pending"), get_double(h, "failed"), get_double(h, "succeeded"),
           get_double(h, "expired"), get_double(h, "backlog"), get_double(h, "due"));
    if (get_double(h, "due") > 0)
        printf(", oldest due %.1fs", get_double(h, "oldest_due_age_s"));
    if (json_object_object_get_ex(h, "delivery_lag", &lag) && get_double(lag, "count") > 0)
        printf("; delivery lag p50 %.3fs p99 %.3fs max %.3fs (%.0f in %ds)", get_double(lag, "p50_s"),
               get_double(lag, "p99_s"), get_double(lag, "max_s"), get_double(lag, "count"), LAG_WINDOW_S);
    printf("\n");
}

static void print_shard_text(json_object *o)
{
    json_object *v, *m;
    printf("shard %s\n", get_string(o, "shard"));
    static const char *const keys[] = {"primary", "dialect", "server", "eventlog", "owner", NULL};
    for (const char *const *k = keys; *k; k++)
        if (json_object_object_get_ex(o, *k, &v))
            printf("  %-10s %s\n", *k, v ? json_object_get_string(v) : "(none recorded yet: migrate records it)");
    if (json_object_object_get_ex(o, "migrations", &m)) {
        size_t n = json_object_array_length(m);
        int applied = 0, pending = 0, failed = 0;
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(m, i);
            const char *state = get_string(e, "state");
            applied += !strcmp(state, "applied") || !strcmp(state, "changed");
            pending += !strcmp(state, "pending");
            failed += !strcmp(state, "failed");
            printf("  %-7s %-6s V%-6s %-36s %s\n", state, get_string(e, "set"), get_string(e, "version"),
                   get_string(e, "description"), get_string(e, "installed_on"));
            if (json_object_object_get_ex(e, "error", &v))
                printf("          error: %s\n", json_object_get_string(v));
        }
        printf("  migrations: %d applied, %d pending, %d failed%s\n", applied, pending, failed,
               failed ? " (see `odbox migrate repair`)" : "");
    }
    if (json_object_object_get_ex(o, "events", &v)) {
        json_object *t, *u, *d, *s;
        json_object_object_get_ex(v, "total", &t);
        json_object_object_get_ex(v, "undelivered", &u);
        json_object_object_get_ex(v, "delivered", &d);
        json_object_object_get_ex(v, "sentinel", &s);
        printf("  events: %lld total, %lld undelivered, %lld delivered, %lld sentinel\n",
               (long long)json_object_get_int64(t), (long long)json_object_get_int64(u),
               (long long)json_object_get_int64(d), (long long)json_object_get_int64(s));
    }
    if (json_object_object_get_ex(o, "notifications", &v)) {
        printf("  notifications:");
        int any = 0;
        json_object_object_foreach(v, state, n) {
            printf(" %s=%lld", state, (long long)json_object_get_int64(n));
            any = 1;
        }
        printf("%s\n", any ? "" : " none");
    }
    if (json_object_object_get_ex(o, "handlers", &v))
        for (size_t i = 0; i < json_object_array_length(v); i++)
            print_handler_text(json_object_array_get_idx(v, i));
}

/* Per handler: counts, due rows and the delivery lag (odbox metrics). */
static int shard_handlers(odbox_registry *r, odbox_shard *s, json_object *so, odbox_error *err)
{
    odbox_notification_metrics_options mo = {.shard = s, .lag_window_s = LAG_WINDOW_S};
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    int rc = odbox_notifications_metrics(r, &mo, &st, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(arr, ops_stats_json(&st[i], 1));
    json_object_object_add(so, "handlers", arr);
    odbox_notification_stats_free(&st, n);
    return ODBOX_OK;
}

/* One shard's status into so. */
static int shard_status(odbox_registry *r, odbox_shard *s, const odbox_migrate_options *o, json_object *so,
                        odbox_error *err)
{
    odbox_conn *conn = NULL;
    char server[160], owner[256];
    json_object_object_add(so, "primary", json_object_new_string(odbox_shard_primary_redacted(s)));
    /* another application's eventlog is refused before anything is read */
    int rc = odbox_migrate_check_owner(s, owner, sizeof owner, err);
    if (rc == ODBOX_OK)
        rc = odbox_pool_acquire(odbox_shard_primary(s), &conn, err);
    if (rc != ODBOX_OK)
        return rc;
    if ((rc = server_text(conn, server, sizeof server, err)) == ODBOX_OK) {
        json_object_object_add(so, "dialect", json_object_new_string(odbox_conn_dialect(conn)->name));
        json_object_object_add(so, "server", json_object_new_string(server));
        json_object_object_add(so, "eventlog", json_object_new_string(odbox_shard_eventlog(s)));
        json_object_object_add(so, "owner", *owner ? json_object_new_string(owner) : NULL);
        rc = shard_counts(conn, odbox_shard_eventlog(s), so, err);
    }
    odbox_pool_release(odbox_shard_primary(s), &conn);
    json_object *counted;
    if (rc == ODBOX_OK && json_object_object_get_ex(so, "notifications", &counted))
        rc = shard_handlers(r, s, so, err);
    odbox_migration_info *list = NULL;
    size_t n = 0;
    if (rc != ODBOX_OK || (rc = odbox_migrate_status(s, o, &list, &n, err)) != ODBOX_OK)
        return rc;
    json_object *m = json_object_new_array();
    for (size_t k = 0; k < n; k++)
        json_object_array_add(m, migration_json(&list[k]));
    free(list);
    json_object_object_add(so, "migrations", m);
    return ODBOX_OK;
}

int cmd_status(int argc, char **argv)
{
    cli c;
    odbox_registry *r = NULL;
    odbox_migrate_options o;
    odbox_error err = {0};
    int u = cli_begin(argc, argv, usage_status, 0, &c, &r, &o);
    if (u)
        return u;
    json_object *shards = json_object_new_array();
    int rc = ODBOX_OK;
    for (size_t i = 0; i < odbox_registry_shard_count(r) && rc == ODBOX_OK; i++) {
        odbox_shard *s = odbox_registry_shard_at(r, i);
        char name[16];
        cli_shard_name(s, name, sizeof name);
        json_object *so = json_object_new_object();
        json_object_array_add(shards, so);
        json_object_object_add(so, "shard", json_object_new_string(name));
        rc = shard_status(r, s, &o, so, &err);
    }
    odbox_registry_free(&r);
    if (rc != ODBOX_OK) {
        json_object_put(shards);
        return cli_fail(&c, &err);
    }
    if (c.json) {
        json_object *top = json_object_new_object();
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "shards", shards);
        cli_print_json(top);
        json_object_put(top);
    } else {
        for (size_t i = 0; i < json_object_array_length(shards); i++)
            print_shard_text(json_object_array_get_idx(shards, i));
        json_object_put(shards);
    }
    return 0;
}
