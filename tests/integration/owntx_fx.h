/* odbox — the fixture of the own-transaction suite (owntx: test_owntx.c,
 * test_owntx_races.c, test_owntx_sql.c): a migrated database with a
 * table of the caller's own (id, amount), an executor counting its
 * commits, and the caller's statements, events and counts. The txf_ helpers assert (Check), so
 * they belong to a test's own thread. */
#ifndef ODBOX_TESTS_OWNTX_FX_H
#define ODBOX_TESTS_OWNTX_FX_H

#include "actions.h"
#include "odbox/tx.h"

extern const odbox_event_type PAID;

typedef struct txf {
    dfx f;
    char table[64];
    odbox_executor *exe;
    int commits;
    size_t nevents;
} txf;

void txf_open(txf *o);
void txf_close(txf *o);
int64_t txf_rows(txf *o);
int64_t txf_events(txf *o);
/* odbox_action_committed's answer for action_id */
int txf_committed(txf *o, const char *action_id);
/* Neither the caller's rows nor the events landed, and the transaction
 * action_id did not commit. */
void txf_nothing_landed(txf *o, const char *action_id);
odbox_tx *txf_begin(txf *o, const odbox_tx_config *cfg);
/* The caller's own statement of two parameters (amount, id): returns its
 * code, *affected its row count. Asserts nothing. */
int txf_run_sql(odbox_tx *tx, const char *sql, const char *id, int64_t amount, int64_t *affected);
void txf_insert_row(txf *o, odbox_tx *tx, const char *id, int64_t amount);
void txf_emit(odbox_tx *tx, const char *id, const char *payload_json);
/* test_owntx_races.c's and test_owntx_sql.c's tests, into the owntx
 * suite's case */
void owntx_add_race_tests(TCase *t);
void owntx_add_sql_tests(TCase *t);

#endif
