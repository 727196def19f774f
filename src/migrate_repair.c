/* odbox — repairing a shard's migration history, as Flyway's repair does:
 * a failed migration's row goes (MySQL/MariaDB, where a failing file may
 * be half-applied and blocks every later run), and an applied migration
 * whose file changed gets the file's checksum and description. A person
 * decides: the caller asks for a dry run first (the CLI wants --yes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "migrate_internal.h"

/* What repair would do to hist, given the files of sets. */
static int plan_repair(const mset *sets, size_t nsets, const applied *hist, size_t nhist,
                       odbox_repair_item **items, size_t *n, odbox_error *err)
{
    *items = nhist ? calloc(nhist, sizeof **items) : NULL;
    *n = 0;
    if (nhist && !*items)
        return odbox_fail(err, ODBOX_ENOMEM, "migrate repair: out of memory");
    for (size_t i = 0; i < nhist; i++) {
        const applied *a = &hist[i];
        const mset *s = NULL;
        for (size_t k = 0; k < nsets; k++)
            if (!strcmp(sets[k].name, a->set))
                s = &sets[k];
        if (!s)
            continue; /* a set this run was not asked about */
        const mfile *f = odbox_migrate_find_file(s, a->version);
        odbox_repair_item it = {0};
        if (!a->success)
            it.action = ODBOX_REPAIR_REMOVE_FAILED;
        else if (f && (strcmp(f->checksum, a->checksum) || strcmp(f->description, a->description)))
            it.action = ODBOX_REPAIR_REALIGN;
        else
            continue;
        snprintf(it.set, sizeof it.set, "%s", a->set);
        snprintf(it.version, sizeof it.version, "%s", a->version);
        snprintf(it.description, sizeof it.description, "%s", f ? f->description : a->description);
        snprintf(it.old_checksum, sizeof it.old_checksum, "%s", a->checksum);
        if (f && it.action == ODBOX_REPAIR_REALIGN)
            snprintf(it.new_checksum, sizeof it.new_checksum, "%s", f->checksum);
        (*items)[(*n)++] = it;
    }
    return ODBOX_OK;
}

/* Carries out items in one transaction (the history is rows: DML rolls
 * back on every dialect). */
static int carry_out(odbox_conn *c, const char *eventlog, const mset *sets, size_t nsets, const applied *hist,
                     size_t nhist, const odbox_repair_item *items, size_t n, odbox_error *err)
{
    int rc = odbox_conn_begin(c, err);
    for (size_t i = 0; i < n && rc == ODBOX_OK; i++) {
        const applied *a = odbox_migrate_find_applied(hist, nhist, items[i].set, items[i].version);
        if (items[i].action == ODBOX_REPAIR_REMOVE_FAILED) {
            rc = odbox_history_delete(c, eventlog, a, err);
            continue;
        }
        const mfile *f = NULL;
        for (size_t k = 0; k < nsets && !f; k++)
            if (!strcmp(sets[k].name, a->set))
                f = odbox_migrate_find_file(&sets[k], a->version);
        rc = odbox_history_realign(c, eventlog, a, f, err);
    }
    return odbox_conn_end(c, rc, err);
}

int odbox_migrate_repair(odbox_shard *shard, const odbox_migrate_options *opt, int dry_run,
                         odbox_repair_item **items, size_t *n, odbox_error *err)
{
    if (!shard || !items || !n)
        return odbox_fail(err, ODBOX_EINVAL, "migrate repair: NULL argument");
    *items = NULL;
    *n = 0;
    odbox_pool *pool = odbox_shard_primary(shard);
    odbox_shard_id id = odbox_shard_get_id(shard);
    const char *eventlog = odbox_shard_eventlog(shard);
    odbox_conn *c = NULL;
    mset sets[2];
    size_t nsets = 0, nhist = 0;
    applied *hist = NULL;
    int rc = odbox_migrate_begin(shard, opt, &c, sets, &nsets, err);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
    migrate_locks held;
    if ((rc = odbox_migrate_lock(c, eventlog, opt, id, &held, err)) == ODBOX_OK) {
        if ((rc = odbox_owner_check(c, eventlog, NULL, 0, err)) == ODBOX_OK &&
            (rc = odbox_history_read(c, eventlog, &hist, &nhist, err)) == ODBOX_OK &&
            (rc = plan_repair(sets, nsets, hist, nhist, items, n, err)) == ODBOX_OK && !dry_run && *n)
            rc = carry_out(c, eventlog, sets, nsets, hist, nhist, *items, *n, err);
        odbox_migrate_unlock(pool, &c, &held);
    } else if (rc != ODBOX_ETIMEDOUT) {
        odbox_pool_discard(pool, &c); /* the lock may be held: see odbox_migrate_lock */
    }
    odbox_pool_release(pool, &c);
    free(hist);
    odbox_migrate_sets_free(sets, nsets);
    if (rc != ODBOX_OK) {
        free(*items);
        *items = NULL;
        *n = 0;
        return odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
    }
    for (size_t i = 0; i < *n && !dry_run; i++)
        odbox_log(ODBOX_LOG_INFO, "shard %d.%d: repair %s set %s version %s", id.group, id.member,
                  (*items)[i].action == ODBOX_REPAIR_REMOVE_FAILED ? "removed the failed entry of"
                                                                   : "realigned the checksum of",
                  (*items)[i].set, (*items)[i].version);
    return ODBOX_OK;
}
