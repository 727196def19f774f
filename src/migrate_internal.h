/* odbox — what the migration runner's modules share: the files of a set
 * (migrate.c), file names and versions (migrate_version.c), the history
 * and owner tables (migrate_history.c), repair (migrate_repair.c). Not
 * installed. */
#ifndef ODBOX_MIGRATE_INTERNAL_H
#define ODBOX_MIGRATE_INTERNAL_H

#include "odbox/migrate.h"
#include "odbox/dialect.h"
#include "internal.h"

#define ODBOX_FRAMEWORK_SET "odbox"
#define ODBOX_HISTORY_TABLE "odbox_schema_history"
#define ODBOX_OWNER_TABLE "odbox_eventlog_owner"
/* What a failed migration's history row keeps of its error, in characters */
#define ODBOX_HISTORY_ERROR_MAX 1000

typedef struct mfile {
    char version[ODBOX_MIGRATION_VERSION_MAX];
    char description[256];
    char script[256];
    char checksum[65];
    char *text;
} mfile;

typedef struct mset {
    const char *name;
    char dir[1024];
    mfile *files;  /* by version */
    size_t n;
} mset;

/* A row of the history table. */
typedef struct applied {
    char set[ODBOX_NAME_MAX];
    char version[ODBOX_MIGRATION_VERSION_MAX];
    char description[256];
    char checksum[65];
    int success;
    int64_t installed_on_us;
    char error[ODBOX_ERROR_MESSAGE_MAX]; /* of a failed row; "" when none was kept */
} applied;

/* ---- names and versions (migrate_version.c) ---- */

/* "V<version>__<description>.sql" -> the version (its parts joined by
 * '.') and the description (underscores become blanks, as Flyway shows
 * them). ODBOX_EINVAL saying what is wrong with name. */
int odbox_migration_name_parse(const char *name, char version[ODBOX_MIGRATION_VERSION_MAX], char *desc,
                               size_t dcap, odbox_error *err);
/* Orders versions part by part as numbers, a missing part counting as 0:
 * <0, 0 or >0 as a comes before, is the same as, or comes after b. */
int odbox_migration_version_cmp(const char *a, const char *b);
/* ODBOX_EUNSUPPORTED, saying d's too_old_hint, when server (as d's
 * server_version_sql answers: "10.6.12-MariaDB-log") is older than d's
 * min_server_version; ODBOX_OK when it is not, when d names none, or
 * when server begins with no version number. */
int odbox_server_version_check(const odbox_dialect *d, const char *server, odbox_error *err);

/* ---- the files (migrate.c) ---- */

void odbox_migrate_sets_free(mset *sets, size_t n);
/* A connection of the shard's primary (*c) and opt's sets for its
 * dialect; on failure nothing is held. */
int odbox_migrate_begin(odbox_shard *shard, const odbox_migrate_options *opt, odbox_conn **c, mset sets[2],
                        size_t *nsets, odbox_error *err);
const mfile *odbox_migrate_find_file(const mset *s, const char *version);
const applied *odbox_migrate_find_applied(const applied *h, size_t n, const char *set, const char *version);

/* The keys of the migrator locks a migrator holds. */
typedef struct migrate_locks {
    char eventlog[128], application[300];
} migrate_locks;

/* Takes the migrator locks on c: eventlog's (one migrator per eventlog),
 * then its application's (one per schema or database: see migrate.c),
 * their keys into *held; ODBOX_ETIMEDOUT after opt's lock timeout, with
 * neither held, reporting WAITING. On another error the server may have
 * granted one all the same (a fetch failed after it): the caller
 * discards c, which ends it. */
int odbox_migrate_lock(odbox_conn *c, const char *eventlog, const odbox_migrate_options *opt, odbox_shard_id id,
                       migrate_locks *held, odbox_error *err);
/* Releases them; a connection that cannot say is discarded from pool. */
void odbox_migrate_unlock(odbox_pool *pool, odbox_conn **c, const migrate_locks *held);

/* ---- the history and owner tables (migrate_history.c) ---- */

/* Creates the eventlog container, the history table (or brings one of an
 * earlier odbox to today's columns) and the owner table. */
int odbox_history_ensure(odbox_conn *c, const char *eventlog, odbox_error *err);
/* Every row by set and version; none when the table does not exist. */
int odbox_history_read(odbox_conn *c, const char *eventlog, applied **out, size_t *n, odbox_error *err);
/* Records f as applied (success) or failed with error (may be NULL). */
int odbox_history_record(odbox_conn *c, const char *eventlog, const char *set, const mfile *f, int64_t started_us,
                         int success, const char *error, odbox_error *err);
/* Deletes one row (repair: a failed migration). */
int odbox_history_delete(odbox_conn *c, const char *eventlog, const applied *row, odbox_error *err);
/* Sets a row's checksum, description and script to f's (repair). */
int odbox_history_realign(odbox_conn *c, const char *eventlog, const applied *row, const mfile *f,
                          odbox_error *err);

/* ODBOX_EOWNER when eventlog records an owner other than c's container;
 * recorded (may be NULL) gets the recorded owner. */
int odbox_owner_check(odbox_conn *c, const char *eventlog, char *recorded, size_t cap, odbox_error *err);
/* Under the migrator lock, before anything is written: refuses
 * (ODBOX_EOWNER) an eventlog owned by another container than c's, and
 * one with nhistory history rows but no recorded owner (migrated before
 * owners were recorded) unless c's container holds scheduled_tasks,
 * which that migrate created beside it. recorded gets the owner ("" when
 * none: odbox_owner_record then claims it). */
int odbox_owner_claimable(odbox_conn *c, const char *eventlog, size_t nhistory, char *recorded, size_t cap,
                          odbox_error *err);
/* Records c's container as eventlog's owner (the owner table exists). */
int odbox_owner_record(odbox_conn *c, const char *eventlog, odbox_error *err);
/* The connection's own container (the dialect's owner_sql: the schema or
 * database of the application's tables) into own; ODBOX_EINVAL when it
 * has none (a MySQL DSN without a database). */
int odbox_own_container(odbox_conn *c, char *own, size_t cap, odbox_error *err);

#endif
