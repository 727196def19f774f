/* odbox — job schedules: a fixed delay, or a 5-field cron expression in
 * UTC, and their next execution times (db-scheduler's FixedDelay and
 * CronSchedule: a fixed delay counts from the end of a run, cron finds
 * the first match strictly after it). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "jobs_internal.h"

#define US_PER_MIN INT64_C(60000000)
#define MAX_TIME_US INT64_C(253402300799999999) /* 9999-12-31 23:59:59.999999 */

typedef struct field_spec {
    const char *what;
    int lo, hi;
    const char *const *names; /* names[i] is value i + name_base */
    int name_base;
} field_spec;

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", NULL};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", NULL};

static const field_spec fields[5] = {
    {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},
    {"day-of-month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, 1},
    {"day-of-week", 0, 7, day_names, 0}, /* 7 is Sunday too */
};

static const struct {
    const char *name, *expr;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},  {"@midnight", "0 0 * * *"}, {"@hourly", "0 * * * *"},
};

odbox_schedule odbox_schedule_fixed_delay(int64_t ms)
{
    odbox_schedule s = {.kind = ODBOX_SCHEDULE_FIXED_DELAY, .delay_ms = ms};
    return s;
}

/* A number or (where the field has names) a name at *p; advances *p. */
static int parse_value(const char **p, const char *end, const field_spec *f, int *v)
{
    const char *s = *p;
    if (s < end && isdigit((unsigned char)*s)) {
        long n = 0;
        while (s < end && isdigit((unsigned char)*s) && n < 1000)
            n = n * 10 + (*s++ - '0');
        *v = (int)n;
        *p = s;
        return 1;
    }
    for (int i = 0; f->names && f->names[i]; i++) {
        if (end - s >= 3 && !strncasecmp(s, f->names[i], 3)) {
            *v = i + f->name_base;
            *p = s + 3;
            return 1;
        }
    }
    return 0;
}

/* One field's text [s, end) into bits; *star when it begins with '*'. */
static int parse_field(const char *expr, const char *s, const char *end, const field_spec *f, uint64_t *bits,
                       int *star, odbox_error *err)
{
    int flen = (int)(end - s);
    *bits = 0;
    *star = *s == '*';
    const char *p = s;
    while (p < end) {
        int a, b, step = 1;
        if (*p == '*') {
            a = f->lo, b = f->hi;
            p++;
        } else {
            if (!parse_value(&p, end, f, &a))
                goto syntax;
            b = a;
            if (p < end && *p == '-') {
                p++;
                if (!parse_value(&p, end, f, &b))
                    goto syntax;
            }
            if (a < f->lo || a > f->hi || b < f->lo || b > f->hi)
                return odbox_fail(err, ODBOX_EINVAL, "cron '%.100s': %s field '%.*s': %d is out of range %d..%d",
                                  expr, f->what, flen, s, a < f->lo || a > f->hi ? a : b, f->lo, f->hi);
            if (a > b)
                return odbox_fail(err, ODBOX_EINVAL, "cron '%.100s': %s field '%.*s': range %d-%d is backwards",
                                  expr, f->what, flen, s, a, b);
        }
        if (p < end && *p == '/') {
            p++;
            if (!(p < end && isdigit((unsigned char)*p)) || !parse_value(&p, end, &fields[0], &step))
                goto syntax;
            if (step < 1 || step > f->hi - f->lo + 1)
                return odbox_fail(err, ODBOX_EINVAL, "cron '%.100s': %s field '%.*s': step %d is not in 1..%d",
                                  expr, f->what, flen, s, step, f->hi - f->lo + 1);
            if (a == b && s[0] != '*')
                b = f->hi; /* "5/10": from 5 to the end */
        }
        for (int v = a; v <= b; v += step)
            *bits |= UINT64_C(1) << v;
        if (p < end && *p != ',')
            goto syntax;
        if (p < end && ++p == end)
            goto syntax; /* a trailing comma */
    }
    return ODBOX_OK;
syntax:
    return odbox_fail(err, ODBOX_EINVAL,
                      "cron '%.100s': %s field '%.*s' is not a list of *, n, a-b with an optional /step", expr,
                      f->what, flen, s);
}

static int days_in_month(int month, int year)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return days[month - 1] + (month == 2 && leap);
}

/* Some allowed month must have some allowed day, or the schedule never
 * runs; a weekday is no further limit (every date falls on every weekday
 * in some year). With both day fields restricted either one matches. */
static int ever_matches(const odbox_schedule *s)
{
    if (!s->weekdays_star && !s->days_star)
        return 1;
    for (int m = 1; m <= 12; m++)
        for (int d = 1; d <= days_in_month(m, 2000); d++)
            if ((s->months >> m & 1) && (s->days >> d & 1))
                return 1;
    return 0;
}

int odbox_schedule_cron(const char *expr, odbox_schedule *out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "cron: out is NULL");
    memset(out, 0, sizeof *out);
    if (!expr)
        return odbox_fail(err, ODBOX_EINVAL, "cron: expression is NULL");
    const char *text = expr;
    while (isspace((unsigned char)*text))
        text++;
    if (*text == '@') {
        size_t n = strcspn(text, " \t\r\n");
        const char *rest = text + n + strspn(text + n, " \t\r\n");
        for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
            if (strlen(macros[i].name) == n && !strncasecmp(text, macros[i].name, n) && !*rest)
                return odbox_schedule_cron(macros[i].expr, out, err);
        return odbox_fail(err, ODBOX_EINVAL,
                          "cron '%.100s': unknown macro (known: @yearly @annually @monthly @weekly @daily "
                          "@midnight @hourly)",
                          expr);
    }
    const char *start[6], *end[6];
    int n = 0;
    for (const char *p = text; *p;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        if (n < 6)
            start[n] = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        if (n < 6)
            end[n] = p;
        n++;
    }
    if (n != 5)
        return odbox_fail(err, ODBOX_EINVAL,
                          "cron '%.100s': expected 5 fields (minute hour day-of-month month day-of-week), found %d",
                          expr, n);
    uint64_t bits[5];
    int star[5];
    for (int i = 0; i < 5; i++) {
        int rc = parse_field(expr, start[i], end[i], &fields[i], &bits[i], &star[i], err);
        if (rc != ODBOX_OK)
            return rc;
    }
    odbox_schedule s = {.kind = ODBOX_SCHEDULE_CRON,
                        .minutes = bits[0],
                        .hours = (uint32_t)bits[1],
                        .days = (uint32_t)bits[2],
                        .months = (uint32_t)bits[3],
                        .weekdays = (uint32_t)((bits[4] | bits[4] >> 7) & 0x7f),
                        .days_star = star[2],
                        .weekdays_star = star[4]};
    if (!ever_matches(&s))
        return odbox_fail(err, ODBOX_EINVAL,
                          "cron '%.100s': day-of-month field '%.*s' never falls in the month field '%.*s': it "
                          "would never run",
                          expr, (int)(end[2] - start[2]), start[2], (int)(end[3] - start[3]), start[3]);
    *out = s;
    return ODBOX_OK;
}

int odbox_schedule_check(const odbox_schedule *s, odbox_error *err)
{
    if (!s)
        return odbox_fail(err, ODBOX_EINVAL, "schedule is NULL");
    switch (s->kind) {
    case ODBOX_SCHEDULE_FIXED_DELAY:
        if (s->delay_ms <= 0)
            return odbox_fail(err, ODBOX_EINVAL, "schedule: fixed delay %lld ms must be > 0",
                              (long long)s->delay_ms);
        if (s->delay_ms > MAX_TIME_US / 1000)
            return odbox_fail(err, ODBOX_EINVAL,
                              "schedule: fixed delay %lld ms must be in 1..%lld ms (to the year 9999)",
                              (long long)s->delay_ms, (long long)(MAX_TIME_US / 1000));
        return ODBOX_OK;
    case ODBOX_SCHEDULE_CRON:
        if (!(s->minutes & ((UINT64_C(1) << 60) - 1)) || s->minutes >> 60 || !s->hours || s->hours >> 24 ||
            !(s->days >> 1) || s->days & 1 || !(s->months >> 1) || s->months & 1 || s->months >> 13 ||
            !s->weekdays || s->weekdays >> 7 || !ever_matches(s))
            return odbox_fail(err, ODBOX_EINVAL, "schedule: cron fields out of range (use odbox_schedule_cron)");
        return ODBOX_OK;
    default: return odbox_fail(err, ODBOX_EINVAL, "schedule: not set (use odbox_schedule_fixed_delay or _cron)");
    }
}

static int day_matches(const odbox_schedule *s, const struct tm *tm)
{
    if (!(s->months >> (tm->tm_mon + 1) & 1))
        return 0;
    int dom = (int)(s->days >> tm->tm_mday & 1), dow = (int)(s->weekdays >> tm->tm_wday & 1);
    return s->days_star || s->weekdays_star ? dom && dow : dom || dow;
}

/* The first matching minute at or after minute (since the epoch). */
static int cron_from(const odbox_schedule *s, int64_t minute, int64_t *out_us, odbox_error *err)
{
    time_t t = (time_t)(minute * 60);
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return odbox_fail(err, ODBOX_EINVAL, "schedule: time out of range");
    /* a date that exists comes within 400 years (the calendar's cycle) */
    for (int day = 0; day < 400 * 366 && tm.tm_year + 1900 <= 9999; day++) {
        if (day_matches(s, &tm)) {
            for (int h = tm.tm_hour; h < 24; h++) {
                if (!(s->hours >> h & 1))
                    continue;
                for (int m = h == tm.tm_hour ? tm.tm_min : 0; m < 60; m++) {
                    if (s->minutes >> m & 1) {
                        tm.tm_hour = h, tm.tm_min = m, tm.tm_sec = 0;
                        *out_us = (int64_t)timegm(&tm) * 1000000;
                        return ODBOX_OK;
                    }
                }
            }
        }
        tm.tm_mday++;
        tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
        t = timegm(&tm);
        gmtime_r(&t, &tm);
    }
    return odbox_fail(err, ODBOX_EINVAL, "schedule: no cron match before the year 10000");
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

int odbox_schedule_next(const odbox_schedule *s, int64_t after_us, int64_t *next_us, odbox_error *err)
{
    int rc = odbox_schedule_check(s, err);
    if (rc != ODBOX_OK)
        return rc;
    if (!next_us)
        return odbox_fail(err, ODBOX_EINVAL, "schedule: next_us is NULL");
    if (after_us < -MAX_TIME_US || after_us > MAX_TIME_US)
        return odbox_fail(err, ODBOX_EINVAL, "schedule: time %lld out of range", (long long)after_us);
    if (s->kind == ODBOX_SCHEDULE_FIXED_DELAY) {
        if (after_us > MAX_TIME_US - s->delay_ms * 1000)
            return odbox_fail(err, ODBOX_EINVAL, "schedule: next time past the year 9999");
        *next_us = after_us + s->delay_ms * 1000;
        return ODBOX_OK;
    }
    return cron_from(s, floor_div(after_us, US_PER_MIN) + 1, next_us, err);
}

int odbox_schedule_initial(const odbox_schedule *s, int64_t now_us, int64_t *first_us, odbox_error *err)
{
    int rc = odbox_schedule_check(s, err);
    if (rc != ODBOX_OK)
        return rc;
    if (!first_us)
        return odbox_fail(err, ODBOX_EINVAL, "schedule: first_us is NULL");
    if (s->kind == ODBOX_SCHEDULE_FIXED_DELAY) {
        *first_us = now_us;
        return ODBOX_OK;
    }
    return odbox_schedule_next(s, now_us, first_us, err);
}
