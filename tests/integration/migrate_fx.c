/* odbox — helpers of the migrate suite (see migrate_fx.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "migrate_fx.h"

odbox_registry *mig_one_shard(int which, const char *eventlog)
{
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(which), .eventlog = eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open(&cfg, &r, &e) == ODBOX_OK, "%s", e.message);
    return r;
}

int64_t mig_history(odbox_conn *c, const char *eventlog, const char *set)
{
    return itest_count(c, "SELECT COUNT(*) FROM %s WHERE migration_set = '%s' AND success = TRUE",
                       itest_evt(eventlog, "odbox_schema_history"), set);
}

/* Tables of that name in the eventlog schema (NULL: the application's). */
int64_t mig_table_count(odbox_conn *c, const char *schema, const char *table)
{
    if (itest_is("sqlite"))
        return itest_count(c, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'",
                           schema ? itest_evt(schema, table) : table);
    return itest_count(c, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s%s%s AND table_name = '%s'",
                       schema ? "'" : "", schema ? schema : (strcmp(itest_dialect(), "pg") ? "DATABASE()" : "current_schema()"),
                       schema ? "'" : "", table);
}

/* A private copy of the framework migrations that a test may change. */
void mig_copy_migrations(char *dir, size_t cap)
{
    char cmd[1200];
    snprintf(dir, cap, "/tmp/odbox-mig-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp -r '%s'/* '%s'/", itest_src("migrations"), dir);
    ck_assert_int_eq(system(cmd), 0);
}

void mig_remove_dir(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

const char *mig_dialect_dir(void)
{
    const char *d = itest_dialect();
    return !strcmp(d, "pg") ? "pg" : d;
}

void mig_write_file(const char *dir, const char *name, const char *text)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* "CREATE TABLE ${eventlog}.<table> <rest>" in the dialect's naming. */
const char *mig_create_in_eventlog(const char *table, const char *rest)
{
    static char sql[4][256];
    static int k;
    char *b = sql[k++ % 4];
    snprintf(b, sizeof sql[0], "CREATE TABLE %s %s", itest_evt("${eventlog}", table), rest);
    return b;
}

/* "INSERT INTO ${eventlog}.dv (n) VALUES (<n>)" in the dialect's naming. */
const char *mig_insert_dv(int n)
{
    static char sql[4][256];
    static int k;
    char *b = sql[k++ % 4];
    snprintf(b, sizeof sql[0], "INSERT INTO %s (n) VALUES (%d);\n", itest_evt("${eventlog}", "dv"), n);
    return b;
}
