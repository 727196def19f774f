/* odbox — integration test runner for one dialect. Without a server it
 * fails under CI=true and otherwise skips loudly (exit 77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "itest.h"

int main(void)
{
    /* a failed check ends its test's process with _exit: what the test
     * printed before must be out already, in the order it happened */
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *dialect = itest_dialect();
    if (!itest_dsn(1) || !itest_dsn(2)) {
        const char *ci = getenv("CI");
        if (ci && !strcmp(ci, "true")) {
            fprintf(stderr, "FAIL: integration suite '%s' has no server: ODBOX_TEST_*_DSN unset under CI=true "
                            "(run it through tests/db/with-servers.sh)\n", dialect);
            return 1;
        }
        fprintf(stderr,
                "\n*** SKIPPED: integration suite '%s' — no server (ODBOX_TEST_*_DSN unset).\n"
                "*** Nothing was tested against %s. Run: tests/db/with-servers.sh -- make check\n\n",
                dialect, dialect);
        return 77;
    }
    Suite *(*const suites[])(void) = {db_suite, migrate_suite, schema_suite, lock_suite, repo_suite, action_suite,
                                        persist_suite, shards_suite, owner_suite, tables_suite,
                                        writers_suite, idempotency_suite, sqlite_suite, jobs_suite, jobs_cluster_suite, jobs_faults_suite, conn_suite,
                                        commit_listeners_suite, wake_suite, notifications_suite, purge_suite,
                                        handlers_suite, handlers_names_suite, handlers_giveup_suite, subscriptions_suite, handlers_jobs_suite, handlers_order_suite,
                                        handlers_overlap_suite, replica_suite, collation_suite, owntx_suite};
    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());
    /* restarts cut other tests' sessions: only from restart.test */
    if (getenv("ODBOX_TEST_RESTARTS"))
        srunner_add_suite(sr, restart_suite());
    printf("integration suite: dialect %s\n", dialect);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
