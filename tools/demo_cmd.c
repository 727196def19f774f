/* odbox — `odbox demo`: the whole outbox in one process on the wallet
 * example (examples/wallet, linked as an internal library): migrate, run a
 * few hundred actions (one refused, one retried after a concurrent
 * update), deliver their events to two handlers (one failing a few times
 * first), and summarise. SQLite by default (a file it creates), or --dsn. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "../examples/wallet/wallet.h"
#include "../examples/wallet/wallet_handlers.h"

#ifndef ODBOX_DEMO_BUILDDIR
#define ODBOX_DEMO_BUILDDIR ""
#endif
#ifndef ODBOX_DEMO_SRCDIR
#define ODBOX_DEMO_SRCDIR ""
#endif
#ifndef ODBOX_WALLET_MIGRATIONS_DIR
#define ODBOX_WALLET_MIGRATIONS_DIR "/usr/local/share/odbox/examples/wallet/migrations"
#endif

#define DEMO_WALLETS 10
#define DEMO_ACTIONS 300
#define DEMO_PAUSE_US 3000
#define DEMO_IDLE_MS 60000 /* delivery must be over by then */
#define DEMO_MAX_LAGS 8192

const char usage_demo[] =
    "usage: odbox demo [--db FILE | --dsn DSN] [--json]\n"
    "\n"
    "Shows odbox's whole job in a few seconds, on the wallet example: migrates\n"
    "a database, runs a few hundred wallet actions (deposits, withdrawals,\n"
    "transfers; one refused for an insufficient balance, one retried after a\n"
    "concurrent update), delivers their events in this process to two handlers\n"
    "(statement, and audit, which fails a few calls before they succeed), and\n"
    "prints a summary and the commands to look further.\n"
    "\n"
    "  --db FILE   the SQLite file (default ./odbox-demo.db); created when absent.\n"
    "              An existing file is used again only if an earlier demo made it\n"
    "              (its odbox_demo table); any other file is refused.\n"
    "  --dsn DSN   run it in that database instead (PostgreSQL, MySQL, MariaDB):\n"
    "              refused when it has a wallets table that no demo made\n"
    "  --json      the summary as JSON\n"
    "\n"
    "Migrations: $ODBOX_MIGRATIONS_DIR and $ODBOX_WALLET_MIGRATIONS when set;\n"
    "else the source tree's when odbox runs from its build directory; else the\n"
    "installed copies.\n"
    "\n"
    "Exit codes: 0 ok; 1 runtime error; 2 usage, or a database that is not a\n"
    "demo's; 4 cannot connect; 5 delivery not done within 60 s.\n";

typedef struct demo {
    const char *dsn;
    char dsn_buf[PATH_MAX + 16];
    int json, tty;
    int existing_file; /* --db names a file that exists: it must be a demo's */
    odbox_registry *r;
    odbox_executor *exe;
    char ids[DEMO_WALLETS][ODBOX_UUID_LEN + 1];
    int64_t balance[DEMO_WALLETS];
    long committed, refused, estale_retries;
    int64_t refused_events_before, refused_events_after, refused_balance_before, refused_balance_after;
    wallet_handlers_state hs;
    int64_t last_progress_us;
} demo;

static int dir_exists(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Running from the build directory (the binary, or libtool's .libs/ copy
 * of it): the source tree's migrations; else the installed ones. */
static int from_build_dir(void)
{
    char exe[PATH_MAX], dir[PATH_MAX + 8];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || !ODBOX_DEMO_BUILDDIR[0])
        return 0;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return 0;
    *slash = 0;
    snprintf(dir, sizeof dir, "%s/.libs", ODBOX_DEMO_BUILDDIR);
    return !strcmp(exe, ODBOX_DEMO_BUILDDIR) || !strcmp(exe, dir);
}

static void migration_dirs(const char **framework, const char **wallet, char *fbuf, char *wbuf, size_t cap)
{
    *framework = getenv("ODBOX_MIGRATIONS_DIR");
    *wallet = getenv("ODBOX_WALLET_MIGRATIONS");
    int in_tree = from_build_dir();
    if (!*framework || !**framework) {
        snprintf(fbuf, cap, "%s/migrations", ODBOX_DEMO_SRCDIR);
        *framework = in_tree && dir_exists(fbuf) ? fbuf : NULL; /* NULL: the library's installed folder */
    }
    if (!*wallet || !**wallet) {
        snprintf(wbuf, cap, "%s/examples/wallet/migrations", ODBOX_DEMO_SRCDIR);
        *wallet = in_tree && dir_exists(wbuf) ? wbuf : ODBOX_WALLET_MIGRATIONS_DIR;
    }
}

/* ---- the database: a demo's, or refused ------------------------------------ */

static int demo_fail(demo *d, int code, const char *msg)
{
    odbox_error e = {.code = code};
    snprintf(e.message, sizeof e.message, "%s", msg);
    cli c = {.json = d->json};
    int x = cli_fail(&c, &e);
    return code == ODBOX_EINVAL ? EXIT_USAGE : x;
}

static int table_exists(odbox_conn *c, const char *name, int *exists, odbox_error *err)
{
    return odbox_conn_table_exists(c, NULL, name, exists, err);
}

/* Refuses a database with wallets of another's; marks a fresh one. */
static int claim_database(demo *d, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(d->r));
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    int marked = 0, wallets = 0;
    if ((rc = table_exists(c, "odbox_demo", &marked, err)) == ODBOX_OK &&
        (rc = table_exists(c, "wallets", &wallets, err)) == ODBOX_OK && !marked) {
        if (d->existing_file)
            rc = odbox_error_set(err, ODBOX_EINVAL, "the file is not an odbox demo database (no odbox_demo table): "
                                                  "not touching it");
        else if (wallets)
            rc = odbox_error_set(err, ODBOX_EINVAL,
                                 "this database has a wallets table that no odbox demo made: not touching it");
        else if ((rc = odbox_conn_exec(c, "CREATE TABLE odbox_demo (created_us BIGINT NOT NULL)", err)) ==
                 ODBOX_OK) {
            odbox_stmt *s = NULL;
            if ((rc = odbox_stmt_prepare(c, "INSERT INTO odbox_demo (created_us) VALUES (?)", &s, err)) == ODBOX_OK &&
                (rc = odbox_stmt_bind_int64(s, 1, (int64_t)time(NULL) * 1000000, err)) == ODBOX_OK)
                rc = odbox_stmt_execute(s, err);
            odbox_stmt_free(&s);
        }
    }
    odbox_pool_release(pool, &c);
    return rc;
}

/* ---- progress ------------------------------------------------------------------ */

static void progress(demo *d, const char *phase, int force)
{
    int64_t t = cli_mono_us();
    if (d->json || (!force && t - d->last_progress_us < 100000))
        return;
    d->last_progress_us = t;
    long calls = (long)atomic_load(&d->hs.calls), failed = (long)atomic_load(&d->hs.injected);
    if (d->tty) {
        printf("\r\033[K%-10s actions %ld committed, %ld refused | handler calls %ld (%ld failed, retried)", phase,
               d->committed, d->refused, calls, failed);
        fflush(stdout);
    } else if (force) {
        printf("%s: actions %ld committed, %ld refused; handler calls %ld (%ld failed, retried)\n", phase,
               d->committed, d->refused, calls, failed);
    }
}

/* ---- actions --------------------------------------------------------------------- */

static void count(demo *d, int rc, const wallet_reply *reply)
{
    if (rc == ODBOX_OK)
        d->committed++;
    else
        d->refused++;
    (void)reply;
}

static int run_actions(demo *d, odbox_error *err)
{
    unsigned seed = (unsigned)time(NULL);
    wallet_reply reply;
    odbox_shard_id shard = odbox_shard_get_id(odbox_registry_default_shard(d->r));
    for (int i = 0; i < DEMO_WALLETS; i++) {
        char owner[32];
        snprintf(owner, sizeof owner, "demo-%d", i);
        int rc = wallet_open(d->exe, owner, shard, NULL, &reply, err);
        if (rc != ODBOX_OK)
            return rc;
        count(d, rc, &reply);
        snprintf(d->ids[i], sizeof d->ids[i], "%s", reply.wallet.id);
        if ((rc = wallet_deposit(d->exe, d->ids[i], 1000, NULL, NULL, &reply, err)) != ODBOX_OK)
            return rc;
        count(d, rc, &reply);
        d->balance[i] = 1000;
    }
    for (int n = 0; n < DEMO_ACTIONS; n++) {
        int a = rand_r(&seed) % DEMO_WALLETS, b = (a + 1 + rand_r(&seed) % (DEMO_WALLETS - 1)) % DEMO_WALLETS;
        int64_t amount = 1 + rand_r(&seed) % 200;
        int kind = n % 3, rc;
        if (kind == 1 && d->balance[a] < amount)
            kind = 0; /* the one refusal comes later, on purpose */
        if (kind == 2 && d->balance[a] < amount)
            kind = 0;
        if (kind == 0)
            rc = wallet_deposit(d->exe, d->ids[a], amount, NULL, NULL, &reply, err);
        else if (kind == 1)
            rc = wallet_withdraw(d->exe, d->ids[a], amount, NULL, NULL, &reply, err);
        else
            rc = wallet_transfer(d->exe, d->ids[a], d->ids[b], amount, NULL, NULL, &reply, err);
        if (rc != ODBOX_OK)
            return rc;
        count(d, rc, &reply);
        d->balance[a] = reply.wallet.balance;
        if (kind == 2)
            d->balance[b] = reply.other.balance;
        progress(d, "actions", 0);
        /* a steady rate, as a service's requests come, rather than a burst
         * the delivery can only queue behind: the latency then shows the
         * wake-up path, not the length of a queue */
        usleep(DEMO_PAUSE_US);
    }
    return ODBOX_OK;
}

static int count_events(demo *d, int64_t *n, odbox_error *err)
{
    return wallet_events_count(odbox_registry_default_shard(d->r), 0, n, err);
}

/* A withdrawal above the balance: refused, and nothing of it written. */
static int refused_withdrawal(demo *d, odbox_error *err)
{
    wallet_view v;
    wallet_reply reply;
    odbox_error ignored = {0};
    int rc;
    if ((rc = wallet_find(d->r, d->ids[0], &v, err)) != ODBOX_OK ||
        (rc = count_events(d, &d->refused_events_before, err)) != ODBOX_OK)
        return rc;
    d->refused_balance_before = v.balance;
    rc = wallet_withdraw(d->exe, d->ids[0], v.balance + 1, NULL, NULL, &reply, &ignored);
    if (rc == ODBOX_OK || reply.refusal != WALLET_REFUSED_INSUFFICIENT)
        return odbox_error_set(err, ODBOX_EDB, "the withdrawal above the balance was not refused");
    d->refused++;
    if ((rc = wallet_find(d->r, d->ids[0], &v, err)) != ODBOX_OK ||
        (rc = count_events(d, &d->refused_events_after, err)) != ODBOX_OK)
        return rc;
    d->refused_balance_after = v.balance;
    return ODBOX_OK;
}

/* Two threads deposit on one wallet at once; the one whose update finds
 * the version changed (ODBOX_ESTALE) runs again. Repeated until that
 * happened (or a bound). */
typedef struct racer {
    demo *d;
    pthread_barrier_t *go;
    const odbox_exec_config *cfg;
    int rc, attempts;
    odbox_error err;
} racer;

static void *race(void *arg)
{
    racer *x = arg;
    wallet_reply reply;
    pthread_barrier_wait(x->go);
    x->rc = wallet_deposit(x->d->exe, x->d->ids[1], 5, NULL, x->cfg, &reply, &x->err);
    x->attempts = reply.attempts;
    return NULL;
}

static int concurrent_update(demo *d, odbox_error *err)
{
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    int found = 0;
    for (int i = 0; i < cfg.nretries; i++)
        if (cfg.retries[i].code == ODBOX_ESTALE)
            cfg.retries[i].max_retries = 20, cfg.retries[i].delay_ms = 5, found = 1;
    if (!found && cfg.nretries < ODBOX_MAX_RETRY_RULES)
        cfg.retries[cfg.nretries++] = (odbox_retry_rule){ODBOX_ESTALE, 20, 5};
    for (int round = 0; round < 50 && d->estale_retries == 0; round++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        racer x[2] = {{.d = d, .go = &go, .cfg = &cfg}, {.d = d, .go = &go, .cfg = &cfg}};
        pthread_t t[2];
        for (int k = 0; k < 2; k++)
            pthread_create(&t[k], NULL, race, &x[k]);
        for (int k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
        pthread_barrier_destroy(&go);
        for (int k = 0; k < 2; k++) {
            if (x[k].rc != ODBOX_OK) {
                *err = x[k].err;
                return x[k].rc;
            }
            d->committed++;
            d->estale_retries += x[k].attempts - 1;
        }
    }
    return ODBOX_OK;
}

/* ---- delivery ------------------------------------------------------------------- */

static int wait_idle(demo *d, odbox_error *err)
{
    int64_t deadline = cli_mono_us() + (int64_t)DEMO_IDLE_MS * 1000;
    for (;;) {
        wallet_backlog b;
        int rc = wallet_backlog_read(d->r, &b, err);
        if (rc != ODBOX_OK)
            return rc;
        progress(d, "delivering", 0);
        if (b.undelivered == 0 && b.pending == 0 && b.failed == 0)
            return ODBOX_OK;
        if (cli_mono_us() > deadline)
            return odbox_error_set(err, ODBOX_ETIMEDOUT,
                                   "delivery not done after %d s: %lld undelivered, %lld pending, %lld failed",
                                   DEMO_IDLE_MS / 1000, (long long)b.undelivered, (long long)b.pending,
                                   (long long)b.failed);
        usleep(50000);
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value that at least q of them do not exceed. */
static double quantile_ms(const int64_t *v, size_t n, double q)
{
    if (!n)
        return 0;
    size_t k = (size_t)(q * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    return (double)v[(k > n ? n : k) - 1] / 1000.0;
}

static const char *ms_text(double v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%.1f", v);
    return buf;
}

/* ---- summary --------------------------------------------------------------------- */

static int summary(demo *d, double seconds, odbox_error *err)
{
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    int64_t events = 0, by_state[4] = {0};
    int rc = count_events(d, &events, err);
    if (rc == ODBOX_OK)
        rc = odbox_notifications_count(d->r, &(odbox_notification_filter){0}, &st, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        by_state[0] += st[i].pending;
        by_state[1] += st[i].failed;
        by_state[2] += st[i].succeeded;
        by_state[3] += st[i].expired;
    }
    odbox_notification_stats_free(&st, n);
    size_t nlag = atomic_load(&d->hs.nlag), nstart = atomic_load(&d->hs.nstart);
    if (nlag > d->hs.lag_cap)
        nlag = d->hs.lag_cap;
    if (nstart > d->hs.lag_cap)
        nstart = d->hs.lag_cap;
    qsort(d->hs.lag_us, nlag, sizeof *d->hs.lag_us, cmp_i64);
    qsort(d->hs.start_lag_us, nstart, sizeof *d->hs.start_lag_us, cmp_i64);
    double p50 = quantile_ms(d->hs.lag_us, nlag, 0.50), p99 = quantile_ms(d->hs.lag_us, nlag, 0.99);
    double s50 = quantile_ms(d->hs.start_lag_us, nstart, 0.50), s99 = quantile_ms(d->hs.start_lag_us, nstart, 0.99);
    long calls = (long)atomic_load(&d->hs.calls), retries = (long)atomic_load(&d->hs.injected);
    const char *shown = odbox_shard_primary_redacted(odbox_registry_default_shard(d->r));
    static const char *const cmds[] = {"status", "notifications", "jobs"};
    if (d->json) {
        char b50[32], b99[32], bs[32];
        json_object *j = json_object_new_object(), *a = json_object_new_object(), *no = json_object_new_object();
        json_object *rf = json_object_new_object(), *lat = json_object_new_object(), *cm = json_object_new_array();
        json_object_object_add(j, "ok", json_object_new_boolean(1));
        json_object_object_add(j, "dsn", json_object_new_string(shown));
        json_object_object_add(a, "committed", json_object_new_int64(d->committed));
        json_object_object_add(a, "refused", json_object_new_int64(d->refused));
        json_object_object_add(j, "actions", a);
        json_object_object_add(rf, "events_before", json_object_new_int64(d->refused_events_before));
        json_object_object_add(rf, "events_after", json_object_new_int64(d->refused_events_after));
        json_object_object_add(rf, "balance_before", json_object_new_int64(d->refused_balance_before));
        json_object_object_add(rf, "balance_after", json_object_new_int64(d->refused_balance_after));
        json_object_object_add(j, "refused_withdrawal", rf);
        json_object_object_add(j, "estale_retries", json_object_new_int64(d->estale_retries));
        json_object_object_add(j, "events", json_object_new_int64(events));
        json_object_object_add(no, "PENDING", json_object_new_int64(by_state[0]));
        json_object_object_add(no, "FAILED", json_object_new_int64(by_state[1]));
        json_object_object_add(no, "SUCCEEDED", json_object_new_int64(by_state[2]));
        json_object_object_add(no, "EXPIRED", json_object_new_int64(by_state[3]));
        json_object_object_add(j, "notifications", no);
        json_object_object_add(j, "handler_calls", json_object_new_int64(calls));
        json_object_object_add(j, "handler_retries", json_object_new_int64(retries));
        json_object_object_add(lat, "p50", json_object_new_double_s(p50, ms_text(p50, b50, sizeof b50)));
        json_object_object_add(lat, "p99", json_object_new_double_s(p99, ms_text(p99, b99, sizeof b99)));
        json_object_object_add(lat, "samples", json_object_new_int64((int64_t)nlag));
        json_object_object_add(j, "latency_ms", lat);
        json_object *sl = json_object_new_object();
        json_object_object_add(sl, "p50", json_object_new_double_s(s50, ms_text(s50, b50, sizeof b50)));
        json_object_object_add(sl, "p99", json_object_new_double_s(s99, ms_text(s99, b99, sizeof b99)));
        json_object_object_add(sl, "samples", json_object_new_int64((int64_t)nstart));
        json_object_object_add(j, "start_latency_ms", sl);
        json_object_object_add(j, "seconds", json_object_new_double_s(seconds, ms_text(seconds, bs, sizeof bs)));
        for (size_t i = 0; i < 3; i++) {
            char line[PATH_MAX + 64];
            snprintf(line, sizeof line, "odbox %s --dsn '%s'", cmds[i], shown);
            json_object_array_add(cm, json_object_new_string(line));
        }
        json_object_object_add(j, "commands", cm);
        cli_print_json(j);
        json_object_put(j);
        return ODBOX_OK;
    }
    if (d->tty)
        printf("\r\033[K");
    printf("odbox demo on %s, %.1f s\n", shown, seconds);
    printf("  actions:        %ld committed, %ld refused\n", d->committed, d->refused);
    printf("  refused:        a withdrawal of more than the balance: balance %lld -> %lld, events %lld -> %lld "
           "(nothing written)\n",
           (long long)d->refused_balance_before, (long long)d->refused_balance_after,
           (long long)d->refused_events_before, (long long)d->refused_events_after);
    printf("  concurrent:     two deposits on one wallet at once: %ld ESTALE retr%s, both committed\n",
           d->estale_retries, d->estale_retries == 1 ? "y" : "ies");
    printf("  events:         %lld in the outbox\n", (long long)events);
    printf("  notifications:  %lld SUCCEEDED, %lld PENDING, %lld FAILED, %lld EXPIRED\n", (long long)by_state[2],
           (long long)by_state[0], (long long)by_state[1], (long long)by_state[3]);
    printf("  handler calls:  %ld, of which %ld failed on purpose (audit) and were retried after a backoff\n", calls,
           retries);
    printf("  commit to handler start:   p50 %.1f ms, p99 %.1f ms (%zu first calls)\n", s50, s99, nstart);
    printf("  commit to handler success: p50 %.1f ms, p99 %.1f ms (%zu successes)\n", p50, p99, nlag);
    printf("\nlook further:\n");
    for (size_t i = 0; i < 3; i++)
        printf("  odbox %s --dsn '%s'\n", cmds[i], shown);
    return ODBOX_OK;
}

/* ---- the command ---------------------------------------------------------------- */

static int parse(int argc, char **argv, demo *d, const char **db)
{
    d->json = cli_argv_json(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_demo, stdout);
            return -1;
        } else if (!strcmp(a, "--json")) {
            d->json = 1;
        } else if ((!strcmp(a, "--db") || !strcmp(a, "--dsn")) && i + 1 < argc && argv[i + 1][0]) {
            if (!strcmp(a, "--db"))
                *db = argv[++i];
            else
                d->dsn = argv[++i];
        } else {
            cli_usage_error(d->json, "odbox demo", "unknown option or missing value '%.64s'", a);
            fputs(usage_demo, stderr);
            return EXIT_USAGE;
        }
    }
    if (*db && d->dsn)
        return cli_usage_error(d->json, "odbox demo", "give --db or --dsn, not both");
    return 0;
}

static int run(demo *d, odbox_error *err)
{
    odbox_handlers *handlers = NULL;
    odbox_delivery *delivery = NULL;
    odbox_jobs *jobs = NULL;
    const char *fw, *wm;
    char fbuf[PATH_MAX], wbuf[PATH_MAX];
    migration_dirs(&fw, &wm, fbuf, wbuf, sizeof fbuf);
    wallet_faults faults = {.audit_fail_attempts = 2, .audit_fail_every = 10};
    odbox_delivery_config dc = {.fanout_poll_ms = 200, .handling_poll_ms = 200, .backoff_base_ms = 50,
                                .backoff_cap_ms = 400, .workers = 4};
    odbox_jobs_config jc = {.poll_interval_ms = 200, .heartbeat_interval_ms = 1000, .shutdown_max_wait_ms = 10000};
    odbox_migrate_options mo = {.framework_dir = fw, .user_dir = wm, .user_set = "wallet"};
    int64_t start = cli_mono_us();
    int rc = odbox_registry_open_dsn(d->dsn, &d->r, err);
    if (rc == ODBOX_OK)
        rc = claim_database(d, err);
    if (rc == ODBOX_OK && !dir_exists(wm))
        rc = odbox_error_set(err, ODBOX_ENOTFOUND, "wallet migrations not found at %s (set ODBOX_WALLET_MIGRATIONS)",
                             wm);
    if (rc == ODBOX_OK)
        rc = odbox_migrate_registry(d->r, &mo, err);
    if (rc == ODBOX_OK)
        rc = wallet_executor_open(d->r, NULL, &d->exe, err);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_new(&handlers, err);
    if (rc == ODBOX_OK)
        rc = wallet_handlers_add(handlers, d->r, &faults, &d->hs, err);
    if (rc == ODBOX_OK && (!(d->hs.lag_us = calloc(DEMO_MAX_LAGS, sizeof *d->hs.lag_us)) ||
                           !(d->hs.start_lag_us = calloc(DEMO_MAX_LAGS, sizeof *d->hs.start_lag_us))))
        rc = odbox_error_set(err, ODBOX_ENOMEM, "out of memory");
    d->hs.lag_cap = DEMO_MAX_LAGS;
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(d->r, handlers, &dc, &delivery, err);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(d->r, &jc, &jobs, err);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(delivery, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, err);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_attach(delivery, d->exe, err);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, err);
    if (rc == ODBOX_OK)
        rc = run_actions(d, err);
    if (rc == ODBOX_OK)
        rc = refused_withdrawal(d, err);
    if (rc == ODBOX_OK)
        rc = concurrent_update(d, err);
    if (rc == ODBOX_OK) {
        progress(d, "actions", 1);
        rc = wait_idle(d, err);
    }
    if (rc == ODBOX_OK)
        progress(d, "delivered", 1);
    if (jobs) {
        odbox_error stop_err = {0};
        int src = odbox_jobs_stop(jobs, &stop_err);
        if (rc == ODBOX_OK && src != ODBOX_OK)
            rc = src, *err = stop_err;
    }
    odbox_delivery_free(&delivery);
    odbox_jobs_free(&jobs);
    if (rc == ODBOX_OK)
        rc = summary(d, (double)(cli_mono_us() - start) / 1e6, err);
    odbox_handlers_free(&handlers);
    odbox_executor_free(&d->exe);
    free(d->hs.lag_us);
    free(d->hs.start_lag_us);
    odbox_registry_free(&d->r);
    return rc;
}

int cmd_demo(int argc, char **argv)
{
    demo *d = calloc(1, sizeof *d);
    if (!d)
        return 1;
    const char *db = NULL;
    int code = parse(argc, argv, d, &db);
    if (code) {
        free(d);
        return code < 0 ? 0 : code;
    }
    d->tty = isatty(STDOUT_FILENO);
    if (!d->dsn) {
        db = db ? db : "odbox-demo.db";
        /* a file that is not SQLite's is not even opened */
        char head[16] = {0};
        FILE *f = fopen(db, "rb");
        d->existing_file = f != NULL;
        size_t got = f ? fread(head, 1, sizeof head, f) : 0;
        if (f)
            fclose(f);
        if (got > 0 && (got < sizeof head || memcmp(head, "SQLite format 3", 16))) {
            code = demo_fail(d, ODBOX_EINVAL, "the file is not an odbox demo database (not SQLite): not touching it");
            free(d);
            return code;
        }
        /* absolute, so that the commands printed work from anywhere */
        char cwd[PATH_MAX] = "";
        if (db[0] != '/' && !getcwd(cwd, sizeof cwd))
            cwd[0] = 0;
        int n = snprintf(d->dsn_buf, sizeof d->dsn_buf, "sqlite://%s%s%s", cwd, cwd[0] ? "/" : "", db);
        if (n < 0 || (size_t)n >= sizeof d->dsn_buf) {
            code = demo_fail(d, ODBOX_EINVAL, "the database's path is longer than PATH_MAX");
            free(d);
            return code;
        }
        d->dsn = d->dsn_buf;
    }
    odbox_error err = {0};
    int rc = run(d, &err);
    if (rc != ODBOX_OK) {
        if (d->tty && !d->json)
            printf("\n");
        code = demo_fail(d, rc, err.message[0] ? err.message : odbox_strerror(rc));
    }
    free(d);
    return code;
}
