/* odbox — errors, and the ownership rule of every public header.
 *
 * Every function that can fail returns int: 0 on success or a negative
 * ODBOX_E* code, and fills an optional odbox_error with the detail. The
 * codes are what a caller acts on (retry, reconnect, report); the SQLSTATE,
 * native code and message are what a human reads. Thread-safe: no globals.
 *
 * Ownership, for every public function unless its comment says otherwise:
 * - Passed in, strings and json_object pointers stay the caller's: odbox
 *   never frees or puts them, and copies (or serialises) what it keeps
 *   past the call. The one exception: odbox_plan_set_result takes the
 *   caller's reference to its result.
 * - Handed out, a `char *` (returned or stored through `char **`) is
 *   malloc'd and the caller's: free() it. A `const char *` is borrowed:
 *   static, or owned by the object it came from and valid while that
 *   object lives (or as long as the function's comment says).
 * - A json_object handed to the caller (odbox_result.value) is the
 *   caller's: json_object_put, or odbox_result_clear. One handed to a
 *   callback (perform's params, an envelope's action_params and payload)
 *   is borrowed for the call: json_object_get to keep it.
 * - Objects and lists handed out are freed by their own odbox_*_free or
 *   odbox_*_clear, which frees the strings inside them too. */
#ifndef ODBOX_ERROR_H
#define ODBOX_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
    ODBOX_OK           = 0,
    ODBOX_EINVAL       = -1,  /* invalid argument or input (DSN, config, name) */
    ODBOX_ENOMEM       = -2,  /* allocation failed */
    ODBOX_ECONNECT     = -3,  /* could not connect (server unreachable, bad login) */
    ODBOX_ECONNLOST    = -4,  /* connection lost mid-use: retryable after reconnect */
    ODBOX_ESTALE       = -5,  /* optimistic lock lost: the row changed or vanished */
    ODBOX_EUNIQUE      = -6,  /* unique or primary key conflict */
    ODBOX_EDEADLOCK    = -7,  /* deadlock or serialization failure: retryable */
    ODBOX_ENOTFOUND    = -8,  /* no such row, shard, file or dialect */
    ODBOX_ECROSSSHARD  = -9,  /* a plan touches several shards and that is not allowed */
    ODBOX_ETIMEDOUT    = -10, /* waited too long: pool, lock or statement timeout */
    ODBOX_EMIGRATION   = -11, /* migration history disagrees with the files */
    ODBOX_EUNSUPPORTED = -12, /* the dialect or driver cannot do this */
    ODBOX_EDB          = -13, /* any other database error: see sqlstate/message */
    ODBOX_EIO          = -14, /* reading a file or directory failed */
    ODBOX_EBUSY        = -15, /* held by someone else right now (lock, migrator) */
    ODBOX_EPARTIAL     = -16, /* some shards committed, others failed */
    ODBOX_ESTATE       = -17, /* called in the wrong state (e.g. commit without begin) */
    ODBOX_EINDOUBT     = -18, /* the connection was lost after a commit was sent: it may
                                 have committed or not; never retry blindly */
    ODBOX_EOWNER       = -19, /* the eventlog belongs to another application database
                                 (or schema): name another eventlog */
    ODBOX_EDISCARD     = -20  /* returned by a handler: this event can never be handled;
                                 its row is given up on now (EXPIRED), not retried */
};

#define ODBOX_ERROR_MESSAGE_MAX 512

typedef struct odbox_error {
    int  code;          /* ODBOX_E*, 0 when clear */
    char sqlstate[6];   /* five characters + NUL, "" when not from the database */
    long native;        /* driver/server native error number, 0 when none */
    char message[ODBOX_ERROR_MESSAGE_MAX];
} odbox_error;

/* Resets err to "no error". NULL is accepted. */
void odbox_error_clear(odbox_error *err);

/* Short symbolic name of a code, e.g. "ODBOX_ESTALE"; never NULL. */
const char *odbox_errname(int code);

/* One-line description of a code; never NULL. */
const char *odbox_strerror(int code);

/* Lets the compiler check a printf-style format against its arguments. */
#if defined(__GNUC__) || defined(__clang__)
#define ODBOX_PRINTF_FORMAT(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define ODBOX_PRINTF_FORMAT(fmt_index, first_arg)
#endif

/* Sets err to code and a printf-style message (cut to
 * ODBOX_ERROR_MESSAGE_MAX - 1 bytes), SQLSTATE and native code cleared,
 * and returns code: a perform callback, handler or job reports its own
 * failure with `return odbox_error_set(err, ODBOX_EINVAL, "amount %d", a);`.
 * NULL err is accepted (code is still returned); NULL fmt leaves the
 * message empty. Thread-safe (err is the caller's). */
int odbox_error_set(odbox_error *err, int code, const char *fmt, ...) ODBOX_PRINTF_FORMAT(3, 4);

#ifdef __cplusplus
}
#endif
#endif
