/* odbox — what the library knows of a shard beyond registry.h; not
 * installed. */
#ifndef ODBOX_REGISTRY_INTERNAL_H
#define ODBOX_REGISTRY_INTERNAL_H

#include "odbox/registry.h"
#include "odbox/model.h"

/* A shard remembers what was checked against its schema once (its
 * eventlog's owner, a model type's table), keyed by an address: the
 * model type, or the shard itself for its eventlog. Thread-safe. */
int odbox_shard_is_verified(odbox_shard *s, const void *what);
int odbox_shard_set_verified(odbox_shard *s, const void *what, odbox_error *err);

/* Refuses (ODBOX_EOWNER) an eventlog whose recorded owner is not the
 * container the shard's primary connects to; checked once per shard
 * (an eventlog without a recorded owner passes). */
int odbox_shard_check_eventlog(odbox_shard *s, odbox_error *err);

/* Checks t's table on the shard's primary (see odbox_model_type_verify),
 * once per shard. */
int odbox_shard_check_model(odbox_shard *s, const odbox_model_type *t, odbox_error *err);

/* The primary DSN as given (holds the password: never log it). */
const char *odbox_shard_primary_dsn(const odbox_shard *s);

/* Cross-process wake-ups of the shard: at most one NOTIFY per channel per
 * this many milliseconds (its primary DSN's notify_interval_ms=, default
 * ODBOX_NOTIFY_INTERVAL_MS); 0 when its DSN says notify=off. */
int odbox_shard_notify_interval_ms(const odbox_shard *s);

#endif
