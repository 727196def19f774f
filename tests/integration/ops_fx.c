/* odbox — the fixture of the operations suites (see ops_fx.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops_fx.h"

void ofx_open(ofx *f, int nshards)
{
    memset(f, 0, sizeof *f);
    f->nshards = nshards;
    odbox_shard_config sc[2];
    memset(sc, 0, sizeof sc);
    for (int i = 0; i < nshards; i++) {
        itest_name(f->ev[i], sizeof f->ev[i], i ? "ev_ops_b" : "ev_ops_a");
        f->c[i] = itest_connect(i + 1);
        sc[i].id = (odbox_shard_id){0, i};
        sc[i].primary_dsn = itest_dsn(i + 1);
        sc[i].eventlog = f->ev[i];
    }
    odbox_registry_config cfg = {.shards = sc, .nshards = (size_t)nshards};
    odbox_error e = {0};
    ck_assert_msg(odbox_registry_open(&cfg, &f->r, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_migrate_registry(f->r, NULL, &e) == ODBOX_OK, "migrate: %s", e.message);
}

void ofx_close(ofx *f)
{
    for (int i = 0; i < f->nshards; i++) {
        itest_drop_eventlog(f->c[i], f->ev[i]);
        odbox_conn_close(&f->c[i]);
    }
    odbox_registry_free(&f->r);
}

odbox_shard *ofx_shard(ofx *f, int i) { return odbox_registry_shard_at(f->r, (size_t)i); }

static int64_t or_t0(int64_t t) { return t ? t : T0; }

void ofx_notification(ofx *f, int i, const nrow *n, char id[37])
{
    const odbox_dialect *d = odbox_conn_dialect(f->c[i]);
    char sql[2048], nid[37], eid[37], aid[37];
    odbox_uuid_v4(nid);
    odbox_uuid_v4(eid);
    odbox_uuid_v4(aid);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (id, event_id, handler_name, namespace, action_id, action_name, action_params, "
             "started_date, completion_date, model_id, model_type, event_type, payload, event_date, state, attempts, "
             "next_retry_at, created_date, updated_date, lease_owner, lease_until) VALUES (%s, %s, ?, 'test', %s, "
             "'TestAction', %s, ?, ?, NULL, NULL, ?, NULL, ?, ?, ?, ?, ?, ?, %s, ?)",
             itest_evt(f->ev[i], "event_notifications"), d->uuid_param, d->uuid_param, d->uuid_param, d->json_param,
             n->lease_until ? "'test-round'" : "NULL");
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    int k = 1;
    /* a finished row's next_retry_at is its finish time, as an outcome
     * writes it (unless the test says otherwise) */
    int finished = !strcmp(n->state, "SUCCEEDED") || !strcmp(n->state, "EXPIRED");
    int rc = odbox_stmt_prepare(f->c[i], sql, &s, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_uuid(s, k++, nid, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_uuid(s, k++, eid, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, k++, n->handler, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_uuid(s, k++, aid, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_json(s, k++, "{}", &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, or_t0(n->completion) - SEC, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, or_t0(n->completion), &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, k++, n->event_type ? n->event_type : "Thing", &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, or_t0(n->event_date), &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, k++, n->state, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_int64(s, k++, n->attempts, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, n->next_retry || !finished ? or_t0(n->next_retry) : or_t0(n->updated), &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, or_t0(n->created), &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, or_t0(n->updated), &e);
    if (rc == ODBOX_OK)
        rc = n->lease_until ? odbox_stmt_bind_timestamp(s, k++, n->lease_until, &e)
                            : odbox_stmt_bind_null(s, k++, ODBOX_TYPE_TIMESTAMP, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    ck_assert_msg(rc == ODBOX_OK, "insert notification: %s", e.message);
    odbox_stmt_free(&s);
    if (id)
        memcpy(id, nid, 37);
}

void ofx_event(ofx *f, int i, const char *type, int64_t event_date, int delivered, char id[37])
{
    const odbox_dialect *d = odbox_conn_dialect(f->c[i]);
    char sql[2048], eid[37], aid[37];
    odbox_uuid_v4(eid);
    odbox_uuid_v4(aid);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (id, namespace, action_id, action_name, action_params, started_date, completion_date, "
             "model_id, model_type, event_type, payload, event_date, delivered) VALUES (%s, 'test', %s, 'TestAction', "
             "%s, ?, ?, %s, ?, %s, ?, ?)",
             itest_evt(f->ev[i], "events"), d->uuid_param, d->uuid_param, d->json_param,
             type ? "'m1', 'Model'" : "NULL, NULL", type ? d->json_param : "NULL");
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    int k = 1;
    int rc = odbox_stmt_prepare(f->c[i], sql, &s, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_uuid(s, k++, eid, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_uuid(s, k++, aid, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_json(s, k++, "{}", &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, event_date - SEC, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, event_date, &e);
    if (rc == ODBOX_OK)
        rc = type ? odbox_stmt_bind_text(s, k++, type, &e) : odbox_stmt_bind_null(s, k++, ODBOX_TYPE_TEXT, &e);
    if (rc == ODBOX_OK && type)
        rc = odbox_stmt_bind_json(s, k++, "{\"x\": 1}", &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, k++, event_date, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_bool(s, k++, delivered, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    ck_assert_msg(rc == ODBOX_OK, "insert event: %s", e.message);
    odbox_stmt_free(&s);
    if (id)
        memcpy(id, eid, 37);
}

int64_t ofx_count(ofx *f, int i, const char *table, const char *where)
{
    return itest_count(f->c[i], "SELECT COUNT(*) FROM %s WHERE %s", itest_evt(f->ev[i], table), where);
}

/* Reads one column of notification id with getter kind 't' (timestamp), 'i' or 's'. */
static void read_col(ofx *f, int i, const char *id, const char *column, char kind, int64_t *v, char *text, size_t cap)
{
    const odbox_dialect *d = odbox_conn_dialect(f->c[i]);
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT %s%s%s FROM %s WHERE id = %s",
             kind == 't' && d->timestamp_read_open ? d->timestamp_read_open : "", column,
             kind == 't' && d->timestamp_read_open ? d->timestamp_read_close : "",
             itest_evt(f->ev[i], "event_notifications"), d->uuid_param);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    const char *t = NULL;
    int rc = odbox_stmt_prepare(f->c[i], sql, &s, &e);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_uuid(s, 1, id, &e)) == ODBOX_OK &&
        (rc = odbox_stmt_execute(s, &e)) == ODBOX_OK)
        rc = odbox_stmt_fetch(s, &e);
    ck_assert_msg(rc == 1, "%s: %d %s", sql, rc, e.message);
    if (kind == 't')
        rc = odbox_stmt_get_timestamp(s, 1, v, NULL, &e);
    else if (kind == 'i')
        rc = odbox_stmt_get_int64(s, 1, v, NULL, &e);
    else if ((rc = odbox_stmt_get_text(s, 1, &t, NULL, &e)) == ODBOX_OK)
        snprintf(text, cap, "%s", t);
    ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);
}

int64_t ofx_notification_ts(ofx *f, int i, const char *id, const char *column)
{
    int64_t v = 0;
    read_col(f, i, id, column, 't', &v, NULL, 0);
    return v;
}

int64_t ofx_notification_int(ofx *f, int i, const char *id, const char *column)
{
    int64_t v = 0;
    read_col(f, i, id, column, 'i', &v, NULL, 0);
    return v;
}

const char *ofx_notification_state(ofx *f, int i, const char *id)
{
    static char buf[4][32];
    static int k;
    char *b = buf[k++ % 4];
    read_col(f, i, id, "state", 's', NULL, b, sizeof buf[0]);
    return b;
}

int64_t ofx_db_now(ofx *f, int i) { return itest_db_now(f->c[i]); }
