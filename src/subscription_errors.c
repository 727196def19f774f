/* odbox — the last error of a subscription (migration V12): a handling
 * round whose calls failed records the latest message of each handler in
 * <eventlog>.subscriptions, so that `odbox handlers` and
 * odbox_subscriptions_list name it. At most once a second per handler
 * and shard in a process: a broker that is down costs a statement a
 * second, not one per failed row. Dialect-neutral but for now_sql. */
#include <stdlib.h>
#include <string.h>
#include "delivery_internal.h"

#define NOTE_INTERVAL_US 1000000
/* bytes of a message kept: the error of a call is one line */
#define NOTE_MAX 1000

/* message as text of at most NOTE_MAX bytes, cut between characters,
 * each byte that starts no valid UTF-8 sequence replaced by U+FFFD: a
 * handler's or a driver's message may be in another encoding, which
 * PostgreSQL and MySQL/MariaDB refuse (the note was lost: "cannot record
 * the last error") and SQLite kept as it was (`odbox handlers --json`
 * printed it). */
static void note_text(const char *message, char text[NOTE_MAX + 1])
{
    const unsigned char *u = (const unsigned char *)message;
    size_t out = 0;
    for (size_t i = 0, len; u[i]; i += len) {
        const char *from = message + i;
        size_t n = len = u[i] < 0x80 ? 1 : odbox_utf8_len(u + i);
        if (!len)
            from = "\xEF\xBF\xBD", n = 3, len = 1;
        if (out + n > NOTE_MAX)
            break;
        memcpy(text + out, from, n);
        out += n;
    }
    text[out] = '\0';
}

void odbox_subs_note_error(odbox_delivery *d, odbox_dshard *ds, odbox_conn *c, int handler, const char *message)
{
    if (handler < 0 || (size_t)handler >= d->h->n || !message)
        return;
    int64_t now = odbox_mono_us(), last = atomic_load(&ds->error_noted_us[handler]);
    /* one loop of the shard records it; the others leave it */
    if ((last && now - last < NOTE_INTERVAL_US) ||
        !atomic_compare_exchange_strong(&ds->error_noted_us[handler], &last, now))
        return;
    const odbox_dialect *dl = odbox_conn_dialect(c);
    char subs[ODBOX_NAME_MAX * 2 + 32], text[NOTE_MAX + 1];
    odbox_dialect_eventlog_table(dl, odbox_shard_eventlog(ds->shard), "subscriptions", subs, sizeof subs);
    note_text(message, text);
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", subs, " SET last_error = ?, last_error_date = ", dl->now_sql, " WHERE name = ?",
                  (char *)NULL);
    char *sql = odbox_buf_take(&b);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    int rc = sql ? odbox_stmt_prepare(c, sql, &s, &e) : odbox_fail(&e, ODBOX_ENOMEM, "out of memory");
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, text, &e)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, d->h->v[handler].name, &e)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    odbox_stmt_free(&s);
    free(sql);
    if (rc != ODBOX_OK)
        odbox_log(ODBOX_LOG_WARN, "delivery: cannot record the last error of %s on shard %d.%d (is migration V12 "
                                  "applied?): %s", d->h->v[handler].name, ds->id.group, ds->id.member, e.message);
}
