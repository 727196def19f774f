/* odbox — unit test runner (libuv-style list of suites). */
#include <stdlib.h>
#include "unit.h"

int main(void)
{
    Suite *(*const suites[])(void) = {
        basics_suite, dsn_suite,     registry_config_suite, uuid_suite, dialect_sqlite_suite, jobs_suite,
        drivers_suite, wake_suite, ops_suite, handlers_suite, relay_suite,
        relay_nats_suite, relay_kafka_suite, relay_rabbitmq_suite, refusals_suite, keys_suite,
    };
    SRunner *sr = srunner_create(NULL);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
