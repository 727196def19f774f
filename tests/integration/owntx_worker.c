/* odbox — a process for the own-transaction tests: begins a transaction on
 * the DSN's shard, inserts N rows into TABLE (id, amount) with its own
 * statements, adds one event per row, prints
 *     ready <action_id>
 * and then, per MODE, commits ("commit": prints "committed", exits 0) or
 * waits up to 60 s for the test to kill it (-9) before its commit ("hold").
 * "keyed" waits (at most 10 s) until BARRIER exists, so that every worker
 * starts at once, begins with idempotency key KEY and prints
 *     replayed <action_id>
 * when the key executed before; else it writes, waits 300 ms (the others
 * reach the key's claim meanwhile) and commits: "committed <action_id>".
 * Exits 1 on any failure, with the message on stderr.
 *
 * Usage: owntx-worker DSN TABLE hold|commit N
 *        owntx-worker DSN TABLE keyed N KEY BARRIER */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "odbox/odbox.h"

static const odbox_event_type WORKED = {"OwnTxWorked"};

static int write_rows(odbox_tx *tx, const char *table, int n, odbox_error *e)
{
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, amount) VALUES (?, ?)", table);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(odbox_tx_conn(tx), sql, &s, e);
    for (int i = 0; i < n && rc == ODBOX_OK; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%d", odbox_tx_action_id(tx), i);
        json_object *payload = json_object_new_object();
        json_object_object_add(payload, "amount", json_object_new_int(i));
        if ((rc = odbox_stmt_bind_text(s, 1, id, e)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_int64(s, 2, i, e)) == ODBOX_OK && (rc = odbox_stmt_execute(s, e)) == ODBOX_OK)
            rc = odbox_tx_emit(tx, "Row", id, &WORKED, payload, e);
        json_object_put(payload);
    }
    odbox_stmt_free(&s);
    return rc;
}

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int keyed(odbox_executor *exe, const char *table, int n, const char *key, const char *barrier, odbox_error *e)
{
    for (int i = 0; i < 1000 && access(barrier, F_OK) != 0; i++)
        nap_ms(10);
    json_object *params = json_object_new_object();
    json_object_object_add(params, "rows", json_object_new_int(n));
    odbox_tx_config cfg = {.action_name = "OwnTxWorker", .params = params, .idempotency_key = key};
    odbox_tx *tx = NULL;
    int rc = odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, &tx, e);
    json_object_put(params);
    if (rc == ODBOX_OK && odbox_tx_replayed(tx)) {
        printf("replayed %s\n", odbox_tx_action_id(tx));
        return odbox_tx_commit(&tx, e);
    }
    if (rc == ODBOX_OK && (rc = write_rows(tx, table, n, e)) == ODBOX_OK) {
        char id[40];
        snprintf(id, sizeof id, "%s", odbox_tx_action_id(tx));
        nap_ms(300);
        if ((rc = odbox_tx_commit(&tx, e)) == ODBOX_OK)
            printf("committed %s\n", id);
    }
    odbox_tx_rollback(&tx);
    return rc;
}

int main(int argc, char **argv)
{
    int is_keyed = argc == 7 && !strcmp(argv[3], "keyed");
    if (!is_keyed && (argc != 5 || (strcmp(argv[3], "hold") && strcmp(argv[3], "commit")))) {
        fprintf(stderr, "usage: owntx-worker DSN TABLE hold|commit N\n"
                        "       owntx-worker DSN TABLE keyed N KEY BARRIER\n");
        return 2;
    }
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_tx *tx = NULL;
    odbox_error e = {0};
    int rc = odbox_registry_open_dsn(argv[1], &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_open("com.example.owntx_worker", r, NULL, &exe, &e);
    odbox_tx_config cfg = {.action_name = "OwnTxWorker"};
    if (rc == ODBOX_OK && is_keyed)
        rc = keyed(exe, argv[2], atoi(argv[4]), argv[5], argv[6], &e);
    else if (rc == ODBOX_OK)
        rc = odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, &tx, &e);
    if (rc == ODBOX_OK && !is_keyed && (rc = write_rows(tx, argv[2], atoi(argv[4]), &e)) == ODBOX_OK) {
        printf("ready %s\n", odbox_tx_action_id(tx));
        fflush(stdout);
        if (!strcmp(argv[3], "hold")) {
            sleep(60); /* killed before this ends */
            fprintf(stderr, "owntx-worker: not killed within 60 s\n");
            return 3;
        } else if ((rc = odbox_tx_commit(&tx, &e)) == ODBOX_OK) {
            printf("committed\n");
        }
    }
    if (rc != ODBOX_OK)
        fprintf(stderr, "owntx-worker: %s: %s\n", odbox_errname(rc), e.message);
    odbox_tx_rollback(&tx);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc == ODBOX_OK ? 0 : 1;
}
