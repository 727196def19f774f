/* odbox — clocks: where odbox's schedules, heartbeats, backoff and
 * retention read the time (UTC microseconds since the epoch).
 *
 * The system clock reads the real time. A manual clock stays where it is
 * set, so tests move time instead of sleeping. Both are thread-safe. */
#ifndef ODBOX_CLOCK_H
#define ODBOX_CLOCK_H

#include <stdint.h>
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_clock {
    int64_t (*now_us)(void *ud); /* UTC microseconds; called from any thread */
    void *ud;
} odbox_clock;

/* The real time (CLOCK_REALTIME). A static clock: never freed. */
const odbox_clock *odbox_clock_system(void);

/* clock's time; the system clock's when clock is NULL. */
int64_t odbox_clock_now_us(const odbox_clock *clock);

/* A clock that only moves when told to. */
typedef struct odbox_manual_clock odbox_manual_clock;

/* Starts at start_us. */
int odbox_manual_clock_new(int64_t start_us, odbox_manual_clock **out, odbox_error *err);

/* Whatever reads the clock must be done with it first. NULL-safe; sets
 * *c = NULL. */
void odbox_manual_clock_free(odbox_manual_clock **c);

void odbox_manual_clock_set(odbox_manual_clock *c, int64_t now_us);
void odbox_manual_clock_advance(odbox_manual_clock *c, int64_t delta_us);

/* The odbox_clock reading c, valid until c is freed. */
const odbox_clock *odbox_manual_clock_clock(odbox_manual_clock *c);

#ifdef __cplusplus
}
#endif
#endif
