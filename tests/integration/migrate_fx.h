/* odbox — helpers of the migrate suite's two files (test_migrate.c,
 * test_migrate_deploy.c): a one-shard registry, migration folders and
 * files written by a test, and what the history holds. */
#ifndef ODBOX_TESTS_MIGRATE_FX_H
#define ODBOX_TESTS_MIGRATE_FX_H

#include <stddef.h>
#include <stdint.h>
#include "itest.h"

/* A registry of one shard 0.0 on test database `which` with that eventlog. */
odbox_registry *mig_one_shard(int which, const char *eventlog);
/* Successful history rows of a set. */
int64_t mig_history(odbox_conn *c, const char *eventlog, const char *set);
/* Tables of that name in the eventlog schema (NULL: the application's). */
int64_t mig_table_count(odbox_conn *c, const char *schema, const char *table);
/* A private copy of the framework migrations that a test may change
 * (a new directory, its name into dir). */
void mig_copy_migrations(char *dir, size_t cap);
void mig_remove_dir(const char *dir);
/* The dialect's folder name under a migrations tree. */
const char *mig_dialect_dir(void);
void mig_write_file(const char *dir, const char *name, const char *text);
/* "CREATE TABLE ${eventlog}.<table> <rest>" in the dialect's naming
 * (valid for the next 3 calls). */
const char *mig_create_in_eventlog(const char *table, const char *rest);
/* "INSERT INTO ${eventlog}.dv (n) VALUES (<n>);\n" in the dialect's
 * naming (valid for the next 3 calls). */
const char *mig_insert_dv(int n);

#endif
