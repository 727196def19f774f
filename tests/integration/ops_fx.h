/* odbox — the fixture of the operations suites (notifications, purge): a
 * registry of one or two shards (databases 1 and 2), each migrated into a
 * private eventlog, and rows written straight into events and
 * event_notifications, so that counts, metrics and purges can be checked
 * against known rows. */
#ifndef ODBOX_TESTS_OPS_FX_H
#define ODBOX_TESTS_OPS_FX_H

#include "itest.h"

#define T0 INT64_C(1893456000000000) /* 2030-01-01 00:00:00 UTC */
#define SEC INT64_C(1000000)
#define DAY (86400 * SEC)

typedef struct ofx {
    int nshards;
    char ev[2][64];
    odbox_registry *r;
    odbox_conn *c[2]; /* to shard 0.0's and 0.1's databases */
} ofx;

void ofx_open(ofx *f, int nshards);
void ofx_close(ofx *f);
odbox_shard *ofx_shard(ofx *f, int i);

/* A notification row; zero times default to T0. */
typedef struct nrow {
    const char *handler, *state, *event_type; /* event_type NULL: "Thing" */
    int attempts;
    int64_t next_retry, completion, event_date, created, updated;
    int64_t lease_until; /* 0: no lease; else held by a round "test-round" until then */
} nrow;

/* Inserts n on shard i; its id into id (may be NULL). */
void ofx_notification(ofx *f, int i, const nrow *n, char id[37]);
/* Inserts an event on shard i: type NULL is a sentinel row. */
void ofx_event(ofx *f, int i, const char *type, int64_t event_date, int delivered, char id[37]);
/* COUNT(*) of eventlog table `table` on shard i WHERE where (SQL text). */
int64_t ofx_count(ofx *f, int i, const char *table, const char *where);
/* One column of notification id as text (timestamps as int64 text). */
int64_t ofx_notification_ts(ofx *f, int i, const char *id, const char *column);
int64_t ofx_notification_int(ofx *f, int i, const char *id, const char *column);
const char *ofx_notification_state(ofx *f, int i, const char *id);
/* The database's time on shard i's database (the dialect's now_sql). */
int64_t ofx_db_now(ofx *f, int i);

#endif
