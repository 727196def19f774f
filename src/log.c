/* odbox — the logging callback. */
#include <pthread.h>
#include <stdio.h>
#include "internal.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static odbox_log_fn log_fn;
static void *log_ud;
static odbox_log_level log_min = ODBOX_LOG_INFO;

void odbox_log_set(odbox_log_fn fn, void *ud, odbox_log_level min_level)
{
    pthread_mutex_lock(&log_mu);
    log_fn = fn;
    log_ud = ud;
    log_min = min_level;
    pthread_mutex_unlock(&log_mu);
}

void odbox_log(odbox_log_level level, const char *fmt, ...)
{
    pthread_mutex_lock(&log_mu);
    odbox_log_fn fn = log_fn;
    void *ud = log_ud;
    int wanted = fn && level >= log_min;
    pthread_mutex_unlock(&log_mu);
    if (!wanted)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fn(ud, level, msg);
}
