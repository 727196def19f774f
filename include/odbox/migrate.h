/* odbox — migrations.
 *
 * Files named V<version>__<description>.sql (Flyway naming) in
 * <dir>/<dialect migrations_dir>/ are applied in version order. A version
 * is digits, or parts of digits separated by '.' or '_' (V1__, V1.1__,
 * V2_0_3__), ordered part by part as numbers: 1.1 < 1.2 < 1.10 < 2, and
 * 1 = 1.0. It must be above 0, and a part has at most 18 digits. Each is
 * recorded with its SHA-256 and time in <eventlog>.odbox_schema_history
 * under a migration set ("odbox" for the framework's own, a user-chosen
 * name for a service's domain tables). The placeholder ${eventlog} in a
 * file is replaced by the shard's eventlog name (Flyway placeholder
 * syntax, so Flyway can run the same folders).
 *
 * Before anything is applied every applied file is checked: a changed or
 * missing file stops the run with ODBOX_EMIGRATION and nothing applied.
 * A version applied above the newest file of its set is not missing: a
 * newer build applied it (a rolling deploy, every process migrating at
 * start); it is left as it is, with one ODBOX_LOG_WARN per set and run,
 * as Flyway ignores "future" migrations. A failed one still stops it.
 * Only one migrator works on an eventlog at a time: a keyed lock is taken
 * (ODBOX_ETIMEDOUT after lock_timeout_ms); on SQLite the lock is the
 * process's: migrate a file from one process at a time.
 *
 * An eventlog belongs to one application: the database (MySQL/MariaDB)
 * or schema (PostgreSQL) whose migrate created it, recorded as its
 * owner in <eventlog>.odbox_eventlog_owner. Migrate, status, repair and
 * the executor refuse an eventlog owned by another with ODBOX_EOWNER:
 * on MySQL/MariaDB database names are server-wide, so two applications
 * on one server would otherwise share one outbox. Several shards (and
 * eventlogs) of one application may share its database. */
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

/* Longest version text + NUL ("1.2.10"; '_' separators become '.'). */
#define ODBOX_MIGRATION_VERSION_MAX 51

typedef struct odbox_migrate_event {
    odbox_shard_id shard;
    odbox_migrate_phase phase;
    const char *set;
    const char *version;      /* APPLYING, APPLIED: "1", "1.1"; else NULL */
    const char *description;
} odbox_migrate_event;

typedef struct odbox_migrate_options {
    const char *framework_dir; /* NULL: $ODBOX_MIGRATIONS_DIR, else the installed folder */
    const char *user_dir;      /* NULL: none; DIR/<dialect>/ when it exists, else DIR (ODBOX_ENOTFOUND
                                * when DIR holds another dialect's folder) */
    const char *user_set;      /* NULL: "app" */
    int lock_timeout_ms;       /* 0: 60000 */
    void (*progress)(void *ud, const odbox_migrate_event *ev);
    void *progress_ud;
} odbox_migrate_options;

typedef struct odbox_migration_info {
    char set[ODBOX_NAME_MAX];
    char version[ODBOX_MIGRATION_VERSION_MAX];
    char description[256];
    char checksum[65];       /* of the file; "" when the file is missing */
    int applied;             /* applied successfully */
    int failed;              /* failed in an earlier run (MySQL/MariaDB, where DDL
                                cannot roll back): may be half-applied */
    int changed;             /* applied, but the file changed since */
    int missing;             /* applied (or failed), but the file is gone */
    char error[ODBOX_ERROR_MESSAGE_MAX]; /* why it failed, when failed */
    int64_t installed_on_us; /* 0 when pending */
} odbox_migration_info;

typedef enum odbox_repair_action {
    ODBOX_REPAIR_REMOVE_FAILED = 1, /* a failed migration's history row is deleted */
    ODBOX_REPAIR_REALIGN            /* an applied migration's recorded checksum and
                                       description are set to its file's */
} odbox_repair_action;

typedef struct odbox_repair_item {
    odbox_repair_action action;
    char set[ODBOX_NAME_MAX];
    char version[ODBOX_MIGRATION_VERSION_MAX];
    char description[256];
    char old_checksum[65];   /* recorded */
    char new_checksum[65];   /* of the file (REALIGN) */
} odbox_repair_item;

/* Applies what is pending on one shard's primary. */
int odbox_migrate_shard(odbox_shard *s, const odbox_migrate_options *opt, odbox_error *err);

/* Every shard in registry order; stops at the first shard that fails
 * (err names it). */
int odbox_migrate_registry(odbox_registry *r, const odbox_migrate_options *opt, odbox_error *err);

/* Applied, failed and pending migrations of one shard, framework set
 * first, by version. *list is malloc'd (free()). ODBOX_EOWNER when the
 * eventlog belongs to another application. */
int odbox_migrate_status(odbox_shard *s, const odbox_migrate_options *opt,
                         odbox_migration_info **list, size_t *n, odbox_error *err);

/* As Flyway's repair, on one shard, under the migrator lock: deletes the
 * history rows of failed migrations (undo what such a file did first: it
 * may be half-applied), and sets the recorded checksum and description
 * of applied migrations whose file changed to the file's. With dry_run
 * nothing is changed. *items (malloc'd, free(); may be NULL with *n 0)
 * lists what was (or would be) done; opt's sets as for migrate.
 * ODBOX_EOWNER when the eventlog belongs to another application. */
int odbox_migrate_repair(odbox_shard *s, const odbox_migrate_options *opt, int dry_run,
                         odbox_repair_item **items, size_t *n, odbox_error *err);

/* The owner recorded for the shard's eventlog into owner (cap bytes;
 * "" when none is recorded yet), and ODBOX_EOWNER when it is not the
 * database (MySQL/MariaDB) or schema (PostgreSQL) the shard's primary
 * connects to. The executor makes this check at a shard's first action;
 * one that passed here is not made again. Thread-safe. */
int odbox_migrate_check_owner(odbox_shard *s, char *owner, size_t cap, odbox_error *err);

/* The installed framework migrations folder (compile-time). */
const char *odbox_migrations_dir(void);

#ifdef __cplusplus
}
#endif
#endif
