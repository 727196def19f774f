/* odbox benchmarks — what the benchmark programs share: the latency
 * histogram, clocks, CPU use, argument parsing, JSON strings. */
#ifndef ODBOX_BENCH_UTIL_H
#define ODBOX_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>

/* Latency histogram over nanoseconds: below 2^(SUB_BITS+1) every value
 * has its own bucket; above, each power of two is split into 2^SUB_BITS
 * buckets (under 0.8% error). */
#define SUB_BITS 7
#define SUB_COUNT (1 << SUB_BITS)
#define HIST_BUCKETS ((2 * SUB_COUNT) + (64 - SUB_BITS - 1) * SUB_COUNT)

int hist_index(uint64_t v);
/* Midpoint of bucket i. */
double hist_value(int i);

/* Monotonic clock in nanoseconds. */
uint64_t now_ns(void);

/* CPU this process used so far, all threads: user and system seconds. */
void cpu_seconds(double *user, double *sys);

/* CPU the database server used so far, user and system seconds: the
 * process ODBOX_BENCH_SERVER_PID names (with what its exited children
 * used) and its live children (PostgreSQL's backends); -1 when the
 * variable is unset or /proc cannot be read. A benchmark prints the
 * difference per event: where a drain's time goes, on a machine whose
 * cores the server and the client share. */
double server_cpu_seconds(void);

/* v as an integer in lo..hi, else a message naming prog and what, exit 2. */
long parse_long(const char *prog, const char *what, const char *v, long lo, long hi);

/* s as a JSON string literal. */
void json_string(FILE *f, const char *s);

#endif
