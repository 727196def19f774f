/* odbox-bench-delivery: what its two files share. delivery_bench.c has
 * the modes that run odbox's delivery (rounds, drain, scale, fill,
 * fanout, handle), the helpers below and main (its head describes every
 * mode); delivery_raw.c the raw client (--mode raw) and the claim's SQL
 * (--mode due-sql). */
#ifndef ODBOX_BENCH_DELIVERY_H
#define ODBOX_BENCH_DELIVERY_H

#include <stdatomic.h>
#include <stdint.h>
#include <odbox/odbox.h>

typedef struct opts {
    const char *dsn, *replica, *eventlog, *mode, *go, *stop;
    long events, handlers, batch, hbatch, workers, old, repeat, handler_ms, loops;
    int reuse, ordered;
} opts;

/* Warnings and errors the library logged, and how many of them were a
 * round or an outcome retried after 40001 or a deadlock. */
extern atomic_long log_warnings, log_retries;

/* CLOCK_REALTIME in ns: comparable across the processes of a run. */
int64_t wall_ns(void);
void sleep_ms(long ms);
/* Sets e (code, msg) and returns code. */
int bench_fail(odbox_error *e, int code, const char *msg);
/* Prints "ready", then waits for the file --go (if given). */
void wait_go(const opts *o);
/* The JSON line of --mode handle and --mode raw. */
void print_result(const char *mode, long succeeded, long rounds, long empty, long stale, long round_errors,
                  int64_t start_ns, int64_t last_ns, double cpu);

/* delivery_raw.c */
int mode_due_sql(const opts *o, odbox_error *e);
int mode_raw(const opts *o, odbox_error *e);

#endif
