/* odbox — the database registry: shards, each a primary and an optional
 * replica with its own connection pool.
 *
 * A shard is (group 0..255, member 0..63). One shard is the default.
 * Shards may use different dialects. Each shard names its eventlog
 * container (PostgreSQL schema / MySQL-MariaDB database), default
 * "eventlog", so that several shards can share one server.
 *
 * A registry is immutable after open and thread-safe; its pools open
 * connections lazily, so opening a registry does not connect. */
#ifndef ODBOX_REGISTRY_H
#define ODBOX_REGISTRY_H

#include <stddef.h>
#include "db.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODBOX_SHARD_GROUP_MAX 255
#define ODBOX_SHARD_MEMBER_MAX 63
#define ODBOX_NAME_MAX 64   /* longest identifier that reaches SQL text */

typedef struct odbox_shard_id {
    int group;   /* 0..255: residency / policy */
    int member;  /* 0..63: capacity within the group */
} odbox_shard_id;

typedef struct odbox_registry odbox_registry;
typedef struct odbox_shard odbox_shard;

typedef struct odbox_shard_config {
    odbox_shard_id id;
    const char *primary_dsn;   /* required */
    const char *replica_dsn;   /* NULL: replica reads use the primary */
    const char *eventlog;      /* NULL: the primary DSN's eventlog=, else "eventlog";
                                  a DSN's eventlog= must agree with it (a replica's
                                  never names it) */
    odbox_pool_config pool;    /* zeros: pool defaults */
} odbox_shard_config;

typedef struct odbox_registry_config {
    const odbox_shard_config *shards;
    size_t nshards;
    int has_default;               /* 0: the only shard, else (0,0) */
    odbox_shard_id default_shard;
} odbox_registry_config;

/* Builds a registry in code. Checks ranges, duplicates, DSNs and names. */
int odbox_registry_open(const odbox_registry_config *cfg, odbox_registry **out,
                        odbox_error *err);

/* One DSN: a registry of one shard (0,0), whose eventlog the DSN's
 * eventlog= names (default "eventlog"). */
int odbox_registry_open_dsn(const char *dsn, odbox_registry **out, odbox_error *err);

/* From a JSON config file (format in docs/registry.md) or its text. Errors name
 * the offending key path, e.g. "shards[1].member: 64 is out of range 0..63". */
int odbox_registry_load(const char *path, odbox_registry **out, odbox_error *err);
int odbox_registry_parse(const char *json_text, odbox_registry **out, odbox_error *err);

/* All pools' connections must have been released. NULL-safe. */
void odbox_registry_free(odbox_registry **r);

/* The connections r opens from now on never create a database that does
 * not exist: connecting to a SQLite file that is missing fails with
 * ODBOX_ECONNECT ("the SQLite database file '...' does not exist")
 * instead of creating it empty. For tools that look at or maintain a
 * database that must be there already (odbox's commands other than
 * migrate and demo), so that a mistyped path leaves no file behind. A
 * server's database is never created by connecting: nothing changes
 * there, nor for a raw ODBC string without dialect=. Call it before the
 * registry's first use: connections already open stay as they are.
 * Thread-safe; NULL-safe. */
void odbox_registry_never_create(odbox_registry *r);

size_t odbox_registry_shard_count(const odbox_registry *r);
odbox_shard *odbox_registry_shard_at(const odbox_registry *r, size_t i);
/* NULL when id is not registered. */
odbox_shard *odbox_registry_shard(const odbox_registry *r, odbox_shard_id id);
odbox_shard *odbox_registry_default_shard(const odbox_registry *r);
/* The shard id names when registered, else the default shard. */
odbox_shard *odbox_registry_effective_shard(const odbox_registry *r, odbox_shard_id id);

/* The shard accessors take a NULL shard: -1.-1, NULL or 0. */
odbox_shard_id odbox_shard_get_id(const odbox_shard *s);
const char *odbox_shard_eventlog(const odbox_shard *s);
odbox_pool *odbox_shard_primary(const odbox_shard *s);
/* The replica pool, or the primary pool when the shard has no replica. */
odbox_pool *odbox_shard_replica(const odbox_shard *s);
int odbox_shard_has_replica(const odbox_shard *s);
/* The primary DSN with its password replaced by "***". */
const char *odbox_shard_primary_redacted(const odbox_shard *s);

/* "G.M" -> id; ODBOX_EINVAL when malformed or out of range. */
int odbox_shard_id_parse(const char *text, odbox_shard_id *id, odbox_error *err);

/* 1 when name may reach SQL text as an identifier: [a-z_][a-z0-9_]*,
 * at most ODBOX_NAME_MAX - 1 characters. */
int odbox_name_is_valid(const char *name);

#ifdef __cplusplus
}
#endif
#endif
