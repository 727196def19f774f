/* odbox — `odbox migrate` and `odbox migrate repair`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

const char usage_migrate[] =
    "usage: odbox migrate (--dsn DSN | --config FILE) [options]\n"
    "       odbox migrate repair (--dsn DSN | --config FILE) [--yes] [options]\n"
    "\n"
    "Applies pending migrations, in version order, on every shard's primary.\n"
    "A changed or missing applied file stops the run before anything is applied;\n"
    "applied versions newer than every file (a newer build migrated) are left as\n"
    "they are, with a warning.\n"
    "An eventlog that another application database (or schema) migrated is refused.\n"
    "\n"
    "repair lists what it would change in the migration history: the entries of\n"
    "failed migrations (MySQL/MariaDB, where a failing file may be half-applied:\n"
    "undo what it did first) are removed, and applied migrations whose file changed\n"
    "get the file's checksum. With --yes it makes those changes.\n"
    "\n"
    "  --lock-timeout MS  wait at most MS for another migrator (default 60000)\n"
    "  --quiet            migrate: no per-shard summary\n"
    "  --yes              repair: make the changes it lists\n";

typedef struct progress_state {
    const cli *c;
    json_object *shards;   /* --json: array of per-shard objects */
    json_object *current;
    int applied;
} progress_state;

static void on_progress(void *ud, const odbox_migrate_event *ev)
{
    progress_state *ps = ud;
    const cli *c = ps->c;
    if (ev->phase == ODBOX_MIGRATE_APPLIED) {
        ps->applied++;
        if (ps->current) {
            json_object *a = json_object_new_object();
            json_object_object_add(a, "set", json_object_new_string(ev->set));
            json_object_object_add(a, "version", json_object_new_string(ev->version));
            json_object_object_add(a, "description", json_object_new_string(ev->description));
            json_object *arr;
            json_object_object_get_ex(ps->current, "applied", &arr);
            json_object_array_add(arr, a);
        }
    }
    if (c->json || c->quiet || !c->tty)
        return;
    switch (ev->phase) {
    case ODBOX_MIGRATE_WAITING:
        printf("shard %d.%d: waiting for another migrator to finish\n", ev->shard.group, ev->shard.member);
        break;
    case ODBOX_MIGRATE_APPLYING:
        printf("shard %d.%d: applying %s V%s %s ... ", ev->shard.group, ev->shard.member, ev->set, ev->version,
               ev->description);
        fflush(stdout);
        break;
    case ODBOX_MIGRATE_APPLIED: printf("done\n"); break;
    case ODBOX_MIGRATE_UP_TO_DATE:
        printf("shard %d.%d: %s is up to date\n", ev->shard.group, ev->shard.member, ev->set);
        break;
    case ODBOX_MIGRATE_DONE: break;
    }
    fflush(stdout);
}

static void print_repair(const char *shard, const odbox_repair_item *it, int done)
{
    if (it->action == ODBOX_REPAIR_REMOVE_FAILED)
        printf("shard %s: %s the failed entry of %s V%s %s%s\n", shard, done ? "removed" : "would remove", it->set,
               it->version, it->description,
               done ? " (migrate runs the file again: undo what its failed run left behind first)" : "");
    else
        printf("shard %s: %s %s V%s %s to its file: checksum %.12s... recorded, %.12s... on disk\n", shard,
               done ? "realigned" : "would realign", it->set, it->version, it->description, it->old_checksum,
               it->new_checksum);
}

static json_object *repair_json(const odbox_repair_item *it)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "action", json_object_new_string(it->action == ODBOX_REPAIR_REMOVE_FAILED
                                                                    ? "remove_failed" : "realign"));
    json_object_object_add(o, "set", json_object_new_string(it->set));
    json_object_object_add(o, "version", json_object_new_string(it->version));
    json_object_object_add(o, "description", json_object_new_string(it->description));
    json_object_object_add(o, "old_checksum", json_object_new_string(it->old_checksum));
    if (it->action == ODBOX_REPAIR_REALIGN)
        json_object_object_add(o, "new_checksum", json_object_new_string(it->new_checksum));
    return o;
}

static int cmd_repair(int argc, char **argv)
{
    cli c;
    odbox_registry *r = NULL;
    odbox_migrate_options o;
    odbox_error err = {0};
    int u = cli_begin(argc, argv, usage_migrate, CLI_YES | CLI_LOCK, &c, &r, &o);
    if (u)
        return u;
    json_object *shards = json_object_new_array();
    int rc = ODBOX_OK;
    size_t total = 0;
    for (size_t i = 0; i < odbox_registry_shard_count(r) && rc == ODBOX_OK; i++) {
        odbox_shard *s = odbox_registry_shard_at(r, i);
        char name[16];
        cli_shard_name(s, name, sizeof name);
        odbox_repair_item *items = NULL;
        size_t n = 0;
        if ((rc = odbox_migrate_repair(s, &o, !c.yes, &items, &n, &err)) != ODBOX_OK)
            break;
        json_object *so = json_object_new_object(), *changes = json_object_new_array();
        json_object_object_add(so, "shard", json_object_new_string(name));
        json_object_object_add(so, "changes", changes);
        json_object_array_add(shards, so);
        for (size_t k = 0; k < n; k++) {
            json_object_array_add(changes, repair_json(&items[k]));
            if (!c.json)
                print_repair(name, &items[k], c.yes);
        }
        if (!c.json && n == 0)
            printf("shard %s: nothing to repair\n", name);
        total += n;
        free(items);
    }
    odbox_registry_free(&r);
    if (rc != ODBOX_OK) {
        json_object_put(shards);
        return cli_fail(&c, &err);
    }
    if (c.json) {
        json_object *top = json_object_new_object();
        json_object_object_add(top, "ok", json_object_new_boolean(1));
        json_object_object_add(top, "changed", json_object_new_boolean(c.yes && total > 0));
        json_object_object_add(top, "shards", shards);
        cli_print_json(top);
        json_object_put(top);
    } else {
        json_object_put(shards);
        if (total && !c.yes)
            printf("nothing was changed: run `odbox migrate repair --yes` with the same options to make "
                   "these changes\n");
    }
    return 0;
}

/* The library's warnings (applied migrations newer than this build's
 * files, ...), on stderr: --json keeps stdout to its document. */
static void warn_to_stderr(void *ud, odbox_log_level level, const char *message)
{
    (void)ud;
    fprintf(stderr, "odbox: %s: %s\n", level >= ODBOX_LOG_ERROR ? "error" : "warning", message);
}

int cmd_migrate(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "repair"))
        return cmd_repair(argc - 1, argv + 1);
    cli c;
    odbox_registry *r = NULL;
    odbox_migrate_options o;
    odbox_error err = {0};
    int u = cli_begin(argc, argv, usage_migrate, CLI_LOCK | CLI_QUIET | CLI_CREATES, &c, &r, &o);
    if (u)
        return u;
    odbox_log_set(warn_to_stderr, NULL, ODBOX_LOG_WARN);
    progress_state ps = {.c = &c};
    o.progress = on_progress;
    o.progress_ud = &ps;
    if (c.json)
        ps.shards = json_object_new_array();
    int rc = ODBOX_OK;
    for (size_t i = 0; i < odbox_registry_shard_count(r) && rc == ODBOX_OK; i++) {
        odbox_shard *s = odbox_registry_shard_at(r, i);
        char name[16];
        cli_shard_name(s, name, sizeof name);
        ps.applied = 0;
        if (c.json) {
            ps.current = json_object_new_object();
            json_object_object_add(ps.current, "shard", json_object_new_string(name));
            json_object_object_add(ps.current, "applied", json_object_new_array());
            json_object_array_add(ps.shards, ps.current);
        }
        rc = odbox_migrate_shard(s, &o, &err);
        if (rc == ODBOX_OK && !c.json && !c.quiet)
            printf("shard %s: %d migration(s) applied\n", name, ps.applied);
    }
    odbox_registry_free(&r);
    if (rc != ODBOX_OK) {
        json_object_put(ps.shards);
        return cli_fail(&c, &err);
    }
    if (c.json) {
        json_object *o2 = json_object_new_object();
        json_object_object_add(o2, "ok", json_object_new_boolean(1));
        json_object_object_add(o2, "shards", ps.shards);
        cli_print_json(o2);
        json_object_put(o2);
    }
    return 0;
}
