/* odbox — a strict parser of the Prometheus text exposition format 0.0.4,
 * for tests: what odbox writes must read back under the format's rules,
 * and some stricter ones of its own (no comments or blank lines, HELP and
 * TYPE before every family, no trailing commas, no timestamps).
 *
 * Checked: line syntax; metric and label names; escapes in HELP and label
 * values (only \\, \" and \n); UTF-8; values (Go float syntax, NaN,
 * +Inf, -Inf); each family's samples together, its HELP and TYPE first
 * and once; sample names a family's type allows (histogram: _bucket with
 * le, _sum, _count; summary: quantile samples, _sum, _count); no series
 * twice; counters >= 0; histograms: le increasing, counts cumulative, a
 * +Inf bucket equal to _count, _sum and _count present; summaries:
 * quantiles in 0..1, _sum and _count present. Promtool (Debian's
 * prometheus package) checks the same and lints names; it is too heavy to
 * install for the tests (a 96 MB server with a web UI and a daemon), so
 * the tests use this and run promtool as well when it is on PATH. */
#ifndef ODBOX_TESTS_PROMPARSE_H
#define ODBOX_TESTS_PROMPARSE_H

#include <stddef.h>

/* 0 when text is a valid exposition; else -1 and a message naming the
 * line in msg. *samples (may be NULL) gets the number of sample lines. */
int prom_check(const char *text, size_t *samples, char *msg, size_t cap);

/* The value of the sample whose series (name and labels exactly as
 * written, e.g. "x{a=\"1\"}") is series; 0 when found, -1 when not. */
int prom_value(const char *text, const char *series, double *value);

#endif
