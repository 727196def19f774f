/* odbox benchmarks — shared helpers (see bench_util.h). */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include "bench_util.h"

int hist_index(uint64_t v)
{
    if (v < 2 * SUB_COUNT)
        return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - SUB_BITS;
    uint64_t top = v >> shift; /* in [SUB_COUNT, 2*SUB_COUNT) */
    return 2 * SUB_COUNT + (shift - 1) * SUB_COUNT + (int)(top - SUB_COUNT);
}

double hist_value(int i)
{
    if (i < 2 * SUB_COUNT)
        return (double)i;
    int shift = (i - 2 * SUB_COUNT) / SUB_COUNT + 1;
    uint64_t top = (uint64_t)((i - 2 * SUB_COUNT) % SUB_COUNT + SUB_COUNT);
    uint64_t lo = top << shift;
    return (double)lo + (double)((uint64_t)1 << shift) / 2.0;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void cpu_seconds(double *user, double *sys)
{
    struct rusage ru;
    *user = *sys = 0;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return;
    *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

long parse_long(const char *prog, const char *what, const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "%s: %s must be an integer in %ld..%ld, got '%s'\n", prog, what, lo, hi, v);
        exit(2);
    }
    return x;
}

void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}
