/* odbox — the command-line tool's shared parts. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

static const char usage_target[] =
    "  --dsn DSN          one database (URL or ODBC string); default $ODBOX_DSN\n"
    "  --config FILE      a registry config file (JSON, see docs/registry.md)\n"
    "  --eventlog NAME    with --dsn: the eventlog schema/database (default: the DSN's\n"
    "                     eventlog=, else eventlog)\n";
static const char usage_migrations[] =
    "  --dir DIR          also the service's own migrations (DIR/<dialect>/ or DIR)\n"
    "  --set NAME         history name of --dir's migrations (default: app)\n"
    "  --migrations DIR   odbox's own migrations (default: $ODBOX_MIGRATIONS_DIR, else\n"
    "                     the installed copy)\n";

void cli_print_usage(FILE *f, const char *usage, int takes)
{
    fputs(usage, f);
    if (takes & CLI_TARGET_ONLY)
        return;
    fputs(usage_target, f);
    if (!(takes & CLI_OPS))
        fputs(usage_migrations, f);
    fputs("  --json             machine-readable output on stdout\n", f);
}

int cli_exit_code(int rc)
{
    switch (rc) {
    case ODBOX_OK: return 0;
    case ODBOX_EINVAL: return EXIT_USAGE;
    case ODBOX_EMIGRATION: return EXIT_MISMATCH;
    case ODBOX_ECONNECT: case ODBOX_ECONNLOST: case ODBOX_EINDOUBT: return EXIT_CONNECT;
    case ODBOX_ETIMEDOUT: case ODBOX_EBUSY: return EXIT_LOCK;
    case ODBOX_EOWNER: return EXIT_OWNER;
    default: return 1;
    }
}

const char *cli_bad_option(char **argv)
{
    static char one[3];
    const char *last = argv[optind - 1];
    if (!optopt || !strncmp(last, "--", 2))
        return last;
    snprintf(one, sizeof one, "-%c", optopt);
    return one;
}

void cli_print_json(json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                               JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* The length of the valid UTF-8 sequence at p (0: not one). */
static size_t utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    /* no overlong form, surrogate or code point past U+10FFFF */
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F) || (c == 0xF0 && p[1] < 0x90) ||
        (c == 0xF4 && p[1] > 0x8F))
        return 0;
    return n;
}

json_object *cli_json_text(const char *s)
{
    if (!s)
        return NULL;
    size_t len = strlen(s), out = 0;
    char *t = malloc(3 * len + 1);
    if (!t)
        return json_object_new_string("");
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = utf8_len(p);
        if (n) {
            memcpy(t + out, p, n);
            out += n, p += n;
        } else {
            memcpy(t + out, "\xEF\xBF\xBD", 3); /* U+FFFD */
            out += 3, p++;
        }
    }
    json_object *o = json_object_new_string_len(t, (int)out);
    free(t);
    return o;
}

/* {"ok": false, "error", "sqlstate", "message"} and more's members. */
static void print_error_doc(const odbox_error *err, json_object *more)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "ok", json_object_new_boolean(0));
    json_object_object_add(o, "error", json_object_new_string(odbox_errname(err->code)));
    json_object_object_add(o, "sqlstate", json_object_new_string(err->sqlstate));
    json_object_object_add(o, "message", cli_json_text(err->message));
    if (more) {
        json_object_object_foreach(more, key, val) json_object_object_add(o, key, json_object_get(val));
    }
    cli_print_json(o);
    json_object_put(o);
}

/* What migrate would do on s: *applied of odbox's own migrations are
 * applied, *pending not (a failed one counts as pending), the first of
 * them in first; 0, or -1 when that cannot be told (no files, no
 * connection). */
static int framework_state(odbox_shard *s, size_t *applied, size_t *pending, char *first, size_t cap)
{
    odbox_migration_info *list = NULL;
    size_t n = 0;
    odbox_error e = {0};
    if (odbox_migrate_status(s, NULL, &list, &n, &e) != ODBOX_OK)
        return -1;
    *applied = *pending = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i].set, "odbox") || list[i].missing)
            continue;
        if (list[i].applied)
            (*applied)++;
        else if ((*pending)++ == 0)
            snprintf(first, cap, "%s", list[i].version);
    }
    free(list);
    return 0;
}

void cli_explain_schema(odbox_registry *r, odbox_shard *only, odbox_error *err)
{
    if (!r || !err || err->code != ODBOX_EDB)
        return;
    for (size_t i = 0; i < (only ? 1 : odbox_registry_shard_count(r)); i++) {
        odbox_shard *s = only ? only : odbox_registry_shard_at(r, i);
        size_t applied = 0, pending = 0;
        char first[ODBOX_MIGRATION_VERSION_MAX] = "", shard[16], said[ODBOX_ERROR_MESSAGE_MAX];
        if (framework_state(s, &applied, &pending, first, sizeof first) != 0 || !pending)
            continue;
        cli_shard_name(s, shard, sizeof shard);
        snprintf(said, sizeof said, "%s", err->message);
        if (!applied)
            odbox_error_set(err, ODBOX_EMIGRATION,
                            "shard %s: the database has no odbox schema (eventlog '%s': no odbox migration "
                            "applied): run odbox migrate (the database said: %.600s)",
                            shard, odbox_shard_eventlog(s), said);
        else
            odbox_error_set(err, ODBOX_EMIGRATION,
                            "shard %s: the database's odbox schema is older than this odbox's (eventlog '%s': %zu "
                            "migration(s) pending, V%s first): run odbox migrate (the database said: %.600s)",
                            shard, odbox_shard_eventlog(s), pending, first, said);
        return;
    }
}

int cli_fail(const cli *c, const odbox_error *err) { return cli_fail_with(c, err, NULL); }

int cli_fail_with(const cli *c, const odbox_error *err, json_object *more)
{
    if (c->json)
        print_error_doc(err, more);
    json_object_put(more);
    fprintf(stderr, "odbox: %s\n", err->message[0] ? err->message : odbox_strerror(err->code));
    return cli_exit_code(err->code);
}

/* -j alone or among other flags (-qj, -jq): the short options are all
 * flags, so a cluster of them is one argument. */
static int short_flags_with_j(const char *a)
{
    if (a[0] != '-' || a[1] == '-' || !a[1] || strspn(a + 1, "hjq") != strlen(a + 1))
        return 0;
    return strchr(a + 1, 'j') != NULL;
}

int cli_argv_json(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--json") || short_flags_with_j(argv[i]))
            return 1;
    return 0;
}

int cli_whole_number(const char *text, long min, long max, long *out)
{
    /* digits only: strtol alone takes leading blanks and a sign */
    if (!(*text >= '0' && *text <= '9'))
        return 0;
    char *end;
    long v = strtol(text, &end, 10);
    if (*end || v < min || v > max)
        return 0;
    *out = v;
    return 1;
}

int cli_usage_error(int json, const char *who, const char *fmt, ...)
{
    odbox_error err = {.code = ODBOX_EINVAL};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    if (json)
        print_error_doc(&err, NULL);
    fprintf(stderr, "%s: %s\n", who, err.message);
    return EXIT_USAGE;
}

int cli_parse_options(int argc, char **argv, cli *c, const char *usage, int takes)
{
    static const struct option opts[] = {
        {"dsn", required_argument, 0, 'd'},     {"config", required_argument, 0, 'c'},
        {"dir", required_argument, 0, 'D'},     {"set", required_argument, 0, 's'},
        {"migrations", required_argument, 0, 'm'}, {"lock-timeout", required_argument, 0, 'l'},
        {"eventlog", required_argument, 0, 'e'},
        {"json", no_argument, 0, 'j'},          {"quiet", no_argument, 0, 'q'},
        {"yes", no_argument, 0, 'y'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    int ch, li = -1;
    optind = 1;
    opterr = 0;
    c->json = cli_argv_json(argc, argv);
    while ((ch = getopt_long(argc, argv, "hjq", opts, &li)) != -1) {
        switch (ch) {
        case 'd': c->dsn = optarg; break;
        case 'c': c->config = optarg; break;
        case 'D': c->dir = optarg; break;
        case 's': c->set = optarg; break;
        case 'm': c->migrations = optarg; break;
        case 'e': c->eventlog = optarg; break;
        case 'l': {
            long v;
            if (!cli_whole_number(optarg, 1, 86400000, &v))
                return cli_usage_error(c->json, "odbox", "--lock-timeout wants milliseconds 1..86400000");
            c->lock_timeout_ms = (int)v;
            break;
        }
        case 'j': c->json = 1; break;
        case 'q': c->quiet = 1; break;
        case 'y':
            if (!(takes & CLI_YES))
                goto unknown;
            c->yes = 1;
            break;
        case 'h': cli_print_usage(stdout, usage, takes); exit(0);
        default:
        unknown:
            cli_usage_error(c->json, "odbox", "unknown or incomplete option '%s'", cli_bad_option(argv));
            cli_print_usage(stderr, usage, takes);
            return EXIT_USAGE;
        }
        /* an option of another command is refused, not ignored */
        const char *own = takes & CLI_TARGET_ONLY ? "dcj" : takes & CLI_OPS ? "dcejy" : NULL;
        if (own ? !strchr(own, ch) : (ch == 'l' && !(takes & CLI_LOCK)) || (ch == 'q' && !(takes & CLI_QUIET))) {
            if (li >= 0)
                cli_usage_error(c->json, "odbox", "%s takes no option '--%s'", argv[0], opts[li].name);
            else
                cli_usage_error(c->json, "odbox", "%s takes no option '-%c'", argv[0], ch);
            cli_print_usage(stderr, usage, takes);
            return EXIT_USAGE;
        }
        li = -1;
    }
    /* GNU getopt has moved the arguments behind the options */
    c->args = argv + optind;
    c->nargs = argc - optind;
    if (c->nargs && !(takes & CLI_ARGS))
        return cli_usage_error(c->json, "odbox", "unexpected argument '%s'", argv[optind]);
    if (!c->dsn && !c->config)
        c->dsn = getenv("ODBOX_DSN");
    if (!c->dsn == !c->config)
        return cli_usage_error(c->json, "odbox", "give exactly one of --dsn and --config (or set ODBOX_DSN)");
    if (c->eventlog && c->config)
        return cli_usage_error(c->json, "odbox",
                               "--eventlog goes with --dsn; a config file names each shard's eventlog");
    /* without --dir there is no set of the user's: --set would go unused,
     * and only the framework's set be migrated, repaired or listed */
    if (c->set && !c->dir)
        return cli_usage_error(c->json, "odbox", "--set names the set of the migrations in --dir: give --dir too");
    return 0;
}

int cli_open_registry(const cli *c, odbox_registry **r, odbox_error *err)
{
    if (c->config)
        return odbox_registry_load(c->config, r, err);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = c->dsn, .eventlog = c->eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    return odbox_registry_open(&cfg, r, err);
}

int cli_begin(int argc, char **argv, const char *usage, int takes, cli *c, odbox_registry **r,
              odbox_migrate_options *o)
{
    memset(c, 0, sizeof *c);
    c->tty = isatty(1);
    int u = cli_parse_options(argc, argv, c, usage, takes);
    if (u)
        return u;
    odbox_error err = {0};
    if (cli_open_registry(c, r, &err) != ODBOX_OK)
        return cli_fail(c, &err);
    if (!(takes & CLI_CREATES))
        odbox_registry_never_create(*r);
    cli_migrate_options(c, o);
    return 0;
}

void cli_migrate_options(const cli *c, odbox_migrate_options *o)
{
    memset(o, 0, sizeof *o);
    o->framework_dir = c->migrations;
    o->user_dir = c->dir;
    o->user_set = c->set;
    o->lock_timeout_ms = c->lock_timeout_ms;
}

void cli_shard_name(const odbox_shard *s, char *buf, size_t cap)
{
    odbox_shard_id id = odbox_shard_get_id(s);
    snprintf(buf, cap, "%d.%d", id.group, id.member);
}

int64_t cli_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const char *cli_format_time(int64_t us, int iso, char *buf, size_t cap)
{
    if (!us)
        return "-";
    time_t t = (time_t)(us / 1000000);
    long frac = (long)(us % 1000000);
    if (frac < 0)
        t--, frac += 1000000;
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(buf, cap, iso ? "%Y-%m-%dT%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tm);
    if (iso)
        snprintf(buf + n, cap - n, ".%06ldZ", frac);
    return buf;
}
