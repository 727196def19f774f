/* odbox — a handling round's private parts: the calls it makes and the
 * round itself, shared by the claim (delivery_claim.c) and the calling
 * and writing (delivery_handling.c). */
#ifndef ODBOX_DELIVERY_ROUND_H
#define ODBOX_DELIVERY_ROUND_H

#include "delivery_internal.h"

#include "odbox/uuid.h"

enum { SQL_DUE_READ = 111, SQL_OUTCOME, SQL_CLAIM, SQL_HANDOFF_READ, SQL_ORDER_RECHECK };

/* Buckets, in the order they are written; B_RELEASE (not an outcome):
 * rows left as they were, their claim given back; B_KEEP (neither): a
 * call of an ordered subscription still running at its timeout or cut
 * off by a stop, whose claim is kept until it returns (delivery_kept.c). */
enum { B_PREFLIGHT = 0, B_SUCCEEDED, B_POSTFAILURE, B_RETRY, NBUCKETS, B_RELEASE = NBUCKETS, B_KEEP };

/* Why a row gets no call. */
enum { CALL = 0, NO_CALL_EXPIRED, NO_CALL_UNKNOWN, NO_CALL_BAD_ROW, NO_CALL_NOT_TAKEN };

typedef struct call {
    odbox_work w; /* first: the pool hands this back */
    odbox_handler_fn fn;
    void *user;
    odbox_envelope env;
    json_object *params, *payload;
    char *text;            /* the strings env points into */
    int handler;           /* index into the registry, -1 when none answers */
    int skip;              /* CALL or NO_CALL_* */
    int attempts;          /* as read */
    int64_t deadline_us;   /* retention */
    int64_t due_us;        /* next_retry_at as read */
    int limited;           /* claimed under its handler's concurrency limit */
    int ordered;           /* read with an order_key (a claim's rows only) */
    /* written by the call (never read once it is abandoned) */
    int rc;
    int retry_asked;        /* odbox_handler_retry_after was called: */
    int64_t retry_after_us; /* ... its delay */
    char message[256];
    int64_t duration_us;
    atomic_int finished;    /* set once the above are written: the call returned */
    /* the round's */
    char why[160];         /* why a row failed without a call, or timed out */
    int bucket;            /* B_*, or -1: left as it was */
    const char *gave_up;   /* B_POSTFAILURE: why (a literal) */
    int64_t next_retry_us;
    /* a kept call's (B_KEEP): its claim's token, the claim's now and
     * when it was read (monotonic), its lease's last renewal in the
     * delivery's time, and the shard's list (under the delivery's mu) */
    char claim_token[ODBOX_UUID_LEN + 1];
    int64_t claimed_at_us, claim_mono_us, renewed_us;
    struct call *kept_next;
} call;

typedef struct hround {
    odbox_delivery *d;
    odbox_dshard *ds;
    odbox_delivery_round *rd;
    char table[ODBOX_NAME_MAX * 2 + 32];
    const odbox_dialect *dialect;
    call **calls;
    size_t n;
    char token[ODBOX_UUID_LEN + 1]; /* lease_owner of this round's claim */
    int64_t lease_end_mono_us;      /* when the claim ends, by this process's clock */
    int64_t claimed_at_us;          /* the claim's now (the database's where it reads it) */
} hround;

/* The round's now: with the database's time (db_time), the claim's now
 * plus what has passed since the claim (its lease's start) by this
 * process's monotonic clock, so that no process's wall clock decides when
 * a row expires or is retried; else the delivery's clock. */
static inline int64_t odbox_hround_now(const hround *h, const odbox_round_ctx *x)
{
    int64_t since = odbox_mono_us() - (h->lease_end_mono_us - h->d->cfg.lease_us);
    return h->d->db_time && h->n ? h->claimed_at_us + since : odbox_round_now(x);
}

/* Drops a reference to a call (the round's, or an abandoned call's thread's). */
void odbox_hcall_release(odbox_work *w);

/* Records a call's outcome: rc (0, or made a negative ODBOX_E* code), e's
 * message or rc's text, and how long it took. */
void odbox_hcall_done(call *c, int rc, const odbox_error *e, int64_t took_us);

/* Claims up to a batch of due rows of the handlers served here in one
 * short transaction, into h->calls: the limited handlers' room counted
 * under their subscription's row lock, the locking read(s), the claim. */
int odbox_handling_claim(hround *h, odbox_conn *c, int64_t now, odbox_error *err);

/* Takes a hand-off's rows instead (those still leased to it: not the rows
 * of ordered subscriptions or of events not yet due, which the fan-out
 * left to claims, nor rows it did not write): one statement, no
 * transaction. */
int odbox_handling_take(hround *h, odbox_conn *c, const odbox_handoff *ho, odbox_error *err);

/* Keeps the claims of h's B_KEEP rows, listed on its shard, each
 * renewed at once when conn is given (else at the shard's next round):
 * their rows stay claimed, and their model's order held, until their
 * calls return. Logs each. */
void odbox_kept_add(hround *h, odbox_conn *conn);

/* Renews, on conn, the claims of h's shard's kept calls still running
 * whose renewal is due (a quarter of the lease passed), in h's table;
 * one found lost (its lease ran out and another round claimed the row)
 * or past its row's retention is let go, logged. */
int odbox_kept_renew(const hround *h, odbox_conn *conn, odbox_error *err);

/* The shard's kept calls that returned, taken off its list (linked by
 * kept_next, a reference each); NULL: none. */
call *odbox_kept_returned(odbox_delivery *d, odbox_dshard *ds);

/* Puts calls (linked by kept_next) back on the shard's list. */
void odbox_kept_put_back(odbox_delivery *d, odbox_dshard *ds, call *list);

/* Now for a kept call's outcome and renewals: the database's time
 * counted from its claim by the monotonic clock, or the delivery's
 * clock when one is given. */
int64_t odbox_kept_now(const odbox_delivery *d, const call *c);

#endif
