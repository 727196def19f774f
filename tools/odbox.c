/* odbox — the command-line tool: migrate, status, version.
 *
 * Exit codes: 0 success; 1 database or other runtime error; 2 usage error
 * or invalid input (DSN, config); 3 migration history does not match the
 * files; 4 cannot connect or the connection was lost (ODBOX_ECONNECT,
 * ODBOX_ECONNLOST, ODBOX_EINDOUBT); 5 timed out or busy (ODBOX_ETIMEDOUT,
 * ODBOX_EBUSY: the migration lock, a pool's acquire, SQLite's busy
 * timeout, relay --until-idle); 6 the eventlog belongs to another
 * application database (or schema). The mapping: cli_exit_code (tools/cli.c).
 * Each command lives in its own file (tools/migrate_cmd.c, ...), sharing
 * tools/cli.c. */
#include <stdio.h>
#include <string.h>
#include "cli.h"

static const char usage_main[] =
    "usage: odbox <command> [options]\n"
    "\n"
    "commands:\n"
    "  migrate   apply pending migrations on every shard (`migrate repair`: fix the history)\n"
    "  status    per shard: dialect, server, migrations, event and notification counts\n"
    "  jobs      list jobs; pause, resume or run one now (`odbox jobs --help`)\n"
    "  notifications  counts by handler and state, rows (--list), requeue\n"
    "  handlers  subscriptions: types, live processes, backlog, lag; retire, replay\n"
    "  metrics   the notifications' metrics in the Prometheus text format\n"
    "  purge     delete delivered events and finished notifications older than an age\n"
    "  relay     the config's \"relays\": publish events to NATS JetStream, RabbitMQ, Kafka\n"
    "  version   print the version\n"
    "  demo      the whole outbox in a few seconds, on SQLite (`odbox demo --help`)\n"
    "  help      this text; `odbox <command> --help` for a command's options\n"
    "\n"
    "Exit codes: 0 ok, 1 runtime error, 2 usage or invalid input, 3 migration\n"
    "history does not match the files, 4 cannot connect or connection lost,\n"
    "5 timed out or busy (the migration lock, a pool's or SQLite's wait,\n"
    "relay --until-idle), 6 the eventlog belongs to another application database.\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        if (argc > 2 && !strcmp(argv[2], "migrate"))
            cli_print_usage(stdout, usage_migrate, 0);
        else if (argc > 2 && !strcmp(argv[2], "status"))
            cli_print_usage(stdout, usage_status, 0);
        else if (argc > 2 && !strcmp(argv[2], "jobs"))
            fputs(usage_jobs, stdout);
        else if (argc > 2 && !strcmp(argv[2], "notifications"))
            cli_print_usage(stdout, usage_notifications, CLI_OPS);
        else if (argc > 2 && !strcmp(argv[2], "handlers"))
            cli_print_usage(stdout, usage_handlers, CLI_OPS);
        else if (argc > 2 && !strcmp(argv[2], "metrics"))
            cli_print_usage(stdout, usage_metrics, CLI_OPS);
        else if (argc > 2 && !strcmp(argv[2], "demo"))
            fputs(usage_demo, stdout);
        else if (argc > 2 && !strcmp(argv[2], "relay"))
            fputs(usage_relay, stdout);
        else if (argc > 2 && !strcmp(argv[2], "purge"))
            cli_print_usage(stdout, usage_purge, CLI_OPS);
        else
            fputs(usage_main, stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        if (argc > 2 && !strcmp(argv[2], "--help")) {
            puts("usage: odbox version\n\nPrints odbox's version.");
            return 0;
        }
        printf("odbox %s\n", odbox_version());
        return 0;
    }
    if (!strcmp(cmd, "migrate"))
        return cmd_migrate(argc - 1, argv + 1);
    if (!strcmp(cmd, "status"))
        return cmd_status(argc - 1, argv + 1);
    if (!strcmp(cmd, "jobs"))
        return cmd_jobs(argc - 1, argv + 1);
    if (!strcmp(cmd, "notifications"))
        return cmd_notifications(argc - 1, argv + 1);
    if (!strcmp(cmd, "handlers"))
        return cmd_handlers(argc - 1, argv + 1);
    if (!strcmp(cmd, "metrics"))
        return cmd_metrics(argc - 1, argv + 1);
    if (!strcmp(cmd, "purge"))
        return cmd_purge(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo"))
        return cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "relay"))
        return cmd_relay(argc - 1, argv + 1);
    fprintf(stderr, "odbox: unknown command '%s'\n%s", cmd, usage_main);
    return EXIT_USAGE;
}
