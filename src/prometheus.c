/* odbox — the Prometheus text exposition format 0.0.4 (see prometheus.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "prometheus.h"

void odbox_prom_init(odbox_prom *p) { memset(p, 0, sizeof *p); }

void odbox_prom_reset(odbox_prom *p)
{
    odbox_buf_reset(&p->out);
    odbox_buf_reset(&p->names);
    odbox_prom_init(p);
}

static int refuse(odbox_prom *p, const char *fmt, ...) ODBOX_PRINTF(2, 3);

static int refuse(odbox_prom *p, const char *fmt, ...)
{
    if (!p->rc) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->message, sizeof p->message, fmt, ap);
        va_end(ap);
        p->rc = ODBOX_EINVAL;
    }
    return p->rc;
}

static int is_alpha_(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* metric names may hold ':'; label names may not */
static int valid_name(const char *s, int colons)
{
    if (!s || !(is_alpha_(*s) || (colons && *s == ':')))
        return 0;
    for (s++; *s; s++)
        if (!(is_alpha_(*s) || is_digit(*s) || (colons && *s == ':')))
            return 0;
    return 1;
}

/* Appends s escaped: '\' and newline always, '"' in label values. */
static void append_escaped(odbox_buf *b, const char *s, int quote)
{
    for (const unsigned char *u = (const unsigned char *)s; *u;) {
        if (*u == '\\')
            odbox_buf_append(b, "\\\\"), u++;
        else if (*u == '\n')
            odbox_buf_append(b, "\\n"), u++;
        else if (quote && *u == '"')
            odbox_buf_append(b, "\\\""), u++;
        else {
            size_t n = odbox_utf8_len(u);
            if (n)
                odbox_buf_appendn(b, (const char *)u, n), u += n;
            else
                odbox_buf_append(b, "\xef\xbf\xbd"), u++; /* U+FFFD */
        }
    }
}

/* The shortest text that reads back as v (Go's ParseFloat reads it). */
static void append_value(odbox_buf *b, double v)
{
    if (isnan(v)) {
        odbox_buf_append(b, "NaN");
        return;
    }
    if (isinf(v)) {
        odbox_buf_append(b, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    char t[40];
    if (v > -9007199254740992.0 && v < 9007199254740992.0 && v == (double)(int64_t)v) {
        snprintf(t, sizeof t, "%lld", (long long)(int64_t)v);
    } else {
        snprintf(t, sizeof t, "%.15g", v);
        if (strtod(t, NULL) != v)
            snprintf(t, sizeof t, "%.17g", v);
    }
    odbox_buf_append(b, t);
}

int odbox_prom_family(odbox_prom *p, const char *name, odbox_prom_type type, const char *help)
{
    if (p->rc)
        return p->rc;
    if (!valid_name(name, 1) || strlen(name) >= sizeof p->family)
        return refuse(p, "prometheus: '%.80s' is not a metric name", name ? name : "(null)");
    if (type < ODBOX_PROM_GAUGE || type > ODBOX_PROM_SUMMARY)
        return refuse(p, "prometheus: %s: unknown type %d", name, (int)type);
    char key[sizeof p->family + 2];
    snprintf(key, sizeof key, "\n%s\n", name);
    if (p->names.data && strstr(p->names.data, key))
        return refuse(p, "prometheus: family %s written twice (its samples must stay together)", name);
    odbox_buf_append(&p->names, key);
    snprintf(p->family, sizeof p->family, "%s", name);
    p->type = type;
    static const char *const types[] = {"", "gauge", "counter", "histogram", "summary"};
    odbox_buf_cat(&p->out, "# HELP ", name, " ", (char *)NULL);
    append_escaped(&p->out, help ? help : "", 0);
    odbox_buf_cat(&p->out, "\n# TYPE ", name, " ", types[type], "\n", (char *)NULL);
    return ODBOX_OK;
}

/* Checks labels (name/value pairs up to NULL). */
static int check_labels(odbox_prom *p, const char *const *labels)
{
    for (size_t i = 0; labels && labels[i]; i += 2) {
        const char *k = labels[i];
        if (!valid_name(k, 0) || !strncmp(k, "__", 2) || !strcmp(k, "le") || !strcmp(k, "quantile"))
            return refuse(p, "prometheus: %s: '%.80s' is not a label name here", p->family, k);
        if (!labels[i + 1])
            return refuse(p, "prometheus: %s: label %s has no value", p->family, k);
        for (size_t j = 0; j < i; j += 2)
            if (!strcmp(labels[j], k))
                return refuse(p, "prometheus: %s: label %s given twice", p->family, k);
    }
    return ODBOX_OK;
}

/* name{labels[,extra="v"]} value\n; extra may be NULL. */
static void line(odbox_prom *p, const char *suffix, const char *const *labels, const char *extra, const char *extra_v,
                 double value)
{
    odbox_buf_cat(&p->out, p->family, suffix, (char *)NULL);
    int any = 0;
    for (size_t i = 0; labels && labels[i]; i += 2) {
        odbox_buf_cat(&p->out, any ? "," : "{", labels[i], "=\"", (char *)NULL);
        append_escaped(&p->out, labels[i + 1], 1);
        odbox_buf_append(&p->out, "\"");
        any = 1;
    }
    if (extra) {
        odbox_buf_cat(&p->out, any ? "," : "{", extra, "=\"", extra_v, "\"", (char *)NULL);
        any = 1;
    }
    odbox_buf_append(&p->out, any ? "} " : " ");
    append_value(&p->out, value);
    odbox_buf_append(&p->out, "\n");
}

static int in_family(odbox_prom *p, odbox_prom_type want, const char *what)
{
    if (p->rc)
        return p->rc;
    if (!p->family[0])
        return refuse(p, "prometheus: a %s before any family", what);
    if (p->type != want && !(want == ODBOX_PROM_GAUGE && p->type == ODBOX_PROM_COUNTER))
        return refuse(p, "prometheus: %s: a %s in a family of another type", p->family, what);
    return ODBOX_OK;
}

int odbox_prom_sample(odbox_prom *p, const char *const *labels, double value)
{
    if (in_family(p, ODBOX_PROM_GAUGE, "sample") || check_labels(p, labels))
        return p->rc;
    if (p->type == ODBOX_PROM_COUNTER && (value < 0 || isnan(value)))
        return refuse(p, "prometheus: %s: a counter cannot be negative or NaN", p->family);
    line(p, "", labels, NULL, NULL, value);
    return ODBOX_OK;
}

int odbox_prom_histogram(odbox_prom *p, const char *const *labels, const double *bounds, const uint64_t *counts,
                         size_t nb, double sum)
{
    if (in_family(p, ODBOX_PROM_HISTOGRAM, "histogram") || check_labels(p, labels))
        return p->rc;
    if (!counts || (nb && !bounds))
        return refuse(p, "prometheus: %s: histogram without counts", p->family);
    for (size_t i = 0; i < nb; i++)
        if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
            return refuse(p, "prometheus: %s: bucket bounds must be finite and increasing", p->family);
    uint64_t cum = 0;
    for (size_t i = 0; i <= nb; i++) {
        cum += counts[i];
        odbox_buf le = {0};
        if (i < nb)
            append_value(&le, bounds[i]);
        else
            odbox_buf_append(&le, "+Inf");
        char *text = odbox_buf_take(&le);
        if (!text) {
            p->out.oom = 1;
            return ODBOX_ENOMEM;
        }
        line(p, "_bucket", labels, "le", text, (double)cum);
        free(text);
    }
    line(p, "_sum", labels, NULL, NULL, sum);
    line(p, "_count", labels, NULL, NULL, (double)cum);
    return ODBOX_OK;
}

int odbox_prom_summary(odbox_prom *p, const char *const *labels, const double *quantiles, const double *values,
                       size_t nq, double sum, uint64_t count)
{
    if (in_family(p, ODBOX_PROM_SUMMARY, "summary") || check_labels(p, labels))
        return p->rc;
    if (nq && (!quantiles || !values))
        return refuse(p, "prometheus: %s: summary without quantiles", p->family);
    for (size_t i = 0; i < nq; i++) {
        if (!(quantiles[i] >= 0 && quantiles[i] <= 1) || (i && quantiles[i] <= quantiles[i - 1]))
            return refuse(p, "prometheus: %s: quantiles must lie in 0..1 and increase", p->family);
        odbox_buf q = {0};
        append_value(&q, quantiles[i]);
        char *text = odbox_buf_take(&q);
        if (!text) {
            p->out.oom = 1;
            return ODBOX_ENOMEM;
        }
        line(p, "", labels, "quantile", text, values[i]);
        free(text);
    }
    line(p, "_sum", labels, NULL, NULL, sum);
    line(p, "_count", labels, NULL, NULL, (double)count);
    return ODBOX_OK;
}

int odbox_prom_take(odbox_prom *p, char **text, odbox_error *err)
{
    int rc = ODBOX_OK;
    *text = NULL;
    if (p->rc)
        rc = odbox_fail(err, p->rc, "%s", p->message);
    else if (p->out.oom || p->names.oom)
        rc = odbox_fail(err, ODBOX_ENOMEM, "prometheus: out of memory");
    else if (!(*text = p->out.len ? odbox_buf_take(&p->out) : odbox_strdup("")))
        rc = odbox_fail(err, ODBOX_ENOMEM, "prometheus: out of memory");
    odbox_prom_reset(p);
    return rc;
}
