/* odbox — logging. The library never prints: it hands messages to a
 * process-wide callback (none by default). Messages never contain a
 * password. The callback may be called from any thread, concurrently. */
#ifndef ODBOX_LOG_H
#define ODBOX_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum odbox_log_level {
    ODBOX_LOG_DEBUG = 0,
    ODBOX_LOG_INFO,
    ODBOX_LOG_WARN,
    ODBOX_LOG_ERROR
} odbox_log_level;

typedef void (*odbox_log_fn)(void *ud, odbox_log_level level, const char *message);

/* Sets the callback (NULL: silent) and the least level passed to it.
 * Thread-safe; meant to be called once at start-up. */
void odbox_log_set(odbox_log_fn fn, void *ud, odbox_log_level min_level);

#ifdef __cplusplus
}
#endif
#endif
