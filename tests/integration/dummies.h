/* odbox — the "dummies" fixture shared by the repository and action
 * suites: a registry of one or two shards with their own eventlogs, the
 * dummies (model) and tags (entity) tables, and helpers to count rows. */
#ifndef ODBOX_TESTS_DUMMIES_H
#define ODBOX_TESTS_DUMMIES_H

#include "itest.h"

typedef struct dfx {
    int nshards;
    char ev[2][64];        /* eventlog of shard 0.0 and 0.1 */
    odbox_registry *r;
    odbox_conn *c[2];      /* admin connections to database 1 and 2 */
} dfx;

extern const odbox_model_type DUMMY_T, TAG_T;
void dfx_open(dfx *f, int nshards, int with_replica);
void dfx_close(dfx *f);
int64_t dfx_events(dfx *f, int shard);
int64_t dfx_rows(dfx *f, int shard, const char *table);
int64_t dfx_now_us(void);
odbox_model *dfx_dummy(const char *id, const char *name, int64_t amount);
odbox_model *dfx_dummy_in(odbox_shard_id shard, const char *name, int64_t amount);
void dfx_insert(dfx *f, int shard, odbox_model *const *m, size_t n);
void dfx_assert_same(const odbox_model *a, const odbox_model *b);
void dfx_assert_columns(const odbox_model *a, const odbox_model *b);
int dfx_json_same(const char *a, const char *b);

#endif
