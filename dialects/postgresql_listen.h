/* odbox — PostgreSQL's listen_open, listen_wait and listen_close (see
 * odbox/dialect.h), built when configure found libpq; not installed. */
#ifndef ODBOX_POSTGRESQL_LISTEN_H
#define ODBOX_POSTGRESQL_LISTEN_H

#include "odbox/dialect.h"

int odbox_pg_listen_open(const odbox_dsn *dsn, const char *const *channels, size_t nchannels, int timeout_ms,
                         int cancel_fd, odbox_listener **out, odbox_error *err);
int odbox_pg_listen_wait(odbox_listener *l, int timeout_ms, int cancel_fd, unsigned *got, odbox_error *err);
void odbox_pg_listen_close(odbox_listener **l);
/* The dialect's libpq_conninfo (odbox/dialect.h). */
int odbox_pg_conninfo(const odbox_dsn *dsn, char **out, odbox_error *err);

#endif
