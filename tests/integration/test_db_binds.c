/* odbox — integration tests of the ODBC core, part of the db suite
 * (test_db.c): typed binds. Every odbox type round-trips through a bound
 * parameter and a typed read, NULLs included; integers and booleans at
 * their limits; long values read whole; timestamp edges with microseconds;
 * text is UTF-8 both ways. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "itest.h"

START_TEST(typed_binds_round_trip)
{
    odbox_conn *c = itest_connect(1);
    const odbox_dialect *d = odbox_conn_dialect(c);
    char t[64], sql[512];
    itest_types_table(c, t, sizeof t);
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, txt, i, dbl, b, j, ts) VALUES (%s, ?, ?, ?, ?, %s, ?)", t,
             d->uuid_param, d->json_param);
    odbox_stmt *s = NULL;
    odbox_error e;
    ck_assert_msg(odbox_stmt_prepare(c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    const int64_t ts = 1763882045123456LL; /* 2025-11-23 07:14:05.123456 UTC */
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, "0192f0c1-7a3e-7abc-8def-0123456789ab", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 2, "h\xc3\xa9llo 'quoted' ; -- not a comment", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_int64(s, 3, INT64_MIN + 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_double(s, 4, 2.5e-3, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_bool(s, 5, 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_json(s, 6, "{\"a\": [1, 2, {\"b\": null}]}", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 7, ts, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_rows_affected(s), 1);
    /* the same statement again with typed NULLs everywhere but the key */
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, "0192f0c1-7a3e-7abc-8def-0123456789ac", &e), ODBOX_OK);
    for (int i = 2; i <= 7; i++) {
        const odbox_type types[] = {0, 0, ODBOX_TYPE_TEXT, ODBOX_TYPE_INT64, ODBOX_TYPE_DOUBLE,
                                    ODBOX_TYPE_BOOL, ODBOX_TYPE_JSON, ODBOX_TYPE_TIMESTAMP};
        ck_assert_int_eq(odbox_stmt_bind_null(s, i, types[i], &e), ODBOX_OK);
    }
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);

    snprintf(sql, sizeof sql, "SELECT id, txt, i, dbl, b, j, ts FROM %s ORDER BY id", t);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_column_count(s), 7);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    const char *txt;
    int64_t i64, got_ts;
    double dbl;
    int b, null;
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &txt, &null, &e), ODBOX_OK);
    ck_assert_str_eq(txt, "0192f0c1-7a3e-7abc-8def-0123456789ab");
    ck_assert_int_eq(odbox_stmt_get_text(s, 2, &txt, &null, &e), ODBOX_OK);
    ck_assert_str_eq(txt, "h\xc3\xa9llo 'quoted' ; -- not a comment");
    ck_assert_int_eq(odbox_stmt_get_int64(s, 3, &i64, &null, &e), ODBOX_OK);
    ck_assert(i64 == INT64_MIN + 1);
    ck_assert_int_eq(odbox_stmt_get_double(s, 4, &dbl, &null, &e), ODBOX_OK);
    ck_assert_double_eq_tol(dbl, 2.5e-3, 1e-12);
    ck_assert_int_eq(odbox_stmt_get_bool(s, 5, &b, &null, &e), ODBOX_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(odbox_stmt_get_text(s, 6, &txt, &null, &e), ODBOX_OK);
    ck_assert_ptr_nonnull(strstr(txt, "\"b\""));
    ck_assert_int_eq(odbox_stmt_get_timestamp(s, 7, &got_ts, &null, &e), ODBOX_OK);
    ck_assert_int_eq(null, 0);
    ck_assert(got_ts == ts); /* microseconds survive */
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    for (int col = 2; col <= 7; col++) {
        ck_assert_int_eq(odbox_stmt_get_text(s, col, &txt, &null, &e), ODBOX_OK);
        ck_assert_msg(null == 1, "column %d not NULL", col);
    }
    ck_assert_int_eq(odbox_stmt_get_timestamp(s, 7, &got_ts, &null, &e), ODBOX_OK);
    ck_assert(null && got_ts == 0);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 0);
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &txt, &null, &e), ODBOX_ESTATE);
    odbox_stmt_free(&s);
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

/* sql prepared with parameter 1 bound to test id k. */
static odbox_stmt *prepare_with_id(odbox_conn *c, const char *sql, int k)
{
    char id[37];
    odbox_stmt *s = NULL;
    odbox_error e;
    snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", k);
    ck_assert_msg(odbox_stmt_prepare(c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, id, &e), ODBOX_OK);
    return s;
}

static void execute_and_free(odbox_stmt **s)
{
    odbox_error e;
    ck_assert_msg(odbox_stmt_execute(*s, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(s);
}

/* Integers at both ends of BIGINT and booleans come back exactly, and a
 * bound integer compares as a number in a WHERE clause (PostgreSQL gets
 * them as text and infers the type from the column). */
START_TEST(integers_and_booleans_at_their_limits)
{
    odbox_conn *c = itest_connect(1);
    const odbox_dialect *d = odbox_conn_dialect(c);
    char t[64], sql[512];
    itest_types_table(c, t, sizeof t);
    const int64_t vals[] = {INT64_MIN, -1, 0, 9, 10, INT64_MAX};
    odbox_stmt *s = NULL;
    odbox_error e;
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, i, b) VALUES (%s, ?, ?)", t, d->uuid_param);
    for (int k = 0; k < 6; k++) {
        s = prepare_with_id(c, sql, k);
        ck_assert_int_eq(odbox_stmt_bind_int64(s, 2, vals[k], &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_bool(s, 3, k % 2, &e), ODBOX_OK);
        execute_and_free(&s);
    }
    snprintf(sql, sizeof sql, "SELECT i, b FROM %s WHERE i >= ? ORDER BY i", t);
    for (int from = 0; from < 6; from++) {
        ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_int64(s, 1, vals[from], &e), ODBOX_OK);
        ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
        for (int k = from; k < 6; k++) {
            int64_t i = 0;
            int b = -1, null = -1;
            ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
            ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &i, &null, &e), ODBOX_OK);
            ck_assert_msg(i == vals[k] && !null, "from %d: row %d came back as %lld", from, k, (long long)i);
            ck_assert_int_eq(odbox_stmt_get_bool(s, 2, &b, &null, &e), ODBOX_OK);
            ck_assert_int_eq(b, k % 2);
        }
        ck_assert_int_eq(odbox_stmt_fetch(s, &e), 0);
        odbox_stmt_free(&s);
    }
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

/* Values longer than a column's first buffer (multi-byte text cut inside
 * a character, 100 kB of JSON) come back whole, between short values and
 * NULLs, also when the statement runs again with its grown buffers. */
START_TEST(long_values_read_whole)
{
    odbox_conn *c = itest_connect(1);
    const odbox_dialect *d = odbox_conn_dialect(c);
    char t[64], sql[512];
    itest_types_table(c, t, sizeof t);
    static char big[100003], accents[301], bs[131];
    big[0] = '"';
    memset(big + 1, 'x', sizeof big - 3);
    big[sizeof big - 2] = '"';
    for (int i = 0; i < 150; i++)
        memcpy(accents + 2 * i, "\xc3\xa9", 2);
    memset(bs, 'b', sizeof bs - 1);
    const struct {
        const char *txt, *j;
    } rows[] = {{"a", NULL}, {accents, big}, {NULL, "1"}, {bs, "2"}};
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, txt, j) VALUES (%s, ?, %s)", t, d->uuid_param, d->json_param);
    odbox_stmt *s = NULL;
    odbox_error e;
    for (int i = 0; i < 4; i++) {
        s = prepare_with_id(c, sql, i);
        ck_assert_int_eq(odbox_stmt_bind_text(s, 2, rows[i].txt, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_json(s, 3, rows[i].j, &e), ODBOX_OK);
        execute_and_free(&s);
    }
    snprintf(sql, sizeof sql, "SELECT txt, j FROM %s ORDER BY id", t);
    for (int run = 0; run < 2; run++) {
        ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
        ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
        for (int i = 0; i < 4; i++) {
            ck_assert_msg(odbox_stmt_fetch(s, &e) == 1, "run %d row %d: %s", run, i, e.message);
            for (int col = 1; col <= 2; col++) {
                const char *want = col == 1 ? rows[i].txt : rows[i].j, *got;
                int null = -1;
                ck_assert_int_eq(odbox_stmt_get_text(s, col, &got, &null, &e), ODBOX_OK);
                ck_assert_msg(null == !want, "run %d row %d column %d: null=%d", run, i, col, null);
                if (want)
                    ck_assert_msg(!strcmp(got, want), "run %d row %d column %d: %zu bytes, expected %zu", run, i,
                                  col, strlen(got), strlen(want));
            }
        }
        ck_assert_int_eq(odbox_stmt_fetch(s, &e), 0);
        odbox_stmt_free(&s);
    }
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

/* Timestamps at the range's ends, around the epoch and on a leap day
 * keep every microsecond, and compare as timestamps in a WHERE clause. */
START_TEST(timestamp_edges_round_trip)
{
    static const struct {
        int64_t us;
        const char *text;
    } cases[] = {
        {-62135596800000000LL, "0001-01-01 00:00:00.000000"},
        {-1, "1969-12-31 23:59:59.999999"},
        {0, "1970-01-01 00:00:00.000000"},
        {951782400000001LL, "2000-02-29 00:00:00.000001"},
        {253402300799999999LL, "9999-12-31 23:59:59.999999"},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    odbox_conn *c = itest_connect(1);
    const odbox_dialect *d = odbox_conn_dialect(c);
    char t[64], sql[512];
    itest_types_table(c, t, sizeof t);
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, i, ts) VALUES (%s, ?, ?)", t, d->uuid_param);
    odbox_stmt *s = NULL;
    odbox_error e;
    ck_assert_msg(odbox_stmt_prepare(c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    for (int k = 0; k < N; k++) { /* one prepared statement, re-executed */
        char id[ODBOX_UUID_LEN + 1];
        odbox_uuid_v4(id);
        ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, id, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_int64(s, 2, k, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 3, cases[k].us, &e), ODBOX_OK);
        ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s: %s", cases[k].text, e.message);
    }
    odbox_stmt_free(&s);
    snprintf(sql, sizeof sql, "SELECT i, ts FROM %s ORDER BY i", t);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    for (int k = 0; k < N; k++) {
        int64_t i, us;
        int null;
        ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
        ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &i, &null, &e), ODBOX_OK);
        ck_assert_int_eq(i, k);
        ck_assert_int_eq(odbox_stmt_get_timestamp(s, 2, &us, &null, &e), ODBOX_OK);
        ck_assert_msg(us == cases[k].us, "%s came back as %lld us", cases[k].text, (long long)us);
    }
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 0);
    odbox_stmt_free(&s);
    /* a bound timestamp compares as a timestamp: exactly the rows before it */
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE ts < ?", t);
    for (int k = 0; k < N; k++) {
        int64_t n;
        int null;
        ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 1, cases[k].us, &e), ODBOX_OK);
        ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
        ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
        ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &n, &null, &e), ODBOX_OK);
        ck_assert_msg(n == k, "%lld rows before %s, expected %d", (long long)n, cases[k].text, k);
        odbox_stmt_free(&s);
    }
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE ts = '2000-02-29 00:00:00.000001'", t), 1);
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

/* Text is UTF-8 on the way in and out: the server counts characters,
 * not bytes, and sends the same bytes back. */
START_TEST(text_is_utf8_both_ways)
{
    odbox_conn *c = itest_connect(1);
    odbox_stmt *s = NULL;
    odbox_error e;
    const char *word = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"; /* "héllo € 😀": 9 characters */
    ck_assert_int_eq(odbox_stmt_prepare(c, itest_is("sqlite") ? "SELECT LENGTH(?), ?" : "SELECT CHAR_LENGTH(?), ?",
                                        &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 1, word, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 2, word, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    int64_t n;
    const char *back;
    int null;
    ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &n, &null, &e), ODBOX_OK);
    ck_assert_int_eq(n, 9);
    ck_assert_int_eq(odbox_stmt_get_text(s, 2, &back, &null, &e), ODBOX_OK);
    ck_assert_str_eq(back, word);
    odbox_stmt_free(&s);
    odbox_conn_close(&c);
}
END_TEST

/* A getter asked for a type its column's text is not, a column that is
 * not there, a bind that cannot be sent: EINVAL, the value untouched. */
START_TEST(getters_and_binds_refuse_what_they_cannot_hold)
{
    odbox_conn *c = itest_connect(1);
    odbox_stmt *s = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 'abc', 'maybe', 'yesterday', '12x', '12.5', '12.000', "
                                           "'9223372036854775808', '12.', '.0'", &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    int64_t i = 7;
    double dbl = 7.0;
    int b = 7, is_null = 7;
    const char *txt = NULL;
    ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &i, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "column 1 ('abc') is not an integer"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 4, &i, NULL, &e), ODBOX_EINVAL); /* no trailing text */
    ck_assert_int_eq(odbox_stmt_get_int64(s, 5, &i, NULL, &e), ODBOX_EINVAL); /* no fraction cut off */
    ck_assert_msg(strstr(e.message, "column 5 ('12.5') is not an integer"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 7, &i, NULL, &e), ODBOX_EINVAL); /* beyond int64 */
    ck_assert_int_eq(odbox_stmt_get_int64(s, 6, &i, NULL, &e), ODBOX_OK);     /* a DECIMAL's zero fraction */
    ck_assert_int_eq(i, 12);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 8, &i, NULL, &e), ODBOX_OK);
    ck_assert_int_eq(i, 12);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 9, &i, NULL, &e), ODBOX_EINVAL); /* no digits */
    ck_assert_int_eq(odbox_stmt_get_double(s, 1, &dbl, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "is not a number"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_bool(s, 2, &b, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "column 2 ('maybe') is not a boolean"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_timestamp(s, 3, &i, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "is not a timestamp"), "%s", e.message);
    /* refused for the column's text: the value is zero, not what it was */
    ck_assert_msg(i == 0 && dbl == 0.0 && b == 0 && is_null == 0, "%lld %g %d %d", (long long)i, dbl, b, is_null);
    i = 7;
    ck_assert_int_eq(odbox_stmt_get_text(s, 0, &txt, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "column 0 out of range 1..9"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_text(s, 10, &txt, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 10, &i, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(txt == NULL && i == 7, "a get out of range wrote its output");
    ck_assert_int_eq(odbox_stmt_get_text(s, 4, &txt, NULL, &e), ODBOX_OK); /* the row is still there */
    ck_assert_str_eq(txt, "12x");
    odbox_stmt_free(&s);

    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT ?", &s, &e), ODBOX_OK);
    double bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ck_assert_int_eq(odbox_stmt_bind_double(s, 1, bad[k], &e), ODBOX_EINVAL);
        ck_assert_msg(strstr(e.message, "parameter 1 is not a finite number"), "%s", e.message);
    }
    ck_assert_int_eq(odbox_stmt_bind_text(s, 32768, "x", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "parameter index 32768 out of range"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_text(NULL, 1, "x", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "statement is NULL"), "%s", e.message);
    /* bool and JSON binds take their slot as every bind does */
    ck_assert_int_eq(odbox_stmt_bind_bool(s, 0, 1, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "parameter index 0 out of range 1..32767"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_bool(s, 32768, 1, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "parameter index 32768 out of range"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_bool(NULL, 1, 1, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "bind: statement is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_json(s, 0, "{}", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "parameter index 0 out of range 1..32767"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_json(s, 32768, "{}", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "parameter index 32768 out of range"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_json(NULL, 1, "{}", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "bind: statement is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_json(s, 0, NULL, &e), ODBOX_EINVAL); /* a NULL JSON too */
    ck_assert_msg(strstr(e.message, "parameter index 0 out of range"), "%s", e.message);
    int rc = odbox_stmt_execute(s, &e);
    ck_assert_msg(rc == ODBOX_EINVAL, "%s: %s", odbox_errname(rc), e.message); /* nothing bound */
    ck_assert_msg(strstr(e.message, "parameter 1 of 1 is not bound"), "%s", e.message);
    odbox_stmt_free(&s);
    odbox_conn_close(&c);
}
END_TEST

/* A getter given a NULL output or a NULL statement: ODBOX_EINVAL with a
 * message, and nothing written (is_null neither). */
START_TEST(getters_refuse_null_outputs)
{
    odbox_conn *c = itest_connect(1);
    odbox_stmt *s = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 1", &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    int is_null = 7;
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, NULL, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "get: out is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 1, NULL, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "get: out is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_double(s, 1, NULL, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "get: out is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_bool(s, 1, NULL, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "get: out is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_timestamp(s, 1, NULL, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "get: out is NULL"), "%s", e.message);
    ck_assert_int_eq(is_null, 7);

    /* a NULL statement is refused as binds, execute and fetch refuse it */
    const char *txt = "kept";
    int64_t i = 7;
    double dbl = 7.0;
    int b = 7;
    ck_assert_int_eq(odbox_stmt_get_text(NULL, 1, &txt, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "get: statement is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_stmt_get_int64(NULL, 1, &i, &is_null, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_get_double(NULL, 1, &dbl, &is_null, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_get_bool(NULL, 1, &b, &is_null, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_get_timestamp(NULL, 1, &i, &is_null, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "get: statement is NULL"), "%s", e.message);
    ck_assert_msg(!strcmp(txt, "kept") && i == 7 && dbl == 7.0 && b == 7 && is_null == 7,
                  "a refused get wrote its output");

    /* the row is still there */
    ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &i, &is_null, &e), ODBOX_OK);
    ck_assert_int_eq(i, 1);
    ck_assert_int_eq(is_null, 0);
    odbox_stmt_free(&s);
    odbox_conn_close(&c);
}
END_TEST

/* The db suite's tests, added to its tcase where they were listed. */
void db_add_bind_tests(TCase *t)
{
    tcase_add_test(t, typed_binds_round_trip);
    tcase_add_test(t, timestamp_edges_round_trip);
    tcase_add_test(t, long_values_read_whole);
    tcase_add_test(t, integers_and_booleans_at_their_limits);
    tcase_add_test(t, text_is_utf8_both_ways);
    tcase_add_test(t, getters_and_binds_refuse_what_they_cannot_hold);
    tcase_add_test(t, getters_refuse_null_outputs);
}
