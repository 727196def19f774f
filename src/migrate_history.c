/* odbox — the tables the migration runner keeps in an eventlog: the
 * history of applied and failed migrations, and the eventlog's owner.
 * Dialect-neutral: the dialect gives the types and catalogue queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "migrate_internal.h"
#include "catalog.h"

/* The application tables the framework's own migrations create beside
 * the eventlog, in the owner's container. */
#define OWNER_WITNESS_TABLE "scheduled_tasks"

/* The SQL name of eventlog table `table` (out holds EVT_NAME_MAX). */
#define EVT_NAME_MAX (2 * ODBOX_NAME_MAX + 32)
static const char *evt(odbox_conn *c, const char *eventlog, const char *table, char *out)
{
    /* eventlog is a validated name of under ODBOX_NAME_MAX characters: it fits */
    odbox_dialect_eventlog_table(odbox_conn_dialect(c), eventlog, table, out, EVT_NAME_MAX);
    return out;
}

/* The columns of eventlog table `table`, as odbox_catalog_columns. */
static int evt_columns(odbox_conn *c, const char *eventlog, const char *table, odbox_table_column **cols,
                       size_t *n, odbox_error *err)
{
    const char *container;
    char name[EVT_NAME_MAX];
    odbox_dialect_eventlog_locate(odbox_conn_dialect(c), eventlog, table, &container, name, sizeof name);
    return odbox_catalog_columns(c, container, name, cols, n, err);
}

static int exec_fmt(odbox_conn *c, odbox_error *err, const char *fmt, ...) ODBOX_PRINTF(3, 4);
static int exec_fmt(odbox_conn *c, odbox_error *err, const char *fmt, ...)
{
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return odbox_conn_exec(c, sql, err);
}

/* Today's history table, unless there is one. */
static int create_history(odbox_conn *c, const char *table, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    return exec_fmt(c, err,
                    "CREATE TABLE IF NOT EXISTS %s ("
                    "migration_set VARCHAR(64) NOT NULL, "
                    "version VARCHAR(50) NOT NULL, "
                    "description VARCHAR(255) NOT NULL, "
                    "script VARCHAR(255) NOT NULL, "
                    "checksum CHAR(64) NOT NULL, "
                    "installed_on %s NOT NULL, "
                    "execution_ms BIGINT NOT NULL, "
                    "success %s NOT NULL, "
                    "error_message VARCHAR(%d) NULL, "
                    "PRIMARY KEY (migration_set, version))",
                    table, d->timestamp_type, d->bool_type, ODBOX_HISTORY_ERROR_MAX);
}

#define HISTORY_OLD_COLUMNS "migration_set, version, description, script, checksum, installed_on, execution_ms, success"

/* Gives the history table's version column today's type where a column's
 * type cannot be altered (SQLite): the rows go to a copy with their
 * versions as text, and come back into a new table of today's columns,
 * in one transaction. */
static int rebuild_history(odbox_conn *c, const char *eventlog, const char *table, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char copy[EVT_NAME_MAX];
    if (!d->has_transactional_ddl)
        return odbox_fail(err, ODBOX_EUNSUPPORTED, "%s: cannot change the type of its version column", table);
    evt(c, eventlog, ODBOX_HISTORY_TABLE "_copy", copy);
    int rc = odbox_conn_begin(c, err);
    if (rc == ODBOX_OK)
        rc = exec_fmt(c, err,
                      "CREATE TABLE %s AS SELECT migration_set, CAST(version AS VARCHAR(50)) AS version, "
                      "description, script, checksum, installed_on, execution_ms, success FROM %s",
                      copy, table);
    if (rc == ODBOX_OK)
        rc = exec_fmt(c, err, "DROP TABLE %s", table);
    if (rc == ODBOX_OK)
        rc = create_history(c, table, err);
    if (rc == ODBOX_OK)
        rc = exec_fmt(c, err, "INSERT INTO %s (" HISTORY_OLD_COLUMNS ") SELECT " HISTORY_OLD_COLUMNS " FROM %s",
                      table, copy);
    if (rc == ODBOX_OK)
        rc = exec_fmt(c, err, "DROP TABLE %s", copy);
    return odbox_conn_end(c, rc, err);
}

/* 1 when a catalogue type is an integer type (bigint, BIGINT, bigint(20)). */
static int integer_type(const char *type)
{
    for (const char *p = type; *p; p++)
        if ((p[0] | 0x20) == 'i' && (p[1] | 0x20) == 'n' && (p[2] | 0x20) == 't')
            return 1;
    return 0;
}

/* A history table of an earlier odbox kept versions as BIGINT and no
 * error: bring it to today's columns. The error column goes last, so a
 * run stopped half-way does the whole upgrade again; a version column
 * still of an integer type (a SQLite table whose error column an odbox
 * before its rebuild added) is changed on its own. */
static int upgrade_history(odbox_conn *c, const char *eventlog, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_table_column *cols = NULL;
    size_t n = 0;
    int rc = evt_columns(c, eventlog, ODBOX_HISTORY_TABLE, &cols, &n, err);
    const odbox_table_column *version = rc == ODBOX_OK ? odbox_catalog_find(cols, n, "version") : NULL;
    int with_error = rc == ODBOX_OK && odbox_catalog_find(cols, n, "error_message");
    int int_version = version && integer_type(version->type);
    free(cols);
    if (rc != ODBOX_OK || (with_error && !int_version))
        return rc;
    char table[EVT_NAME_MAX], sql[512];
    evt(c, eventlog, ODBOX_HISTORY_TABLE, table);
    if (!d->alter_column_type_fmt) /* today's columns, error_message too */
        rc = rebuild_history(c, eventlog, table, err);
    else {
        snprintf(sql, sizeof sql, d->alter_column_type_fmt, table, "version", "VARCHAR(50)");
        if (int_version)
            rc = odbox_conn_exec(c, sql, err);
        if (rc == ODBOX_OK && !with_error)
            rc = exec_fmt(c, err, "ALTER TABLE %s ADD COLUMN error_message VARCHAR(%d) NULL", table,
                          ODBOX_HISTORY_ERROR_MAX);
    }
    if (rc == ODBOX_OK)
        odbox_log(ODBOX_LOG_INFO, "%s: upgraded to dotted versions and kept errors", table);
    return rc;
}

int odbox_history_ensure(odbox_conn *c, const char *eventlog, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char table[EVT_NAME_MAX];
    int rc = ODBOX_OK;
    if (d->create_eventlog_fmt) /* else the eventlog is a name prefix */
        rc = exec_fmt(c, err, d->create_eventlog_fmt, eventlog);
    if (rc == ODBOX_OK)
        rc = create_history(c, evt(c, eventlog, ODBOX_HISTORY_TABLE, table), err);
    if (rc == ODBOX_OK)
        rc = upgrade_history(c, eventlog, err);
    if (rc == ODBOX_OK)
        rc = exec_fmt(c, err,
                      "CREATE TABLE IF NOT EXISTS %s ("
                      "id INT NOT NULL PRIMARY KEY, owner VARCHAR(255) NOT NULL, claimed_on %s NOT NULL)",
                      evt(c, eventlog, ODBOX_OWNER_TABLE, table), d->timestamp_type);
    return rc;
}

static int cmp_applied(const void *a, const void *b)
{
    const applied *x = a, *y = b;
    int c = strcmp(x->set, y->set);
    return c ? c : odbox_migration_version_cmp(x->version, y->version);
}

int odbox_history_read(odbox_conn *c, const char *eventlog, applied **out, size_t *n, odbox_error *err)
{
    odbox_table_column *cols = NULL;
    size_t ncols = 0, cap = 0;
    *out = NULL;
    *n = 0;
    int rc = evt_columns(c, eventlog, ODBOX_HISTORY_TABLE, &cols, &ncols, err);
    int with_error = rc == ODBOX_OK && odbox_catalog_find(cols, ncols, "error_message");
    free(cols);
    if (rc != ODBOX_OK || ncols == 0)
        return rc;
    char sql[512], table[EVT_NAME_MAX];
    odbox_stmt *s = NULL;
    snprintf(sql, sizeof sql, "SELECT migration_set, version, description, checksum, success, installed_on%s FROM %s",
             with_error ? ", error_message" : "", evt(c, eventlog, ODBOX_HISTORY_TABLE, table));
    rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *set, *version, *desc, *sum, *error = "";
        applied a = {0};
        if ((rc = odbox_stmt_get_text(s, 1, &set, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &version, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 3, &desc, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 4, &sum, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_bool(s, 5, &a.success, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_timestamp(s, 6, &a.installed_on_us, NULL, err)) != ODBOX_OK ||
            (with_error && (rc = odbox_stmt_get_text(s, 7, &error, NULL, err)) != ODBOX_OK))
            break;
        snprintf(a.set, sizeof a.set, "%s", set);
        snprintf(a.version, sizeof a.version, "%s", version);
        snprintf(a.description, sizeof a.description, "%s", desc);
        snprintf(a.checksum, sizeof a.checksum, "%s", sum);
        snprintf(a.error, sizeof a.error, "%s", error ? error : "");
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            applied *g = realloc(*out, cap * sizeof *g);
            if (!g) {
                rc = odbox_fail(err, ODBOX_ENOMEM, "migrate: out of memory");
                break;
            }
            *out = g;
        }
        (*out)[(*n)++] = a;
        rc = ODBOX_OK;
    }
    odbox_stmt_free(&s);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
        return rc;
    }
    if (*n > 1)
        qsort(*out, *n, sizeof **out, cmp_applied);
    return ODBOX_OK;
}

/* The first max characters of a UTF-8 text (what VARCHAR(max) holds). */
static size_t utf8_prefix(const char *s, size_t max)
{
    size_t bytes = 0, chars = 0;
    while (s[bytes]) {
        if (((unsigned char)s[bytes] & 0xC0) != 0x80 && chars++ == max)
            break;
        bytes++;
    }
    return bytes;
}

int odbox_history_record(odbox_conn *c, const char *eventlog, const char *set, const mfile *f, int64_t started_us,
                         int success, const char *error, odbox_error *err)
{
    char sql[512], table[EVT_NAME_MAX], *kept = NULL;
    odbox_stmt *s = NULL;
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (migration_set, version, description, script, checksum, "
             "installed_on, execution_ms, success, error_message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
             evt(c, eventlog, ODBOX_HISTORY_TABLE, table));
    if (error && !(kept = odbox_strndup(error, utf8_prefix(error, ODBOX_HISTORY_ERROR_MAX))))
        return odbox_fail(err, ODBOX_ENOMEM, "migrate: out of memory");
    int64_t now = odbox_now_us();
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 1, set, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, f->version, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 3, f->description, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 4, f->script, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 5, f->checksum, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_timestamp(s, 6, now, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 7, (now - started_us) / 1000, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_bool(s, 8, success, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 9, kept, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    free(kept);
    return rc;
}

int odbox_history_delete(odbox_conn *c, const char *eventlog, const applied *row, odbox_error *err)
{
    char sql[512], table[EVT_NAME_MAX];
    odbox_stmt *s = NULL;
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE migration_set = ? AND version = ?",
             evt(c, eventlog, ODBOX_HISTORY_TABLE, table));
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, row->set, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, row->version, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    return rc;
}

int odbox_history_realign(odbox_conn *c, const char *eventlog, const applied *row, const mfile *f,
                          odbox_error *err)
{
    char sql[512], table[EVT_NAME_MAX];
    odbox_stmt *s = NULL;
    snprintf(sql, sizeof sql,
             "UPDATE %s SET checksum = ?, description = ?, script = ? WHERE migration_set = ? AND version = ?",
             evt(c, eventlog, ODBOX_HISTORY_TABLE, table));
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, f->checksum, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, f->description, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 3, f->script, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 4, row->set, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 5, row->version, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    return rc;
}

/* ---- the owner ------------------------------------------------------------ */

int odbox_own_container(odbox_conn *c, char *own, size_t cap, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_stmt *s = NULL;
    const char *v = NULL;
    int null = 1;
    int rc = odbox_stmt_prepare(c, d->owner_sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
        rc = odbox_stmt_get_text(s, 1, &v, &null, err);
    else if (rc == 0)
        rc = odbox_fail(err, ODBOX_EDB, "the server did not say which %s the connection uses", d->eventlog_container);
    if (rc == ODBOX_OK && (null || !*v))
        rc = odbox_fail(err, ODBOX_EINVAL,
                        "the connection has no current %s, which would own the eventlog and its application "
                        "tables: name one in the DSN", d->eventlog_container);
    if (rc == ODBOX_OK)
        snprintf(own, cap, "%s", v);
    odbox_stmt_free(&s);
    return rc;
}

/* The owner recorded in eventlog ("" when none: no owner table or row). */
static int recorded_owner(odbox_conn *c, const char *eventlog, char *owner, size_t cap, odbox_error *err)
{
    int exists = 0;
    const char *container;
    char sql[256], table[EVT_NAME_MAX];
    owner[0] = '\0';
    odbox_dialect_eventlog_locate(odbox_conn_dialect(c), eventlog, ODBOX_OWNER_TABLE, &container, table, sizeof table);
    int rc = odbox_conn_table_exists(c, container, table, &exists, err);
    if (rc != ODBOX_OK || !exists)
        return rc;
    odbox_stmt *s = NULL;
    snprintf(sql, sizeof sql, "SELECT owner FROM %s WHERE id = 1", evt(c, eventlog, ODBOX_OWNER_TABLE, table));
    const char *v;
    if ((rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_fetch(s, err)) == 1 && (rc = odbox_stmt_get_text(s, 1, &v, NULL, err)) == ODBOX_OK)
        snprintf(owner, cap, "%s", v);
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

static int refuse(odbox_conn *c, const char *eventlog, const char *owner, const char *own, odbox_error *err)
{
    const char *what = odbox_conn_dialect(c)->eventlog_container;
    return odbox_fail(err, ODBOX_EOWNER,
                      "eventlog %s belongs to %s %s (whose migrate created it), not to %s %s that this "
                      "connection uses; give this application its own eventlog: ?eventlog=NAME in the DSN, "
                      "\"eventlog\": \"NAME\" for the shard in the config file, or --eventlog NAME",
                      eventlog, what, owner, what, own);
}

int odbox_owner_check(odbox_conn *c, const char *eventlog, char *recorded, size_t cap, odbox_error *err)
{
    char own[256], owner[256];
    int rc = recorded_owner(c, eventlog, owner, sizeof owner, err);
    if (rc == ODBOX_OK && recorded)
        snprintf(recorded, cap, "%s", owner);
    if (rc != ODBOX_OK || !*owner)
        return rc;
    if ((rc = odbox_own_container(c, own, sizeof own, err)) != ODBOX_OK)
        return rc;
    return strcmp(owner, own) ? refuse(c, eventlog, owner, own, err) : ODBOX_OK;
}

int odbox_owner_claimable(odbox_conn *c, const char *eventlog, size_t nhistory, char *recorded, size_t cap,
                          odbox_error *err)
{
    char own[256];
    int rc = odbox_own_container(c, own, sizeof own, err);
    if (rc == ODBOX_OK)
        rc = recorded_owner(c, eventlog, recorded, cap, err);
    if (rc != ODBOX_OK)
        return rc;
    if (*recorded)
        return strcmp(recorded, own) ? refuse(c, eventlog, recorded, own, err) : ODBOX_OK;
    if (nhistory == 0)
        return ODBOX_OK;
    int witness = 0;
    if ((rc = odbox_conn_table_exists(c, own, OWNER_WITNESS_TABLE, &witness, err)) != ODBOX_OK || witness)
        return rc;
    return odbox_fail(err, ODBOX_EOWNER,
                      "eventlog %s has a migration history but records no owner, and %s %s has no "
                      OWNER_WITNESS_TABLE ", which the migrate that wrote that history created beside it: "
                      "another application's migrate made this eventlog. Run migrate from that application "
                      "first, or give this one its own eventlog (?eventlog=NAME in the DSN, \"eventlog\" in "
                      "the config file, or --eventlog NAME)",
                      eventlog, odbox_conn_dialect(c)->eventlog_container, own);
}

int odbox_owner_record(odbox_conn *c, const char *eventlog, odbox_error *err)
{
    char own[256], sql[256], table[EVT_NAME_MAX];
    odbox_stmt *s = NULL;
    int rc = odbox_own_container(c, own, sizeof own, err);
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, owner, claimed_on) VALUES (1, ?, ?)",
             evt(c, eventlog, ODBOX_OWNER_TABLE, table));
    if (rc == ODBOX_OK && (rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 1, own, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_timestamp(s, 2, odbox_now_us(), err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    if (rc == ODBOX_OK)
        odbox_log(ODBOX_LOG_INFO, "eventlog %s: recorded %s %s as its owner", eventlog,
                  odbox_conn_dialect(c)->eventlog_container, own);
    return rc;
}
