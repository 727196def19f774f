/* odbox — database metrics of event_notifications per shard and handler:
 * the counts (notifications.c) plus the delivery lag of recent successes,
 * and their Prometheus text (see odbox/notifications.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "notifications_internal.h"
#include "prometheus.h"

#define TABLE "event_notifications"
#define DEFAULT_LAG_WINDOW_S 600

/* Nearest-rank quantile q% of n sorted values: rank ceil(q * n / 100),
 * i.e. the rank k with 100 (k - 1) < q n <= 100 k. */
static int is_rank(int64_t k, int64_t n, int q) { return 100 * k >= q * n && 100 * (k - 1) < q * n; }

/* The SUCCEEDED rows updated from `since` to `now`, through the finished index
 * ((updated_date) WHERE state IN ('SUCCEEDED','EXPIRED')), or on MySQL/
 * MariaDB the due index (state, next_retry_at), as a finishing outcome
 * sets next_retry_at to its updated_date (V13: a row finished before it,
 * with an earlier next_retry_at, is left out of the window it finished
 * in); SQLite uses a partial index only when the query repeats its
 * condition, hence the IN. The window functions
 * rank each handler's lags; only the ranks of p50, p99 and the maximum
 * come back, with the count and the sum. */
static int read_lag(odbox_conn *c, const char *table, int64_t since, int64_t now, odbox_ops_stats *v, size_t from,
                    odbox_shard_id id, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char lag[512];
    snprintf(lag, sizeof lag, d->interval_us_fmt, "updated_date", "completion_date");
    odbox_buf b = {0};
    odbox_buf_cat(&b,
                  "SELECT handler_name, rn, cnt, total, lag_us FROM (SELECT handler_name, lag_us, "
                  "ROW_NUMBER() OVER (PARTITION BY handler_name ORDER BY lag_us) AS rn, "
                  "COUNT(*) OVER (PARTITION BY handler_name) AS cnt, "
                  "SUM(lag_us) OVER (PARTITION BY handler_name) AS total FROM (SELECT handler_name, ",
                  lag, " AS lag_us FROM ", table,
                  " WHERE state IN ('SUCCEEDED', 'EXPIRED') AND state = 'SUCCEEDED' AND updated_date >= ? "
                  "AND updated_date <= ? AND next_retry_at >= ? AND next_retry_at <= ?) w) r "
                  "WHERE (100 * rn >= 50 * cnt AND 100 * (rn - 1) < 50 * cnt) "
                  "OR (100 * rn >= 99 * cnt AND 100 * (rn - 1) < 99 * cnt) OR rn = cnt",
                  (char *)NULL);
    char *sql = odbox_buf_take(&b);
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    free(sql);
    for (int i = 0; i < 4 && rc == ODBOX_OK; i++)
        rc = odbox_stmt_bind_timestamp(s, i + 1, i % 2 ? now : since, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *handler;
        int64_t rn = 0, cnt = 0, us = 0;
        double total = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &handler, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 2, &rn, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 3, &cnt, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_double(s, 4, &total, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 5, &us, NULL, err)) != ODBOX_OK)
            break;
        odbox_notification_stats *e = odbox_ops_stats_entry(v, from, id, handler, err);
        if (!e) {
            rc = ODBOX_ENOMEM;
            break;
        }
        e->lag_count = cnt;
        e->lag_sum_us = (int64_t)(total < 0 ? total - 0.5 : total + 0.5);
        if (is_rank(rn, cnt, 50))
            e->lag_p50_us = us;
        if (is_rank(rn, cnt, 99))
            e->lag_p99_us = us;
        if (rn == cnt)
            e->lag_max_us = us;
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

static int shard_lag(const odbox_shard *sh, int64_t since, int64_t now, odbox_ops_stats *v, size_t from,
                     odbox_error *err)
{
    odbox_conn *c = NULL;
    char table[ODBOX_NAME_MAX * 2 + 32];
    int rc = odbox_ops_connect(sh, TABLE, &c, table, sizeof table, err);
    if (rc != ODBOX_OK)
        return rc;
    rc = read_lag(c, table, since, now, v, from, odbox_shard_get_id(sh), err);
    odbox_ops_release(sh, &c);
    return rc == ODBOX_OK ? rc : odbox_ops_shard_error(sh, rc, err);
}

int odbox_notifications_metrics(const odbox_registry *r, const odbox_notification_metrics_options *o,
                                odbox_notification_stats **out, size_t *n, odbox_error *err)
{
    static const odbox_notification_metrics_options defaults = {0};
    if (!o)
        o = &defaults;
    if (!r || !out || !n)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: registry, out or n is NULL");
    *out = NULL;
    *n = 0;
    if (o->lag_window_s < 0)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: a lag window of %d s", o->lag_window_s);
    odbox_notification_filter f = {.shard = o->shard, .clock = o->clock};
    odbox_ops_filter of;
    int rc = odbox_ops_filter_init(&f, &of, err);
    int64_t window = (int64_t)(o->lag_window_s ? o->lag_window_s : DEFAULT_LAG_WINDOW_S) * 1000000;
    odbox_ops_stats v = {0};
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_ops_shard_count(r, of.shard); i++) {
        const odbox_shard *sh = odbox_ops_shard_at(r, of.shard, i);
        size_t from = v.n;
        int64_t now = 0; /* the window ends when the shard's due rows were counted */
        if ((rc = odbox_ops_shard_counts(sh, &of, &v, &now, err)) == ODBOX_OK)
            rc = shard_lag(sh, now - window, now, &v, from, err);
    }
    if (rc == ODBOX_OK)
        odbox_ops_stats_finish(&v, out, n);
    odbox_notification_stats_free(&v.v, v.n);
    return rc;
}

/* ---- Prometheus ------------------------------------------------------ */

static double seconds(int64_t us) { return (double)us / 1e6; }

int odbox_notifications_prometheus(const odbox_notification_stats *stats, size_t n, char **text, odbox_error *err)
{
    if ((!stats && n) || !text)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: stats or text is NULL");
    odbox_prom p;
    odbox_prom_init(&p);
    char (*shard)[16] = n ? calloc(n, sizeof *shard) : NULL;
    if (n && !shard)
        return odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
    for (size_t i = 0; i < n; i++)
        snprintf(shard[i], sizeof shard[i], "%d.%d", stats[i].shard.group, stats[i].shard.member);
#define LABELS(i) (const char *const[]){"shard", shard[i], "handler", stats[i].handler, NULL}

    odbox_prom_family(&p, "odbox_notifications", ODBOX_PROM_GAUGE,
                      "Notifications in event_notifications by shard, handler and state.");
    for (size_t i = 0; i < n; i++) {
        const char *const st[] = {"PENDING", "FAILED", "SUCCEEDED", "EXPIRED"};
        const int64_t count[] = {stats[i].pending, stats[i].failed, stats[i].succeeded, stats[i].expired};
        for (int k = 0; k < 4; k++)
            odbox_prom_sample(&p, (const char *const[]){"shard", shard[i], "handler", stats[i].handler, "state", st[k],
                                                        NULL},
                              (double)count[k]);
    }
    odbox_prom_family(&p, "odbox_notifications_backlog", ODBOX_PROM_GAUGE,
                      "Notifications waiting for their handler (PENDING and FAILED).");
    for (size_t i = 0; i < n; i++)
        odbox_prom_sample(&p, LABELS(i), (double)stats[i].backlog);
    odbox_prom_family(&p, "odbox_notifications_due", ODBOX_PROM_GAUGE,
                      "PENDING and FAILED notifications whose next_retry_at has come "
                      "(a claimed one's is its lease's end).");
    for (size_t i = 0; i < n; i++)
        odbox_prom_sample(&p, LABELS(i), (double)stats[i].due);
    odbox_prom_family(&p, "odbox_notifications_oldest_due_age_seconds", ODBOX_PROM_GAUGE,
                      "How long the longest-waiting due notification has been due (0: none is due).");
    for (size_t i = 0; i < n; i++)
        odbox_prom_sample(&p, LABELS(i), seconds(stats[i].oldest_due_age_us));
    odbox_prom_family(&p, "odbox_delivery_lag_seconds", ODBOX_PROM_SUMMARY,
                      "From an action's commit to its handler's success, over the SUCCEEDED notifications of the "
                      "lag window (count and sum cover the window too: they can go down).");
    for (size_t i = 0; i < n; i++) {
        const double q[] = {0.5, 0.99};
        const double none = NAN;
        const double val[] = {stats[i].lag_count ? seconds(stats[i].lag_p50_us) : none,
                              stats[i].lag_count ? seconds(stats[i].lag_p99_us) : none};
        odbox_prom_summary(&p, LABELS(i), q, val, 2, seconds(stats[i].lag_sum_us), (uint64_t)stats[i].lag_count);
    }
    odbox_prom_family(&p, "odbox_delivery_lag_max_seconds", ODBOX_PROM_GAUGE,
                      "The longest delivery lag of the lag window (NaN: no success in it).");
    for (size_t i = 0; i < n; i++)
        odbox_prom_sample(&p, LABELS(i), stats[i].lag_count ? seconds(stats[i].lag_max_us) : NAN);
#undef LABELS
    free(shard);
    return odbox_prom_take(&p, text, err);
}
