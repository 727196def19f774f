/* odbox — writing the Prometheus text exposition format 0.0.4 (what a
 * /metrics endpoint serves and `promtool check metrics` reads); not
 * installed. The library's metrics (database metrics of notifications,
 * in-process metrics of handlers) are rendered through it, so names,
 * labels, escaping and the shape of histograms and summaries are checked
 * in one place.
 *
 * A writer holds one exposition: families one after the other, each its
 * HELP and TYPE lines and then all its samples. A family name may appear
 * once; names, label names and the sample suffixes a type allows are
 * checked. The first mistake is kept and every later call is a no-op;
 * odbox_prom_take reports it. Not thread-safe: one writer per thread. */
#ifndef ODBOX_PROMETHEUS_H
#define ODBOX_PROMETHEUS_H

#include <stddef.h>
#include <stdint.h>
#include "internal.h"

typedef enum odbox_prom_type {
    ODBOX_PROM_GAUGE = 1,
    ODBOX_PROM_COUNTER,   /* name should end in _total */
    ODBOX_PROM_HISTOGRAM, /* samples through odbox_prom_histogram */
    ODBOX_PROM_SUMMARY    /* samples through odbox_prom_summary */
} odbox_prom_type;

typedef struct odbox_prom {
    odbox_buf out;
    odbox_buf names;      /* "\nname\n" of every family begun */
    char family[128];     /* the current family ("" before the first) */
    odbox_prom_type type;
    int rc;               /* the first failure, 0 while none */
    char message[256];
} odbox_prom;

/* A writer with nothing written. */
void odbox_prom_init(odbox_prom *p);

/* Begins family name ([a-zA-Z_:][a-zA-Z0-9_:]*, at most 127 characters)
 * of type, with help (any text: '\' and newlines are escaped). */
int odbox_prom_family(odbox_prom *p, const char *name, odbox_prom_type type, const char *help);

/* One sample of the current gauge or counter family. labels: name, value,
 * name, value, ..., NULL (may be NULL for none). Label names are
 * [a-zA-Z_][a-zA-Z0-9_]*, not "__..." and not "le" or "quantile" (the
 * histogram's and summary's own); values are any text ('\', '"' and
 * newlines escaped; bytes that are not UTF-8 become U+FFFD). NaN and
 * infinities are written as Prometheus spells them. */
int odbox_prom_sample(odbox_prom *p, const char *const *labels, double value);

/* One histogram of the current histogram family: nb upper bounds in
 * increasing order (finite), counts[0..nb] the observations per bucket
 * (counts[nb]: above the last bound), sum of all observations. Writes
 * the cumulative _bucket{le=...} lines with le="+Inf", _sum and _count. */
int odbox_prom_histogram(odbox_prom *p, const char *const *labels, const double *bounds, const uint64_t *counts,
                         size_t nb, double sum);

/* One summary of the current summary family: nq quantiles (0..1,
 * increasing) and their values, then _sum and _count. */
int odbox_prom_summary(odbox_prom *p, const char *const *labels, const double *quantiles, const double *values,
                       size_t nq, double sum, uint64_t count);

/* The exposition in *text (malloc'd, ends with a newline; "" when
 * empty), or the first mistake (ODBOX_EINVAL naming it, ODBOX_ENOMEM)
 * with *text = NULL. The writer is reset either way. */
int odbox_prom_take(odbox_prom *p, char **text, odbox_error *err);

/* Frees what the writer holds (after a failure, instead of take). */
void odbox_prom_reset(odbox_prom *p);

#endif
