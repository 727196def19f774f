/* odbox — the migration runner. Dialect-neutral: the files are per dialect,
 * the runner only asks the dialect for its folder, types and lock SQL. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "migrate_internal.h"
#include "registry_internal.h"
#include "sqlsplit.h"

#ifndef ODBOX_MIGRATIONS_DIR
#define ODBOX_MIGRATIONS_DIR "/usr/local/share/odbox/migrations"
#endif

#define MAX_FILE_BYTES (16 * 1024 * 1024)
#define MAX_FILES 10000

const char *odbox_migrations_dir(void) { return ODBOX_MIGRATIONS_DIR; }

static void mset_free(mset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->files[i].text);
    free(s->files);
    s->files = NULL;
    s->n = 0;
}

void odbox_migrate_sets_free(mset *sets, size_t n)
{
    for (size_t k = 0; k < n; k++)
        mset_free(&sets[k]);
}

static int cmp_file(const void *a, const void *b)
{
    const mfile *x = a, *y = b;
    return odbox_migration_version_cmp(x->version, y->version);
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
        if ((rc = odbox_migration_name_parse(name, f.version, f.description, sizeof f.description, err)) !=
            ODBOX_OK) {
            odbox_error_prefix(err, rc, "migrate: in %.300s", s->dir);
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
    if (s->n > 1) /* files is NULL while empty, which qsort may not take */
        qsort(s->files, s->n, sizeof *s->files, cmp_file);
    for (size_t i = 1; i < s->n; i++)
        if (!odbox_migration_version_cmp(s->files[i].version, s->files[i - 1].version)) {
            rc = odbox_fail(err, ODBOX_EINVAL, "migrate: version %s appears twice in %.300s ('%s', '%s')",
                            s->files[i].version, s->dir, s->files[i - 1].script, s->files[i].script);
            mset_free(s);
            return rc;
        }
    return ODBOX_OK;
}

/* The folder of the user's set: DIR/<d's folder> when it exists, else
 * DIR itself, unless DIR holds another dialect's folder (DIR is then a
 * tree of dialect folders that lacks d's, and DIR's own files, if any,
 * are not meant for d): ODBOX_ENOTFOUND naming the folder wanted. */
static int user_dir(const odbox_dialect *d, const char *dir, mset *s, odbox_error *err)
{
    snprintf(s->dir, sizeof s->dir, "%s/%s", dir, d->migrations_dir);
    if (is_dir(s->dir))
        return ODBOX_OK;
    char other[1100];
    for (const odbox_dialect *const *k = odbox_dialects(); *k; k++) {
        snprintf(other, sizeof other, "%s/%s", dir, (*k)->migrations_dir);
        if (is_dir(other))
            return odbox_fail(err, ODBOX_ENOTFOUND,
                              "migrate: %.300s has a folder for dialect %s (%s/) but none for %s: %.300s does "
                              "not exist",
                              dir, (*k)->name, (*k)->migrations_dir, d->name, s->dir);
    }
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    return ODBOX_OK;
}

/* The framework set and, when opt asks, the user's, for dialect d. */
static int load_sets(const odbox_dialect *d, const odbox_migrate_options *opt, mset sets[2], size_t *nsets,
                     odbox_error *err)
{
    const char *base = opt && opt->framework_dir ? opt->framework_dir : getenv("ODBOX_MIGRATIONS_DIR");
    if (!base || !*base)
        base = ODBOX_MIGRATIONS_DIR;
    memset(sets, 0, 2 * sizeof *sets);
    sets[0].name = ODBOX_FRAMEWORK_SET;
    snprintf(sets[0].dir, sizeof sets[0].dir, "%s/%s", base, d->migrations_dir);
    *nsets = 1;
    int rc = load_set(&sets[0], err);
    if (rc != ODBOX_OK)
        return rc;
    if (opt && opt->user_dir) {
        const char *name = opt->user_set ? opt->user_set : "app";
        if (!odbox_name_is_valid(name) || !strcmp(name, ODBOX_FRAMEWORK_SET)) {
            mset_free(&sets[0]);
            return odbox_fail(err, ODBOX_EINVAL, "migrate: '%.80s' cannot name a migration set", name);
        }
        sets[1].name = name;
        if ((rc = user_dir(d, opt->user_dir, &sets[1], err)) != ODBOX_OK ||
            (rc = load_set(&sets[1], err)) != ODBOX_OK) {
            mset_free(&sets[0]);
            return rc;
        }
        *nsets = 2;
    }
    return ODBOX_OK;
}

int odbox_migrate_begin(odbox_shard *shard, const odbox_migrate_options *opt, odbox_conn **c, mset sets[2],
                        size_t *nsets, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(shard);
    *nsets = 0;
    int rc = odbox_pool_acquire(pool, c, err);
    if (rc == ODBOX_OK && (rc = load_sets(odbox_conn_dialect(*c), opt, sets, nsets, err)) != ODBOX_OK)
        odbox_pool_release(pool, c);
    return rc;
}

const mfile *odbox_migrate_find_file(const mset *s, const char *version)
{
    for (size_t i = 0; i < s->n; i++)
        if (!odbox_migration_version_cmp(s->files[i].version, version))
            return &s->files[i];
    return NULL;
}

const applied *odbox_migrate_find_applied(const applied *h, size_t n, const char *set, const char *version)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(h[i].set, set) && !odbox_migration_version_cmp(h[i].version, version))
            return &h[i];
    return NULL;
}

/* 1 when version was applied by a newer build: it is above the newest
 * file of s (Flyway's "future" migration). A set without files has no
 * newest, and nothing of it counts as future. */
static int is_future(const mset *s, const char *version)
{
    return s->n && odbox_migration_version_cmp(version, s->files[s->n - 1].version) > 0;
}

/* Logs, once per set, the applied versions newer than every file of the
 * set: in a rolling deploy a newer build has migrated, and this one
 * leaves them as they are. */
static void warn_future(odbox_shard_id id, const mset *sets, size_t nsets, const applied *h, size_t nh)
{
    for (size_t k = 0; k < nsets; k++) {
        size_t count = 0;
        const char *newest = NULL;
        for (size_t i = 0; i < nh; i++)
            if (!strcmp(h[i].set, sets[k].name) && h[i].success && is_future(&sets[k], h[i].version)) {
                count++;
                if (!newest || odbox_migration_version_cmp(h[i].version, newest) > 0)
                    newest = h[i].version;
            }
        if (count)
            odbox_log(ODBOX_LOG_WARN,
                      "shard %d.%d: set '%s': %zu applied migration(s) newer than this build's newest file "
                      "V%s (up to V%s), left as they are: a newer build migrated this eventlog",
                      id.group, id.member, sets[k].name, count, sets[k].files[sets[k].n - 1].version, newest);
    }
}

/* Refuses to go on when history and files disagree; nothing is applied
 * until every set checks out. An applied version newer than every file
 * of its set is no disagreement (warn_future): an older build runs
 * against an eventlog a newer one migrated. */
static int validate(const mset *sets, size_t nsets, const applied *h, size_t nh, odbox_error *err)
{
    for (size_t i = 0; i < nh; i++) {
        const mset *s = NULL;
        for (size_t k = 0; k < nsets; k++)
            if (!strcmp(sets[k].name, h[i].set))
                s = &sets[k];
        if (!s)
            continue; /* a set this run was not asked about */
        const mfile *f = odbox_migrate_find_file(s, h[i].version);
        if (!h[i].success)
            return odbox_fail(err, ODBOX_EMIGRATION,
                              "migrate: set '%s' version %s failed in an earlier run and may be half-applied "
                              "(%.200s); undo what it did by hand, fix the file, then run `odbox migrate repair` "
                              "to drop its entry", s->name, h[i].version, h[i].error[0] ? h[i].error : "no error kept");
        if (!f && is_future(s, h[i].version))
            continue;
        if (!f)
            return odbox_fail(err, ODBOX_EMIGRATION,
                              "migrate: set '%s' version %s is applied but its file is missing from %.300s",
                              s->name, h[i].version, s->dir);
        if (strcmp(f->checksum, h[i].checksum))
            return odbox_fail(err, ODBOX_EMIGRATION,
                              "migrate: %.200s (set '%s') was changed after it was applied "
                              "(checksum %.12s... applied, %.12s... on disk); restore the file or write a new "
                              "migration (`odbox migrate repair` accepts the file as it is)",
                              f->script, s->name, h[i].checksum, f->checksum);
    }
    for (size_t k = 0; k < nsets; k++) {
        const char *max_applied = NULL;
        for (size_t i = 0; i < nh; i++)
            if (!strcmp(h[i].set, sets[k].name) &&
                (!max_applied || odbox_migration_version_cmp(h[i].version, max_applied) > 0))
                max_applied = h[i].version;
        for (size_t j = 0; max_applied && j < sets[k].n; j++) {
            const mfile *f = &sets[k].files[j];
            if (odbox_migration_version_cmp(f->version, max_applied) < 0 &&
                !odbox_migrate_find_applied(h, nh, sets[k].name, f->version))
                return odbox_fail(err, ODBOX_EMIGRATION,
                                  "migrate: %.200s (set '%s') is older than applied version %s; "
                                  "give it a higher version", f->script, sets[k].name, max_applied);
        }
    }
    return ODBOX_OK;
}

/* Applies one file. With transactional DDL the statements and the history
 * row commit together or not at all; without it (MySQL/MariaDB) a failure
 * is recorded as a failed row, with its error, so no later run builds on
 * a half-applied file. A first statement that timed out (waiting for a
 * lock another transaction holds, bounded by the session: see
 * docs/dsn.md) was rolled back by the server and left nothing behind:
 * that is not recorded, and the next run tries the file again. */
static int apply(odbox_conn *c, const char *eventlog, const mset *set, const mfile *f, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char *text = NULL;
    odbox_sql_script script = {0};
    int64_t started = odbox_now_us();
    int rc = odbox_sql_placeholders(f->text, "eventlog", eventlog, &text, err);
    if (rc == ODBOX_OK)
        rc = odbox_sql_split(text, d->backslash_escapes ? ODBOX_SQL_MYSQL : 0, &script, err);
    free(text);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "migrate: %s", f->script);

    int tx = d->has_transactional_ddl, untouched = 0;
    if (tx && (rc = odbox_conn_begin(c, err)) != ODBOX_OK)
        goto out;
    for (size_t i = 0; i < script.n; i++) {
        if ((rc = odbox_conn_exec(c, script.stmts[i], err)) != ODBOX_OK) {
            untouched = rc == ODBOX_ETIMEDOUT && i == 0;
            odbox_error_prefix(err, rc, "migrate: %s (set '%s'), statement %zu%s", f->script, set->name, i + 1,
                               rc == ODBOX_ETIMEDOUT ? " (gave up waiting for a lock another transaction holds; "
                                                       "run migrate again once it ends)"
                                                     : "");
            break;
        }
    }
    if (rc == ODBOX_OK)
        rc = odbox_history_record(c, eventlog, set->name, f, started, 1, NULL, err);
    if (tx)
        rc = odbox_conn_end(c, rc, err);
    else if (rc != ODBOX_OK && !untouched && !odbox_conn_is_dead(c)) {
        odbox_error e2;
        odbox_history_record(c, eventlog, set->name, f, started, 0, err ? err->message : NULL, &e2);
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
    odbox_migrate_event ev = {id, ph, set, f ? f->version : NULL, f ? f->description : NULL};
    opt->progress(opt->progress_ud, &ev);
}

/* One migrator per eventlog: advisory locks are per database on
 * PostgreSQL and GET_LOCK names are server-wide on MySQL/MariaDB, where
 * the eventlog database name is server-wide too. And one per application
 * container (its schema or database): every eventlog's migrations create
 * the application tables its eventlogs share (scheduled_tasks,
 * odbox_job_state, ...), and on PostgreSQL two CREATE TABLE IF NOT
 * EXISTS at once fail one of them (23505 on pg_type). */
static void lock_key(const char *kind, const char *name, char *key, size_t cap)
{
    snprintf(key, cap, "odbox.migrate.%s%s", kind, name);
}

/* Takes the lock of key, waiting at most wait_ms (reporting WAITING). */
static int take_lock(odbox_conn *c, const char *key, int wait_ms, const odbox_migrate_options *opt,
                     odbox_shard_id id, odbox_error *err)
{
    int taken = 0;
    int rc = odbox_conn_try_lock(c, key, &taken, err);
    if (rc != ODBOX_OK || taken)
        return rc;
    progress(opt, id, ODBOX_MIGRATE_WAITING, NULL, NULL);
    if ((rc = odbox_conn_lock(c, key, wait_ms, err)) == ODBOX_ETIMEDOUT)
        odbox_error_prefix(err, rc, "migrate: another migrator is running");
    return rc;
}

int odbox_migrate_lock(odbox_conn *c, const char *eventlog, const odbox_migrate_options *opt, odbox_shard_id id,
                       migrate_locks *held, odbox_error *err)
{
    char own[256];
    int wait_ms = opt && opt->lock_timeout_ms > 0 ? opt->lock_timeout_ms : 60000;
    int64_t deadline_us = odbox_mono_us() + (int64_t)wait_ms * 1000;
    lock_key("", eventlog, held->eventlog, sizeof held->eventlog);
    int rc = take_lock(c, held->eventlog, wait_ms, opt, id, err);
    if (rc != ODBOX_OK)
        return rc;
    /* read once: a migration may change the session's schema (SET
     * search_path), and the unlock must name what was locked */
    if ((rc = odbox_own_container(c, own, sizeof own, err)) == ODBOX_OK) {
        int64_t left_ms = (deadline_us - odbox_mono_us()) / 1000;
        lock_key("application.", own, held->application, sizeof held->application);
        rc = take_lock(c, held->application, left_ms > 0 ? (int)left_ms : 1, opt, id, err);
    }
    odbox_error e2;
    if (rc != ODBOX_OK && odbox_conn_unlock(c, held->eventlog, &e2) != ODBOX_OK && rc == ODBOX_ETIMEDOUT)
        rc = e2.code; /* the eventlog's may still be held: the caller discards c */
    return rc;
}

void odbox_migrate_unlock(odbox_pool *pool, odbox_conn **c, const migrate_locks *held)
{
    odbox_error e2;
    if (!odbox_conn_is_dead(*c) && (odbox_conn_unlock(*c, held->application, &e2) != ODBOX_OK ||
                                    odbox_conn_unlock(*c, held->eventlog, &e2) != ODBOX_OK))
        odbox_pool_discard(pool, c);
}

/* Applies the pending files of sets, set by set. */
static int apply_pending(odbox_conn *c, odbox_shard_id id, const char *eventlog, const mset *sets, size_t nsets,
                         const applied *hist, size_t nhist, const odbox_migrate_options *opt, odbox_error *err)
{
    int rc = ODBOX_OK;
    for (size_t k = 0; k < nsets && rc == ODBOX_OK; k++) {
        int any = 0;
        for (size_t j = 0; j < sets[k].n && rc == ODBOX_OK; j++) {
            const mfile *f = &sets[k].files[j];
            if (odbox_migrate_find_applied(hist, nhist, sets[k].name, f->version))
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
    return rc;
}

/* Refuses a server older than the dialect's migrations need, before
 * anything is written (see odbox_server_version_check). */
static int check_server(odbox_conn *c, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    if (!d->min_server_version)
        return ODBOX_OK;
    odbox_stmt *s = NULL;
    const char *v = NULL;
    int rc = odbox_stmt_prepare(c, d->server_version_sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
        rc = odbox_stmt_get_text(s, 1, &v, NULL, err);
    if (rc >= 0)
        rc = odbox_server_version_check(d, v, err);
    odbox_stmt_free(&s);
    return rc;
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
    char owner[256];
    migrate_locks held;

    int rc = odbox_migrate_begin(shard, opt, &c, sets, &nsets, err);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
    if ((rc = check_server(c, err)) != ODBOX_OK) {
        odbox_pool_release(pool, &c);
        goto out;
    }
    if ((rc = odbox_migrate_lock(c, eventlog, opt, id, &held, err)) != ODBOX_OK) {
        if (rc == ODBOX_ETIMEDOUT) /* else the lock may be held: see odbox_migrate_lock */
            odbox_pool_release(pool, &c);
        else
            odbox_pool_discard(pool, &c);
        goto out;
    }
    /* The owner is checked before anything is written to the eventlog:
     * another application's is left as it is. */
    if ((rc = odbox_history_read(c, eventlog, &hist, &nhist, err)) == ODBOX_OK &&
        (rc = odbox_owner_claimable(c, eventlog, nhist, owner, sizeof owner, err)) == ODBOX_OK &&
        (rc = odbox_history_ensure(c, eventlog, err)) == ODBOX_OK &&
        (*owner || (rc = odbox_owner_record(c, eventlog, err)) == ODBOX_OK) &&
        (rc = validate(sets, nsets, hist, nhist, err)) == ODBOX_OK) {
        warn_future(id, sets, nsets, hist, nhist);
        if ((rc = apply_pending(c, id, eventlog, sets, nsets, hist, nhist, opt, err)) == ODBOX_OK)
            progress(opt, id, ODBOX_MIGRATE_DONE, NULL, NULL);
    }
    odbox_migrate_unlock(pool, &c, &held);
    odbox_pool_release(pool, &c);
out:
    free(hist);
    odbox_migrate_sets_free(sets, nsets);
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

static void info_from_row(odbox_migration_info *mi, const applied *a)
{
    mi->applied = a->success;
    mi->failed = !a->success;
    mi->installed_on_us = a->installed_on_us;
    if (!a->success)
        snprintf(mi->error, sizeof mi->error, "%s", a->error);
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
    int rc = odbox_migrate_begin(shard, opt, &c, sets, &nsets, err);
    if (rc != ODBOX_OK)
        return rc;
    if ((rc = odbox_owner_check(c, eventlog, NULL, 0, err)) == ODBOX_OK)
        rc = odbox_history_read(c, eventlog, &hist, &nhist, err);
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
            const applied *a = odbox_migrate_find_applied(hist, nhist, sets[k].name, f->version);
            odbox_migration_info *mi = &out[m++];
            snprintf(mi->set, sizeof mi->set, "%s", sets[k].name);
            snprintf(mi->version, sizeof mi->version, "%s", f->version);
            snprintf(mi->description, sizeof mi->description, "%s", f->description);
            snprintf(mi->checksum, sizeof mi->checksum, "%s", f->checksum);
            if (a) {
                info_from_row(mi, a);
                mi->changed = a->success && strcmp(a->checksum, f->checksum) != 0;
            }
        }
        /* rows whose file is gone */
        for (size_t i = 0; i < nhist; i++) {
            if (strcmp(hist[i].set, sets[k].name) || odbox_migrate_find_file(&sets[k], hist[i].version))
                continue;
            odbox_migration_info *mi = &out[m++];
            snprintf(mi->set, sizeof mi->set, "%s", hist[i].set);
            snprintf(mi->version, sizeof mi->version, "%s", hist[i].version);
            snprintf(mi->description, sizeof mi->description, "%s", hist[i].description);
            mi->missing = 1;
            info_from_row(mi, &hist[i]);
        }
    }
    free(hist);
    odbox_migrate_sets_free(sets, nsets);
    if (rc != ODBOX_OK) {
        free(out);
        return rc;
    }
    *list = out;
    *n = m;
    return ODBOX_OK;
}

int odbox_migrate_check_owner(odbox_shard *shard, char *owner, size_t cap, odbox_error *err)
{
    if (!shard || !owner || !cap)
        return odbox_fail(err, ODBOX_EINVAL, "migrate check owner: NULL argument");
    owner[0] = '\0';
    odbox_pool *pool = odbox_shard_primary(shard);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK)
        rc = odbox_owner_check(c, odbox_shard_eventlog(shard), owner, cap, err);
    odbox_pool_release(pool, &c);
    if (rc == ODBOX_OK)
        rc = odbox_shard_set_verified(shard, shard, err); /* the executor need not ask again */
    if (rc != ODBOX_OK) {
        odbox_shard_id id = odbox_shard_get_id(shard);
        odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
    }
    return rc;
}

int odbox_shard_check_eventlog(odbox_shard *shard, odbox_error *err)
{
    char owner[256];
    return odbox_shard_is_verified(shard, shard) ? ODBOX_OK : odbox_migrate_check_owner(shard, owner, sizeof owner, err);
}
