/* odbox — integration tests of connections under network faults and
 * misuse: connect, login and read timeouts against a listener that never
 * answers and a proxy that stops forwarding, connects to one shard while
 * another hangs, and statements still held when their connection closes
 * or goes back to its pool. */
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "itest.h"
#include "netfault.h"

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static const char *scheme(void)
{
    return !strcmp(itest_dialect(), "pg") ? "postgresql" : itest_dialect();
}

static int mysql_family(void) { return strcmp(itest_dialect(), "pg") != 0; }

/* The test server's host and port. */
static void server_address(char *host, size_t cap, int *port)
{
    odbox_dsn *d = NULL;
    ck_assert_int_eq(odbox_dsn_parse(itest_dsn(1), &d, NULL), ODBOX_OK);
    snprintf(host, cap, "%s", d->host);
    *port = d->port;
    odbox_dsn_free(&d);
}

/* ---- connect and login ---------------------------------------------------- */

/* A server that accepts the TCP connection and never answers: the connect
 * gives up after connect_timeout, on every dialect. */
START_TEST(connect_gives_up_at_a_black_hole)
{
    netfault *bh = netfault_black_hole();
    char url[256];
    snprintf(url, sizeof url, "%s://u:Secret-77@127.0.0.1:%d/db?connect_timeout=2", scheme(), netfault_port(bh));
    odbox_conn *c = NULL;
    odbox_error e;
    int64_t t0 = now_ms();
    int rc = odbox_conn_open(url, &c, &e);
    int64_t took = now_ms() - t0;
    ck_assert_msg(rc == ODBOX_ECONNECT, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_ptr_null(c);
    ck_assert_int_ge(netfault_accepted(bh), 1); /* it did get through TCP */
    /* libpq counts whole seconds from the current one: 1 to 2 s */
    ck_assert_msg(took >= 900 && took < 30000, "gave up after %lld ms, connect_timeout is 2 s", (long long)took);
    ck_assert_msg(strstr(e.message, "Secret-77") == NULL, "password in: %s", e.message);
    netfault_free(&bh);
}
END_TEST

/* The case: `odbox status` at a black hole, the DSN without any
 * option, exits 4 (cannot connect) within the default 10 s. */
START_TEST(cli_status_at_a_black_hole_exits_4)
{
    const char *builddir = getenv("ODBOX_BUILDDIR");
    ck_assert_msg(builddir != NULL, "ODBOX_BUILDDIR is not set");
    char tool[1024], url[256];
    snprintf(tool, sizeof tool, "%s/odbox", builddir);
    netfault *bh = netfault_black_hole();
    snprintf(url, sizeof url, "%s://u:Secret-77@127.0.0.1:%d/db", scheme(), netfault_port(bh));
    int64_t t0 = now_ms();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv("ODBOX_DSN", url, 1);
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(99);
        execl(tool, tool, "status", (char *)NULL);
        _exit(98);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    int64_t took = now_ms() - t0;
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 4, "odbox status ended with status %d", status);
    ck_assert_msg(took >= 5000 && took < 60000, "odbox status took %lld ms, the default bound is 10 s",
                  (long long)took);
    netfault_free(&bh);
}
END_TEST

/* A keyed lock on a shard whose server accepts and never answers: its
 * lock session's connect times out, which is a connect failure
 * (ODBOX_ECONNECT), never the "every lock session is in use" that a
 * waiter keeps retrying (the pool's ODBOX_ETIMEDOUT): an unbounded
 * acquire returns too. */
START_TEST(a_lock_at_a_black_hole_is_a_connect_failure)
{
    netfault *bh = netfault_black_hole();
    char url[256];
    snprintf(url, sizeof url, "%s://u:Secret-77@127.0.0.1:%d/db?connect_timeout=1", scheme(), netfault_port(bh));
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open_dsn(url, &r, &e), ODBOX_OK);
    odbox_shard *s = odbox_registry_default_shard(r);
    odbox_lease *l = NULL;
    int64_t t0 = now_ms();
    int rc = odbox_lock_try_acquire(s, "k", 60000, 1000, &l, &e);
    int64_t took = now_ms() - t0;
    ck_assert_msg(rc == ODBOX_ECONNECT, "bounded wait: %s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(took < 30000, "bounded wait: gave up after %lld ms, connect_timeout is 1 s", (long long)took);
    ck_assert_ptr_null(l);
    rc = odbox_lock_acquire(s, "k", 1000, &l, &e);
    ck_assert_msg(rc == ODBOX_ECONNECT, "unbounded wait: %s: %s", odbox_errname(rc), e.message);
    ck_assert_ptr_null(l);
    ck_assert_msg(strstr(e.message, "Secret-77") == NULL, "password in: %s", e.message);
    ck_assert_int_ge(netfault_accepted(bh), 2);
    odbox_registry_free(&r);
    netfault_free(&bh);
}
END_TEST

/* ---- reads ------------------------------------------------------------------ */

/* MySQL/MariaDB: a session whose server goes silent after login (a proxy
 * that stops forwarding) is dropped after read_timeout; the statement's
 * outcome is unknown, so the connection is lost and dead. */
START_TEST(read_gives_up_when_the_server_goes_silent)
{
    if (!mysql_family()) {
        /* psqlODBC/libpq 15 have no client-side read timeout: a peer whose
         * TCP stack keeps answering holds a read without end (README). */
        fprintf(stderr, "read_gives_up_when_the_server_goes_silent: not on PostgreSQL (no client read timeout)\n");
        return;
    }
    netfault *px = netfault_proxy_to(itest_dsn(1));
    char *dsn = netfault_dsn(itest_dsn(1), netfault_port(px), "read_timeout=2");
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_msg(odbox_conn_open(dsn, &c, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(itest_count(c, "SELECT 41 + 1"), 42);
    netfault_stall(px);
    int64_t v = 0, t0 = now_ms();
    int rc = odbox_conn_query_int64(c, "SELECT 43", &v, &e);
    int64_t took = now_ms() - t0;
    ck_assert_msg(rc == ODBOX_ECONNLOST, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(took >= 1500 && took < 30000, "gave up after %lld ms, read_timeout is 2 s", (long long)took);
    ck_assert(odbox_conn_is_dead(c));
    odbox_conn_close(&c);
    free(dsn);
    netfault_free(&px);
}
END_TEST

/* What read_timeout means per dialect, on a statement that runs longer:
 * MySQL/MariaDB cut it (the driver's READ_TIMEOUT: any silence); on
 * PostgreSQL it runs to its end (keepalives are answered while the
 * server works). */
START_TEST(read_timeout_and_a_long_statement)
{
    char *dsn = itest_dsn_with(1, "read_timeout=1");
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_msg(odbox_conn_open(dsn, &c, &e) == ODBOX_OK, "%s", e.message);
    int64_t t0 = now_ms();
    int rc = odbox_conn_exec(c, mysql_family() ? "SELECT SLEEP(30)" : "SELECT pg_sleep(3)", &e);
    int64_t took = now_ms() - t0;
    if (mysql_family()) {
        ck_assert_msg(rc == ODBOX_ECONNLOST, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_msg(took >= 500 && took < 20000, "cut after %lld ms, read_timeout is 1 s", (long long)took);
    } else {
        ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_int_ge(took, 2900);
    }
    odbox_conn_close(&c);
    free(dsn);
}
END_TEST

/* Our socket: connected to the server, from the port the server sees. */
static int find_socket(int server_port, int local_port)
{
    DIR *dir = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(dir);
    int found = -1;
    for (struct dirent *de; (de = readdir(dir)) != NULL && found < 0;) {
        int fd = atoi(de->d_name);
        struct sockaddr_storage local, peer;
        socklen_t ll = sizeof local, pl = sizeof peer;
        if (de->d_name[0] == '.' || getsockname(fd, (struct sockaddr *)&local, &ll) != 0 ||
            getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || local.ss_family != AF_INET)
            continue;
        if (ntohs(((struct sockaddr_in *)&local)->sin_port) == local_port &&
            ntohs(((struct sockaddr_in *)&peer)->sin_port) == server_port)
            found = fd;
    }
    closedir(dir);
    return found;
}

static int sockopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    ck_assert_int_eq(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

/* PostgreSQL: read_timeout reaches libpq as keepalives and
 * tcp_user_timeout on the connection's own socket. */
START_TEST(postgresql_socket_carries_the_read_timeout)
{
    if (mysql_family())
        return; /* the MariaDB driver times reads out itself (read_gives_up_when_the_server_goes_silent) */
    char host[128];
    int port;
    server_address(host, sizeof host, &port);
    const struct {
        const char *option;
        int idle, interval, user_ms;
    } cases[] = {{NULL, 150, 30, 300000}, {"read_timeout=40", 20, 4, 40000}};
    for (int k = 0; k < 2; k++) {
        char *dsn = cases[k].option ? itest_dsn_with(1, cases[k].option) : strdup(itest_dsn(1));
        odbox_conn *c = NULL;
        odbox_error e;
        ck_assert_msg(odbox_conn_open(dsn, &c, &e) == ODBOX_OK, "%s", e.message);
        int fd = find_socket(port, (int)itest_count(c, "SELECT inet_client_port()"));
        ck_assert_msg(fd >= 0, "no socket of ours to port %d", port);
        ck_assert_int_eq(sockopt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE), cases[k].idle);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL), cases[k].interval);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_KEEPCNT), 5);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), cases[k].user_ms);
        odbox_conn_close(&c);
        free(dsn);
    }
}
END_TEST

/* ---- one shard hanging does not hold up another --------------------------- */

typedef struct hanging {
    odbox_pool *pool;
    int rc;
    volatile int done;
} hanging;

static void *acquire_from(void *ud)
{
    hanging *h = ud;
    odbox_conn *c = NULL;
    odbox_error e;
    h->rc = odbox_pool_acquire(h->pool, &c, &e);
    odbox_pool_release(h->pool, &c);
    __atomic_store_n(&h->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

START_TEST(a_hanging_shard_does_not_delay_another)
{
    netfault *bh = netfault_black_hole();
    char url[256];
    snprintf(url, sizeof url, "%s://u:pw@127.0.0.1:%d/db?connect_timeout=10", scheme(), netfault_port(bh));
    odbox_pool_config cfg = {.size = 2, .acquire_timeout_ms = 30000};
    hanging h = {0};
    odbox_pool *good = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_pool_open(url, &cfg, &h.pool, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &good, &e), ODBOX_OK);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, acquire_from, &h), 0);
    for (int i = 0; i < 1000 && netfault_accepted(bh) == 0; i++)
        usleep(10 * 1000);
    ck_assert_msg(netfault_accepted(bh) > 0, "the hanging shard's connect never reached its server");
    /* the other shard's connect runs while that one waits out its 10 s */
    odbox_conn *c = NULL;
    int64_t t0 = now_ms();
    ck_assert_msg(odbox_pool_acquire(good, &c, &e) == ODBOX_OK, "%s", e.message);
    int64_t took = now_ms() - t0;
    ck_assert_msg(!__atomic_load_n(&h.done, __ATOMIC_SEQ_CST),
                  "the good shard's connect waited for the hanging one (%lld ms)", (long long)took);
    ck_assert_int_eq(itest_count(c, "SELECT 1"), 1);
    odbox_pool_release(good, &c);
    pthread_join(th, NULL);
    ck_assert_int_eq(h.rc, ODBOX_ECONNECT);
    odbox_pool_free(&good);
    odbox_pool_free(&h.pool);
    netfault_free(&bh);
}
END_TEST

/* ---- statements held past their connection -------------------------------- */

typedef struct logged {
    pthread_mutex_t mu;
    int warnings;
    char last[512];
} logged;

static void record_log(void *ud, odbox_log_level level, const char *msg)
{
    logged *l = ud;
    pthread_mutex_lock(&l->mu);
    if (level == ODBOX_LOG_WARN || level == ODBOX_LOG_ERROR) {
        l->warnings++;
        snprintf(l->last, sizeof l->last, "%s", msg);
    }
    pthread_mutex_unlock(&l->mu);
}

/* Every use of a detached statement is refused with ODBOX_ESTATE, and it
 * can still be freed (ASan proves nothing freed is touched). */
static void assert_detached(odbox_stmt *s)
{
    odbox_error e;
    const char *txt = NULL;
    int64_t v = 0;
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_ESTATE);
    ck_assert_msg(strstr(e.message, "detached"), "message: %s", e.message);
    ck_assert_int_eq(odbox_stmt_execute(s, NULL), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_stmt_bind_int64(s, 1, 7, &e), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 1, "x", NULL), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_stmt_bind_null(s, 1, ODBOX_TYPE_TEXT, &e), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &txt, NULL, &e), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &v, NULL, NULL), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_stmt_rows_affected(s), -1);
    ck_assert_int_eq(odbox_stmt_column_count(s), 0);
    odbox_stmt_clear_binds(s);
}

START_TEST(closing_a_connection_detaches_held_statements)
{
    logged l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_log_set(record_log, &l, ODBOX_LOG_WARN);
    odbox_conn *c = itest_connect(1);
    odbox_stmt *held = NULL, *fetched = NULL, *cached = NULL;
    odbox_error e;
    /* one held and idle, one held mid-result, one freed back to the cache */
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 1", &held, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 2 UNION ALL SELECT 3", &fetched, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(fetched, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(fetched, &e), 1);
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 4", &cached, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(cached, &e), ODBOX_OK);
    odbox_stmt_free(&cached);
    odbox_conn_close(&c);
    assert_detached(held);
    assert_detached(fetched);
    odbox_stmt_free(&held);
    odbox_stmt_free(&fetched);
    ck_assert_ptr_null(held);
    odbox_log_set(NULL, NULL, ODBOX_LOG_WARN);
    ck_assert_int_eq(l.warnings, 2);
    ck_assert_msg(strstr(l.last, "odbox_conn_close") && strstr(l.last, "detached"), "log: %s", l.last);
}
END_TEST

START_TEST(releasing_a_connection_detaches_held_statements)
{
    logged l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_log_set(record_log, &l, ODBOX_LOG_WARN);
    odbox_pool *p = NULL;
    odbox_pool_config cfg = {.size = 1, .acquire_timeout_ms = 5000};
    odbox_error e;
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, &e), ODBOX_OK);
    odbox_conn *c = NULL;
    odbox_stmt *held = NULL;
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 5", &held, &e), ODBOX_OK);
    odbox_pool_release(p, &c);
    assert_detached(held);
    /* the next user of the connection is not disturbed, and the same SQL
     * prepares anew */
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(c, "SELECT 5"), 5);
    odbox_stmt *again = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 5", &again, &e), ODBOX_OK);
    ck_assert_ptr_ne(again, held);
    ck_assert_int_eq(odbox_stmt_execute(again, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(again, &e), 1);
    odbox_stmt_free(&again);
    odbox_stmt_free(&held);
    odbox_pool_release(p, &c);
    odbox_pool_free(&p);
    odbox_log_set(NULL, NULL, ODBOX_LOG_WARN);
    ck_assert_int_eq(l.warnings, 1);
    ck_assert_msg(strstr(l.last, "odbox_pool_release"), "log: %s", l.last);
}
END_TEST

/* A connection released twice (a copy of the pointer kept) is pooled
 * once: the second release is logged and ignored, and two callers never
 * get one session. Before, it went on the idle list twice, and the next
 * two acquires shared it. */
START_TEST(a_second_release_is_ignored)
{
    logged l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_log_set(record_log, &l, ODBOX_LOG_WARN);
    odbox_pool *p = NULL;
    odbox_pool_config cfg = {.size = 2, .acquire_timeout_ms = 5000};
    odbox_error e;
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, &e), ODBOX_OK);
    odbox_conn *c = NULL, *copy;
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    copy = c;
    odbox_pool_release(p, &c);
    odbox_pool_release(p, &copy);
    ck_assert_ptr_null(copy);
    ck_assert_int_eq(l.warnings, 1);
    ck_assert_msg(strstr(l.last, "released already"), "log: %s", l.last);
    odbox_conn *a = NULL, *b = NULL;
    ck_assert_int_eq(odbox_pool_acquire(p, &a, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_pool_acquire(p, &b, &e), ODBOX_OK);
    ck_assert_ptr_ne(a, b);
    odbox_pool_release(p, &a);
    odbox_pool_release(p, &b);
    odbox_pool_free(&p);
    odbox_log_set(NULL, NULL, ODBOX_LOG_WARN);
}
END_TEST

Suite *conn_suite(void)
{
    Suite *s = suite_create("conn");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, connect_gives_up_at_a_black_hole);
    tcase_add_test(t, cli_status_at_a_black_hole_exits_4);
    tcase_add_test(t, a_lock_at_a_black_hole_is_a_connect_failure);
    tcase_add_test(t, read_gives_up_when_the_server_goes_silent);
    tcase_add_test(t, read_timeout_and_a_long_statement);
    tcase_add_test(t, postgresql_socket_carries_the_read_timeout);
    tcase_add_test(t, a_hanging_shard_does_not_delay_another);
    tcase_add_test(t, closing_a_connection_detaches_held_statements);
    tcase_add_test(t, releasing_a_connection_detaches_held_statements);
    tcase_add_test(t, a_second_release_is_ignored);
    suite_add_tcase(s, t);
    return s;
}
