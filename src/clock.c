/* odbox — the system clock and a manual clock for tests. */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include "internal.h"
#include "odbox/clock.h"

static int64_t system_now(void *ud)
{
    (void)ud;
    return odbox_now_us();
}

static const odbox_clock system_clock = {system_now, NULL};

const odbox_clock *odbox_clock_system(void) { return &system_clock; }

int64_t odbox_clock_now_us(const odbox_clock *clock)
{
    return clock && clock->now_us ? clock->now_us(clock->ud) : odbox_now_us();
}

struct odbox_manual_clock {
    odbox_clock clock; /* first: its ud points back at this struct */
    _Atomic int64_t now;
};

static int64_t manual_now(void *ud)
{
    return atomic_load(&((odbox_manual_clock *)ud)->now);
}

int odbox_manual_clock_new(int64_t start_us, odbox_manual_clock **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "manual clock: out is NULL");
    odbox_manual_clock *c = malloc(sizeof *c);
    if (!(*out = c))
        return odbox_fail(err, ODBOX_ENOMEM, "manual clock: out of memory");
    c->clock.now_us = manual_now;
    c->clock.ud = c;
    atomic_init(&c->now, start_us);
    return ODBOX_OK;
}

void odbox_manual_clock_free(odbox_manual_clock **c)
{
    if (!c || !*c)
        return;
    free(*c);
    *c = NULL;
}

void odbox_manual_clock_set(odbox_manual_clock *c, int64_t now_us)
{
    if (c)
        atomic_store(&c->now, now_us);
}

void odbox_manual_clock_advance(odbox_manual_clock *c, int64_t delta_us)
{
    if (c)
        atomic_fetch_add(&c->now, delta_us);
}

const odbox_clock *odbox_manual_clock_clock(odbox_manual_clock *c) { return c ? &c->clock : NULL; }

int64_t odbox_mono_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

void odbox_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec odbox_mono_after(int64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

struct timespec odbox_mono_at(int64_t mono_us)
{
    return (struct timespec){.tv_sec = (time_t)(mono_us / 1000000), .tv_nsec = (long)(mono_us % 1000000) * 1000L};
}

void odbox_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int odbox_mono_passed(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec || (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}
