/* odbox — helpers shared by the library's modules; not installed. */
#ifndef ODBOX_INTERNAL_H
#define ODBOX_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "odbox/db.h"
#include "odbox/error.h"
#include "odbox/log.h"

#if defined(__GNUC__)
#define ODBOX_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define ODBOX_SENTINEL __attribute__((sentinel))
#else
#define ODBOX_PRINTF(f, a)
#define ODBOX_SENTINEL
#endif

/* Fills err (when not NULL) with code and a formatted message; SQLSTATE
 * and native code cleared. Returns code, so `return odbox_fail(...)`. */
int odbox_fail(odbox_error *err, int code, const char *fmt, ...) ODBOX_PRINTF(3, 4);

/* Prefixes err->message with a formatted context ("shard 0.1: ...").
 * Returns err->code (or ODBOX_EINVAL when err is NULL and code unknown). */
int odbox_error_prefix(odbox_error *err, int code, const char *fmt, ...) ODBOX_PRINTF(3, 4);
/* err's failure made ODBOX_EDISCARD, "discarded: " before its message (a
 * relay's row that no retry could send); returns ODBOX_EDISCARD. */
int odbox_error_discard(odbox_error *err);

/* The outcome of a commit that failed with rc after it was sent (a
 * COMMIT, or a write in autocommit): a lost connection leaves unknown
 * whether the server committed, which is ODBOX_EINDOUBT; any other code
 * is kept. */
int odbox_commit_failed(int rc, odbox_error *err);

/* Logs through the callback set by odbox_log_set (no-op when none). The
 * caller keeps secrets out of the message. */
void odbox_log(odbox_log_level level, const char *fmt, ...) ODBOX_PRINTF(2, 3);

/* A growable string. All appends are no-ops once an allocation failed;
 * odbox_buf_take then returns NULL. */
typedef struct odbox_buf {
    char *data;
    size_t len, cap;
    int oom;
} odbox_buf;

void odbox_buf_append(odbox_buf *b, const char *s);
void odbox_buf_appendn(odbox_buf *b, const char *s, size_t n);
void odbox_buf_appendf(odbox_buf *b, const char *fmt, ...) ODBOX_PRINTF(2, 3);
/* Appends the strings up to a NULL: SQL built per action uses this, as
 * formatting cost more than the rest of building it. */
void odbox_buf_cat(odbox_buf *b, ...) ODBOX_SENTINEL;
/* Appends item n times, separated by ", " (a list of parameters). */
void odbox_buf_list(odbox_buf *b, const char *item, size_t n);
/* Returns the string (caller frees) and resets b; NULL after an OOM. */
char *odbox_buf_take(odbox_buf *b);
void odbox_buf_reset(odbox_buf *b);

char *odbox_strdup(const char *s);          /* NULL-safe strdup */
char *odbox_strndup(const char *s, size_t n);
int odbox_strcaseeq(const char *a, const char *b); /* ASCII, NULL-safe */

/* 1 when JSON text (as json-c writes it) holds the character U+0000 in a
 * string (the escape \u0000), which PostgreSQL's json and jsonb refuse:
 * refused at emit on every database, so that a transaction is not lost
 * at its commit on one of them. */
int odbox_json_has_nul(const char *json);

/* The deepest nesting of arrays and objects in JSON text (0: a scalar). */
int odbox_json_depth(const char *json);

/* The deepest JSON odbox writes: MariaDB's JSON CHECK refuses 32 levels
 * (10.11), and json-c, which reads params and payloads back for the
 * handlers, refuses more than 32 by default. */
#define ODBOX_JSON_DEPTH_MAX 31

/* ODBOX_OK when the JSON text odbox is about to write (params, a payload)
 * can be stored on every database and read back: no U+0000
 * (odbox_json_has_nul), only UTF-8 (odbox_utf8_bad_at), nested at most
 * ODBOX_JSON_DEPTH_MAX levels. Else ODBOX_EINVAL, "<what>[ <name>]:
 * <subject> ...", naming the first bad byte; plural: the subject is
 * ("params hold"). */
int odbox_json_storable(const char *json, const char *what, const char *name, const char *subject, int plural,
                        odbox_error *err);

/* Reads a whole text file of at most max bytes into *out (NUL-ended,
 * malloc'd). ODBOX_EIO when it cannot be opened or read (what names the
 * caller in the message), ODBOX_EINVAL when larger or holding a NUL. */
int odbox_read_text_file(const char *what, const char *path, size_t max, char **out, size_t *len,
                         odbox_error *err);

/* The length (1..4) of the valid UTF-8 sequence at s, or 0: a byte that
 * cannot start one, a sequence cut short (by a NUL too), an overlong
 * form, a surrogate or a code point past U+10FFFF. */
size_t odbox_utf8_len(const unsigned char *s);

/* The offset of the first byte of the NUL-ended s that does not start a
 * valid UTF-8 sequence (odbox_utf8_len), or -1 when s is all UTF-8. Text
 * odbox writes as text or JSON (params, payloads, a key's result) is
 * checked with it before any write: PostgreSQL and MySQL/MariaDB refuse
 * other bytes at the INSERT, losing the transaction at its commit, while
 * SQLite stores them. */
long odbox_utf8_bad_at(const char *s);

/* 0..15 for a hex digit of either case, else -1; the table has 16 for
 * every byte that is not a hex digit (for loops over many digits). */
int odbox_hex_value(int c);
extern const unsigned char odbox_hex_digit[256];

/* Zeroes and frees a secret. NULL-safe. */
void odbox_free_secret(char *s);

/* Current UTC time in microseconds since the epoch, as this machine's
 * clock tells it (plus the skew below). */
int64_t odbox_now_us(void);

/* Tests: makes this process's clock as wrong as a machine's can be
 * (odbox_now_us and the system odbox_clock run skew_us ahead; negative:
 * behind). Thread-safe. */
void odbox_clock_skew_set(int64_t skew_us);

/* Microseconds on CLOCK_MONOTONIC, for durations and deadlines, never
 * dates (src/clock.c). */
int64_t odbox_mono_us(void);
/* A deadline ms from now on CLOCK_MONOTONIC (for condition variables set
 * to that clock), and whether it has passed (src/clock.c). */
struct timespec odbox_mono_after(int64_t ms);
/* The deadline at mono_us (an odbox_mono_us reading), for the same
 * condition variables. */
struct timespec odbox_mono_at(int64_t mono_us);
int odbox_mono_passed(const struct timespec *deadline);
/* Initialises cv to wait on CLOCK_MONOTONIC (odbox_mono_after's
 * deadlines; src/clock.c). */
void odbox_cond_init_mono(pthread_cond_t *cv);
/* Sleeps ms milliseconds, all of them (a signal does not cut it short;
 * src/clock.c): the naps between tries of a poll or a retry. */
void odbox_sleep_ms(int64_t ms);

/* SHA-256 of data as 64 lower-case hex characters + NUL. */
void odbox_sha256_hex(const void *data, size_t len, char out[65]);
/* The first 8 bytes of SHA-256(data) as a big-endian int64. */
int64_t odbox_sha256_int64(const void *data, size_t len);

/* The longest timeout_ms a relay takes, from C as from JSON: its deadlines
 * add a few seconds' grace to it in int arithmetic, which a value near
 * INT_MAX would overflow. */
#define ODBOX_RELAY_TIMEOUT_MAX_MS 3600000

/* *fixed: tmpl's text (malloc'd) when it has no placeholder, so that
 * every row's subject, topic or key is that text; NULL when it has one.
 * ODBOX_EINVAL for a template odbox_relay_template_check refuses. */
int odbox_relay_fixed_text(const char *tmpl, char **fixed, odbox_error *err);

/* ---- generated statements, found again by key ------------------------ */

/* What a statement's SQL is generated from, besides the connection's
 * dialect: an operation, a row or id count, and names (a table, a type's
 * columns). Building it costs far less than building the SQL, and the
 * statement cache finds the prepared statement by it. It holds the names
 * themselves, not a type's address, which a freed type passes on. */
typedef struct odbox_sql_key {
    unsigned char b[512];
    size_t n;
    int too_long; /* then it is no key: use the SQL text */
} odbox_sql_key;

enum {
    ODBOX_SQL_FIND_IDS = 1, ODBOX_SQL_INSERT, ODBOX_SQL_UPDATE, ODBOX_SQL_EVENTS, ODBOX_SQL_JOINED,
    ODBOX_SQL_IDEM_FIND, ODBOX_SQL_IDEM_CLAIM, ODBOX_SQL_IDEM_RESULT, ODBOX_SQL_IDEM_ID /* idempotency.c */
};

void odbox_sql_key_init(odbox_sql_key *k, int op, size_t count);
/* Adds a part: a small tag (a type, a kind) and a name (may be NULL). */
void odbox_sql_key_add(odbox_sql_key *k, int tag, const char *name);

/* Adds a count as a part (a number of rows or columns). */
void odbox_sql_key_add_count(odbox_sql_key *k, int tag, size_t count);

/* What follows "INSERT INTO t (cols) ": "VALUES (...),(...)" for rows
 * rows (odbox_sql_rows), or for one row with select_form "SELECT ..., ...",
 * to which a WHERE can be added. NULL on bad input or out of memory. */
char *odbox_sql_insert_source(int rows, const char *const *forms, int ncols, int select_form);

/* Prepares sql with key k on c, or hands out the cached statement of k.
 * When sql is NULL and nothing is cached, *out is NULL and the caller
 * builds the SQL and calls again: hot paths skip building it. The SQL of
 * a key always has the same result columns: their count is asked once. */
int odbox_stmt_prepare_keyed(odbox_conn *c, const char *sql, const odbox_sql_key *k, odbox_stmt **out,
                             odbox_error *err);

/* Lends c, a connection of p that this thread holds in an open
 * transaction, to this thread's own acquires of p until
 * odbox_pool_lend(NULL, NULL): they get c, and their release leaves it
 * with its holder. So reads made under the transaction (a keyed action's
 * perform, whose key the transaction holds) need no second connection
 * of a pool that may have none free. One loan per thread. */
void odbox_pool_lend(odbox_pool *p, odbox_conn *c);
/* 1 while this thread's acquires of p get its loan. */
int odbox_pool_lending(const odbox_pool *p);

/* The connections p opens from now on never create their database
 * (odbox_registry_never_create). Thread-safe; NULL-safe. */
void odbox_pool_never_create(odbox_pool *p);

/* 1 when a statement failed on c since odbox_conn_begin opened its
 * transaction: what PostgreSQL has then aborted (and psqlODBC rolled
 * back), and what an own transaction (tx.c) may therefore only roll back. */
int odbox_conn_tx_failed(const odbox_conn *c);

/* Ends c's open transaction by rc: after ODBOX_OK commits it and returns
 * the commit's outcome; otherwise rolls it back (if one is still open;
 * a failed rollback has marked c dead) and returns rc. */
int odbox_conn_end(odbox_conn *c, int rc, odbox_error *err);
/* An own transaction (odbox_tx) holds c's transaction (on), or gives it
 * back (off) before it ends it itself. While held, odbox_conn_begin,
 * odbox_conn_commit and odbox_conn_rollback on c are ODBOX_ESTATE (the
 * events and the key would not follow), and once a statement has failed
 * no other is sent: MySQL's and MariaDB's deadlock has rolled the
 * transaction back already, and what came next would autocommit. */
void odbox_conn_own_tx(odbox_conn *c, int on);
/* 1, with an error logged naming who, when an odbox_tx holds c: a
 * release, discard or close of it would leave the transaction with a
 * connection gone or handed to another caller, so those do nothing. */
int odbox_conn_tx_owned(const odbox_conn *c, const char *who);

/* A UUIDv7 of unix_ms whose 12-bit counter is seq (carrying into the
 * millisecond past 4095): the event ids of one action, in emission order. */
void odbox_uuid_v7_seq(int64_t unix_ms, size_t seq, char out[37]);

/* odbox_stmt_bind_uuid for an id odbox made or checked already (a
 * model's id, a generated id): not parsed again. */
int odbox_stmt_bind_valid_uuid(odbox_stmt *s, int idx, const char *uuid36, odbox_error *err);

/* Executes s, bound already, and reads the first column of its first row
 * as int64 (ODBOX_ENOTFOUND when no row). */
int odbox_stmt_query_int64(odbox_stmt *s, int64_t *v, odbox_error *err);

/* Executes s, bound already, outside a transaction: one that loses a
 * deadlock (ODBOX_EDEADLOCK) was rolled back whole, so it runs again,
 * after 10, 20, 30 ... ms, up to tries runs in all, rather than failing
 * with "try restarting transaction"; *runs (may be NULL) gets how many.
 * Inside a transaction it runs once: the deadlock ended the transaction. */
int odbox_stmt_execute_autocommit(odbox_stmt *s, int tries, int *runs, odbox_error *err);

/* ---- keyed-lock sessions ------------------------------------------------ */

/* The pool keyed locks take their sessions from: one per shard, on its
 * primary, apart from the pool odbox_execute writes through (src/lock.c). */
struct odbox_shard;
odbox_pool *odbox_shard_lock_pool(const struct odbox_shard *s);
/* That pool's configuration, from the shard's pool configuration
 * (src/registry.c, which opens the pool): one try waits at most
 * ODBOX_LOCK_SESSION_WAIT_MS for a free lock session. */
#define ODBOX_LOCK_SESSION_WAIT_MS 50
void odbox_lock_pool_config(const odbox_pool_config *shard_pool, odbox_pool_config *out);

#endif
