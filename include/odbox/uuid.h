/* odbox — ids: random UUIDs (v4) and shard-aware UUIDv7.
 *
 * A shard-aware id is a UUIDv7 whose random bits carry the shard
 * (Ekbatan's layout): the high 64 bits are (unix_ms & 0xFFFFFFFFFFFF) << 16
 * | 0x7000 | rand12; the low 64 bits are 0x8000000000000000 |
 * ((group << 6 | member) << 48) | rand48, so byte 8 is 10gggggg and byte 9
 * ggmmmmmm. Ids are 36-character lower-case text plus NUL.
 *
 * Thread-safe. */
#ifndef ODBOX_UUID_H
#define ODBOX_UUID_H

#include <stdint.h>
#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODBOX_UUID_LEN 36

/* A random (version 4) UUID. */
void odbox_uuid_v4(char out[ODBOX_UUID_LEN + 1]);

/* A UUIDv7 carrying shard id; ODBOX_EINVAL when id is out of range. */
int odbox_uuid_v7_sharded(odbox_shard_id id, char out[ODBOX_UUID_LEN + 1], odbox_error *err);

/* The same, with the millisecond timestamp given (tests, replays). */
int odbox_uuid_v7_sharded_at(odbox_shard_id id, int64_t unix_ms, char out[ODBOX_UUID_LEN + 1],
                             odbox_error *err);

/* 1 when text is a UUID in 8-4-4-4-12 hex form (either case). */
int odbox_uuid_is_valid(const char *text);

/* The UUID version (1..8), or 0 when text is not a UUID. */
int odbox_uuid_version(const char *text);

/* Decodes the shard from a version-7 id: 1 and *id set; 0 for any other
 * version or malformed text (such ids belong to the default shard). */
int odbox_uuid_shard(const char *text, odbox_shard_id *id);

#ifdef __cplusplus
}
#endif
#endif
