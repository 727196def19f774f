/* odbox — the CLI's `jobs` command: list the jobs of scheduled_tasks, and
 * pause, resume or run one now, on the default shard's primary (where a
 * job registry runs its jobs unless given another pool). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "cli.h"

const char usage_jobs[] =
    "usage: odbox jobs [list] (--dsn DSN | --config FILE) [--json]\n"
    "       odbox jobs pause|resume|run NAME (--dsn DSN | --config FILE) [--json]\n"
    "\n"
    "list     every row of scheduled_tasks: name, instance, next execution, picked,\n"
    "         picked by, last heartbeat and its age (by the database's time), last\n"
    "         success, last failure, consecutive failures, paused (times in UTC)\n"
    "pause    stop claiming job NAME in the whole cluster (a run in progress goes on)\n"
    "resume   let job NAME run again when it is due\n"
    "run      make job NAME due now; if it is running, it runs again right after\n"
    "\n"
    "  --dsn DSN          one database (URL or ODBC string); default $ODBOX_DSN\n"
    "  --config FILE      a registry config file (JSON): its default shard\n"
    "  --json             machine-readable output on stdout\n"
    "\n"
    "Exit codes: 0 ok; 1 runtime error, also a job NAME without a row; 2 usage or\n"
    "invalid input; 3 the database has no odbox schema, or an older one: run odbox\n"
    "migrate; 4 cannot connect (also a SQLite file that does not exist).\n";

static json_object *time_json(int64_t us)
{
    char buf[40];
    return us ? json_object_new_string(cli_format_time(us, 1, buf, sizeof buf)) : NULL;
}

static int cmd_list(odbox_pool *pool, const cli *o, odbox_error *err)
{
    odbox_job_info *list = NULL;
    size_t n = 0;
    int rc = odbox_jobs_list(pool, &list, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    if (o->json) {
        json_object *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
            odbox_job_info *in = &list[i];
            json_object *j = json_object_new_object();
            json_object_object_add(j, "name", json_object_new_string(in->name));
            json_object_object_add(j, "instance", json_object_new_string(in->instance));
            json_object_object_add(j, "next_execution", time_json(in->next_execution_us));
            json_object_object_add(j, "picked", json_object_new_boolean(in->picked));
            json_object_object_add(j, "picked_by", in->picked_by ? json_object_new_string(in->picked_by) : NULL);
            json_object_object_add(j, "last_heartbeat", time_json(in->last_heartbeat_us));
            json_object_object_add(j, "heartbeat_age_s", in->last_heartbeat_us
                                                             ? json_object_new_double((double)in->heartbeat_age_us / 1e6)
                                                             : NULL);
            json_object_object_add(j, "last_success", time_json(in->last_success_us));
            json_object_object_add(j, "last_failure", time_json(in->last_failure_us));
            json_object_object_add(j, "consecutive_failures", json_object_new_int(in->consecutive_failures));
            json_object_object_add(j, "paused", json_object_new_boolean(in->paused));
            json_object_array_add(arr, j);
        }
        cli_print_json(arr);
        json_object_put(arr);
    } else if (!n) {
        puts("no jobs (scheduled_tasks is empty)");
    } else {
        printf("%-24s %-10s %-19s %-6s %-20s %-26s %-19s %-19s %-8s %s\n", "NAME", "INSTANCE", "NEXT EXECUTION",
               "PICKED", "PICKED BY", "LAST HEARTBEAT (AGE)", "LAST SUCCESS", "LAST FAILURE", "FAILURES", "PAUSED");
        for (size_t i = 0; i < n; i++) {
            odbox_job_info *in = &list[i];
            char next[40], beat[64], ok[40], bad[40], when[40];
            cli_format_time(in->next_execution_us, 0, next, sizeof next);
            if (in->last_heartbeat_us)
                snprintf(beat, sizeof beat, "%s (%.1fs)", cli_format_time(in->last_heartbeat_us, 0, when, sizeof when),
                         (double)in->heartbeat_age_us / 1e6);
            else
                strcpy(beat, "-");
            printf("%-24s %-10s %-19s %-6s %-20s %-26s %-19s %-19s %-8d %s\n", in->name, in->instance, next,
                   in->picked ? "yes" : "no", in->picked_by ? in->picked_by : "-", beat,
                   cli_format_time(in->last_success_us, 0, ok, sizeof ok),
                   cli_format_time(in->last_failure_us, 0, bad, sizeof bad), in->consecutive_failures,
                   in->paused ? "yes" : "no");
        }
    }
    odbox_job_infos_free(&list, n);
    return ODBOX_OK;
}

static int cmd_change(odbox_pool *pool, const char *verb, const char *name, const cli *o, odbox_error *err)
{
    int rc;
    const char *done;
    if (!strcmp(verb, "pause"))
        rc = odbox_jobs_pause(pool, name, err), done = "paused";
    else if (!strcmp(verb, "resume"))
        rc = odbox_jobs_resume(pool, name, err), done = "resumed";
    else
        rc = odbox_jobs_run_now(pool, name, err), done = "due now";
    if (rc != ODBOX_OK)
        return rc;
    if (o->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "ok", json_object_new_boolean(1));
        json_object_object_add(j, "job", json_object_new_string(name));
        json_object_object_add(j, "done", json_object_new_string(done));
        cli_print_json(j);
        json_object_put(j);
    } else {
        printf("job '%s': %s\n", name, done);
    }
    return ODBOX_OK;
}

int cmd_jobs(int argc, char **argv)
{
    cli c;
    odbox_registry *r = NULL;
    odbox_migrate_options unused;
    int u = cli_begin(argc, argv, usage_jobs, CLI_ARGS | CLI_TARGET_ONLY, &c, &r, &unused);
    if (u)
        return u;
    const char *verb = c.nargs ? c.args[0] : "list";
    int change = !strcmp(verb, "pause") || !strcmp(verb, "resume") || !strcmp(verb, "run");
    if (!change && strcmp(verb, "list"))
        u = cli_usage_error(c.json, "odbox", "unknown jobs command '%s' (list, pause, resume, run)", verb);
    else if (change ? c.nargs != 2 : c.nargs > 1)
        u = cli_usage_error(c.json, "odbox", change ? "jobs %s wants one job NAME" : "jobs %s takes no argument",
                            verb);
    odbox_error err = {0};
    int rc = ODBOX_OK;
    if (!u) {
        odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(r));
        rc = change ? cmd_change(pool, verb, c.args[1], &c, &err) : cmd_list(pool, &c, &err);
    }
    if (!u && rc != ODBOX_OK)
        cli_explain_schema(r, odbox_registry_default_shard(r), &err);
    odbox_registry_free(&r);
    return u ? u : rc == ODBOX_OK ? 0 : cli_fail(&c, &err);
}
