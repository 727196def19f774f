/* odbox — unit tests: errors, reading text files, SHA-256, SQL splitting and placeholders,
 * names and shard ids, the dialect table, multi-row SQL, migration file
 * names and versions, idempotency keys' input checks. */
#include <fcntl.h>
#include <malloc.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "odbox/odbox.h"
#include "internal.h"
#include "sqlsplit.h"
#include "dialects.h"
#include "migrate_internal.h"
#include "idempotency.h"
#include "unit.h"

START_TEST(error_names_are_distinct)
{
    const int codes[] = {ODBOX_EINVAL, ODBOX_ENOMEM, ODBOX_ECONNECT, ODBOX_ECONNLOST, ODBOX_ESTALE,
                         ODBOX_EUNIQUE, ODBOX_EDEADLOCK, ODBOX_ENOTFOUND, ODBOX_ECROSSSHARD,
                         ODBOX_ETIMEDOUT, ODBOX_EMIGRATION, ODBOX_EUNSUPPORTED, ODBOX_EDB,
                         ODBOX_EIO, ODBOX_EBUSY, ODBOX_EPARTIAL, ODBOX_ESTATE,
                         ODBOX_EINDOUBT, ODBOX_EOWNER, ODBOX_EDISCARD};
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_lt(codes[i], 0);
        ck_assert_str_ne(odbox_errname(codes[i]), "ODBOX_EUNKNOWN");
        ck_assert_str_ne(odbox_strerror(codes[i]), "unknown error");
        for (size_t j = 0; j < i; j++) {
            ck_assert_int_ne(codes[i], codes[j]);
            ck_assert_str_ne(odbox_errname(codes[i]), odbox_errname(codes[j]));
        }
    }
    ck_assert_str_eq(odbox_errname(-999), "ODBOX_EUNKNOWN");
    ck_assert_str_eq(odbox_errname(ODBOX_ESTALE), "ODBOX_ESTALE");
    /* a code odbox does not know (a caller's own, a stray positive) still
     * has a text to print: never NULL */
    const int unknown[] = {-999, 1, 12345, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ck_assert_ptr_nonnull(odbox_strerror(unknown[i]));
        ck_assert_str_eq(odbox_strerror(unknown[i]), "unknown error");
        ck_assert_ptr_nonnull(odbox_errname(unknown[i]));
    }
}
END_TEST

START_TEST(error_fail_and_prefix)
{
    odbox_error e;
    ck_assert_int_eq(odbox_fail(&e, ODBOX_EINVAL, "bad %s", "thing"), ODBOX_EINVAL);
    ck_assert_int_eq(e.code, ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "bad thing");
    ck_assert_str_eq(e.sqlstate, "");
    odbox_error_prefix(&e, ODBOX_EINVAL, "shard %d.%d", 1, 2);
    ck_assert_str_eq(e.message, "shard 1.2: bad thing");
    ck_assert_int_eq(odbox_fail(NULL, ODBOX_EIO, "ignored"), ODBOX_EIO);
    odbox_error_clear(&e);
    ck_assert_int_eq(e.code, 0);
    ck_assert_str_eq(e.message, "");
}
END_TEST

/* odbox_error_set: the public way for a perform callback or handler to
 * report its own failure; it replaces whatever err held before. */
START_TEST(error_set_public)
{
    odbox_error e;
    memset(&e, 0, sizeof e);
    e.code = ODBOX_EDEADLOCK;
    memcpy(e.sqlstate, "40001", 6);
    e.native = 1213;
    snprintf(e.message, sizeof e.message, "an older message");
    ck_assert_int_eq(odbox_error_set(&e, ODBOX_EINVAL, "amount %d < %s", -5, "0"), ODBOX_EINVAL);
    ck_assert_int_eq(e.code, ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "amount -5 < 0");
    ck_assert_str_eq(e.sqlstate, "");
    ck_assert_int_eq(e.native, 0);
    /* NULL err: only the code comes back */
    ck_assert_int_eq(odbox_error_set(NULL, ODBOX_ENOTFOUND, "no wallet %s", "w1"), ODBOX_ENOTFOUND);
    /* NULL fmt: an empty message */
    ck_assert_int_eq(odbox_error_set(&e, ODBOX_EDB, NULL), ODBOX_EDB);
    ck_assert_int_eq(e.code, ODBOX_EDB);
    ck_assert_str_eq(e.message, "");
    /* a message longer than the buffer is cut, NUL-terminated */
    char long_text[3 * ODBOX_ERROR_MESSAGE_MAX];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    ck_assert_int_eq(odbox_error_set(&e, ODBOX_EIO, "read: %s", long_text), ODBOX_EIO);
    ck_assert_uint_eq(strlen(e.message), ODBOX_ERROR_MESSAGE_MAX - 1);
    ck_assert_int_eq(strncmp(e.message, "read: xxx", 9), 0);
    ck_assert_int_eq(e.message[ODBOX_ERROR_MESSAGE_MAX - 2], 'x');
}
END_TEST

START_TEST(sha256_known_vectors)
{
    char hex[65];
    odbox_sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    odbox_sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    odbox_sha256_hex(two, strlen(two), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    odbox_sha256_hex(million, 1000000, hex);
    free(million);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* first 8 bytes of SHA-256("abc") = ba7816bf8f01cfea, big-endian */
    ck_assert(odbox_sha256_int64("abc", 3) == (int64_t)0xba7816bf8f01cfeaULL);
}
END_TEST

START_TEST(split_statements)
{
    odbox_sql_script s;
    const char *text =
        "-- leading comment; with a semicolon\n"
        "CREATE TABLE t (a TEXT DEFAULT 'x;y', \"b;c\" INT);\n"
        "/* block; comment */ INSERT INTO t VALUES ('it''s; fine');\n"
        "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;\n"
        "  ;  -- empty statement\n"
        "SELECT 2";
    ck_assert_int_eq(odbox_sql_split(text, 0, &s, NULL), ODBOX_OK);
    ck_assert_uint_eq(s.n, 4);
    /* comments are blanked: SQLite's ODBC driver refuses a statement
     * with a ';' in a comment ("only one SQL statement allowed") */
    ck_assert_str_eq(s.stmts[0], "CREATE TABLE t (a TEXT DEFAULT 'x;y', \"b;c\" INT)");
    ck_assert_str_eq(s.stmts[1], "INSERT INTO t VALUES ('it''s; fine')");
    ck_assert_str_eq(s.stmts[2], "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql");
    ck_assert_str_eq(s.stmts[3], "SELECT 2");
    odbox_sql_script_free(&s);

    /* inside a statement a comment keeps its lines; optimizer hints are
     * code and stay, and so do MySQL's executable comments there (a
     * comment elsewhere) */
    for (int rules = 0; rules <= ODBOX_SQL_MYSQL; rules++) {
        ck_assert_int_eq(odbox_sql_split("ALTER TABLE t -- why; because\n ADD c INT /* x; */; "
                                         "SELECT /*+ NO_ICP(t) */ 1 /*!50700 , 2 */ /*M!100000 , 3 */",
                                         rules, &s, NULL),
                         ODBOX_OK);
        ck_assert_uint_eq(s.n, 2);
        ck_assert_str_eq(s.stmts[0], "ALTER TABLE t                \n ADD c INT");
        ck_assert_str_eq(s.stmts[1], rules ? "SELECT /*+ NO_ICP(t) */ 1 /*!50700 , 2 */ /*M!100000 , 3 */"
                                           : "SELECT /*+ NO_ICP(t) */ 1");
        odbox_sql_script_free(&s);
    }
    /* opened: the markers and versions are blanks, the text is split */
    ck_assert_int_eq(odbox_sql_split("SELECT 1 /*!50700 ; COMMIT */; /*M!100101 SET autocommit=0*/",
                                     ODBOX_SQL_MYSQL | ODBOX_SQL_OPEN_EXEC, &s, NULL),
                     ODBOX_OK);
    ck_assert_uint_eq(s.n, 3);
    ck_assert_str_eq(s.stmts[0], "SELECT 1");
    ck_assert_str_eq(s.stmts[1], "COMMIT");
    ck_assert_str_eq(s.stmts[2], "SET autocommit=0");
    odbox_sql_script_free(&s);

    ck_assert_int_eq(odbox_sql_split("INSERT INTO t VALUES ('a\\';b'); SELECT 1;", 1, &s, NULL), ODBOX_OK);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_str_eq(s.stmts[0], "INSERT INTO t VALUES ('a\\';b')");
    odbox_sql_script_free(&s);

    ck_assert_int_eq(odbox_sql_split("-- only a comment\n  ;\n/* and */", 0, &s, NULL), ODBOX_OK);
    ck_assert_uint_eq(s.n, 0);
    odbox_sql_script_free(&s);
}
END_TEST

/* MySQL's and MariaDB's lexical rules (a dialect with backslash_escapes):
 * '#' to the end of the line is a comment, and a backslash escapes inside
 * "..." strings too. PostgreSQL's and SQLite's are as they were: '#' is
 * code (PostgreSQL's XOR), "..." an identifier without escapes. */
START_TEST(split_mysql_rules)
{
    odbox_sql_script s;
    odbox_error e;
    ck_assert_int_eq(odbox_sql_split("CREATE TABLE a(x INT);\n# it's\nCREATE TABLE b(y INT);\n# that's\n", 1, &s, &e),
                     ODBOX_OK);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_str_eq(s.stmts[0], "CREATE TABLE a(x INT)");
    ck_assert_str_eq(s.stmts[1], "CREATE TABLE b(y INT)");
    odbox_sql_script_free(&s);
    /* inside a statement the comment is blanked, its line kept */
    ck_assert_int_eq(odbox_sql_split("ALTER TABLE t # why; because\n ADD c INT;", 1, &s, &e), ODBOX_OK);
    ck_assert_uint_eq(s.n, 1);
    ck_assert_str_eq(s.stmts[0], "ALTER TABLE t               \n ADD c INT");
    odbox_sql_script_free(&s);
    /* a '#' in a literal or a quoted name is no comment */
    ck_assert_int_eq(odbox_sql_split("INSERT INTO t VALUES ('#no; comment', \"#nor; this\"); SELECT `#x;`", 1, &s, &e),
                     ODBOX_OK);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_str_eq(s.stmts[0], "INSERT INTO t VALUES ('#no; comment', \"#nor; this\")");
    odbox_sql_script_free(&s);
    ck_assert_int_eq(odbox_sql_split("INSERT INTO t VALUES (\"a\\\";b\"); SELECT 1;", 1, &s, &e), ODBOX_OK);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_str_eq(s.stmts[0], "INSERT INTO t VALUES (\"a\\\";b\")");
    odbox_sql_script_free(&s);

    /* PostgreSQL and SQLite: unchanged */
    ck_assert_int_eq(odbox_sql_split("SELECT 5 # 3; SELECT 2", 0, &s, &e), ODBOX_OK);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_str_eq(s.stmts[0], "SELECT 5 # 3");
    odbox_sql_script_free(&s);
    ck_assert_int_eq(odbox_sql_split("SELECT 1 AS \"a\\\"; SELECT 2", 0, &s, &e), ODBOX_OK);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_str_eq(s.stmts[0], "SELECT 1 AS \"a\\\"");
    odbox_sql_script_free(&s);
    ck_assert_int_eq(odbox_sql_split("SELECT 1;\n# it's\nSELECT 2;", 0, &s, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unterminated"));
    /* and the MySQL rules' own: the same under them */
    ck_assert_int_eq(odbox_sql_split("SELECT 5 # 3; SELECT 2", 1, &s, &e), ODBOX_OK);
    ck_assert_uint_eq(s.n, 1);
    ck_assert_str_eq(s.stmts[0], "SELECT 5");
    odbox_sql_script_free(&s);
    ck_assert_int_eq(odbox_sql_split("SELECT 1 AS \"a\\\"; SELECT 2", 1, &s, &e), ODBOX_EINVAL);
}
END_TEST

START_TEST(split_rejects_unterminated)
{
    const char *bad[] = {"SELECT 'abc", "SELECT \"abc", "SELECT 1 /* never closed",
                         "SELECT $x$ body", "SELECT `x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        odbox_sql_script s;
        odbox_error e;
        ck_assert_int_eq(odbox_sql_split(bad[i], 0, &s, &e), ODBOX_EINVAL);
        ck_assert_ptr_nonnull(strstr(e.message, "unterminated"));
        ck_assert_uint_eq(s.n, 0);
    }
}
END_TEST

/* Writes n bytes of c to a new temporary file; its path into path. */
static void temp_file(char *path, size_t cap, char c, size_t n)
{
    snprintf(path, cap, "/tmp/odbox-read-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    char block[512];
    memset(block, c, sizeof block);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < sizeof block ? n - done : sizeof block;
        ck_assert_int_eq(write(fd, block, k), (ssize_t)k);
        done += k;
    }
    close(fd);
}

/* A file's text takes about its own size, not the most a file may hold
 * (a migration run keeps every file's text at once: 16 MiB each made 80
 * files 1.3 GB). malloc_usable_size answers the size asked for under
 * ASan and valgrind, and at least it with glibc's malloc. */
START_TEST(a_text_file_takes_about_its_size)
{
    const size_t max = 16 * 1024 * 1024; /* migrate's limit */
    char path[64];
    char *text = NULL;
    size_t len = 0;
    odbox_error e;
    ck_assert_int_eq(odbox_read_text_file("t", "/nonexistent/x.sql", max, &text, &len, &e), ODBOX_EIO);
    temp_file(path, sizeof path, 'a', 30);
    ck_assert_int_eq(odbox_read_text_file("t", path, max, &text, &len, &e), ODBOX_OK);
    ck_assert_uint_eq(len, 30);
    ck_assert_uint_eq(strlen(text), 30);
    ck_assert_msg(malloc_usable_size(text) < 4096, "%zu bytes for a 30-byte file", malloc_usable_size(text));
    free(text);
    /* exactly max, and one more */
    ck_assert_int_eq(odbox_read_text_file("t", path, 30, &text, &len, &e), ODBOX_OK);
    ck_assert_uint_eq(len, 30);
    free(text);
    ck_assert_int_eq(odbox_read_text_file("t", path, 29, &text, &len, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "larger than 29 bytes"), "%s", e.message);
    ck_assert_ptr_null(text);
    unlink(path);
    temp_file(path, sizeof path, '\0', 3);
    ck_assert_int_eq(odbox_read_text_file("t", path, max, &text, &len, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "NUL"));
    unlink(path);
    /* a file whose size stat does not tell (0 here) */
    ck_assert_int_eq(odbox_read_text_file("t", "/proc/self/status", max, &text, &len, &e), ODBOX_OK);
    ck_assert(len > 0 && strstr(text, "Name:"));
    ck_assert_uint_le(malloc_usable_size(text), len + 64);
    free(text);
    /* a pipe of 10,000 bytes: the buffer grows, then gives back the rest */
    snprintf(path, sizeof path, "/tmp/odbox-fifo-%d", (int)getpid());
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        int fd = open(path, O_WRONLY);
        char block[1000];
        memset(block, 'p', sizeof block);
        for (int i = 0; i < 10 && fd >= 0; i++)
            if (write(fd, block, sizeof block) != (ssize_t)sizeof block)
                _exit(1);
        _exit(fd >= 0 ? 0 : 1);
    }
    ck_assert_int_eq(odbox_read_text_file("t", path, max, &text, &len, &e), ODBOX_OK);
    int status = 0;
    waitpid(child, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_uint_eq(len, 10000);
    ck_assert_uint_eq(strspn(text, "p"), 10000);
    ck_assert_uint_le(malloc_usable_size(text), 10000 + 64);
    free(text);
    unlink(path);
}
END_TEST

START_TEST(placeholders)
{
    char *out = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_sql_placeholders("CREATE SCHEMA ${eventlog}; SELECT * FROM ${eventlog}.events",
                                            "eventlog", "ev_1", &out, &e), ODBOX_OK);
    ck_assert_str_eq(out, "CREATE SCHEMA ev_1; SELECT * FROM ev_1.events");
    free(out);
    ck_assert_int_eq(odbox_sql_placeholders("SELECT ${evntlog}", "eventlog", "x", &out, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(e.message, "${evntlog}"));
    ck_assert_int_eq(odbox_sql_placeholders("no placeholder", "eventlog", "x", &out, &e), ODBOX_OK);
    ck_assert_str_eq(out, "no placeholder");
    free(out);
}
END_TEST

START_TEST(names)
{
    ck_assert(odbox_name_is_valid("eventlog"));
    ck_assert(odbox_name_is_valid("_x9"));
    ck_assert(odbox_name_is_valid("eventlog_shard_1"));
    const char *bad[] = {NULL, "", "9abc", "Eventlog", "event-log", "event log", "a;drop", "a.b",
                         "x'", "é",
                         "a123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!odbox_name_is_valid(bad[i]), "accepted '%s'", bad[i] ? bad[i] : "(null)");
}
END_TEST

START_TEST(shard_ids)
{
    odbox_shard_id id;
    odbox_error e;
    ck_assert_int_eq(odbox_shard_id_parse("0.0", &id, &e), ODBOX_OK);
    ck_assert_int_eq(id.group, 0);
    ck_assert_int_eq(id.member, 0);
    ck_assert_int_eq(odbox_shard_id_parse("255.63", &id, &e), ODBOX_OK);
    ck_assert_int_eq(id.group, 255);
    ck_assert_int_eq(id.member, 63);
    const char *bad[] = {"", "1", "1.", ".1", "256.0", "0.64", "-1.0", "a.b", "1.2.3", "1.2x", " 1.2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(odbox_shard_id_parse(bad[i], &id, &e) == ODBOX_EINVAL, "accepted '%s'", bad[i]);
        ck_assert(e.message[0]);
    }
}
END_TEST

START_TEST(dialect_table)
{
    ck_assert_ptr_eq(odbox_dialect_find("postgresql"), &odbox_dialect_postgresql);
    ck_assert_ptr_eq(odbox_dialect_find("postgres"), &odbox_dialect_postgresql);
    ck_assert_ptr_eq(odbox_dialect_find("PG"), &odbox_dialect_postgresql);
    ck_assert_ptr_eq(odbox_dialect_find("mysql"), &odbox_dialect_mysql);
    ck_assert_ptr_eq(odbox_dialect_find("MariaDB"), &odbox_dialect_mariadb);
    ck_assert_ptr_null(odbox_dialect_find("oracle"));
    ck_assert_ptr_null(odbox_dialect_find(NULL));
    /* MariaDB's driver may call the product MySQL; the version tells. */
    ck_assert_ptr_eq(odbox_dialect_detect("MySQL", "10.11.6-MariaDB-0+deb12u1"), &odbox_dialect_mariadb);
    ck_assert_ptr_eq(odbox_dialect_detect("MariaDB", "11.4.2"), &odbox_dialect_mariadb);
    ck_assert_ptr_eq(odbox_dialect_detect("MySQL", "8.4.0"), &odbox_dialect_mysql);
    ck_assert_ptr_eq(odbox_dialect_detect("PostgreSQL", "16.03.0000"), &odbox_dialect_postgresql);
    ck_assert_ptr_null(odbox_dialect_detect("Microsoft SQL Server", "16.0"));
    for (const odbox_dialect *const *d = odbox_dialects(); *d; d++) {
        ck_assert_int_eq((*d)->version, ODBOX_DIALECT_VERSION);
        ck_assert_ptr_nonnull((*d)->connection_string);
        ck_assert_ptr_nonnull((*d)->insert_ignore_fmt);
        ck_assert_ptr_null(strstr((*d)->insert_ignore_fmt, "IGNORE")); /* would hide other errors */
    }
    ck_assert(odbox_dialect_postgresql.has_partial_indexes);
    ck_assert(!odbox_dialect_mysql.has_partial_indexes);
    ck_assert_str_eq(odbox_dialect_mysql.uuid_type, "CHAR(36) CHARACTER SET ascii");
    ck_assert_str_eq(odbox_dialect_mariadb.uuid_type, "UUID");
    ck_assert_str_eq(odbox_dialect_postgresql.json_type, "JSONB");
    ck_assert_str_eq(odbox_dialect_mariadb.timestamp_type, "DATETIME(6)");
    /* what names, owners and the catalogue need from every dialect */
    for (const odbox_dialect *const *d = odbox_dialects(); *d; d++) {
        ck_assert_msg((*d)->identifier_quote && strlen((*d)->identifier_quote) == 1, "%s", (*d)->name);
        ck_assert_msg((*d)->owner_sql && (*d)->table_columns_sql && (*d)->server_version_sql, "%s", (*d)->name);
    }
    ck_assert_str_eq(odbox_dialect_postgresql.identifier_quote, "\"");
    ck_assert_str_eq(odbox_dialect_mysql.identifier_quote, "`");
}
END_TEST

START_TEST(connection_strings)
{
    const odbox_dialect *d = NULL;
    char *odbc = NULL, *secret = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_dsn_resolve("postgresql://u:p%3Bw@db.example:6543/app?sslmode=require",
                                       &d, &odbc, &secret, &e), ODBOX_OK);
    ck_assert_ptr_eq(d, &odbox_dialect_postgresql);
    ck_assert_str_eq(odbc, "Driver={PostgreSQL ANSI};Server=db.example;Port=6543;Database=app;Uid=u;"
                           "Pwd={p;w};Protocol=7.4-1;UseServerSidePrepare=1;BoolsAsChar=0;"
                           "UseDeclareFetch=0;ConnSettings={SET client_encoding TO 'UTF8'};"
                           "pqopt={keepalives=1 keepalives_idle=150 keepalives_interval=30 keepalives_count=5 "
                           "tcp_user_timeout=300000};sslmode=require;");
    ck_assert_str_eq(secret, "p;w");
    free(odbc);
    free(secret);

    ck_assert_int_eq(odbox_dsn_resolve("mariadb://u@[::1]/app?driver=My%20Driver", &d, &odbc, &secret, &e),
                     ODBOX_OK);
    ck_assert_ptr_eq(d, &odbox_dialect_mariadb);
    ck_assert_str_eq(odbc, "Driver={My Driver};Server=::1;Port=3306;Database=app;Uid=u;CONN_TIMEOUT=10;"
                           "READ_TIMEOUT=300;WRITE_TIMEOUT=300;");
    ck_assert_ptr_null(secret);
    free(odbc);

    /* dialect= overrides the scheme; Protocol can be overridden by the user */
    ck_assert_int_eq(odbox_dsn_resolve("mariadb://u@h/app?dialect=mysql", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_ptr_eq(d, &odbox_dialect_mysql);
    free(odbc);
    ck_assert_int_eq(odbox_dsn_resolve("postgresql://h/db?Protocol=7.4-2", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_ptr_nonnull(strstr(odbc, "Protocol=7.4-2;"));
    ck_assert_ptr_null(strstr(odbc, "7.4-1"));
    free(odbc);

    /* raw ODBC strings pass through; the dialect comes from the server */
    ck_assert_int_eq(odbox_dsn_resolve("DSN=mydsn;UID=u;PWD=secret", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_ptr_null(d);
    ck_assert_str_eq(odbc, "DSN=mydsn;UID=u;PWD=secret");
    free(odbc);
    ck_assert_int_eq(odbox_dsn_resolve("DSN=mydsn;dialect=postgresql", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_ptr_eq(d, &odbox_dialect_postgresql);
    free(odbc);

    ck_assert_int_eq(odbox_dsn_resolve("oracle://u:s3cr3t@h/db", &d, &odbc, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown scheme"));
    ck_assert_ptr_null(strstr(e.message, "s3cr3t"));
    ck_assert_int_eq(odbox_dsn_resolve("postgresql://u:s3cr3t@h/db?dialect=db2", &d, &odbc, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown dialect"));
    ck_assert_ptr_null(strstr(e.message, "s3cr3t"));
    /* dialect= chooses only among the dialects that read the URL alike:
     * another would connect to the URL's server as a different one */
    odbc = NULL;
    ck_assert_int_eq(odbox_dsn_resolve("postgresql://u:s3cr3t@h/db?dialect=mysql", &d, &odbc, NULL, &e),
                     ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "DSN: dialect=mysql does not go with the scheme postgresql (the URL is for postgresql)");
    ck_assert_ptr_null(odbc);
    ck_assert_int_eq(odbox_dsn_resolve("sqlite:app.db?dialect=postgresql", &d, &odbc, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "does not go with the scheme sqlite"));
    ck_assert_int_eq(odbox_dsn_resolve("mysql://u@h/app?dialect=mariadb", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_ptr_eq(d, &odbox_dialect_mariadb);
    free(odbc);
    ck_assert_int_eq(odbox_dsn_resolve("postgres://h/db?dialect=pg", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_ptr_eq(d, &odbox_dialect_postgresql);
    free(odbc);

    /* eventlog= is odbox's: it never reaches the driver */
    ck_assert_int_eq(odbox_dsn_resolve("mariadb://u@h/app?eventlog=ev_b&OPTION=3", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_str_eq(odbc, "Driver={MariaDB Unicode};Server=h;Port=3306;Database=app;Uid=u;"
                           "CONN_TIMEOUT=10;READ_TIMEOUT=300;WRITE_TIMEOUT=300;OPTION=3;");
    free(odbc);
    ck_assert_int_eq(odbox_dsn_resolve("DSN=mydsn;eventlog=ev_b;UID=u", &d, &odbc, NULL, &e), ODBOX_OK);
    ck_assert_str_eq(odbc, "DSN=mydsn;UID=u");
    free(odbc);
}
END_TEST

/* Flyway's file names and version order (src/migrate_version.c). */
START_TEST(migration_names_and_versions)
{
    char v[ODBOX_MIGRATION_VERSION_MAX], desc[256];
    odbox_error e;
    static const struct {
        const char *name, *version, *desc;
    } good[] = {
        {"V1__init.sql", "1", "init"},
        {"V1.1__add_x.sql", "1.1", "add x"},
        {"V2_0_3__three_parts.sql", "2.0.3", "three parts"},
        {"V007__leading_zeros.sql", "007", "leading zeros"},
        {"V0.1__below_one.sql", "0.1", "below one"},
        {"V20240131120000__timestamp.sql", "20240131120000", "timestamp"},
        {"V123456789012345678__eighteen.sql", "123456789012345678", "eighteen"},
        {"V1___lead.sql", "1", " lead"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(odbox_migration_name_parse(good[i].name, v, desc, sizeof desc, &e) == ODBOX_OK, "%s: %s",
                      good[i].name, e.message);
        ck_assert_str_eq(v, good[i].version);
        ck_assert_str_eq(desc, good[i].desc);
    }
    static const struct {
        const char *name, *why;
    } bad[] = {
        {"init.sql", "is not named V<version>__<description>.sql"},
        {"R__repeatable.sql", "is not named"},
        {"V__x.sql", "must be digits"},
        {"Vx__x.sql", "must be digits"},
        {"V1_x.sql", "expected '__' between the version and the description"},
        {"V1.__x.sql", "expected '__'"},
        {"V1..2__x.sql", "expected '__'"},
        {"V1-2__x.sql", "expected '__'"},
        {"V0__x.sql", "version 0 is not allowed: versions start above 0"},
        {"V0.0__x.sql", "version 0.0 is not allowed"},
        {"V12345678901234567890__x.sql", "version part 12345678901234567890 has 20 digits (at most 18)"},
        {"V1.1234567890123456789__x.sql", "has 19 digits"},
        {"V1__.sql", "no description"},
        {"V1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17.18.19.20.21.22__x.sql", "longer than 50"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        odbox_error_clear(&e);
        ck_assert_msg(odbox_migration_name_parse(bad[i].name, v, desc, sizeof desc, &e) == ODBOX_EINVAL,
                      "accepted %s", bad[i].name);
        ck_assert_msg(strstr(e.message, bad[i].why), "%s: %s", bad[i].name, e.message);
        ck_assert_msg(strstr(e.message, bad[i].name), "%s: the message does not name the file: %s", bad[i].name,
                      e.message);
    }
    /* ordered part by part, as numbers; a missing part is 0 */
    static const char *const order[] = {"0.1", "1", "1.0.1", "1.1", "1.2", "1.10", "2", "2.0.3", "10", "010.1"};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        for (size_t j = 0; j < sizeof order / sizeof order[0]; j++) {
            int c = odbox_migration_version_cmp(order[i], order[j]);
            ck_assert_msg(i < j ? c < 0 : i > j ? c > 0 : c == 0, "%s vs %s: %d", order[i], order[j], c);
        }
    ck_assert_int_eq(odbox_migration_version_cmp("1", "1.0"), 0);
    ck_assert_int_eq(odbox_migration_version_cmp("1.0.0", "1"), 0);
    ck_assert_int_eq(odbox_migration_version_cmp("007", "7"), 0);
    ck_assert_int_eq(odbox_migration_version_cmp("123456789012345678", "123456789012345679"), -1);
    ck_assert_int_eq(odbox_migration_version_cmp("99", "123456789012345678"), -1);
}
END_TEST

/* migrate refuses a server older than its dialect's migrations need:
 * MariaDB before 10.7 (no UUID type), pointing at the mysql dialect. */
START_TEST(server_versions_a_dialect_needs)
{
    const odbox_dialect *m = odbox_dialect_find("mariadb");
    odbox_error e;
    ck_assert_str_eq(m->min_server_version, "10.7");
    static const char *const old[] = {"10.6.12-MariaDB-log", "10.6", "5.5.5-10.6.5-MariaDB",
                                      "10.3.39-MariaDB-0+deb10u1"};
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
        ck_assert_msg(odbox_server_version_check(m, old[i], &e) == ODBOX_EUNSUPPORTED, "%s", old[i]);
        ck_assert_msg(strstr(e.message, "older than 10.7") && strstr(e.message, "dialect=mysql") &&
                          strstr(e.message, "UUID"),
                      "%s", e.message);
    }
    ck_assert_ptr_nonnull(strstr(e.message, "the server is mariadb 10.3.39,"));
    static const char *const ok[] = {"10.7.0", "10.7", "10.11.19-MariaDB-0+deb12u1", "11.4.2-MariaDB",
                                     "5.5.5-10.11.6-MariaDB", "", "unknown"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        ck_assert_msg(odbox_server_version_check(m, ok[i], &e) == ODBOX_OK, "%s", ok[i]);
    ck_assert_int_eq(odbox_server_version_check(m, NULL, &e), ODBOX_OK);
    /* the others name no minimum */
    for (const odbox_dialect *const *d = odbox_dialects(); *d; d++)
        if (*d != m) {
            ck_assert_ptr_null((*d)->min_server_version);
            ck_assert_int_eq(odbox_server_version_check(*d, "1.0", &e), ODBOX_OK);
        }
}
END_TEST

START_TEST(multi_row_sql)
{
    const char *forms[] = {"?", "CAST(? AS UUID)", "?"};
    char *s = odbox_sql_rows(2, forms, 3);
    ck_assert_str_eq(s, "(?,CAST(? AS UUID),?),(?,CAST(? AS UUID),?)");
    free(s);
    ck_assert_ptr_null(odbox_sql_rows(0, forms, 3));
    ck_assert_ptr_null(odbox_sql_rows(1, forms, 0));
    s = odbox_sql_insert_source(2, forms, 3, 0);
    ck_assert_str_eq(s, "VALUES (?,CAST(? AS UUID),?),(?,CAST(? AS UUID),?)");
    free(s);
    s = odbox_sql_insert_source(1, forms, 3, 1);
    ck_assert_str_eq(s, "SELECT ?,CAST(? AS UUID),?");
    free(s);
    ck_assert_ptr_null(odbox_sql_insert_source(2, forms, 3, 1)); /* a SELECT is one row */
    ck_assert_ptr_null(odbox_sql_insert_source(0, forms, 3, 0));
}
END_TEST

/* A shard's writes as one statement: PostgreSQL's data-modifying WITH;
 * the guard makes every later statement depend on the first (an UPDATE). */
START_TEST(joined_writes_sql)
{
    const char *const stmts[] = {"UPDATE t SET a = ? WHERE id = ? AND version = ?", "INSERT INTO u (x) SELECT ?",
                                 "INSERT INTO ev.events (y) SELECT ?"};
    const odbox_dialect *pg = &odbox_dialect_postgresql;
    char *sql = NULL;
    odbox_error e;
    ck_assert_int_eq(pg->join_writes_sql(pg, stmts, 3, 1, &sql, &e), ODBOX_OK);
    ck_assert_str_eq(sql, "WITH w0 AS (UPDATE t SET a = ? WHERE id = ? AND version = ? RETURNING 1), "
                          "w1 AS (INSERT INTO u (x) SELECT ? WHERE EXISTS (SELECT 1 FROM w0)) "
                          "INSERT INTO ev.events (y) SELECT ? WHERE EXISTS (SELECT 1 FROM w0)");
    free(sql);
    const char *const plain[] = {"INSERT INTO u (x) VALUES (?),(?)", "INSERT INTO ev.events (y) VALUES (?)"};
    ck_assert_int_eq(pg->join_writes_sql(pg, plain, 2, 0, &sql, &e), ODBOX_OK);
    ck_assert_str_eq(sql, "WITH w0 AS (INSERT INTO u (x) VALUES (?),(?)) INSERT INTO ev.events (y) VALUES (?)");
    free(sql);
    ck_assert_int_eq(pg->join_writes_sql(pg, plain + 1, 1, 0, &sql, &e), ODBOX_OK);
    ck_assert_str_eq(sql, plain[1]);
    free(sql);
    ck_assert_int_eq(pg->join_writes_sql(pg, stmts, 0, 0, &sql, &e), ODBOX_EINVAL);
    /* no data-modifying WITH: the executor takes a transaction there */
    ck_assert_ptr_null(odbox_dialect_mysql.join_writes_sql);
    ck_assert_ptr_null(odbox_dialect_mariadb.join_writes_sql);
}
END_TEST

/* The key of op/count with two tagged names. */
static odbox_sql_key key_of(int op, size_t count, int tag1, const char *name1, int tag2, const char *name2)
{
    odbox_sql_key k;
    odbox_sql_key_init(&k, op, count);
    odbox_sql_key_add(&k, tag1, name1);
    odbox_sql_key_add(&k, tag2, name2);
    return k;
}

static int same_key(odbox_sql_key a, odbox_sql_key b)
{
    return a.n == b.n && !memcmp(a.b, b.b, a.n);
}

/* The statement cache finds generated SQL by these keys: parts that differ
 * in any way (split, tag, NULL, operation, count) must give other keys. */
START_TEST(sql_keys_tell_parts_apart)
{
    odbox_sql_key a = key_of(ODBOX_SQL_INSERT, 1, 0, "ab", 0, "c");
    ck_assert(same_key(a, key_of(ODBOX_SQL_INSERT, 1, 0, "ab", 0, "c")));
    ck_assert(!same_key(a, key_of(ODBOX_SQL_INSERT, 1, 0, "a", 0, "bc")));
    ck_assert(!same_key(a, key_of(ODBOX_SQL_INSERT, 1, 1, "ab", 0, "c")));
    ck_assert(!same_key(a, key_of(ODBOX_SQL_UPDATE, 1, 0, "ab", 0, "c")));
    ck_assert(!same_key(a, key_of(ODBOX_SQL_INSERT, 2, 0, "ab", 0, "c")));
    ck_assert(!same_key(key_of(ODBOX_SQL_EVENTS, 1, 0, NULL, 0, "x"), key_of(ODBOX_SQL_EVENTS, 1, 0, "", 0, "x")));
    ck_assert(a.b[0] != 'S' && a.b[0] != 'I' && a.b[0] != 'U'); /* never equal to SQL text */
    odbox_sql_key c1 = key_of(ODBOX_SQL_JOINED, 2, 0, "t", 0, "ev"), c2 = c1;
    odbox_sql_key_add_count(&c1, ODBOX_SQL_INSERT, 1);
    odbox_sql_key_add_count(&c2, ODBOX_SQL_INSERT, 2);
    ck_assert(!same_key(c1, c2));

    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    a = key_of(ODBOX_SQL_INSERT, 1, 0, longname, 0, longname);
    ck_assert(!a.too_long);
    odbox_sql_key_add(&a, 0, longname);
    ck_assert(a.too_long); /* then SQL text is the key */
}
END_TEST

START_TEST(pool_rejects_bad_input_without_connecting)
{
    odbox_pool *p = (odbox_pool *)1;
    odbox_error e;
    ck_assert_int_eq(odbox_pool_open("not a dsn", NULL, &p, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(p);
    odbox_pool_config bad = {.size = -1};
    ck_assert_int_eq(odbox_pool_open("postgresql://h/db", &bad, &p, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_pool_open("postgresql://h/db", NULL, &p, &e), ODBOX_OK);
    ck_assert_ptr_eq(odbox_pool_dialect(p), &odbox_dialect_postgresql);
    odbox_pool_free(&p);
    ck_assert_ptr_null(p);
    odbox_conn *c = (odbox_conn *)1;
    ck_assert_int_eq(odbox_conn_open("mysql://u:pw@h:99999/db", &c, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(c);
}
END_TEST

static int never_performed(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params, (void)plan, (void)err;
    (*(int *)user)++;
    return ODBOX_OK;
}

/* Bad keys are refused before anything runs or connects. */
START_TEST(idempotency_keys_refuse_bad_input)
{
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn("postgresql://u@127.0.0.1:1/db", &r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_open("com.example.unit", r, NULL, &exe, &e), ODBOX_OK);
    int calls = 0;
    odbox_action a = {.name = "Never", .perform = never_performed, .user = &calls};
    char long_key[300];
    memset(long_key, 'k', sizeof long_key);
    long_key[256] = '\0';
    odbox_result res = {.attempts = 9};
    ck_assert_int_eq(odbox_execute_keyed(exe, &a, NULL, long_key, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "256 bytes (at most 255)"), "%s", e.message);
    ck_assert_int_eq(res.attempts, 0);
    ck_assert_int_eq(odbox_execute_keyed(exe, &a, NULL, "", NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "empty"), "%s", e.message);
    ck_assert_int_eq(odbox_execute_keyed(exe, &a, NULL, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_execute_keyed(exe, &a, NULL, "a\nb", NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "control character (byte 1)"), "%s", e.message);
    ck_assert_int_eq(odbox_execute_keyed(NULL, &a, NULL, "ok", NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(calls, 0);
    /* 255 bytes and any printable byte are a key */
    long_key[255] = '\0';
    ck_assert_int_eq(odbox_idem_key_check("t", long_key, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_idem_key_check("t", "req 7/\xc3\xa9", &e), ODBOX_OK);
    /* "the same params": the same JSON text, so key order matters */
    char h1[65], h2[65], h3[65];
    odbox_idem_params_sha256("{\"a\":1,\"b\":2}", h1);
    odbox_idem_params_sha256("{\"a\":1,\"b\":2}", h2);
    odbox_idem_params_sha256("{\"b\":2,\"a\":1}", h3);
    ck_assert_str_eq(h1, h2);
    ck_assert_str_ne(h1, h3);
    odbox_idem_outcome o = {.action_id = "0191e5a4-1111-7000-8000-000000000001"};
    memcpy(o.params_sha256, h1, sizeof h1);
    ck_assert_int_eq(odbox_idem_match(&o, "k", "A", h2, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_idem_match(&o, "k", "A", h3, &e), ODBOX_EUNIQUE);
    ck_assert_msg(strstr(e.message, "'k' was used with other parameters"), "%s", e.message);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
}
END_TEST

/* libpq's $n for '?': only the placeholders, never a '?' inside a
 * string, an escape string, a quoted name, a comment (nested too) or a
 * dollar quote; text after an unclosed quote is copied as it is. */
START_TEST(number_params)
{
    static const struct {
        const char *in, *out;
        int n;
    } cases[] = {
        {"SELECT ?", "SELECT $1", 1},
        {"INSERT INTO t VALUES (?,?),(?,?)", "INSERT INTO t VALUES ($1,$2),($3,$4)", 4},
        {"SELECT '?', ?", "SELECT '?', $1", 1},
        {"SELECT 'it''s ?', ?", "SELECT 'it''s ?', $1", 1},
        {"SELECT E'\\'?', ?", "SELECT E'\\'?', $1", 1},
        {"SELECT \"a?\" FROM t WHERE x = ?", "SELECT \"a?\" FROM t WHERE x = $1", 1},
        {"SELECT ? -- why?\n, ?", "SELECT $1 -- why?\n, $2", 2},
        {"SELECT /* ? /* ? */ ? */ ?", "SELECT /* ? /* ? */ ? */ $1", 1},
        {"SELECT $$?$$, $tag$ ? $$ ? $tag$, ?", "SELECT $$?$$, $tag$ ? $$ ? $tag$, $1", 1},
        {"SELECT x$y, ?", "SELECT x$y, $1", 1},
        {"SELECT 1", "SELECT 1", 0},
        {"", "", 0},
        {"SELECT 'open ?", "SELECT 'open ?", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = -1;
        char *out = odbox_sql_number_params(cases[i].in, &n);
        ck_assert_ptr_nonnull(out);
        ck_assert_msg(!strcmp(out, cases[i].out), "%s -> %s", cases[i].in, out);
        ck_assert_int_eq(n, cases[i].n);
        free(out);
    }
}
END_TEST

Suite *basics_suite(void)
{
    Suite *s = suite_create("basics");
    TCase *t = tcase_create("core");
    tcase_add_test(t, error_names_are_distinct);
    tcase_add_test(t, error_fail_and_prefix);
    tcase_add_test(t, error_set_public);
    tcase_add_test(t, sha256_known_vectors);
    tcase_add_test(t, split_statements);
    tcase_add_test(t, split_rejects_unterminated);
    tcase_add_test(t, split_mysql_rules);
    tcase_add_test(t, a_text_file_takes_about_its_size);
    tcase_add_test(t, placeholders);
    tcase_add_test(t, number_params);
    tcase_add_test(t, names);
    tcase_add_test(t, shard_ids);
    tcase_add_test(t, dialect_table);
    tcase_add_test(t, connection_strings);
    tcase_add_test(t, migration_names_and_versions);
    tcase_add_test(t, server_versions_a_dialect_needs);
    tcase_add_test(t, multi_row_sql);
    tcase_add_test(t, joined_writes_sql);
    tcase_add_test(t, sql_keys_tell_parts_apart);
    tcase_add_test(t, pool_rejects_bad_input_without_connecting);
    tcase_add_test(t, idempotency_keys_refuse_bad_input);
    suite_add_tcase(s, t);
    return s;
}
