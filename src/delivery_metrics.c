/* odbox — the delivery's metrics: this process's counts and histograms
 * per handler, with the database's (odbox_notifications_metrics), as C
 * structs and as Prometheus text (see odbox/handlers.h). */
#include <stdlib.h>
#include <string.h>
#include "delivery_internal.h"
#include "prometheus.h"

/* Seconds: a handler call, and from an action's commit to its handler's
 * success (which includes every retry's backoff). */
static const double duration_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,      2.5,   5,    10,    30,   60,  300};
static const double lag_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,  1,
                                    2.5,   5,    10,    30,   60,  300,  3600, 86400};

typedef struct hm {
    uint64_t outcomes[4]; /* ODBOX_DM_* */
    odbox_histogram duration[2], lag;
} hm;

struct odbox_dmetrics {
    pthread_mutex_t mu;
    const odbox_handlers *h;
    hm *v;
    uint64_t fanned_out, created, unknown, round_errors, handed_off, given_back;
};

static void histogram_init(odbox_histogram *hg, const double *bounds, size_t n)
{
    memset(hg, 0, sizeof *hg);
    hg->nbounds = n;
    memcpy(hg->bounds, bounds, n * sizeof *bounds);
}

static void observe(odbox_histogram *hg, double v)
{
    size_t i = 0;
    while (i < hg->nbounds && v > hg->bounds[i])
        i++;
    hg->counts[i]++;
    hg->count++;
    hg->sum += v;
}

int odbox_dmetrics_new(const odbox_handlers *h, odbox_dmetrics **out, odbox_error *err)
{
    odbox_dmetrics *m = calloc(1, sizeof *m);
    if (!m || !(m->v = calloc(h->n, sizeof *m->v))) {
        free(m);
        return odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
    }
    m->h = h;
    for (size_t i = 0; i < h->n; i++) {
        for (int k = 0; k < 2; k++)
            histogram_init(&m->v[i].duration[k], duration_bounds, sizeof duration_bounds / sizeof *duration_bounds);
        histogram_init(&m->v[i].lag, lag_bounds, sizeof lag_bounds / sizeof *lag_bounds);
    }
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return ODBOX_OK;
}

void odbox_dmetrics_free(odbox_dmetrics **mp)
{
    if (!mp || !*mp)
        return;
    pthread_mutex_destroy(&(*mp)->mu);
    free((*mp)->v);
    free(*mp);
    *mp = NULL;
}

void odbox_dmetrics_record(odbox_dmetrics *m, const odbox_dm_outcome *o, size_t n)
{
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        if (o[i].handler < 0) {
            m->unknown++;
            continue;
        }
        hm *x = &m->v[o[i].handler];
        x->outcomes[o[i].outcome]++;
        if (o[i].duration_us >= 0)
            observe(&x->duration[o[i].outcome != ODBOX_DM_SUCCEEDED], (double)o[i].duration_us / 1e6);
        if (o[i].outcome == ODBOX_DM_SUCCEEDED)
            observe(&x->lag, (double)(o[i].lag_us > 0 ? o[i].lag_us : 0) / 1e6);
    }
    pthread_mutex_unlock(&m->mu);
}

void odbox_dmetrics_fanout(odbox_dmetrics *m, size_t delivered, size_t notifications)
{
    pthread_mutex_lock(&m->mu);
    m->fanned_out += delivered;
    m->created += notifications;
    pthread_mutex_unlock(&m->mu);
}

/* Adds n to one of m's counters. */
static void count(odbox_dmetrics *m, uint64_t *counter, size_t n)
{
    pthread_mutex_lock(&m->mu);
    *counter += n;
    pthread_mutex_unlock(&m->mu);
}

void odbox_dmetrics_handoff(odbox_dmetrics *m, size_t taken) { count(m, &m->handed_off, taken); }

void odbox_dmetrics_given_back(odbox_dmetrics *m, size_t given) { count(m, &m->given_back, given); }

void odbox_dmetrics_round_error(odbox_dmetrics *m) { count(m, &m->round_errors, 1); }

void odbox_delivery_metrics_clear(odbox_delivery_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nhandlers; i++) {
        free(m->handlers[i].handler);
        free(m->handlers[i].event_type);
    }
    free(m->handlers);
    odbox_notification_stats_free(&m->db, m->ndb);
    memset(m, 0, sizeof *m);
}

/* "A,B,C": the event types a handler takes. */
static char *joined_types(const odbox_hentry *e)
{
    odbox_buf b = {0};
    for (size_t k = 0; k < e->ntypes; k++)
        odbox_buf_cat(&b, k ? "," : "", e->types[k], (char *)NULL);
    return odbox_buf_take(&b);
}

/* This process's part, under the lock. */
static int snapshot(odbox_dmetrics *dm, odbox_delivery_metrics *out, odbox_error *err)
{
    const odbox_handlers *h = dm->h;
    if (!(out->handlers = calloc(h->n ? h->n : 1, sizeof *out->handlers)))
        return odbox_fail(err, ODBOX_ENOMEM, "delivery metrics: out of memory");
    out->nhandlers = h->n;
    int oom = 0;
    pthread_mutex_lock(&dm->mu);
    for (size_t i = 0; i < h->n; i++) {
        odbox_handler_metrics *x = &out->handlers[i];
        const hm *v = &dm->v[i];
        oom |= !(x->handler = odbox_strdup(h->v[i].name)) || !(x->event_type = joined_types(&h->v[i]));
        x->succeeded = v->outcomes[ODBOX_DM_SUCCEEDED];
        x->failed_retry = v->outcomes[ODBOX_DM_FAILED_RETRY];
        x->expired_preflight = v->outcomes[ODBOX_DM_EXPIRED_PREFLIGHT];
        x->expired_postfailure = v->outcomes[ODBOX_DM_EXPIRED_POSTFAILURE];
        x->duration_succeeded = v->duration[0];
        x->duration_failed = v->duration[1];
        x->lag = v->lag;
    }
    out->events_fanned_out = dm->fanned_out;
    out->notifications_created = dm->created;
    out->unknown_handler = dm->unknown;
    out->round_errors = dm->round_errors;
    pthread_mutex_unlock(&dm->mu);
    return oom ? odbox_fail(err, ODBOX_ENOMEM, "delivery metrics: out of memory") : ODBOX_OK;
}

int odbox_delivery_metrics_read(odbox_delivery *d, const odbox_notification_metrics_options *db_options,
                           odbox_delivery_metrics *out, odbox_error *err)
{
    if (!d || !out)
        return odbox_fail(err, ODBOX_EINVAL, "delivery metrics: delivery or out is NULL");
    memset(out, 0, sizeof *out);
    odbox_notification_metrics_options o = {.clock = &d->clock};
    if (db_options) {
        o = *db_options;
        if (!o.clock)
            o.clock = &d->clock;
    }
    int rc = snapshot(d->metrics, out, err);
    if (rc == ODBOX_OK)
        rc = odbox_notifications_metrics(d->r, &o, &out->db, &out->ndb, err);
    if (rc != ODBOX_OK)
        odbox_delivery_metrics_clear(out);
    return rc;
}

static void histogram(odbox_prom *p, const char *handler, const char *outcome, const odbox_histogram *hg)
{
    const char *const labels[] = {"handler", handler, outcome ? "outcome" : NULL, outcome, NULL};
    odbox_prom_histogram(p, labels, hg->bounds, hg->counts, hg->nbounds, hg->sum);
}

static void counter(odbox_prom *p, const char *name, const char *help, uint64_t v)
{
    odbox_prom_family(p, name, ODBOX_PROM_COUNTER, help);
    odbox_prom_sample(p, NULL, (double)v);
}

/* The hand-offs' counts, which odbox_delivery_metrics has no fields for. */
typedef struct handoff_counts {
    uint64_t taken, given_back;
} handoff_counts;

/* The in-process families of m and ho, and the hung calls of each
 * handler (hung[k], m's order) */
static int process_text(const odbox_delivery_metrics *m, const handoff_counts *ho, const int *hung, char **text,
                        odbox_error *err)
{
    odbox_prom p;
    odbox_prom_init(&p);
    odbox_prom_family(&p, "odbox_handler_calls_total", ODBOX_PROM_COUNTER,
                      "Notifications this process finished per handler and outcome, since the delivery opened "
                      "(expired_preflight: past retention when read, without a call).");
    for (size_t i = 0; i < m->nhandlers; i++) {
        const odbox_handler_metrics *x = &m->handlers[i];
        const char *const outcomes[] = {"succeeded", "failed_retry", "expired_preflight", "expired_postfailure"};
        const uint64_t v[] = {x->succeeded, x->failed_retry, x->expired_preflight, x->expired_postfailure};
        for (int k = 0; k < 4; k++)
            odbox_prom_sample(&p, (const char *const[]){"handler", x->handler, "outcome", outcomes[k], NULL},
                              (double)v[k]);
    }
    odbox_prom_family(&p, "odbox_handler_duration_seconds", ODBOX_PROM_HISTOGRAM,
                      "How long handler calls took in this process (a timed-out call counts its timeout).");
    for (size_t i = 0; i < m->nhandlers; i++) {
        histogram(&p, m->handlers[i].handler, "succeeded", &m->handlers[i].duration_succeeded);
        histogram(&p, m->handlers[i].handler, "failed", &m->handlers[i].duration_failed);
    }
    odbox_prom_family(&p, "odbox_handler_lag_seconds", ODBOX_PROM_HISTOGRAM,
                      "From an action's commit (completion_date) to its handler's success, in this process.");
    for (size_t i = 0; i < m->nhandlers; i++)
        histogram(&p, m->handlers[i].handler, NULL, &m->handlers[i].lag);
    odbox_prom_family(&p, "odbox_handler_calls_hung", ODBOX_PROM_GAUGE,
                      "Calls of the handler still running past handler_timeout_ms in this process, their threads "
                      "abandoned; at its cap (its max_in_flight, at most the workers) its rows are not claimed here.");
    for (size_t i = 0; i < m->nhandlers; i++)
        odbox_prom_sample(&p, (const char *const[]){"handler", m->handlers[i].handler, NULL}, (double)hung[i]);
    counter(&p, "odbox_fanout_events_total", "Events this process's fan-out flipped to delivered.",
            m->events_fanned_out);
    counter(&p, "odbox_fanout_notifications_total",
            "Notification rows this process's fan-out sent to its inserts (rows already there included).",
            m->notifications_created);
    counter(&p, "odbox_handler_unknown_total",
            "Notifications this process finished whose handler_name no handler answers to.", m->unknown_handler);
    counter(&p, "odbox_delivery_round_errors_total", "Fan-out and handling rounds that failed in this process.",
            m->round_errors);
    counter(&p, "odbox_handling_handed_off_total",
            "Notifications this process's handling took from its own fan-out's writes, without a claim.",
            ho->taken);
    counter(&p, "odbox_handling_given_back_total",
            "Notifications this process's fan-out handed to its handling that no loop took in time (200 ms), "
            "given back to every process.",
            ho->given_back);
    return odbox_prom_take(&p, text, err);
}

static handoff_counts handoffs(odbox_dmetrics *m)
{
    pthread_mutex_lock(&m->mu);
    handoff_counts v = {m->handed_off, m->given_back};
    pthread_mutex_unlock(&m->mu);
    return v;
}

int odbox_delivery_prometheus(odbox_delivery *d, const odbox_notification_metrics_options *db_options, char **text,
                              odbox_error *err)
{
    if (!text)
        return odbox_fail(err, ODBOX_EINVAL, "delivery metrics: text is NULL");
    *text = NULL;
    odbox_delivery_metrics m;
    int rc = odbox_delivery_metrics_read(d, db_options, &m, err);
    if (rc != ODBOX_OK)
        return rc;
    char *db = NULL, *mine = NULL;
    handoff_counts ho = handoffs(d->metrics);
    int *hung = calloc(m.nhandlers ? m.nhandlers : 1, sizeof *hung);
    for (size_t k = 0; hung && k < m.nhandlers; k++)
        hung[k] = odbox_workers_hung(d->workers, (int)k);
    if (!hung)
        rc = odbox_fail(err, ODBOX_ENOMEM, "delivery metrics: out of memory");
    else if ((rc = odbox_notifications_prometheus(m.db, m.ndb, &db, err)) == ODBOX_OK &&
             (rc = process_text(&m, &ho, hung, &mine, err)) == ODBOX_OK) {
        odbox_buf b = {0};
        odbox_buf_cat(&b, db, mine, (char *)NULL);
        if (!(*text = odbox_buf_take(&b)))
            rc = odbox_fail(err, ODBOX_ENOMEM, "delivery metrics: out of memory");
    }
    free(db);
    free(mine);
    free(hung);
    odbox_delivery_metrics_clear(&m);
    return rc;
}
