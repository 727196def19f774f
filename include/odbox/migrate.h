/* odbox — migrations.
 *
 * Files named V<version>__<description>.sql (Flyway naming) in
 * <dir>/<dialect migrations_dir>/ are applied in version order; each is
 * recorded with its SHA-256 and time in <eventlog>.odbox_schema_history
 * under a migration set ("odbox" for the framework's own, a user-chosen
 * name for a service's domain tables). The placeholder ${eventlog} in a
 * file is replaced by the shard's eventlog name (Flyway placeholder
 * syntax, so Flyway can run the same folders).
 *
 * Before anything is applied every applied file is checked: a changed or
 * missing file stops the run with ODBOX_EMIGRATION and nothing applied.
 * Only one migrator works on a database at a time: a keyed lock is taken
 * (ODBOX_ETIMEDOUT after lock_timeout_ms). */
#ifndef ODBOX_MIGRATE_H
#define ODBOX_MIGRATE_H

#include <stdint.h>
#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum odbox_migrate_phase {
    ODBOX_MIGRATE_WAITING = 1, /* another migrator holds the lock */
    ODBOX_MIGRATE_APPLYING,    /* version/description set */
    ODBOX_MIGRATE_APPLIED,
    ODBOX_MIGRATE_UP_TO_DATE,  /* nothing pending in this set */
    ODBOX_MIGRATE_DONE         /* the shard is finished */
} odbox_migrate_phase;

typedef struct odbox_migrate_event {
    odbox_shard_id shard;
    odbox_migrate_phase phase;
    const char *set;
    int64_t version;
    const char *description;
} odbox_migrate_event;

typedef struct odbox_migrate_options {
    const char *framework_dir; /* NULL: $ODBOX_MIGRATIONS_DIR, else the installed folder */
    const char *user_dir;      /* NULL: none; DIR/<dialect>/ when it exists, else DIR */
    const char *user_set;      /* NULL: "app" */
    int lock_timeout_ms;       /* 0: 60000 */
    void (*progress)(void *ud, const odbox_migrate_event *ev);
    void *progress_ud;
} odbox_migrate_options;

typedef struct odbox_migration_info {
    char set[ODBOX_NAME_MAX];
    int64_t version;
    char description[256];
    char checksum[65];       /* of the file; "" when the file is missing */
    int applied;
    int64_t installed_on_us; /* 0 when pending */
} odbox_migration_info;

/* Applies what is pending on one shard's primary. */
int odbox_migrate_shard(odbox_shard *s, const odbox_migrate_options *opt, odbox_error *err);

/* Every shard in registry order; stops at the first shard that fails
 * (err names it). */
int odbox_migrate_registry(odbox_registry *r, const odbox_migrate_options *opt, odbox_error *err);

/* Applied and pending migrations of one shard, framework set first, by
 * version. *list is malloc'd (free()). */
int odbox_migrate_status(odbox_shard *s, const odbox_migrate_options *opt,
                         odbox_migration_info **list, size_t *n, odbox_error *err);

/* The installed framework migrations folder (compile-time). */
const char *odbox_migrations_dir(void);

#ifdef __cplusplus
}
#endif
#endif
