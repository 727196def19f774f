/* odbox — unit tests of what each dialect says to its driver and how it
 * reads its driver's diagnostics: the error tables (SQLSTATE and native
 * numbers to ODBOX_E* codes). */
#include <string.h>
#include "unit.h"
#include "dialects.h"

typedef struct map_case {
    const char *sqlstate;
    long native;
    int want;
} map_case;

static void check_table(const odbox_dialect *d, const map_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int got = d->map_error(cases[i].sqlstate, cases[i].native);
        ck_assert_msg(got == cases[i].want, "%s: (%s, %ld) -> %s, expected %s", d->name,
                      cases[i].sqlstate ? cases[i].sqlstate : "NULL", cases[i].native, odbox_errname(got),
                      odbox_errname(cases[i].want));
    }
}

START_TEST(every_dialect_maps_errors)
{
    for (const odbox_dialect *const *d = odbox_dialects(); *d; d++) {
        ck_assert_msg((*d)->map_error != NULL, "%s has no map_error", (*d)->name);
        /* what every driver means alike */
        static const map_case common[] = {
            {"08001", 0, ODBOX_ECONNECT}, {"08004", 0, ODBOX_ECONNECT}, {"28000", 0, ODBOX_ECONNECT},
            {"08S01", 0, ODBOX_ECONNLOST}, {"08003", 0, ODBOX_ECONNLOST}, {"40001", 0, ODBOX_EDEADLOCK},
            {"HYT00", 0, ODBOX_ETIMEDOUT}, {"HYT01", 0, ODBOX_ETIMEDOUT}, {"IM002", 0, ODBOX_ECONNECT},
            {"HY001", 0, ODBOX_ENOMEM},    {"42601", 0, ODBOX_EDB},       {"", 0, ODBOX_EDB},
            {NULL, 0, ODBOX_EDB},
        };
        check_table(*d, common, sizeof common / sizeof common[0]);
    }
}
END_TEST

START_TEST(postgresql_error_table)
{
    static const map_case cases[] = {
        {"23505", 0, ODBOX_EUNIQUE},    {"40P01", 0, ODBOX_EDEADLOCK}, {"55P03", 0, ODBOX_EBUSY},
        {"57014", 0, ODBOX_ETIMEDOUT},  {"57P01", 0, ODBOX_ECONNLOST}, {"57P02", 0, ODBOX_ECONNLOST},
        {"57P03", 0, ODBOX_ECONNLOST},  {"28P01", 0, ODBOX_ECONNECT},  {"23503", 0, ODBOX_EDB},
        /* psqlODBC's native numbers are its own: MySQL's mean nothing here */
        {"HY000", 1062, ODBOX_EDB},     {"HY000", 1213, ODBOX_EDB},    {"HY000", 2013, ODBOX_EDB},
        {"HY000", 2003, ODBOX_EDB},     {"23505", 7, ODBOX_EUNIQUE},
    };
    check_table(&odbox_dialect_postgresql, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(mysql_family_error_table)
{
    static const map_case cases[] = {
        {"23000", 1062, ODBOX_EUNIQUE},   {"23000", 1586, ODBOX_EUNIQUE},   {"40001", 1213, ODBOX_EDEADLOCK},
        {"HY000", 1205, ODBOX_ETIMEDOUT}, {"70100", 1969, ODBOX_ETIMEDOUT}, {"HY000", 3024, ODBOX_ETIMEDOUT},
        {"HY000", 2006, ODBOX_ECONNLOST}, {"HY000", 2013, ODBOX_ECONNLOST}, {"08S01", 2013, ODBOX_ECONNLOST},
        {"70100", 1927, ODBOX_ECONNLOST}, {"HY000", 4031, ODBOX_ECONNLOST}, {"HY000", 2002, ODBOX_ECONNECT},
        {"HY000", 2003, ODBOX_ECONNECT},  {"HY000", 2005, ODBOX_ECONNECT},  {"28000", 1045, ODBOX_ECONNECT},
        {"08004", 1040, ODBOX_ECONNECT},  {"23000", 1452, ODBOX_EDB},       {"42000", 1064, ODBOX_EDB},
        /* PostgreSQL's SQLSTATEs are not MySQL's */
        {"23505", 0, ODBOX_EDB},          {"40P01", 0, ODBOX_EDB},          {"57P01", 0, ODBOX_EDB},
    };
    check_table(&odbox_dialect_mysql, cases, sizeof cases / sizeof cases[0]);
    check_table(&odbox_dialect_mariadb, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

Suite *drivers_suite(void)
{
    Suite *s = suite_create("drivers");
    TCase *t = tcase_create("core");
    tcase_add_test(t, every_dialect_maps_errors);
    tcase_add_test(t, postgresql_error_table);
    tcase_add_test(t, mysql_family_error_table);
    suite_add_tcase(s, t);
    return s;
}
