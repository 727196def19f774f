/* odbox — the migration runner. Dialect-neutral: the files are per dialect,
 * the runner only asks the dialect for its folder, types and lock SQL. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "odbox/migrate.h"
#include "odbox/dialect.h"
#include "internal.h"
#include "sqlsplit.h"

#ifndef ODBOX_MIGRATIONS_DIR
#define ODBOX_MIGRATIONS_DIR "/usr/local/share/odbox/migrations"
#endif

#define FRAMEWORK_SET "odbox"
#define HISTORY_TABLE "odbox_schema_history"
#define MAX_FILE_BYTES (16 * 1024 * 1024)
#define MAX_FILES 10000

typedef struct mfile {
    int64_t version;
    char description[256];
    char script[256];
    char checksum[65];
    char *text;
} mfile;

typedef struct mset {
    const char *name;
    char dir[1024];
    mfile *files;
    size_t n;
} mset;

typedef struct applied {
    char set[ODBOX_NAME_MAX];
    int64_t version;
    char checksum[65];
    int success;
    int64_t installed_on_us;
} applied;

const char *odbox_migrations_dir(void) { return ODBOX_MIGRATIONS_DIR; }

static void mset_free(mset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->files[i].text);
    free(s->files);
    s->files = NULL;
    s->n = 0;
}

/* "V<digits>__<description>.sql" -> version and description (underscores
 * become blanks, as Flyway shows them). 0 when name does not match. */
static int parse_name(const char *name, int64_t *version, char *desc, size_t cap)
{
    size_t len = strlen(name);
    if (len < 8 || name[0] != 'V' || strcmp(name + len - 4, ".sql"))
        return 0;
    const char *p = name + 1;
    int64_t v = 0;
    if (*p < '0' || *p > '9')
        return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (*p - '0');
    }
    if (p[0] != '_' || p[1] != '_' || v < 1)
        return 0;
    p += 2;
    size_t dl = (size_t)(name + len - 4 - p);
    if (dl == 0 || dl >= cap)
        return 0;
    for (size_t i = 0; i < dl; i++)
        desc[i] = p[i] == '_' ? ' ' : p[i];
    desc[dl] = '\0';
    *version = v;
    return 1;
}

static int cmp_file(const void *a, const void *b)
{
    const mfile *x = a, *y = b;
    return x->version < y->version ? -1 : x->version > y->version;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Loads every V*.sql of s->dir, sorted by version. */
static int load_set(mset *s, odbox_error *err)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return odbox_fail(err, errno == ENOENT ? ODBOX_ENOTFOUND : ODBOX_EIO,
                          "migrate: cannot open migrations folder '%.300s': %s", s->dir, strerror(errno));
    struct dirent *e;
    int rc = ODBOX_OK;
    size_t cap = 0;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        size_t len = strlen(name);
        if (name[0] == '.' || len < 4 || strcmp(name + len - 4, ".sql"))
            continue;
        mfile f = {0};
        if (!parse_name(name, &f.version, f.description, sizeof f.description)) {
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "migrate: '%.200s' in %.300s is not named V<version>__<description>.sql",
                            name, s->dir);
            break;
        }
        if (s->n >= MAX_FILES) {
            rc = odbox_fail(err, ODBOX_EINVAL, "migrate: more than %d files in %.300s", MAX_FILES, s->dir);
            break;
        }
        snprintf(f.script, sizeof f.script, "%s", name);
        char path[1400];
        size_t flen = 0;
        snprintf(path, sizeof path, "%s/%s", s->dir, name);
        if ((rc = odbox_read_text_file("migrate", path, MAX_FILE_BYTES, &f.text, &flen, err)) != ODBOX_OK)
            break;
        odbox_sha256_hex(f.text, flen, f.checksum);
        if (s->n == cap) {
            cap = cap ? cap * 2 : 16;
            mfile *g = realloc(s->files, cap * sizeof *g);
            if (!g) {
                free(f.text);
                rc = odbox_fail(err, ODBOX_ENOMEM, "migrate: out of memory");
                break;
            }
            s->files = g;
        }
        s->files[s->n++] = f;
    }
    closedir(d);
    if (rc != ODBOX_OK) {
        mset_free(s);
        return rc;
    }
    qsort(s->files, s->n, sizeof *s->files, cmp_file);
    for (size_t i = 1; i < s->n; i++)
        if (s->files[i].version == s->files[i - 1].version) {
            rc = odbox_fail(err, ODBOX_EINVAL, "migrate: version %lld appears twice in %.300s ('%s', '%s')",
                            (long long)s->files[i].version, s->dir, s->files[i - 1].script, s->files[i].script);
            mset_free(s);
            return rc;
        }
    return ODBOX_OK;
}

/* The framework set and, when asked, the user's set, for dialect d. */
static int load_sets(const odbox_dialect *d, const odbox_migrate_options *opt, mset sets[2],
                     size_t *nsets, odbox_error *err)
{
    const char *base = opt && opt->framework_dir ? opt->framework_dir : getenv("ODBOX_MIGRATIONS_DIR");
    if (!base || !*base)
        base = ODBOX_MIGRATIONS_DIR;
    memset(sets, 0, 2 * sizeof *sets);
    sets[0].name = FRAMEWORK_SET;
    snprintf(sets[0].dir, sizeof sets[0].dir, "%s/%s", base, d->migrations_dir);
    *nsets = 1;
    int rc = load_set(&sets[0], err);
    if (rc != ODBOX_OK)
        return rc;
    if (opt && opt->user_dir) {
        const char *name = opt->user_set ? opt->user_set : "app";
        if (!odbox_name_is_valid(name) || !strcmp(name, FRAMEWORK_SET)) {
            mset_free(&sets[0]);
            return odbox_fail(err, ODBOX_EINVAL, "migrate: '%.80s' cannot name a migration set", name);
        }
        sets[1].name = name;
        snprintf(sets[1].dir, sizeof sets[1].dir, "%s/%s", opt->user_dir, d->migrations_dir);
        if (!is_dir(sets[1].dir))
            snprintf(sets[1].dir, sizeof sets[1].dir, "%s", opt->user_dir);
        if ((rc = load_set(&sets[1], err)) != ODBOX_OK) {
            mset_free(&sets[0]);
            return rc;
        }
        *nsets = 2;
    }
    return ODBOX_OK;
}

/* The history table's SQL name in eventlog (out holds ODBOX_NAME_MAX * 2). */
static const char *history_table(odbox_conn *c, const char *eventlog, char *out)
{
    /* eventlog is a validated name of under ODBOX_NAME_MAX characters: it fits */
    odbox_dialect_eventlog_table(odbox_conn_dialect(c), eventlog, HISTORY_TABLE, out, ODBOX_NAME_MAX * 2);
    return out;
}

static int ensure_history(odbox_conn *c, const char *eventlog, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char sql[1024], table[ODBOX_NAME_MAX * 2];
    int rc;
    if (d->create_eventlog_fmt) { /* else the eventlog is a name prefix */
        snprintf(sql, sizeof sql, d->create_eventlog_fmt, eventlog);
        if ((rc = odbox_conn_exec(c, sql, err)) != ODBOX_OK)
            return rc;
    }
    snprintf(sql, sizeof sql,
             "CREATE TABLE IF NOT EXISTS %s ("
             "migration_set VARCHAR(64) NOT NULL, "
             "version BIGINT NOT NULL, "
             "description VARCHAR(255) NOT NULL, "
             "script VARCHAR(255) NOT NULL, "
             "checksum CHAR(64) NOT NULL, "
             "installed_on %s NOT NULL, "
             "execution_ms BIGINT NOT NULL, "
             "success %s NOT NULL, "
             "PRIMARY KEY (migration_set, version))",
             history_table(c, eventlog, table), d->timestamp_type, d->bool_type);
    return odbox_conn_exec(c, sql, err);
}

static int read_history(odbox_conn *c, const char *eventlog, applied **out, size_t *n, odbox_error *err)
{
    char sql[256], table[ODBOX_NAME_MAX * 2];
    odbox_stmt *s = NULL;
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    snprintf(sql, sizeof sql,
             "SELECT migration_set, version, checksum, success, installed_on FROM %s"
             " ORDER BY migration_set, version", history_table(c, eventlog, table));
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *set, *sum;
        applied a = {0};
        if ((rc = odbox_stmt_get_text(s, 1, &set, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 2, &a.version, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 3, &sum, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_bool(s, 4, &a.success, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_timestamp(s, 5, &a.installed_on_us, NULL, err)) != ODBOX_OK)
            break;
        snprintf(a.set, sizeof a.set, "%s", set);
        snprintf(a.checksum, sizeof a.checksum, "%s", sum);
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
    return ODBOX_OK;
}

static const mfile *find_file(const mset *s, int64_t version)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->files[i].version == version)
            return &s->files[i];
    return NULL;
}

static const applied *find_applied(const applied *h, size_t n, const char *set, int64_t version)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].version == version && !strcmp(h[i].set, set))
            return &h[i];
    return NULL;
}

/* Refuses to go on when history and files disagree; nothing is applied
 * until every set checks out. */
static int validate(const mset *sets, size_t nsets, const applied *h, size_t nh, odbox_error *err)
{
    for (size_t i = 0; i < nh; i++) {
        const mset *s = NULL;
        for (size_t k = 0; k < nsets; k++)
            if (!strcmp(sets[k].name, h[i].set))
                s = &sets[k];
        if (!s)
            continue; /* a set this run was not asked about */
        const mfile *f = find_file(s, h[i].version);
        if (!h[i].success)
            return odbox_fail(err, ODBOX_EMIGRATION,
                              "migrate: set '%s' version %lld failed in an earlier run and may be half-applied; "
                              "repair the database by hand and delete its row from " HISTORY_TABLE,
                              s->name, (long long)h[i].version);
        if (!f)
            return odbox_fail(err, ODBOX_EMIGRATION,
                              "migrate: set '%s' version %lld is applied but its file is missing from %.300s",
                              s->name, (long long)h[i].version, s->dir);
        if (strcmp(f->checksum, h[i].checksum))
            return odbox_fail(err, ODBOX_EMIGRATION,
                              "migrate: %.200s (set '%s') was changed after it was applied "
                              "(checksum %.12s... applied, %.12s... on disk); restore the file or write a new migration",
                              f->script, s->name, h[i].checksum, f->checksum);
    }
    for (size_t k = 0; k < nsets; k++) {
        int64_t max_applied = 0;
        for (size_t i = 0; i < nh; i++)
            if (!strcmp(h[i].set, sets[k].name) && h[i].version > max_applied)
                max_applied = h[i].version;
        for (size_t j = 0; j < sets[k].n; j++) {
            const mfile *f = &sets[k].files[j];
            if (f->version < max_applied && !find_applied(h, nh, sets[k].name, f->version))
                return odbox_fail(err, ODBOX_EMIGRATION,
                                  "migrate: %.200s (set '%s') is older than applied version %lld; "
                                  "give it a higher version", f->script, sets[k].name, (long long)max_applied);
        }
    }
    return ODBOX_OK;
}

static int record(odbox_conn *c, const char *eventlog, const char *set, const mfile *f,
                  int64_t started_us, int success, odbox_error *err)
{
    char sql[512], table[ODBOX_NAME_MAX * 2];
    odbox_stmt *s = NULL;
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (migration_set, version, description, script, checksum, "
             "installed_on, execution_ms, success) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", history_table(c, eventlog, table));
    int64_t now = odbox_now_us();
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 1, set, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 2, f->version, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 3, f->description, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 4, f->script, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 5, f->checksum, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_timestamp(s, 6, now, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 7, (now - started_us) / 1000, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_bool(s, 8, success, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    return rc;
}

/* Applies one file. With transactional DDL the statements and the history
 * row commit together or not at all; without it (MySQL/MariaDB) a failure
 * is recorded as a failed row so no later run builds on a half-applied
 * file. */
static int apply(odbox_conn *c, const char *eventlog, const mset *set, const mfile *f, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char *text = NULL;
    odbox_sql_script script = {0};
    int64_t started = odbox_now_us();
    int rc = odbox_sql_placeholders(f->text, "eventlog", eventlog, &text, err);
    if (rc == ODBOX_OK)
        rc = odbox_sql_split(text, d->backslash_escapes, &script, err);
    free(text);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "migrate: %s", f->script);

    int tx = d->has_transactional_ddl;
    if (tx && (rc = odbox_conn_begin(c, err)) != ODBOX_OK)
        goto out;
    for (size_t i = 0; i < script.n; i++) {
        if ((rc = odbox_conn_exec(c, script.stmts[i], err)) != ODBOX_OK) {
            odbox_error_prefix(err, rc, "migrate: %s (set '%s'), statement %zu", f->script, set->name, i + 1);
            break;
        }
    }
    if (rc == ODBOX_OK)
        rc = record(c, eventlog, set->name, f, started, 1, err);
    if (tx) {
        if (rc == ODBOX_OK)
            rc = odbox_conn_commit(c, err);
        else {
            odbox_error e2;
            odbox_conn_rollback(c, &e2);
        }
    } else if (rc != ODBOX_OK && !odbox_conn_is_dead(c)) {
        odbox_error e2;
        record(c, eventlog, set->name, f, started, 0, &e2);
    }
out:
    odbox_sql_script_free(&script);
    return rc;
}

static void progress(const odbox_migrate_options *opt, odbox_shard_id id, odbox_migrate_phase ph,
                     const char *set, const mfile *f)
{
    if (!opt || !opt->progress)
        return;
    odbox_migrate_event ev = {id, ph, set, f ? f->version : 0, f ? f->description : NULL};
    opt->progress(opt->progress_ud, &ev);
}

int odbox_migrate_shard(odbox_shard *shard, const odbox_migrate_options *opt, odbox_error *err)
{
    if (!shard)
        return odbox_fail(err, ODBOX_EINVAL, "migrate: shard is NULL");
    odbox_pool *pool = odbox_shard_primary(shard);
    odbox_shard_id id = odbox_shard_get_id(shard);
    const char *eventlog = odbox_shard_eventlog(shard);
    odbox_conn *c = NULL;
    mset sets[2];
    size_t nsets = 0;
    applied *hist = NULL;
    size_t nhist = 0;
    char key[128];
    int locked = 0;
    int wait_ms = opt && opt->lock_timeout_ms > 0 ? opt->lock_timeout_ms : 60000;

    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK && (rc = load_sets(odbox_conn_dialect(c), opt, sets, &nsets, err)) != ODBOX_OK)
        odbox_pool_release(pool, &c);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
    /* One migrator per eventlog: advisory locks are per database on
     * PostgreSQL and GET_LOCK names are server-wide on MySQL/MariaDB,
     * where the eventlog database name is server-wide too. */
    snprintf(key, sizeof key, "odbox.migrate.%s", eventlog);
    int taken = 0;
    if ((rc = odbox_conn_try_lock(c, key, &taken, err)) != ODBOX_OK)
        goto out;
    if (!taken) {
        progress(opt, id, ODBOX_MIGRATE_WAITING, NULL, NULL);
        if ((rc = odbox_conn_lock(c, key, wait_ms, err)) != ODBOX_OK) {
            if (rc == ODBOX_ETIMEDOUT)
                odbox_error_prefix(err, rc, "migrate: another migrator is running");
            goto out;
        }
    }
    locked = 1;
    if ((rc = ensure_history(c, eventlog, err)) != ODBOX_OK ||
        (rc = read_history(c, eventlog, &hist, &nhist, err)) != ODBOX_OK ||
        (rc = validate(sets, nsets, hist, nhist, err)) != ODBOX_OK)
        goto out;
    for (size_t k = 0; k < nsets && rc == ODBOX_OK; k++) {
        int any = 0;
        for (size_t j = 0; j < sets[k].n && rc == ODBOX_OK; j++) {
            const mfile *f = &sets[k].files[j];
            if (find_applied(hist, nhist, sets[k].name, f->version))
                continue;
            any = 1;
            progress(opt, id, ODBOX_MIGRATE_APPLYING, sets[k].name, f);
            if ((rc = apply(c, eventlog, &sets[k], f, err)) == ODBOX_OK) {
                odbox_log(ODBOX_LOG_INFO, "shard %d.%d: applied %s (set %s)", id.group, id.member, f->script,
                          sets[k].name);
                progress(opt, id, ODBOX_MIGRATE_APPLIED, sets[k].name, f);
            }
        }
        if (rc == ODBOX_OK && !any)
            progress(opt, id, ODBOX_MIGRATE_UP_TO_DATE, sets[k].name, NULL);
    }
    if (rc == ODBOX_OK)
        progress(opt, id, ODBOX_MIGRATE_DONE, NULL, NULL);
out:
    if (locked && !odbox_conn_is_dead(c)) {
        odbox_error e2;
        if (odbox_conn_unlock(c, key, &e2) != ODBOX_OK)
            odbox_pool_discard(pool, &c);
    }
    odbox_pool_release(pool, &c);
    free(hist);
    for (size_t k = 0; k < nsets; k++)
        mset_free(&sets[k]);
    if (rc != ODBOX_OK)
        odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
    return rc;
}

int odbox_migrate_registry(odbox_registry *r, const odbox_migrate_options *opt, odbox_error *err)
{
    if (!r)
        return odbox_fail(err, ODBOX_EINVAL, "migrate: registry is NULL");
    for (size_t i = 0; i < odbox_registry_shard_count(r); i++) {
        int rc = odbox_migrate_shard(odbox_registry_shard_at(r, i), opt, err);
        if (rc != ODBOX_OK)
            return rc;
    }
    return ODBOX_OK;
}

int odbox_migrate_status(odbox_shard *shard, const odbox_migrate_options *opt,
                         odbox_migration_info **list, size_t *n, odbox_error *err)
{
    if (!shard || !list || !n)
        return odbox_fail(err, ODBOX_EINVAL, "migrate status: NULL argument");
    *list = NULL;
    *n = 0;
    odbox_pool *pool = odbox_shard_primary(shard);
    const char *eventlog = odbox_shard_eventlog(shard);
    odbox_conn *c = NULL;
    mset sets[2];
    size_t nsets = 0, nhist = 0;
    applied *hist = NULL;
    int exists = 0;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    if ((rc = load_sets(odbox_conn_dialect(c), opt, sets, &nsets, err)) != ODBOX_OK) {
        odbox_pool_release(pool, &c);
        return rc;
    }
    if ((rc = odbox_conn_table_exists(c, eventlog, HISTORY_TABLE, &exists, err)) == ODBOX_OK && exists)
        rc = read_history(c, eventlog, &hist, &nhist, err);
    odbox_pool_release(pool, &c);
    size_t total = nhist;
    for (size_t k = 0; k < nsets; k++)
        total += sets[k].n;
    odbox_migration_info *out = rc == ODBOX_OK ? calloc(total ? total : 1, sizeof *out) : NULL;
    if (rc == ODBOX_OK && !out)
        rc = odbox_fail(err, ODBOX_ENOMEM, "migrate status: out of memory");
    size_t m = 0;
    for (size_t k = 0; rc == ODBOX_OK && k < nsets; k++) {
        for (size_t j = 0; j < sets[k].n; j++) {
            const mfile *f = &sets[k].files[j];
            const applied *a = find_applied(hist, nhist, sets[k].name, f->version);
            odbox_migration_info *mi = &out[m++];
            snprintf(mi->set, sizeof mi->set, "%s", sets[k].name);
            mi->version = f->version;
            snprintf(mi->description, sizeof mi->description, "%s", f->description);
            snprintf(mi->checksum, sizeof mi->checksum, "%s", f->checksum);
            mi->applied = a && a->success;
            mi->installed_on_us = a ? a->installed_on_us : 0;
        }
        /* applied rows whose file is gone */
        for (size_t i = 0; i < nhist; i++) {
            if (strcmp(hist[i].set, sets[k].name) || find_file(&sets[k], hist[i].version))
                continue;
            odbox_migration_info *mi = &out[m++];
            snprintf(mi->set, sizeof mi->set, "%s", hist[i].set);
            mi->version = hist[i].version;
            snprintf(mi->description, sizeof mi->description, "(file missing)");
            mi->applied = hist[i].success;
            mi->installed_on_us = hist[i].installed_on_us;
        }
    }
    free(hist);
    for (size_t k = 0; k < nsets; k++)
        mset_free(&sets[k]);
    if (rc != ODBOX_OK) {
        free(out);
        return rc;
    }
    *list = out;
    *n = m;
    return ODBOX_OK;
}
