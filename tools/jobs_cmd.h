/* odbox — the CLI's `jobs` command (tools/jobs_cmd.c). */
#ifndef ODBOX_TOOLS_JOBS_CMD_H
#define ODBOX_TOOLS_JOBS_CMD_H

/* `odbox jobs ...` with argv[0] = "jobs"; returns the exit code. */
int cmd_jobs(int argc, char **argv);

#endif
