/* odbox — unit tests for DSN parsing and redaction (src/dsn.c). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "odbox/dsn.h"
#include "unit.h"

#define SECRET "s3cr3t-PW"

static odbox_dsn *parse_ok(const char *text)
{
    odbox_dsn *d = NULL;
    odbox_error err;
    int rc = odbox_dsn_parse(text, &d, &err);
    ck_assert_msg(rc == 0, "parse '%s' failed: %d %s", text, rc, err.message);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(err.code, 0);
    return d;
}

static const char *opt(const odbox_dsn *d, size_t i, int value)
{
    ck_assert_uint_lt(i, d->noptions);
    return value ? d->options[i].value : d->options[i].key;
}

/* ---- valid URLs ------------------------------------------------------------ */

START_TEST(test_postgresql_all_parts)
{
    odbox_dsn *d = parse_ok("postgresql://alice:pw@db.example.com:5433/orders"
                            "?sslmode=require&application_name=odbox");
    ck_assert_pstr_eq(d->scheme, "postgresql");
    ck_assert_pstr_eq(d->user, "alice");
    ck_assert_pstr_eq(d->password, "pw");
    ck_assert_pstr_eq(d->host, "db.example.com");
    ck_assert_int_eq(d->port, 5433);
    ck_assert_pstr_eq(d->database, "orders");
    ck_assert_ptr_null(d->driver);
    ck_assert_ptr_null(d->dialect);
    ck_assert_ptr_null(d->raw);
    ck_assert_uint_eq(d->noptions, 2);
    ck_assert_str_eq(opt(d, 0, 0), "sslmode");
    ck_assert_str_eq(opt(d, 0, 1), "require");
    ck_assert_str_eq(opt(d, 1, 0), "application_name");
    ck_assert_str_eq(opt(d, 1, 1), "odbox");
    odbox_dsn_free(&d);
    ck_assert_ptr_null(d);
}
END_TEST

START_TEST(test_defaults)
{
    odbox_dsn *d = parse_ok("POSTGRESQL://localhost");
    ck_assert_pstr_eq(d->scheme, "postgresql");
    ck_assert_pstr_eq(d->host, "localhost");
    ck_assert_ptr_null(d->user);
    ck_assert_ptr_null(d->password);
    ck_assert_int_eq(d->port, 0);
    ck_assert_ptr_null(d->database);
    ck_assert_ptr_null(d->driver);
    ck_assert_ptr_null(d->dialect);
    ck_assert_ptr_null(d->raw);
    ck_assert_ptr_null(d->options);
    ck_assert_uint_eq(d->noptions, 0);
    odbox_dsn_free(&d);

    d = parse_ok("postgres://h/");
    ck_assert_pstr_eq(d->scheme, "postgres");
    ck_assert_ptr_null(d->database);
    odbox_dsn_free(&d);

    d = parse_ok("MySQL://h/db?");
    ck_assert_pstr_eq(d->scheme, "mysql");
    ck_assert_pstr_eq(d->database, "db");
    ck_assert_uint_eq(d->noptions, 0);
    odbox_dsn_free(&d);

    d = parse_ok("mariadb://h?charset=utf8");
    ck_assert_ptr_null(d->database);
    ck_assert_uint_eq(d->noptions, 1);
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_mysql_mariadb)
{
    odbox_dsn *d = parse_ok("mysql://root@127.0.0.1:3306/app");
    ck_assert_pstr_eq(d->scheme, "mysql");
    ck_assert_pstr_eq(d->user, "root");
    ck_assert_ptr_null(d->password);
    ck_assert_pstr_eq(d->host, "127.0.0.1");
    ck_assert_int_eq(d->port, 3306);
    ck_assert_pstr_eq(d->database, "app");
    odbox_dsn_free(&d);

    d = parse_ok("mariadb://u:@maria-1:65535/x_y");
    ck_assert_pstr_eq(d->scheme, "mariadb");
    ck_assert_pstr_eq(d->user, "u");
    ck_assert_pstr_eq(d->password, "");
    ck_assert_int_eq(d->port, 65535);
    ck_assert_pstr_eq(d->database, "x_y");
    odbox_dsn_free(&d);

    d = parse_ok("mysql://h:1");
    ck_assert_int_eq(d->port, 1);
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_ipv6)
{
    odbox_dsn *d = parse_ok("postgresql://u:p@[::1]:5432/db");
    ck_assert_pstr_eq(d->host, "::1");
    ck_assert_int_eq(d->port, 5432);
    ck_assert_pstr_eq(d->database, "db");
    odbox_dsn_free(&d);

    d = parse_ok("mariadb://[2001:db8::a:b]/db");
    ck_assert_pstr_eq(d->host, "2001:db8::a:b");
    ck_assert_int_eq(d->port, 0);
    odbox_dsn_free(&d);

    d = parse_ok("mysql://[::ffff:10.0.0.1]:3307");
    ck_assert_pstr_eq(d->host, "::ffff:10.0.0.1");
    ck_assert_int_eq(d->port, 3307);
    odbox_dsn_free(&d);

    d = parse_ok("postgresql://[fe80::1%25eth0]/db");
    ck_assert_pstr_eq(d->host, "fe80::1%eth0");
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_percent_decoding)
{
    odbox_dsn *d = parse_ok("postgresql://us%40er:p%3Aa%2Fs%40s%25:x@host/my%20db");
    ck_assert_pstr_eq(d->user, "us@er");
    ck_assert_pstr_eq(d->password, "p:a/s@s%:x");
    ck_assert_pstr_eq(d->host, "host");
    ck_assert_pstr_eq(d->database, "my db");
    odbox_dsn_free(&d);

    /* Unix socket directory as host; UTF-8 bytes pass through */
    d = parse_ok("postgresql://%2Fvar%2Frun%2Fpostgresql/caf%C3%A9?application_name=a%26b%3Dc");
    ck_assert_pstr_eq(d->host, "/var/run/postgresql");
    ck_assert_pstr_eq(d->database, "caf\xc3\xa9");
    ck_assert_str_eq(opt(d, 0, 0), "application_name");
    ck_assert_str_eq(opt(d, 0, 1), "a&b=c");
    odbox_dsn_free(&d);

    /* reserved characters that need no encoding in a password */
    d = parse_ok("mysql://u:a;b!c$d*e[f]g@h/db");
    ck_assert_pstr_eq(d->password, "a;b!c$d*e[f]g");
    odbox_dsn_free(&d);

    /* '+' is literal, '=' inside a value is kept, encoded keys are decoded */
    d = parse_ok("postgresql://h/db?opt%5Fa=x+y=z");
    ck_assert_str_eq(opt(d, 0, 0), "opt_a");
    ck_assert_str_eq(opt(d, 0, 1), "x+y=z");
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_options_order_case_overrides)
{
    odbox_dsn *d = parse_ok("mysql://h/db?Charset=utf8mb4&DIALECT=mariadb"
                            "&Driver=MariaDB%20ODBC%203.1&SSLMODE=x&empty=");
    ck_assert_pstr_eq(d->dialect, "mariadb");
    ck_assert_pstr_eq(d->driver, "MariaDB ODBC 3.1");
    ck_assert_uint_eq(d->noptions, 3);
    ck_assert_str_eq(opt(d, 0, 0), "Charset");
    ck_assert_str_eq(opt(d, 0, 1), "utf8mb4");
    ck_assert_str_eq(opt(d, 1, 0), "SSLMODE");
    ck_assert_str_eq(opt(d, 1, 1), "x");
    ck_assert_str_eq(opt(d, 2, 0), "empty");
    ck_assert_str_eq(opt(d, 2, 1), "");
    odbox_dsn_free(&d);

    d = parse_ok("postgresql://h/db?dialect=postgresql&driver=PostgreSQL%20Unicode");
    ck_assert_pstr_eq(d->dialect, "postgresql");
    ck_assert_pstr_eq(d->driver, "PostgreSQL Unicode");
    ck_assert_uint_eq(d->noptions, 0);
    odbox_dsn_free(&d);

    /* a password option stays an option (and is redacted, see below) */
    d = parse_ok("postgresql://h/db?password=pw&z=1");
    ck_assert_ptr_null(d->password);
    ck_assert_str_eq(opt(d, 0, 0), "password");
    ck_assert_str_eq(opt(d, 0, 1), "pw");
    ck_assert_str_eq(opt(d, 1, 0), "z");
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_unknown_scheme)
{
    odbox_dsn *d = parse_ok("Foo+Bar://u:p@h:1/x/y?k=v");
    ck_assert_pstr_eq(d->scheme, "foo+bar");
    ck_assert_pstr_eq(d->user, "u");
    ck_assert_pstr_eq(d->host, "h");
    ck_assert_int_eq(d->port, 1);
    ck_assert_pstr_eq(d->database, "x/y");
    ck_assert_str_eq(opt(d, 0, 0), "k");
    odbox_dsn_free(&d);

    d = parse_ok("duckdb:///data.db");
    ck_assert_pstr_eq(d->scheme, "duckdb");
    ck_assert_ptr_null(d->host);
    ck_assert_pstr_eq(d->database, "data.db");
    odbox_dsn_free(&d);
}
END_TEST

static const struct {
    const char *dsn, *database;
} sqlite_cases[] = {
    {"sqlite:///var/lib/app.db", "/var/lib/app.db"},
    {"SQLite:///tmp/x.db", "/tmp/x.db"},
    {"sqlite://localhost/abs.db", "/abs.db"},
    {"sqlite://./rel.db", "./rel.db"},
    {"sqlite://../up/rel.db", "../up/rel.db"},
    {"sqlite://rel/path.db", "rel/path.db"},
    {"sqlite://rel.db", "rel.db"},
    {"sqlite://data/app.db?Timeout=500", "data/app.db"},
    {"sqlite://LocalHost/abs.db", "/abs.db"},
    {"sqlite:rel.db", "rel.db"},
    {"sqlite:dir/sub/rel.db", "dir/sub/rel.db"},
    {"sqlite:/abs/opaque.db", "/abs/opaque.db"},
    {"sqlite::memory:", ":memory:"},
    {"sqlite:///my%20file%3F.db", "/my file?.db"},
};

START_TEST(test_sqlite_paths)
{
    odbox_dsn *d = parse_ok(sqlite_cases[_i].dsn);
    ck_assert_pstr_eq(d->scheme, "sqlite");
    ck_assert_pstr_eq(d->database, sqlite_cases[_i].database);
    ck_assert_ptr_null(d->host);
    ck_assert_ptr_null(d->user);
    ck_assert_ptr_null(d->password);
    ck_assert_int_eq(d->port, 0);
    ck_assert_ptr_null(d->raw);
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_sqlite_query)
{
    odbox_dsn *d = parse_ok("sqlite:///x.db?mode=ro&dialect=sqlite");
    ck_assert_pstr_eq(d->database, "/x.db");
    ck_assert_pstr_eq(d->dialect, "sqlite");
    ck_assert_uint_eq(d->noptions, 1);
    ck_assert_str_eq(opt(d, 0, 0), "mode");
    ck_assert_str_eq(opt(d, 0, 1), "ro");
    odbox_dsn_free(&d);

    d = parse_ok("sqlite:rel.db?cache=shared");
    ck_assert_pstr_eq(d->database, "rel.db");
    ck_assert_uint_eq(d->noptions, 1);
    odbox_dsn_free(&d);
}
END_TEST

/* ---- raw ODBC strings ---------------------------------------------------------- */

START_TEST(test_raw_dsn)
{
    odbox_dsn *d = parse_ok("DSN=name;UID=u;PWD=p");
    ck_assert_ptr_null(d->scheme);
    ck_assert_pstr_eq(d->raw, "DSN=name;UID=u;PWD=p");
    ck_assert_pstr_eq(d->user, "u");
    ck_assert_pstr_eq(d->password, "p");
    ck_assert_ptr_null(d->host);
    ck_assert_ptr_null(d->database);
    ck_assert_ptr_null(d->driver);
    ck_assert_ptr_null(d->dialect);
    ck_assert_uint_eq(d->noptions, 0);
    odbox_dsn_free(&d);

    d = parse_ok("DSN = name ; Uid = bob ;");
    ck_assert_pstr_eq(d->raw, "DSN = name ; Uid = bob ;");
    ck_assert_pstr_eq(d->user, "bob");
    odbox_dsn_free(&d);

    d = parse_ok("dsn=x;User=me;Password={pa ss}");
    ck_assert_pstr_eq(d->user, "me");
    ck_assert_pstr_eq(d->password, "pa ss");
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_raw_driver_braces)
{
    const char *s = "Driver={PostgreSQL Unicode};Server=db;Port=5432;Database=d;"
                    "Uid=u;Pwd={a;b}};c};Url=http://x/y?z=1";
    odbox_dsn *d = parse_ok(s);
    ck_assert_pstr_eq(d->raw, s);
    ck_assert_ptr_null(d->driver);
    ck_assert_pstr_eq(d->user, "u");
    ck_assert_pstr_eq(d->password, "a;b};c");
    ck_assert_ptr_null(d->scheme);
    odbox_dsn_free(&d);

    d = parse_ok("Driver={MariaDB ODBC 3.1 Driver};SERVER=h;OPTION=3;");
    ck_assert_pstr_eq(d->raw, "Driver={MariaDB ODBC 3.1 Driver};SERVER=h;OPTION=3;");
    ck_assert_ptr_null(d->user);
    ck_assert_ptr_null(d->password);
    odbox_dsn_free(&d);
}
END_TEST

START_TEST(test_raw_dialect_removed)
{
    odbox_dsn *d = parse_ok("DSN=x;Dialect=MySQL;UID=u");
    ck_assert_pstr_eq(d->raw, "DSN=x;UID=u");
    ck_assert_pstr_eq(d->dialect, "MySQL");
    ck_assert_ptr_null(d->driver);
    odbox_dsn_free(&d);

    d = parse_ok("dialect={mariadb};DSN=x;");
    ck_assert_pstr_eq(d->raw, "DSN=x;");
    ck_assert_pstr_eq(d->dialect, "mariadb");
    odbox_dsn_free(&d);

    d = parse_ok("DSN=x; DIALECT = postgresql");
    ck_assert_pstr_eq(d->raw, "DSN=x");
    ck_assert_pstr_eq(d->dialect, "postgresql");
    odbox_dsn_free(&d);
}
END_TEST

/* Each of values is ODBOX_EINVAL with why[i] in the message, which never
 * holds the password. */
static void assert_refused(const char *const *values, const char *const *why, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        odbox_dsn *d = (odbox_dsn *)1;
        odbox_error err;
        ck_assert_msg(odbox_dsn_parse(values[i], &d, &err) == ODBOX_EINVAL, "accepted %s", values[i]);
        ck_assert_ptr_null(d);
        ck_assert_msg(strstr(err.message, why[i]), "%s: %s", values[i], err.message);
        ck_assert_ptr_null(strstr(err.message, SECRET));
    }
}

/* eventlog= names the shard's eventlog: odbox's, never the driver's */
START_TEST(test_eventlog_option)
{
    odbox_dsn *d = parse_ok("mariadb://u:" SECRET "@h/app?EventLog=ev_app2&OPTION=3");
    ck_assert_pstr_eq(d->eventlog, "ev_app2");
    ck_assert_uint_eq(d->noptions, 1);
    ck_assert_str_eq(opt(d, 0, 0), "OPTION");
    odbox_dsn_free(&d);
    d = parse_ok("postgresql://h/app");
    ck_assert_ptr_null(d->eventlog);
    odbox_dsn_free(&d);
    /* raw strings lose the entry as they lose dialect= */
    d = parse_ok("DSN=x;eventlog=ev_b;UID=u;dialect=mysql");
    ck_assert_pstr_eq(d->raw, "DSN=x;UID=u");
    ck_assert_pstr_eq(d->eventlog, "ev_b");
    ck_assert_pstr_eq(d->dialect, "mysql");
    odbox_dsn_free(&d);
    d = parse_ok("DSN=x; EVENTLOG = {ev_c} ;");
    ck_assert_pstr_eq(d->raw, "DSN=x;");
    ck_assert_pstr_eq(d->eventlog, "ev_c");
    odbox_dsn_free(&d);

    /* validated as every name that reaches SQL text */
    static const char *const bad_values[] = {
        "mariadb://u:" SECRET "@h/app?eventlog=Ev",
        "mariadb://u:" SECRET "@h/app?eventlog=ev%3B%20DROP%20TABLE%20x",
        "mariadb://u:" SECRET "@h/app?eventlog=1ev",
        "mariadb://u:" SECRET "@h/app?eventlog=",
        "mariadb://u:" SECRET "@h/app?eventlog=a&eventlog=b",
        "DSN=x;PWD=" SECRET ";eventlog=e-v",
        "DSN=x;PWD=" SECRET ";eventlog=",
        "eventlog=ev",
        "mariadb://u:" SECRET "@h/app?eventlog=a234567890123456789012345678901234567890123456789012345678901234",
    };
    static const char *const why[] = {"not a valid name", "not a valid name", "not a valid name", "empty eventlog=",
                                      "duplicate", "not a valid name", "empty eventlog=", "no entries besides",
                                      "not a valid name"};
    assert_refused(bad_values, why, sizeof bad_values / sizeof bad_values[0]);
}
END_TEST

/* notify= and notify_interval_ms= are odbox's (cross-process wake-ups),
 * never the driver's */
START_TEST(test_notify_options)
{
    odbox_dsn *d = parse_ok("postgresql://u:" SECRET "@h/app?Notify=OFF&sslmode=require&notify_interval_ms=20");
    ck_assert_pstr_eq(d->notify, "OFF");
    ck_assert_pstr_eq(d->notify_interval_ms, "20");
    ck_assert_uint_eq(d->noptions, 1);
    ck_assert_str_eq(opt(d, 0, 0), "sslmode");
    odbox_dsn_free(&d);
    d = parse_ok("postgresql://h/app");
    ck_assert_ptr_null(d->notify);
    ck_assert_ptr_null(d->notify_interval_ms);
    odbox_dsn_free(&d);
    d = parse_ok("Driver={PostgreSQL ANSI};notify=on;Server=h;NOTIFY_INTERVAL_MS = 60000;Database=app");
    ck_assert_pstr_eq(d->raw, "Driver={PostgreSQL ANSI};Server=h;Database=app");
    ck_assert_pstr_eq(d->notify, "on");
    ck_assert_pstr_eq(d->notify_interval_ms, "60000");
    odbox_dsn_free(&d);

    static const char *const bad_values[] = {
        "postgresql://u:" SECRET "@h/app?notify=no",
        "postgresql://u:" SECRET "@h/app?notify=",
        "postgresql://u:" SECRET "@h/app?notify=on&notify=off",
        "postgresql://u:" SECRET "@h/app?notify_interval_ms=0",
        "postgresql://u:" SECRET "@h/app?notify_interval_ms=60001",
        "postgresql://u:" SECRET "@h/app?notify_interval_ms=5ms",
        "postgresql://u:" SECRET "@h/app?notify_interval_ms=-1",
        "postgresql://u:" SECRET "@h/app?notify_interval_ms=99999999999999999999",
        "Server=h;PWD=" SECRET ";notify=maybe",
        "Server=h;PWD=" SECRET ";notify_interval_ms=",
        "notify=off",
    };
    static const char *const why[] = {"must be on or off", "must be on or off", "duplicate",
                                      "1..60000", "1..60000", "1..60000", "1..60000", "1..60000",
                                      "must be on or off", "1..60000", "no entries besides"};
    assert_refused(bad_values, why, sizeof bad_values / sizeof bad_values[0]);
}
END_TEST

/* ---- malformed input ------------------------------------------------------------- */

static const struct {
    const char *dsn;
    const char *secret; /* text that must not appear in the message */
    const char *expect; /* substring of the message */
} bad[] = {
    {"", SECRET, "empty"},
    {"   ", SECRET, "spaces"},
    {"just some text", SECRET, "neither a URL"},
    {"postgresql//host/db", SECRET, "neither a URL"},
    {"postgresql:host/db", SECRET, "expected '//'"},
    {"postgresql:///db", SECRET, "missing host"},
    {"postgresql://", SECRET, "missing host"},
    {"postgresql://u:" SECRET "@/db", SECRET, "missing host"},
    {"mysql://u:" SECRET "@:3306/db", SECRET, "missing host"},
    {"foo://:5432/x", SECRET, "missing host"},
    {"postgresql://u:" SECRET "@host:abc/db", SECRET, "port 'abc' is not a number"},
    {"mysql://u:" SECRET "@host:-1/db", SECRET, "not a number"},
    {"mysql://u:" SECRET "@host:3306x/db", SECRET, "not a number"},
    {"postgresql://u:" SECRET "@host:0/db", SECRET, "out of range"},
    {"postgresql://u:" SECRET "@host:65536/db", SECRET, "out of range"},
    {"postgresql://u:" SECRET "@host:99999999999999999999999/db", SECRET, "out of range"},
    {"postgresql://u:" SECRET "@host:/db", SECRET, "empty port"},
    {"postgresql://u:" SECRET "@host:5432:1/db", SECRET, "more than one ':'"},
    {"postgresql://u:" SECRET "@::1/db", SECRET, "brackets"},
    /* password with an unencoded '/': must not be quoted as a "port" */
    {"postgresql://u:" SECRET "/x@host/db", SECRET, "not a number"},
    {"postgresql://u:s3cr3t?PW@host/db", "s3cr3t?PW", "not a number"},
    /* the port equals the (decoded) password */
    {"postgresql://u:%73%33cr3t-PW@host:" SECRET "/db", SECRET, "not a number"},
    {"postgresql://:" SECRET "@host/db", SECRET, "empty user name"},
    {"postgresql://@host/db", SECRET, "without a user"},
    {"postgresql://u@x:" SECRET "@host/db", SECRET, "%40"},
    {"postgresql://u:s3cr3t@PW@host/db", "s3cr3t@PW", "%40"},
    {"postgresql://u:s3cr3t PW@host/db", "s3cr3t PW", "space in the password"},
    {"postgresql://u:" SECRET "@[::1/db", SECRET, "unterminated '['"},
    {"postgresql://u:" SECRET "@[::1:5432", SECRET, "unterminated '['"},
    {"postgresql://u:" SECRET "@[]:5432/db", SECRET, "empty IPv6"},
    {"postgresql://u:" SECRET "@[::1]x/db", SECRET, "after ']'"},
    {"postgresql://u:" SECRET "@[::1]]/db", SECRET, "after ']'"},
    {"postgresql://u:" SECRET "@[zz::1]/db", SECRET, "invalid IPv6"},
    {"postgresql://u:" SECRET "@[1.2.3.4]/db", SECRET, "invalid IPv6"},
    {"postgresql://u:" SECRET "@[fe80::1%eth0]/db", SECRET, "invalid IPv6"},
    {"postgresql://u:" SECRET "@[::1]:99999/db", SECRET, "out of range"},
    {"postgresql://u%zz:" SECRET "@host/db", SECRET, "bad percent-encoding '%zz' in the user"},
    {"postgresql://u:" SECRET "%zz@host/db", SECRET, "bad percent-encoding in the password"},
    {"postgresql://u:" SECRET "%4@host/db", SECRET, "bad percent-encoding in the password"},
    {"mariadb://u:%s3cr3t-PW@host/db", "s3cr3t-PW", "bad percent-encoding in the password"},
    {"postgresql://u:" SECRET "@host/db%4", SECRET, "bad percent-encoding"},
    {"postgresql://u:" SECRET "@host/db%", SECRET, "bad percent-encoding"},
    {"postgresql://u:" SECRET "@host%zz/db", SECRET, "bad percent-encoding"},
    {"postgresql://u:" SECRET "@host/db?a=%G1", SECRET, "bad percent-encoding"},
    {"postgresql://u:" SECRET "@host/db?pass%zzword=x", SECRET, "bad percent-encoding"},
    {"postgresql://u:" SECRET "@host/d%00b", SECRET, "NUL"},
    {"postgresql://u:" SECRET "%00@host/db", SECRET, "NUL"},
    {"postgresql://u%00:" SECRET "@host/db", SECRET, "NUL"},
    {"postgresql://u:" SECRET "@host/db?a=%00", SECRET, "NUL"},
    {"postgresql://u:" SECRET "@ho%00st/db", SECRET, "NUL"},
    {"postgresql://u:" SECRET "@host/d%0Ab", SECRET, "control character"},
    {"postgresql://u:" SECRET "%7F@host/db", SECRET, "control character"},
    {"postgresql://u:" SECRET "@host/db\n", SECRET, "control character"},
    {"postgresql://u:" SECRET "@ho\tst/db", SECRET, "control character"},
    {"postgresql://u:" SECRET "@host/db\x7f", SECRET, "control character"},
    {"postgresql://u:" SECRET "@host/db?x=\x01", SECRET, "control character"},
    {"DSN=x;PWD=" SECRET "\r\n", SECRET, "control character"},
    {"postgresql://u:" SECRET "@host/db?a=1&a=2", SECRET, "duplicate query parameter 'a'"},
    {"postgresql://u:" SECRET "@host/db?sslmode=require&SSLMODE=disable", SECRET, "duplicate"},
    {"postgresql://h/db?password=" SECRET "&password=x", SECRET, "duplicate"},
    {"postgresql://u:" SECRET "@host/db?dialect=mysql&DIALECT=pg", SECRET, "duplicate"},
    {"postgresql://u:" SECRET "@host/db?driver=a&Driver=b", SECRET, "duplicate"},
    {"postgresql://u:" SECRET "@host/db?=x", SECRET, "empty name"},
    {"postgresql://u:" SECRET "@host/db?a=1&&b=2", SECRET, "stray '&'"},
    {"postgresql://u:" SECRET "@host/db?a=1&", SECRET, "stray '&'"},
    {"postgresql://u:" SECRET "@host/db?&a=1", SECRET, "stray '&'"},
    {"postgresql://u:" SECRET "@host/db?novalue", SECRET, "has no '='"},
    {"postgresql://h/db?pwd", SECRET, "has no '='"},
    {"postgresql://u:" SECRET "@host/db?dialect=", SECRET, "empty dialect="},
    {"postgresql://u:" SECRET "@host/db?driver=", SECRET, "empty driver="},
    {"postgresql://u:" SECRET "@host/db?a%3Db=1", SECRET, "invalid name in query parameter #1"},
    {"postgresql://u:" SECRET "@host/db?a b=1", SECRET, "space"},
    {"postgresql://u:" SECRET "@host/db?a=b c", SECRET, "space"},
    {"postgresql://h/db?pwd=s3cr3t<PW", "s3cr3t<PW", "not allowed"},
    {"postgresql://u:" SECRET "@ho st/db", SECRET, "space in the host"},
    {"postgresql://u:" SECRET "@host/my db", SECRET, "space in the database"},
    {"postgresql://u:" SECRET "@host/db ", SECRET, "space"},
    {"postgresql://u:" SECRET "@host/db/extra", SECRET, "unexpected '/'"},
    {"postgresql://u:" SECRET "@host/db#frag", SECRET, "'#'"},
    {"postgresql://u:s3cr3t#PW@host/db", "s3cr3t#PW", "'#'"},
    {"postgresql://u:" SECRET "@ho<st/db", SECRET, "invalid character '<' in the host"},
    {"postgresql://u:" SECRET "@h1,h2/db", SECRET, "only one host"},
    {"postgresql://u:" SECRET "@host/d|b", SECRET, "invalid character '|'"},
    {"postgresql://u:" SECRET "@h\xc3\xa9/db", SECRET, "non-ASCII byte in the host"},
    {"sqlite:", SECRET, "missing database file path"},
    {"sqlite://", SECRET, "missing database file path"},
    {"sqlite:///", SECRET, "missing database file path"},
    {"sqlite:///?mode=ro", SECRET, "missing database file path"},
    {"sqlite://host:5432/x.db", SECRET, "takes no port"},
    {"sqlite://localhost:1/x.db", SECRET, "takes no port"},
    {"sqlite://u:" SECRET "@/x.db", SECRET, "takes no user"},
    {"sqlite:///x.db?a=1&a=1", SECRET, "duplicate"},
    {"sqlite:my file.db", SECRET, "space"},
    {"sqlite:///x.db#y", SECRET, "'#'"},
    {"=value", SECRET, "empty key"},
    {" =value;PWD=" SECRET, SECRET, "empty key"},
    {";DSN=x;PWD=" SECRET, SECRET, "empty entry #1"},
    {"DSN=x;;PWD=" SECRET, SECRET, "empty entry #2"},
    {"DSN=x;PWD=" SECRET ";;", SECRET, "empty entry #3"},
    {"DSN=x;UID", SECRET, "has no '='"},
    {"DSN=x;PWD=" SECRET ";oops", SECRET, "has no '='"},
    {"Driver={PostgreSQL;PWD=" SECRET, SECRET, "unterminated '{'"},
    {"DSN=x;PWD={" SECRET, SECRET, "unterminated '{'"},
    {"Driver={x}y;PWD=" SECRET, SECRET, "after '}'"},
    {"DSN=x;PWD={" SECRET "}x", SECRET, "after '}'"},
    {"DSN=x;PWD=" SECRET ";pwd=other", SECRET, "duplicate key 'pwd'"},
    {"DSN=x;dialect=;PWD=" SECRET, SECRET, "empty dialect="},
    {"dialect=mysql", SECRET, "besides dialect="},
    {"D(SN)=x;PWD=" SECRET, SECRET, "invalid key in entry #1"},
    {" postgresql://u:" SECRET "@h/db?x=1", SECRET, "invalid key"},
    {"a:b=c;PWD=" SECRET, SECRET, "invalid key"},
};

START_TEST(test_malformed)
{
    odbox_dsn *d = (odbox_dsn *)&bad; /* must be reset to NULL */
    odbox_error err;
    memset(&err, 0, sizeof err);
    int rc = odbox_dsn_parse(bad[_i].dsn, &d, &err);
    ck_assert_msg(rc == ODBOX_EINVAL, "case %d '%s': rc %d (%s)", _i, bad[_i].dsn, rc,
                  err.message);
    ck_assert_ptr_null(d);
    ck_assert_int_eq(err.code, ODBOX_EINVAL);
    ck_assert_msg(err.message[0] != '\0', "case %d: empty message", _i);
    ck_assert_msg(strncmp(err.message, "DSN: ", 5) == 0, "case %d: '%s'", _i, err.message);
    ck_assert_msg(strstr(err.message, bad[_i].secret) == NULL,
                  "case %d '%s': message leaks the password: %s", _i, bad[_i].dsn, err.message);
    ck_assert_msg(strstr(err.message, "s3cr3t") == NULL,
                  "case %d '%s': message leaks the password: %s", _i, bad[_i].dsn, err.message);
    ck_assert_msg(strstr(err.message, bad[_i].expect) != NULL,
                  "case %d '%s': message '%s' lacks '%s'", _i, bad[_i].dsn, err.message,
                  bad[_i].expect);

    /* the redacted form of every malformed DSN hides the password too */
    char *r = odbox_dsn_redact(bad[_i].dsn);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(strstr(r, "s3cr3t") == NULL, "case %d: redact leaks: %s", _i, r);
    free(r);

    /* err may be NULL */
    d = NULL;
    ck_assert_int_eq(odbox_dsn_parse(bad[_i].dsn, &d, NULL), ODBOX_EINVAL);
    ck_assert_ptr_null(d);
}
END_TEST

START_TEST(test_too_long)
{
    size_t n = 5000;
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    strcpy(s, "postgresql://u:" SECRET "@host/");
    size_t len = strlen(s);
    memset(s + len, 'a', n - len);
    s[n] = '\0';
    odbox_dsn *d = NULL;
    odbox_error err;
    ck_assert_int_eq(odbox_dsn_parse(s, &d, &err), ODBOX_EINVAL);
    ck_assert_ptr_null(d);
    ck_assert_ptr_nonnull(strstr(err.message, "longer than 4096"));
    ck_assert_ptr_null(strstr(err.message, SECRET));

    char *r = odbox_dsn_redact(s);
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_null(strstr(r, SECRET));
    ck_assert_ptr_nonnull(strstr(r, "postgresql://u:***@host/aaa"));
    free(r);

    /* exactly 4096 characters is fine */
    s[4096] = '\0';
    d = parse_ok(s);
    ck_assert_uint_eq(strlen(d->database), 4096 - len);
    odbox_dsn_free(&d);
    free(s);
}
END_TEST

START_TEST(test_null_and_empty)
{
    odbox_dsn *d = (odbox_dsn *)&d;
    odbox_error err;
    ck_assert_int_eq(odbox_dsn_parse(NULL, &d, &err), ODBOX_EINVAL);
    ck_assert_ptr_null(d);
    ck_assert_str_ne(err.message, "");

    ck_assert_int_eq(odbox_dsn_parse("", &d, &err), ODBOX_EINVAL);
    ck_assert_ptr_null(d);
    ck_assert_str_ne(err.message, "");

    ck_assert_int_eq(odbox_dsn_parse("postgresql://h/db", NULL, &err), ODBOX_EINVAL);
    ck_assert_str_ne(err.message, "");
    ck_assert_int_eq(odbox_dsn_parse(NULL, NULL, NULL), ODBOX_EINVAL);

    /* success clears a previous error */
    ck_assert_int_eq(odbox_dsn_parse("postgresql://h/db", &d, &err), 0);
    ck_assert_int_eq(err.code, 0);
    ck_assert_str_eq(err.message, "");
    odbox_dsn_free(&d);
    ck_assert_ptr_null(d);
    odbox_dsn_free(&d); /* already NULL */
    odbox_dsn_free(NULL);

    ck_assert_ptr_null(odbox_dsn_redact(NULL));
    char *r = odbox_dsn_redact("");
    ck_assert_pstr_eq(r, "");
    free(r);
}
END_TEST

/* ---- redaction --------------------------------------------------------------------- */

static const struct {
    const char *in, *out;
} redactions[] = {
    {"postgresql://alice:" SECRET "@h:5432/db", "postgresql://alice:***@h:5432/db"},
    {"postgresql://alice@h:5432/db", "postgresql://alice@h:5432/db"},
    {"postgresql://h/db?x=a@b", "postgresql://h/db?x=a@b"},
    {"mysql://u:s3cr3t%40PW@[::1]:3306/db?a=1", "mysql://u:***@[::1]:3306/db?a=1"},
    {"mysql://u:@h/db", "mysql://u:***@h/db"},
    {"DSN=x;UID=u;PWD=" SECRET ";", "DSN=x;UID=u;PWD=***;"},
    {"DSN=x;UID=u;pwd = " SECRET " ", "DSN=x;UID=u;pwd = *** "},
    {"Driver={PG};Password={s3cr3t;-PW}};x};Server=h", "Driver={PG};Password=***;Server=h"},
    {"DSN=x;dialect=mysql;PASSWORD=" SECRET, "DSN=x;dialect=mysql;PASSWORD=***"},
    {"DSN=x;Url=http://u:" SECRET "@h/p", "DSN=x;Url=http://u:***@h/p"},
    {"postgresql://h/db?sslmode=require&password=" SECRET "&PWD=" SECRET "2&a=b",
     "postgresql://h/db?sslmode=require&password=***&PWD=***&a=b"},
    {"postgresql://h/db?pass%77ord=" SECRET, "postgresql://h/db?pass%77ord=***"},
    {"sqlite:///x.db?pwd=" SECRET, "sqlite:///x.db?pwd=***"},
    {"foo:///u:" SECRET "@h/db", "foo:///u:***@h/db"},
    /* malformed: best effort */
    {"postgresql://u:" SECRET "@host:abc/db", "postgresql://u:***@host:***/db"},
    {"postgresql://u:%73%33cr3t-PW@host:" SECRET "/db", "postgresql://u:***@host:***/db"},
    {"postgresql://u:" SECRET "/x@host/db", "postgresql://u:***@host/db"},
    {"postgresql://u:" SECRET, "postgresql://u:***"},
    {"postgresql://u:" SECRET "/db", "postgresql://u:***/db"},
    {"postgresql://u:" SECRET "@", "postgresql://u:***@"},
    {"postgresql://u:s3cr3t@PW@host/db", "postgresql://u:***@host/db"},
    {"postgresql://h/db?a=1&a=2&password=" SECRET, "postgresql://h/db?a=1&a=2&password=***"},
    {"DSN=x;;PWD=" SECRET ";UID=u", "DSN=x;;PWD=***;UID=u"},
    {"DSN=x;PWD={" SECRET, "DSN=x;PWD=***"},
    {"DSN=x;PWD={" SECRET "}} ;x", "DSN=x;PWD=***"},
    {"garbage PWD=" SECRET, "garbage PWD=***"},
    {"DSN=x\n;PWD=" SECRET, "DSN=x\n;PWD=***"},
};

START_TEST(test_redact)
{
    char *r = odbox_dsn_redact(redactions[_i].in);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(strcmp(r, redactions[_i].out) == 0, "case %d: '%s' -> '%s', expected '%s'", _i,
                  redactions[_i].in, r, redactions[_i].out);
    ck_assert_ptr_null(strstr(r, "s3cr3t"));
    free(r);
}
END_TEST

START_TEST(test_redact_never_leaks)
{
    /* mangle a DSN with a password in many ways (except in the label that
     * marks it as a password); no variant may show it */
    static const struct {
        const char *dsn, *label;
    } bases[] = {
        {"postgresql://user:" SECRET "@host:5432/db?sslmode=require", ":" SECRET},
        {"DSN=name;UID=user;PWD=" SECRET ";Port=1", "PWD=" SECRET},
        {"Driver={X};Password={" SECRET "};Server=h", "Password={" SECRET},
        {"mysql://h/db?a=1&password=" SECRET "&b=2", "password=" SECRET},
    };
    static const char inserts[] = {'\0', ' ', '@', ':', '/', '?', '#', ';', '&', '{', '}',
                                   '[', ']', '%', '=', '\n'};
    char buf[256];
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
        const char *base = bases[b].dsn;
        size_t n = strlen(base);
        size_t label = (size_t)(strstr(base, bases[b].label) - base);
        size_t secret = label + strlen(bases[b].label) - strlen(SECRET);
        for (size_t pos = 0; pos <= n; pos++) {
            for (size_t k = 0; k < sizeof inserts; k++) {
                if (pos >= label && (pos < secret || (pos == secret && inserts[k])))
                    continue;
                size_t len;
                if (inserts[k] == '\0') { /* delete the character at pos */
                    if (pos == n)
                        continue;
                    memcpy(buf, base, pos);
                    memcpy(buf + pos, base + pos + 1, n - pos);
                    len = n - 1;
                } else {
                    memcpy(buf, base, pos);
                    buf[pos] = inserts[k];
                    memcpy(buf + pos + 1, base + pos, n - pos);
                    len = n + 1;
                }
                buf[len] = '\0';
                /* only meaningful while the secret is still intact */
                if (!strstr(buf, SECRET))
                    continue;
                char *r = odbox_dsn_redact(buf);
                ck_assert_ptr_nonnull(r);
                ck_assert_msg(strstr(r, SECRET) == NULL, "redact('%s') leaks: '%s'", buf, r);
                free(r);

                odbox_dsn *d = NULL;
                odbox_error err;
                int rc = odbox_dsn_parse(buf, &d, &err);
                if (rc != 0) {
                    ck_assert_ptr_null(d);
                    ck_assert_msg(strstr(err.message, SECRET) == NULL,
                                  "parse('%s') leaks: '%s'", buf, err.message);
                }
                odbox_dsn_free(&d);
            }
        }
    }
}
END_TEST

Suite *dsn_suite(void)
{
    Suite *s = suite_create("dsn");

    TCase *tc = tcase_create("url");
    tcase_add_test(tc, test_postgresql_all_parts);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_mysql_mariadb);
    tcase_add_test(tc, test_ipv6);
    tcase_add_test(tc, test_percent_decoding);
    tcase_add_test(tc, test_options_order_case_overrides);
    tcase_add_test(tc, test_unknown_scheme);
    tcase_add_loop_test(tc, test_sqlite_paths, 0,
                        (int)(sizeof sqlite_cases / sizeof sqlite_cases[0]));
    tcase_add_test(tc, test_sqlite_query);
    suite_add_tcase(s, tc);

    tc = tcase_create("raw");
    tcase_add_test(tc, test_raw_dsn);
    tcase_add_test(tc, test_raw_driver_braces);
    tcase_add_test(tc, test_raw_dialect_removed);
    tcase_add_test(tc, test_eventlog_option);
    tcase_add_test(tc, test_notify_options);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_loop_test(tc, test_malformed, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, test_too_long);
    tcase_add_test(tc, test_null_and_empty);
    suite_add_tcase(s, tc);

    tc = tcase_create("redact");
    tcase_add_loop_test(tc, test_redact, 0, (int)(sizeof redactions / sizeof redactions[0]));
    tcase_add_test(tc, test_redact_never_leaks);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    return s;
}
