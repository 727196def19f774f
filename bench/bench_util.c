/* odbox benchmarks — shared helpers (see bench_util.h). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/* Fields 14..17 (utime, stime, cutime, cstime) of /proc/PID/stat in
 * ticks, and its parent; -1 when unreadable. */
static int proc_times(const char *pid, long long t[4], long *ppid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command may hold spaces and parens */
    if (!p || sscanf(p + 1, " %*c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld %lld %lld", ppid, &t[0], &t[1],
                     &t[2], &t[3]) != 5)
        return -1;
    return 0;
}

double server_cpu_seconds(void)
{
    const char *pid = getenv("ODBOX_BENCH_SERVER_PID");
    long long t[4], total = 0;
    long ppid, server;
    if (!pid || !*pid || proc_times(pid, t, &ppid) != 0)
        return -1;
    server = atol(pid);
    total = t[0] + t[1] + t[2] + t[3];
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && proc_times(e->d_name, t, &ppid) == 0 && ppid == server)
            total += t[0] + t[1];
    if (d)
        closedir(d);
    return (double)total / (double)sysconf(_SC_CLK_TCK);
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
