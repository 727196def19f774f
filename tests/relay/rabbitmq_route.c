/* odbox — rabbitmq-check route (tests/relay/rabbitmq.test): where each
 * row of a round goes, in one publish_batch on one connection, and one
 * publish at a time. The exchange template is {model_type}, the routing
 * key {event_type}; in a round of ROWS rows:
 *   - MISSING_ROW's exchange does not exist: that row alone fails with
 *     the server's 404 NOT_FOUND (before, the server's channel.close for
 *     it failed every row of the round, round after round);
 *   - UNROUTED_ROW's exchange has no queue bound: the broker returns the
 *     mandatory message and the row fails as unroutable (before, it was
 *     confirmed, SUCCEEDED and lost);
 *   - EMPTY_ROW has no model type, so its exchange expands to "": refused
 *     with ODBOX_EINVAL (before, it went to the default exchange, which
 *     took its routing key "odbox-q" for the queue's name);
 *   - the others are confirmed.
 * Two rounds on one broker (the second finds the same: the connection
 * stays usable), single publishes the same way, a third round once the
 * missing exchange was made (its row is confirmed too: a missing exchange
 * is asked for again), and a template that is the literal "" (the default
 * exchange) to the queue's name: confirmed. The queue then holds exactly
 * the confirmed messages. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <json-c/json.h>
#include "odbox/odbox.h"
#include "rabbitmq_check.h"

enum { ROWS = 10, MISSING_ROW = 3, EMPTY_ROW = 5, UNROUTED_ROW = 7, ROUNDS = 2 };
#define UNROUTED EXCHANGE "-unrouted"

typedef struct route_round {
    odbox_envelope envs[ROWS];
    const odbox_envelope *ep[ROWS];
    char ids[ROWS][64];
    char *bodies[ROWS];
    size_t lens[ROWS];
    int rcs[ROWS];
    odbox_error errs[ROWS];
} route_round;

static char missing[64];

static void round_fill(route_round *r, int k)
{
    for (int i = 0; i < ROWS; i++) {
        const char *type = i == EMPTY_ROW ? QUEUE : "RouteProbe";
        snprintf(r->ids[i], sizeof r->ids[i], "route-%d-%d-%d", (int)getpid(), k, i);
        r->envs[i] = (odbox_envelope){.event_id = r->ids[i], .event_type = type, .model_id = "m",
                                      .model_type = i == MISSING_ROW    ? missing
                                                    : i == UNROUTED_ROW ? UNROUTED
                                                    : i == EMPTY_ROW    ? NULL
                                                                        : EXCHANGE};
        r->ep[i] = &r->envs[i];
        json_object *o = json_object_new_object(), *p = json_object_new_object();
        json_object_object_add(p, "seq", json_object_new_int(k * ROWS + i));
        json_object_object_add(o, "id", json_object_new_string(r->ids[i]));
        json_object_object_add(o, "type", json_object_new_string(type));
        json_object_object_add(o, "payload", p);
        r->bodies[i] = strdup(json_object_to_json_string(o));
        r->lens[i] = strlen(r->bodies[i]);
        r->rcs[i] = ODBOX_OK;
        r->errs[i] = (odbox_error){0};
        json_object_put(o);
    }
}

static void round_free(route_round *r)
{
    for (int i = 0; i < ROWS; i++)
        free(r->bodies[i]);
}

/* rc and message of a row that must fail with code (0: any) naming want */
static int failed_with(int rc, const odbox_error *e, int code, const char *want)
{
    return rc != ODBOX_OK && (!code || rc == code) && strstr(e->message, want);
}

/* Round k; made: the missing exchange was made since. The confirmed rows. */
static int route_round_check(void *b, int k, int made)
{
    route_round r;
    round_fill(&r, k);
    odbox_relay_rabbitmq_ops.publish_batch(b, ROWS, r.ep, (const char *const *)r.bodies, r.lens, r.rcs, r.errs);
    int ok = 0;
    for (int i = 0; i < ROWS; i++) {
        if ((i == MISSING_ROW && !made) || i == UNROUTED_ROW || i == EMPTY_ROW)
            continue;
        ok += r.rcs[i] == ODBOX_OK;
        CHECK(r.rcs[i] == ODBOX_OK, "route: round %d, row %d beside the bad ones: %s: %s", k, i,
              odbox_errname(r.rcs[i]), r.errs[i].message);
    }
    printf("route: round %d: confirmed=%d of %d\n", k, ok, ROWS - 3 + made);
    printf("route: %s exchange: %s: %s\n", made ? "made" : "missing", odbox_errname(r.rcs[MISSING_ROW]),
           r.errs[MISSING_ROW].message);
    printf("route: unroutable: %s: %s\n", odbox_errname(r.rcs[UNROUTED_ROW]), r.errs[UNROUTED_ROW].message);
    printf("route: empty exchange: %s: %s\n", odbox_errname(r.rcs[EMPTY_ROW]), r.errs[EMPTY_ROW].message);
    CHECK(made || failed_with(r.rcs[MISSING_ROW], &r.errs[MISSING_ROW], 0, "404 NOT_FOUND"),
          "route: the missing exchange");
    CHECK(failed_with(r.rcs[UNROUTED_ROW], &r.errs[UNROUTED_ROW], 0, "unroutable: 312 NO_ROUTE"),
          "route: the unroutable message");
    CHECK(failed_with(r.rcs[EMPTY_ROW], &r.errs[EMPTY_ROW], ODBOX_EDISCARD, "gives ''"), "route: the empty exchange");
    round_free(&r);
    return ok;
}

/* One row of round k through publish: its rc, the message in *e. */
static int route_one(void *b, int k, int row, odbox_error *e)
{
    route_round r;
    round_fill(&r, k);
    int rc = odbox_relay_rabbitmq_ops.publish(b, r.ep[row], r.bodies[row], r.lens[row], e);
    round_free(&r);
    return rc;
}

/* A topic exchange, not durable; bound to QUEUE with "#" when bind. */
static void exchange_make(const char *name, int bind)
{
    amqp_connection_state_t st = amqp_connect_or_die();
    amqp_exchange_declare(st, 1, amqp_cstring_bytes(name), amqp_cstring_bytes("topic"), 0, 0, 0, 0,
                          amqp_empty_table);
    if (bind)
        amqp_queue_bind(st, 1, amqp_cstring_bytes(QUEUE), amqp_cstring_bytes(name), amqp_cstring_bytes("#"),
                        amqp_empty_table);
    CHECK(amqp_get_rpc_reply(st).reply_type == AMQP_RESPONSE_NORMAL, "route: declaring %s", name);
    close_amqp(st);
}

/* Messages in QUEUE (a passive queue.declare), or -1. */
static int queue_depth(void)
{
    amqp_connection_state_t st = amqp_connect_or_die();
    amqp_queue_declare_ok_t *q = amqp_queue_declare(st, 1, amqp_cstring_bytes(QUEUE), 1, 0, 0, 0, amqp_empty_table);
    int n = q ? (int)q->message_count : -1;
    close_amqp(st);
    return n;
}

int rabbit_route(void)
{
    declare();
    snprintf(missing, sizeof missing, "odbox-no-such-exchange-%d", (int)getpid());
    exchange_make(UNROUTED, 0);
    odbox_error e = {0};
    void *b = NULL, *dflt = NULL;
    odbox_relay_rabbitmq_config cfg = {.url = url, .exchange = "{model_type}", .routing_key = "{event_type}",
                                       .timeout_ms = 3000, .max_connections = 1};
    int rc = odbox_relay_rabbitmq_open(&cfg, &b, &e);
    if (rc != ODBOX_OK) {
        fprintf(stderr, "FAIL: route: open: %s: %s\n", odbox_errname(rc), e.message);
        return 1;
    }
    int confirmed = 0;
    for (int k = 0; k < ROUNDS; k++)
        confirmed += route_round_check(b, k, 0);
    /* one publish at a time, on the same connection */
    rc = route_one(b, ROUNDS, MISSING_ROW, &e);
    CHECK(failed_with(rc, &e, 0, "404 NOT_FOUND"), "route: one publish, the missing exchange: %s", e.message);
    rc = route_one(b, ROUNDS, UNROUTED_ROW, &e);
    CHECK(failed_with(rc, &e, 0, "unroutable: 312 NO_ROUTE"), "route: one publish, unroutable: %s", e.message);
    rc = route_one(b, ROUNDS, EMPTY_ROW, &e);
    CHECK(failed_with(rc, &e, ODBOX_EDISCARD, "gives ''"), "route: one publish, the empty exchange: %s", e.message);
    rc = route_one(b, ROUNDS, 0, &e);
    CHECK(rc == ODBOX_OK, "route: one publish, a good row: %s: %s", odbox_errname(rc), e.message);
    confirmed += rc == ODBOX_OK;
    exchange_make(missing, 1);
    confirmed += route_round_check(b, ROUNDS + 2, 1);
    odbox_relay_rabbitmq_ops.close(b);
    /* "" itself is the default exchange: the routing key names the queue */
    cfg.exchange = "";
    rc = odbox_relay_rabbitmq_open(&cfg, &dflt, &e);
    if (rc == ODBOX_OK)
        rc = route_one(dflt, ROUNDS + 3, EMPTY_ROW, &e);
    CHECK(rc == ODBOX_OK, "route: the default exchange by the template \"\": %s: %s", odbox_errname(rc), e.message);
    confirmed += rc == ODBOX_OK;
    odbox_relay_rabbitmq_ops.close(dflt);
    int depth = queue_depth();
    printf("route: confirmed=%d queue=%d\n", confirmed, depth);
    int want = ROUNDS * (ROWS - 3) + 1 + (ROWS - 2) + 1;
    CHECK(depth == confirmed && confirmed == want, "route: %d confirmed, %d in the queue, want %d both", confirmed,
          depth, want);
    return failures ? 1 : 0;
}
