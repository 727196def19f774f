/* odbox — helpers shared by the jobs integration suites (see jobs_fx.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "jobs_fx.h"

int64_t jt_mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void jt_sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

int jt_load(atomic_int *a) { return atomic_load(a); }

int jt_wait_for(int (*cond)(void *), void *arg)
{
    int64_t until = jt_mono_ms() + JT_BOUND_MS;
    while (!cond(arg)) {
        if (jt_mono_ms() > until)
            return 0;
        jt_sleep_ms(10);
    }
    return 1;
}

/* ---- fixture ------------------------------------------------------------------ */

void jfx_open(jfx *f)
{
    memset(f, 0, sizeof *f);
    odbox_error e = {0};
    itest_name(f->ev, sizeof f->ev, "ev_jobs");
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = f->ev};
    odbox_registry_config rc = {.shards = &sc, .nshards = 1};
    ck_assert_msg(odbox_registry_open(&rc, &f->r, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_migrate_registry(f->r, NULL, &e) == ODBOX_OK, "migrate: %s", e.message);
    f->pool = odbox_shard_primary(odbox_registry_default_shard(f->r));
    f->c = itest_connect(1);
    itest_name(f->job, sizeof f->job, "job");
    itest_name(f->runs, sizeof f->runs, "job_runs");
    ck_assert_int_eq(runs_create(f->c, f->runs, &e), ODBOX_OK);
}

void jfx_close(jfx *f)
{
    itest_exec(f->c, "DELETE FROM scheduled_tasks WHERE task_name LIKE '%s%%'", f->job);
    itest_exec(f->c, "DELETE FROM odbox_job_state WHERE task_name LIKE '%s%%'", f->job);
    itest_exec(f->c, "DELETE FROM odbox_job_waiters WHERE task_name LIKE '%s%%'", f->job);
    itest_exec(f->c, "DROP TABLE %s", f->runs);
    itest_drop_eventlog(f->c, f->ev);
    odbox_conn_close(&f->c);
    odbox_registry_free(&f->r);
}

int jt_row(odbox_pool *pool, const char *name, odbox_job_info *out)
{
    odbox_job_info *list = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_list(pool, &list, &n, &e) == ODBOX_OK, "%s", e.message);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(list[i].name, name) && !strcmp(list[i].instance, "recurring")) {
            *out = list[i];
            out->name = out->instance = out->picked_by = NULL;
            found = 1;
        }
    }
    odbox_job_infos_free(&list, n);
    return found;
}

odbox_job_info jt_must_row(jfx *f, const char *name)
{
    odbox_job_info in;
    ck_assert_msg(jt_row(f->pool, name, &in), "no row for %s", name);
    return in;
}

odbox_jobs *jt_open_jobs(odbox_registry *r, const odbox_jobs_config *cfg, const odbox_job *job)
{
    odbox_jobs *j = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_open(r, cfg, &j, &e) == ODBOX_OK, "%s", e.message);
    if (job)
        ck_assert_msg(odbox_jobs_add(j, job, &e) == ODBOX_OK, "%s", e.message);
    return j;
}

void jt_start(odbox_jobs *j)
{
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_start(j, &e) == ODBOX_OK, "%s", e.message);
}

/* ---- a counting job -------------------------------------------------------------- */

int jt_count_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    jt_counter *k = user;
    int n = atomic_fetch_add(&k->calls, 1) + 1;
    while (atomic_load(&k->block))
        odbox_job_context_wait(ctx, 5);
    atomic_fetch_add(&k->returned, 1);
    if (n <= atomic_load(&k->fail_first)) {
        snprintf(err->message, sizeof err->message, "call %d fails on purpose", n);
        return ODBOX_EDB;
    }
    return ODBOX_OK;
}

int jt_returned_n(void *arg)
{
    jt_awaited *a = arg;
    return atomic_load(&a->k->returned) >= a->n;
}

int jt_called_n(void *arg)
{
    jt_awaited *a = arg;
    return atomic_load(&a->k->calls) >= a->n;
}

int jt_row_settled(void *arg)
{
    jt_row_state *s = arg;
    odbox_job_info in;
    return jt_row(s->f->pool, s->f->job, &in) && !in.picked && in.consecutive_failures == s->failures &&
           (!s->next_us || in.next_execution_us == s->next_us);
}

/* ---- programs of the build tree ------------------------------------------------------ */

pid_t jt_spawn(const char *rel, const char *const *args, const char *out_path)
{
    const char *build = getenv("ODBOX_BUILDDIR");
    ck_assert_msg(build, "ODBOX_BUILDDIR is not set (%s is found there)", rel);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", build, rel);
    const char *argv[32] = {path};
    int n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = out_path ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        if (out_path)
            dup2(fd, 2);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int jt_reap(pid_t pid, int extra_ms)
{
    int64_t until = jt_mono_ms() + JT_BOUND_MS + extra_ms;
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (jt_mono_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        jt_sleep_ms(10);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int64_t jt_runs_by(jfx *f, const char *runner)
{
    return itest_count(f->c, "SELECT COUNT(*) FROM %s WHERE runner = '%s'", f->runs, runner);
}

int jt_has_run(void *arg)
{
    jt_runs_of *r = arg;
    return jt_runs_by(r->f, r->runner) > 0;
}

pid_t jt_spawn_holder(jfx *f, int heartbeat_ms, int limit)
{
    char hb[16], lim[16];
    snprintf(hb, sizeof hb, "%d", heartbeat_ms);
    snprintf(lim, sizeof lim, "%d", limit);
    const char *args[] = {"--dsn", itest_dsn(1), "--job", f->job, "--runner", "holder", "--table", f->runs,
                          "--mode", "hold", "--poll", "50", "--heartbeat", hb, "--limit", lim,
                          "--duration", "60000", NULL};
    pid_t holder = jt_spawn("tests/jobs/jobs-runner", args, NULL);
    jt_runs_of held = {f, "holder"};
    ck_assert_msg(jt_wait_for(jt_has_run, &held), "the holder process never ran the job");
    return holder;
}
