/* odbox — `odbox relay --config FILE`: runs the relays of the config
 * file's "relays" array (odbox/relay.h) as one delivery on a job
 * registry, until SIGTERM/SIGINT or, with --until-idle, until a look
 * finds nothing to fan out or claim. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"

const char usage_relay[] =
    "usage: odbox relay --config FILE [--until-idle] [--timeout-ms N] [--workers N]\n"
    "                   [--batch N] [--loops N] [--poll-ms N] [--backoff-ms N] [--lease-ms N]\n"
    "                   [--verbose] [--json]\n"
    "\n"
    "Publishes the events of the relays in FILE's \"relays\" array to their brokers:\n"
    "  \"relays\": [{\"name\": \"to-nats\", \"kind\": \"nats\", \"event_types\": [\"Deposited\"],\n"
    "              \"former_names\": [], \"ordered\": false, \"max_in_flight\": 0, \"max_attempts\": 0,\n"
    "              \"settings\": {\"url\": \"nats://127.0.0.1:4222\",\n"
    "                           \"subject\": \"events.{model_type}.{event_type}\"}}]\n"
    "(kinds: nats, rabbitmq, kafka; docs/relays.md). A relay is a handler: its rows show in\n"
    "`odbox handlers` and `odbox notifications`; \"max_attempts\" N gives a row up (EXPIRED)\n"
    "after N failed publishes (0: retried until its retention, 7 days, ends). Runs until\n"
    "SIGTERM or SIGINT, or with --until-idle until a fan-out round writes nothing and a\n"
    "handling round claims nothing, twice (at most --timeout-ms, default 600000).\n"
    "  --workers N     publishing threads (default 8)\n"
    "  --batch N       rows a handling round claims and publishes at once (default 250)\n"
    "  --loops N       handling rounds at once, each claiming its own batch (default 4 with a\n"
    "                  RabbitMQ or Kafka relay, whose confirms take long, else 2)\n"
    "  --poll-ms N     fan-out and handling poll (default 1000)\n"
    "  --backoff-ms N  a failed row waits N x 2^(attempts-1), at most 300000 (default 30000)\n"
    "  --lease-ms N    a claimed row is claimed again after N ms when its process died or\n"
    "                  its publish still runs (warned when not past every timeout_ms + 2000;\n"
    "                  default: the longest relay timeout + 35000)\n"
    "  --verbose       also the library's info lines (e.g. a redelivery the broker dropped)\n"
    "\n"
    "Exit codes: 0 stopped or idle; 1 runtime error; 2 usage, an unknown kind, a\n"
    "kind this odbox was built without or bad settings (naming the relay); 4\n"
    "cannot connect; 5 --until-idle timed out.\n"
    "\n";

/* A relay's round publishes its rows at once: 100 rows a round left the
 * claims and outcomes (a few ms each) as the limit; 250 ran NATS at 0.8
 * to 0.98 of a raw publisher on a 2-core machine (docs/relays.md). */
#define DEFAULT_BATCH 250
#define DEFAULT_WORKERS 8
#define CHECK_MS 100
#define IDLE_CHECK_MS 250
#define LOOK_WAIT_MS 1000 /* a look still running at the end: its usual few ms and then some */
#define STOP_WAIT_MS 5000
#define JOBS_STOP_MS 15000
#define RELAY_TIMEOUT_DEFAULT_MS 10000
/* A NATS or Kafka call lasts at most its timeout_ms and this (a
 * RabbitMQ one its timeout_ms): how long a publish may run. */
#define RELAY_CALL_GRACE_MS 2000

/* The brokers this odbox knows; one built without its library answers
 * ODBOX_EUNSUPPORTED from open_json. */
typedef struct relay_kind {
    const char *kind;
    int (*open_json)(json_object *settings, void **broker, odbox_error *err);
    const odbox_relay_ops *ops;
    /* handling loops without --loops: a round of RabbitMQ or Kafka spends
     * most of its time waiting for its confirms, so more rounds in flight
     * drain more (docs/relays.md: RabbitMQ 1.17-1.36x and Kafka 1.25-1.55x
     * with 4 loops); NATS, bound by the CPU on the benchmarks' machine,
     * gained nothing */
    int loops;
} relay_kind;

static const relay_kind kinds[] = {
    {"nats", odbox_relay_nats_open_json, &odbox_relay_nats_ops, 2},
    {"rabbitmq", odbox_relay_rabbitmq_open_json, &odbox_relay_rabbitmq_ops, 4},
    {"kafka", odbox_relay_kafka_open_json, &odbox_relay_kafka_ops, 4},
};

typedef struct relay_opts {
    cli c;
    int until_idle, timeout_ms, workers, batch, loops, poll_ms, lease_ms, verbose;
    int64_t backoff_ms;
} relay_opts;

typedef struct relay_entry {
    odbox_relay_config cfg;
    int max_attempts;   /* odbox_handlers_set_max_attempts; 0: none */
    const char **types; /* cfg.event_types, NULL-terminated; the strings are the JSON's */
    const char **former; /* cfg.former_names, likewise; NULL: none */
    int loops;           /* its kind's handling loops without --loops */
    odbox_relay *relay;
} relay_entry;

/* SIGTERM and SIGINT, blocked in every thread from before the first (the
 * registry's, the jobs', the relays' own) and taken by the main thread in
 * its waits: a signal never interrupts a library call on another thread
 * (a poll or a read failing with EINTR mid-publish). */
static sigset_t stop_signals;
static int stop_requested;

static void block_stop_signals(void)
{
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
}

/* Waits ms, or less when SIGTERM or SIGINT comes. */
static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    if (sigtimedwait(&stop_signals, NULL, &ts) > 0)
        stop_requested = 1;
}

static int parse_ms(int json, const char *name, const char *text, long min, long max, long *out)
{
    if (!cli_whole_number(text, min, max, out))
        return cli_usage_error(json, "odbox relay", "%s wants an integer %ld..%ld", name, min, max);
    return 0;
}

static int parse_args(int argc, char **argv, relay_opts *o)
{
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'},   {"until-idle", no_argument, 0, 'u'},
        {"timeout-ms", required_argument, 0, 't'}, {"workers", required_argument, 0, 'w'},
        {"poll-ms", required_argument, 0, 'p'},  {"backoff-ms", required_argument, 0, 'b'},
        {"lease-ms", required_argument, 0, 'l'}, {"json", no_argument, 0, 'j'},
        {"batch", required_argument, 0, 'n'},   {"loops", required_argument, 0, 'o'},
        {"verbose", no_argument, 0, 'v'},        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->timeout_ms = 600000;
    o->batch = DEFAULT_BATCH;
    o->workers = DEFAULT_WORKERS;
    int ch, rc = 0;
    long v = 0;
    optind = 1;
    opterr = 0;
    o->c.json = cli_argv_json(argc, argv);
    while (!rc && (ch = getopt_long(argc, argv, "hj", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': o->c.config = optarg; break;
        case 'u': o->until_idle = 1; break;
        case 'j': o->c.json = 1; break;
        case 'v': o->verbose = 1; break;
        case 't': rc = parse_ms(o->c.json, "--timeout-ms", optarg, 1, 86400000, &v), o->timeout_ms = (int)v; break;
        case 'w': rc = parse_ms(o->c.json, "--workers", optarg, 1, 1024, &v), o->workers = (int)v; break;
        case 'n': rc = parse_ms(o->c.json, "--batch", optarg, 1, 10000, &v), o->batch = (int)v; break;
        case 'o': rc = parse_ms(o->c.json, "--loops", optarg, 1, 64, &v), o->loops = (int)v; break;
        case 'p': rc = parse_ms(o->c.json, "--poll-ms", optarg, 1, 3600000, &v), o->poll_ms = (int)v; break;
        case 'b': rc = parse_ms(o->c.json, "--backoff-ms", optarg, 1, 300000, &v), o->backoff_ms = v; break;
        case 'l': rc = parse_ms(o->c.json, "--lease-ms", optarg, 1, 86400000, &v), o->lease_ms = (int)v; break;
        case 'h': fputs(usage_relay, stdout); exit(0);
        default:
            cli_usage_error(o->c.json, "odbox relay", "unknown or incomplete option '%s'", cli_bad_option(argv));
            fputs(usage_relay, stderr);
            return EXIT_USAGE;
        }
    }
    if (!rc && (optind < argc || !o->c.config)) {
        rc = cli_usage_error(o->c.json, "odbox relay", "%s",
                             optind < argc ? "unexpected argument" : "--config FILE is required");
        fputs(usage_relay, stderr);
    }
    return rc;
}

/* ---- the "relays" array ------------------------------------------------------------ */

static int bad(const char *name, const char *why, odbox_error *err)
{
    return odbox_error_set(err, ODBOX_EINVAL, "relay %.80s: %s", name, why);
}

/* The array a of non-empty strings (member key) into *out, NULL-terminated;
 * an empty one is refused where required, else none (*out NULL). */
static int parse_strings(json_object *a, const char *key, int required, const char ***out, const char *name,
                         odbox_error *err)
{
    char what[96];
    int array = a && json_object_is_type(a, json_type_array);
    size_t n = array ? json_object_array_length(a) : 0;
    if (!array || (!n && required)) {
        snprintf(what, sizeof what, "\"%s\" is not a%s array of strings", key, required ? " non-empty" : "n");
        return bad(name, what, err);
    }
    if (!n)
        return ODBOX_OK;
    if (!(*out = calloc(n + 1, sizeof **out)))
        return odbox_error_set(err, ODBOX_ENOMEM, "relay %.80s: out of memory", name);
    for (size_t i = 0; i < n; i++) {
        json_object *t = json_object_array_get_idx(a, i);
        if (!json_object_is_type(t, json_type_string) || !json_object_get_string_len(t)) {
            snprintf(what, sizeof what, "\"%s\" has an entry that is not a non-empty string", key);
            return bad(name, what, err);
        }
        (*out)[i] = json_object_get_string(t);
    }
    return ODBOX_OK;
}

/* o's member key, when it has one, into *out: an integer 0..1000000. */
static int count_member(json_object *o, const char *key, const char *name, int *out, odbox_error *err)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v))
        return ODBOX_OK;
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 || json_object_get_int64(v) > 1000000) {
        char what[64];
        snprintf(what, sizeof what, "\"%s\" is not an integer 0..1000000", key);
        return bad(name, what, err);
    }
    *out = (int)json_object_get_int64(v);
    return ODBOX_OK;
}

/* One relay object into e (its JSON settings into *settings, its kind into *k). */
static int parse_relay(json_object *o, size_t i, relay_entry *e, json_object **settings, const relay_kind **k,
                       odbox_error *err)
{
    char idx[32];
    snprintf(idx, sizeof idx, "#%zu", i + 1);
    json_object *v;
    if (!json_object_is_type(o, json_type_object))
        return bad(idx, "not a JSON object", err);
    const char *name = json_object_object_get_ex(o, "name", &v) && json_object_is_type(v, json_type_string)
                           ? json_object_get_string(v)
                           : NULL;
    if (!name || !*name)
        return bad(idx, "\"name\" is not a non-empty string", err);
    e->cfg.name = name;
    json_object_object_foreach(o, key, val)
    {
        (void)val;
        static const char *const known[] = {"name",         "kind",          "event_types",  "former_names",
                                            "ordered",      "max_in_flight", "max_attempts", "settings"};
        int ok = 0;
        for (size_t j = 0; j < sizeof known / sizeof *known; j++)
            ok |= !strcmp(key, known[j]);
        if (!ok)
            return odbox_error_set(err, ODBOX_EINVAL,
                                   "relay %.80s: unknown key \"%.64s\" (known: name, kind, event_types, former_names, "
                                   "ordered, max_in_flight, max_attempts, settings)",
                                   name, key);
    }
    const char *kind = json_object_object_get_ex(o, "kind", &v) ? json_object_get_string(v) : NULL;
    *k = NULL;
    for (size_t j = 0; kind && j < sizeof kinds / sizeof *kinds; j++)
        if (!strcmp(kind, kinds[j].kind))
            *k = &kinds[j];
    if (!*k) {
        char known[64] = "";
        for (size_t j = 0; j < sizeof kinds / sizeof *kinds; j++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", j ? ", " : "", kinds[j].kind);
        return odbox_error_set(err, ODBOX_EINVAL, "relay %.80s: unknown kind \"%.64s\" (known: %s)", name,
                               kind ? kind : "", known);
    }
    if (json_object_object_get_ex(o, "ordered", &v)) {
        if (!json_object_is_type(v, json_type_boolean))
            return bad(name, "\"ordered\" is not true or false", err);
        e->cfg.ordered = json_object_get_boolean(v);
    }
    int rc = count_member(o, "max_in_flight", name, &e->cfg.max_in_flight, err);
    if (rc == ODBOX_OK)
        rc = count_member(o, "max_attempts", name, &e->max_attempts, err);
    if (rc != ODBOX_OK)
        return rc;
    if (!json_object_object_get_ex(o, "settings", settings) || !json_object_is_type(*settings, json_type_object))
        return bad(name, "\"settings\" is not a JSON object", err);
    if (json_object_object_get_ex(o, "former_names", &v) &&
        (rc = parse_strings(v, "former_names", 0, &e->former, name, err)) != ODBOX_OK)
        return rc;
    e->cfg.former_names = e->former;
    rc = parse_strings(json_object_object_get_ex(o, "event_types", &v) ? v : NULL, "event_types", 1, &e->types,
                       name, err);
    e->cfg.event_types = e->types;
    return rc;
}

/* The longest "timeout_ms" of the relays' settings: calls get that and some. */
static int longest_timeout(json_object *relays)
{
    int longest = 0;
    for (size_t i = 0; i < json_object_array_length(relays); i++) {
        json_object *s, *t;
        int ms = RELAY_TIMEOUT_DEFAULT_MS; /* a relay without its own (0: the default) */
        if (json_object_object_get_ex(json_object_array_get_idx(relays, i), "settings", &s) &&
            json_object_object_get_ex(s, "timeout_ms", &t) && json_object_get_int(t) > 0)
            ms = json_object_get_int(t);
        if (ms > longest)
            longest = ms;
    }
    return longest;
}

/* err's message behind "relay NAME: ", with code. */
static int name_it(odbox_error *err, int code, const char *name)
{
    char msg[sizeof err->message];
    snprintf(msg, sizeof msg, "%s", err->message);
    return odbox_error_set(err, code, "relay %.80s: %s", name, msg);
}

/* Opens each relay's broker and adds it to h. */
static int add_relays(json_object *relays, relay_entry *es, odbox_handlers *h, odbox_error *err)
{
    for (size_t i = 0; i < json_object_array_length(relays); i++) {
        json_object *settings = NULL;
        const relay_kind *k = NULL;
        void *broker = NULL;
        int rc = parse_relay(json_object_array_get_idx(relays, i), i, &es[i], &settings, &k, err);
        if (rc == ODBOX_OK && (rc = k->open_json(settings, &broker, err)) != ODBOX_OK)
            return name_it(err, rc == ODBOX_EUNSUPPORTED ? ODBOX_EINVAL : rc, es[i].cfg.name);
        if (rc == ODBOX_OK)
            es[i].loops = k->loops;
        if (rc == ODBOX_OK && (rc = odbox_relay_add(h, &es[i].cfg, k->ops, broker, &es[i].relay, err)) != ODBOX_OK)
            return name_it(err, rc, es[i].cfg.name);
        if (rc == ODBOX_OK && es[i].max_attempts &&
            (rc = odbox_handlers_set_max_attempts(h, es[i].cfg.name, es[i].max_attempts, err)) != ODBOX_OK)
            return name_it(err, rc, es[i].cfg.name);
        if (rc != ODBOX_OK)
            return rc;
    }
    return ODBOX_OK;
}

/* ---- running ------------------------------------------------------------------------ */

/* *paused: whether the fan-out job is paused (odbox jobs pause),
 * cluster-wide: then an idle look fans out nothing either. */
static int fanout_paused(odbox_registry *r, odbox_delivery *d, int *paused, odbox_error *err)
{
    odbox_job_info *jobs = NULL;
    size_t n = 0;
    const char *name = odbox_delivery_job_name(d, ODBOX_DELIVERY_FANOUT);
    int rc = odbox_jobs_list(odbox_shard_primary(odbox_registry_default_shard(r)), &jobs, &n, err);
    *paused = 0;
    for (size_t i = 0; rc == ODBOX_OK && i < n; i++)
        if (!strcmp(jobs[i].name, name) && jobs[i].paused)
            *paused = 1;
    odbox_job_infos_free(&jobs, n);
    return rc;
}

/* Whether no publish of the relays runs and none ended since *seen was
 * counted (the publishes ended then), which it counts anew. */
static int publishes_quiet(const relay_entry *es, size_t n, int64_t *seen)
{
    int64_t ended = 0;
    int running = 0;
    for (size_t i = 0; i < n; i++) {
        ended += odbox_relay_published(es[i].relay) + odbox_relay_failed(es[i].relay);
        running |= odbox_relay_calls_running(es[i].relay) > 0;
    }
    int quiet = !running && ended == *seen;
    *seen = ended;
    return quiet;
}

/* 1 when no publish of this process ran from the last look's end to this
 * one's, a fan-out round on every shard found nothing (none while the
 * fan-out job is paused) and a handling round claimed nothing; 0 when
 * not; a negative code when a round failed. A handling round claims what
 * the process's loops would: not the rows on their backoff, held back by
 * an older row of their model (an ordered relay), of an event type no
 * relay here takes, or leased by another process (before: a count of the
 * relays' due rows, which counted those that wait too, so that a look was
 * never idle while one was there). The publishes are looked at across
 * looks: rows a loop has claimed and not yet published are leased (due
 * only at their lease's end), and an ordered relay's others wait for
 * them, so a look's claim finds nothing while the drain goes on; a loop's
 * publishes end within a look or two. */
static int idle_now(odbox_registry *r, odbox_delivery *d, const relay_entry *es, size_t n, int64_t *seen, char *why,
                    size_t cap, odbox_error *err)
{
    static const char busy[] = "a publish was running or had ended since the last look";
    if (!publishes_quiet(es, n, seen)) {
        snprintf(why, cap, "%s", busy);
        return 0;
    }
    int paused = 0, idle = 1;
    int rc = fanout_paused(r, d, &paused, err);
    for (size_t i = 0; rc == ODBOX_OK && !paused && i < odbox_registry_shard_count(r); i++) {
        odbox_delivery_round round = {0};
        rc = odbox_delivery_fanout_round(d, odbox_registry_shard_at(r, i), &round, err);
        if (round.delivered || round.notifications) {
            snprintf(why, cap, "a fan-out round on shard %d.%d wrote %zu notification(s)", round.shard.group,
                     round.shard.member, round.notifications);
            idle = 0;
        }
    }
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_registry_shard_count(r); i++) {
        odbox_delivery_round round = {0};
        rc = odbox_delivery_handling_round(d, odbox_registry_shard_at(r, i), &round, err);
        if (round.read) {
            snprintf(why, cap, "a round on shard %d.%d claimed %zu row(s) to publish", round.shard.group,
                     round.shard.member, round.read);
            idle = 0;
        }
    }
    int quiet = publishes_quiet(es, n, seen);
    if (idle && !quiet) {
        snprintf(why, cap, "%s", busy);
        idle = 0;
    }
    return rc == ODBOX_OK ? idle : rc;
}

/* The idle looks run on a thread of their own: they read the database,
 * and a server that stops answering while its TCP stays up holds a read
 * without end. The main thread only keeps the deadline and the signals;
 * a look still in the database at the end is left running, and what it
 * reads (registry, delivery, relays) is then not freed: the process
 * ends; so when the jobs' stop leaves a round of the delivery running.
 * Static, as a left look may outlive run(). */
static struct idle_look {
    pthread_mutex_t mu;
    int busy, done, result; /* result: 1 idle, 0 not, a negative code */
    odbox_error err;
    char why[160]; /* with result 0: what the look found */
    odbox_registry *r;
    odbox_delivery *d;
    const relay_entry *es;
    size_t n;
    int64_t seen; /* the publishes ended at the last look's end (-1: no look yet) */
    /* what else a left look or round may use, kept reachable */
    odbox_jobs *jobs;
    odbox_handlers *h;
    json_object *config;
} look = {.mu = PTHREAD_MUTEX_INITIALIZER, .seen = -1};

static void *look_main(void *arg)
{
    (void)arg;
    odbox_error e = {0};
    char why[sizeof look.why] = "";
    int rc = idle_now(look.r, look.d, look.es, look.n, &look.seen, why, sizeof why, &e);
    pthread_mutex_lock(&look.mu);
    look.result = rc;
    look.err = e;
    memcpy(look.why, why, sizeof why);
    look.busy = 0;
    look.done = 1;
    pthread_mutex_unlock(&look.mu);
    return NULL;
}

/* 1 while *busy (guarded by mu) holds, after waiting at most wait_ms
 * for it to clear */
static int still_busy(pthread_mutex_t *mu, const int *busy, int wait_ms)
{
    for (;; wait_ms -= CHECK_MS) {
        pthread_mutex_lock(mu);
        int b = *busy;
        pthread_mutex_unlock(mu);
        if (!b || wait_ms <= 0)
            return b;
        sleep_ms(CHECK_MS);
    }
}

/* 1 while a look runs, after waiting at most wait_ms for it to end */
static int look_busy(int wait_ms) { return still_busy(&look.mu, &look.busy, wait_ms); }

/* Starts a look; 1 when one ran to its end since the last call, with its
 * result in *result and err. */
static int look_step(int start, int *result, char *why, size_t cap, odbox_error *err)
{
    pthread_mutex_lock(&look.mu);
    int done = look.done;
    if (done) {
        *result = look.result;
        *err = look.err;
        snprintf(why, cap, "%s", look.why);
        look.done = 0;
    } else if (start && !look.busy) {
        pthread_t t;
        look.busy = 1;
        if (pthread_create(&t, NULL, look_main, NULL) == 0)
            pthread_detach(t);
        else {
            look.busy = 0;
            *result = odbox_error_set(err, ODBOX_ENOMEM, "relay: cannot start a thread for the idle look");
            done = 1;
        }
    }
    pthread_mutex_unlock(&look.mu);
    return done;
}

/* The delivery and the jobs are opened and started, and at the end
 * freed, on a thread of their own, as the looks run: each step reads or
 * writes the database (the jobs' rows; a hand-off given back, the
 * subscriptions' heartbeat joined), and a server that stops answering
 * meanwhile (its TCP up: no bound) must hold neither --timeout-ms nor
 * SIGTERM. A step still running past its bound is left (nothing is
 * freed) and the process ends. Static, as a left step outlives run(). */
static struct delivery_steps {
    pthread_mutex_t mu;
    int busy, rc;
    odbox_error err;
    odbox_registry *r;
    odbox_handlers *h;
    odbox_delivery_config dc;
    odbox_jobs_config jc;
    odbox_delivery *d;
    odbox_jobs *jobs;
} steps = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void step_done(int rc, const odbox_error *e)
{
    pthread_mutex_lock(&steps.mu);
    steps.rc = rc, steps.err = *e, steps.busy = 0;
    pthread_mutex_unlock(&steps.mu);
}

static void *start_main(void *arg)
{
    (void)arg;
    odbox_error e = {0};
    int rc = odbox_delivery_open(steps.r, steps.h, &steps.dc, &steps.d, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(steps.r, &steps.jc, &steps.jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(steps.d, steps.jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(steps.jobs, &e);
    step_done(rc, &e);
    return NULL;
}

static void *free_main(void *arg)
{
    (void)arg;
    odbox_error e = {0};
    odbox_delivery_free(&steps.d);
    odbox_jobs_free(&steps.jobs);
    step_done(ODBOX_OK, &e);
    return NULL;
}

/* Starts a step on its thread; 0, or -1 when no thread could start. */
static int step_run(void *(*step)(void *))
{
    pthread_t t;
    steps.busy = 1;
    if (pthread_create(&t, NULL, step, NULL) != 0) {
        steps.busy = 0;
        return -1;
    }
    pthread_detach(t);
    return 0;
}

/* 1 when the delivery and the jobs were freed within wait_ms */
static int freed_in_time(int wait_ms)
{
    if (step_run(free_main)) {
        free_main(NULL);
        return 1;
    }
    return !still_busy(&steps.mu, &steps.busy, wait_ms);
}

/* Runs the start and waits for it: after a signal or --timeout-ms (with
 * --until-idle, from begin_ms) at most STOP_WAIT_MS more; *left = 1 when
 * it still runs then. */
static int start_delivery(const relay_opts *o, int64_t begin_ms, int *left, odbox_error *err)
{
    if (step_run(start_main))
        return odbox_error_set(err, ODBOX_ENOMEM, "relay: cannot start a thread for the delivery's start");
    for (int64_t give_up = -1;; sleep_ms(CHECK_MS)) {
        int64_t now = cli_mono_us() / 1000;
        pthread_mutex_lock(&steps.mu);
        int busy = steps.busy, rc = steps.rc;
        if (!busy && rc != ODBOX_OK)
            *err = steps.err;
        pthread_mutex_unlock(&steps.mu);
        if (!busy)
            return rc;
        if (give_up < 0 && (stop_requested || (o->until_idle && now - begin_ms >= o->timeout_ms)))
            give_up = now + STOP_WAIT_MS;
        if (give_up >= 0 && now >= give_up) {
            *left = 1;
            if (stop_requested)
                return odbox_error_set(err, ODBOX_ETIMEDOUT,
                                       "relay: stopped while starting: the database has not answered in %lld ms; "
                                       "not waited for",
                                       (long long)(now - begin_ms));
            return odbox_error_set(err, ODBOX_ETIMEDOUT,
                                   "relay: not idle after %d ms (the database has not answered the start)",
                                   o->timeout_ms);
        }
    }
}

/* Until a signal, or idle twice in a row (a round of another process may
 * have held rows the first look missed), or --timeout-ms (from start,
 * in ms of cli_mono_us). */
static int wait_for_end(const relay_opts *o, int64_t start, int *idle, odbox_error *err)
{
    int64_t next_check = cli_mono_us() / 1000;
    int streak = 0, failed = ODBOX_OK;
    odbox_error last = {0};
    char why[sizeof look.why] = "", found[sizeof look.why];
    while (!stop_requested && o->until_idle) {
        int64_t t = cli_mono_us() / 1000;
        int result;
        if (look_step(t >= next_check, &result, found, sizeof found, &last)) {
            if (result == 0)
                memcpy(why, found, sizeof why);
            streak = result == 1 ? streak + 1 : 0;
            failed = result < 0 ? result : ODBOX_OK;
            if (streak >= 2) {
                *idle = 1;
                return ODBOX_OK;
            }
            next_check = t + IDLE_CHECK_MS;
        }
        if (t - start >= o->timeout_ms) {
            if (failed != ODBOX_OK) {
                *err = last;
                return failed;
            }
            if (look_busy(LOOK_WAIT_MS))
                return odbox_error_set(err, ODBOX_ETIMEDOUT,
                                       "relay: not idle after %d ms (its last look has not ended: the database, "
                                       "or a broker it publishes to, has not answered)",
                                       o->timeout_ms);
            return odbox_error_set(err, ODBOX_ETIMEDOUT, "relay: not idle after %d ms%s%s%s", o->timeout_ms,
                                   why[0] ? " (the last look that was not: " : "", why, why[0] ? ")" : "");
        }
        sleep_ms(CHECK_MS);
    }
    while (!stop_requested)
        sleep_ms(CHECK_MS);
    return ODBOX_OK;
}

static void log_to_stderr(void *ud, odbox_log_level level, const char *message)
{
    (void)ud;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "odbox relay: %s: %s\n", names[level < 0 || level > 3 ? 3 : level], message);
}

static void report(const relay_opts *o, const relay_entry *es, size_t n, int idle, int64_t elapsed_ms)
{
    json_object *doc = json_object_new_object(), *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "name", json_object_new_string(es[i].cfg.name));
        json_object_object_add(e, "published", json_object_new_int64(odbox_relay_published(es[i].relay)));
        json_object_object_add(e, "failed", json_object_new_int64(odbox_relay_failed(es[i].relay)));
        json_object_array_add(arr, e);
        if (!o->c.json)
            printf("relay %s: %lld published, %lld failed\n", es[i].cfg.name,
                   (long long)odbox_relay_published(es[i].relay), (long long)odbox_relay_failed(es[i].relay));
    }
    json_object_object_add(doc, "ok", json_object_new_boolean(1));
    json_object_object_add(doc, "idle", json_object_new_boolean(idle));
    json_object_object_add(doc, "elapsed_ms", json_object_new_int64(elapsed_ms));
    json_object_object_add(doc, "relays", arr);
    if (o->c.json)
        cli_print_json(doc);
    json_object_put(doc);
}

/* *left: a look, a job, the start or the frees were left in the
 * database (nothing of r, es freed). */
static int run(odbox_registry *r, json_object *relays, relay_entry *es, size_t n, const relay_opts *o, int *left,
               odbox_error *err)
{
    int64_t start = cli_mono_us() / 1000;
    int timeout = longest_timeout(relays), idle = 0;
    odbox_handlers *h = NULL;
    odbox_delivery *d = NULL;
    odbox_jobs *jobs = NULL;
    odbox_delivery_config dc = {
        .fanout_poll_ms = o->poll_ms,
        .handling_poll_ms = o->poll_ms,
        .backoff_base_ms = o->backoff_ms,
        .workers = o->workers,
        .handling_batch = o->batch,
        .handling_loops = o->loops,
        .stop_wait_ms = STOP_WAIT_MS,
        /* a publish waits at most its timeout: past that and some, it hung */
        .handler_timeout_ms = timeout + 5000,
        .lease_ms = o->lease_ms,
    };
    odbox_jobs_config jc = {.poll_interval_ms = o->poll_ms, .shutdown_max_wait_ms = JOBS_STOP_MS};
    int rc = odbox_handlers_new(&h, err);
    if (rc == ODBOX_OK)
        rc = add_relays(relays, es, h, err);
    for (size_t i = 0; rc == ODBOX_OK && !o->loops && i < n; i++)
        if (es[i].loops > dc.handling_loops)
            dc.handling_loops = es[i].loops;
    if (rc == ODBOX_OK && o->verbose)
        fprintf(stderr, "odbox relay: info: %zu relay(s); %d publishing threads, %d handling loops (%s), %d rows a round\n",
                n, o->workers, dc.handling_loops, o->loops ? "--loops" : "the default for its kinds",
                o->batch);
    if (rc == ODBOX_OK && o->lease_ms && o->lease_ms <= timeout + RELAY_CALL_GRACE_MS)
        fprintf(stderr,
                "odbox relay: warning: --lease-ms %d is not longer than a publish may take (timeout_ms %d + "
                "%d ms): another process may claim and publish a row again while its publish runs\n",
                o->lease_ms, timeout, RELAY_CALL_GRACE_MS);
    look.r = r, look.es = es, look.n = n, look.h = h;
    if (rc == ODBOX_OK) {
        steps.r = r, steps.h = h, steps.dc = dc, steps.jc = jc;
        rc = start_delivery(o, start, left, err);
        if (*left)
            return rc;
        d = steps.d, jobs = steps.jobs;
    }
    look.d = d, look.jobs = jobs;
    if (rc == ODBOX_OK)
        rc = wait_for_end(o, start, &idle, err);
    int jobs_left = 0; /* the stop gave up on a fan-out or handling round: the delivery's free would wait for it */
    if (jobs) {
        odbox_error stop_err = {0};
        int src = odbox_jobs_stop(jobs, &stop_err);
        jobs_left = src == ODBOX_ETIMEDOUT;
        if (rc == ODBOX_OK && src != ODBOX_OK) {
            rc = src;
            *err = stop_err;
        }
    }
    /* a look's handling round may be publishing: its calls end within
     * the handler's timeout, and their rows are then written */
    int look_left = look_busy(LOOK_WAIT_MS + dc.handler_timeout_ms);
    if (look_left)
        fprintf(stderr, "odbox relay: warning: the last idle look has not ended (the database, or a broker it "
                        "publishes to, has not answered); not waited for\n");
    if (look_left || jobs_left) {
        *left = 1;
    } else if (!freed_in_time(dc.handler_timeout_ms)) {
        fprintf(stderr, "odbox relay: warning: the delivery's free waited %d ms for the database (a statement "
                        "still runs); not waited for\n",
                dc.handler_timeout_ms);
        *left = 1;
    }
    if (rc == ODBOX_OK)
        report(o, es, n, idle, cli_mono_us() / 1000 - start);
    if (*left)
        return rc;
    for (size_t i = 0; i < n; i++)
        odbox_relay_free(&es[i].relay);
    odbox_handlers_free(&h);
    return rc;
}

int cmd_relay(int argc, char **argv)
{
    relay_opts o;
    int u = parse_args(argc, argv, &o);
    if (u)
        return u;
    odbox_error err = {0};
    odbox_registry *r = NULL;
    block_stop_signals();
    /* the registry's reading first: a file that cannot be read or is no
     * valid config fails as it does for every other command */
    if (odbox_registry_load(o.c.config, &r, &err) != ODBOX_OK)
        return cli_fail(&o.c, &err);
    odbox_registry_never_create(r);
    json_object *root = json_object_from_file(o.c.config), *relays = NULL;
    if (!root) {
        odbox_registry_free(&r);
        odbox_error_set(&err, ODBOX_EINVAL, "relay: cannot read %.200s as JSON: %s", o.c.config,
                        json_util_get_last_err());
        return cli_fail(&o.c, &err);
    }
    if (!json_object_object_get_ex(root, "relays", &relays) || !json_object_is_type(relays, json_type_array) ||
        !json_object_array_length(relays)) {
        json_object_put(root);
        odbox_registry_free(&r);
        odbox_error_set(&err, ODBOX_EINVAL, "relay: %.200s has no \"relays\" array with a relay", o.c.config);
        return cli_fail(&o.c, &err);
    }
    size_t n = json_object_array_length(relays);
    relay_entry *es = calloc(n, sizeof *es);
    int rc = es ? ODBOX_OK : odbox_error_set(&err, ODBOX_ENOMEM, "relay: out of memory");
    int left = 0;
    look.config = root;
    if (rc == ODBOX_OK) {
        odbox_log_set(log_to_stderr, NULL, o.verbose ? ODBOX_LOG_INFO : ODBOX_LOG_WARN);
        rc = run(r, relays, es, n, &o, &left, &err);
    }
    if (left) /* the look still reads them; the process ends */
        return rc == ODBOX_OK ? 0 : cli_fail(&o.c, &err);
    odbox_registry_free(&r);
    for (size_t i = 0; es && i < n; i++)
        free(es[i].types), free(es[i].former);
    free(es);
    json_object_put(root);
    return rc == ODBOX_OK ? 0 : cli_fail(&o.c, &err);
}
