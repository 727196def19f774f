/* odbox — the NATS relay's test hook; not in the ABI (the tests link the
 * library statically). */
#ifndef ODBOX_RELAY_NATS_INTERNAL_H
#define ODBOX_RELAY_NATS_INTERNAL_H

/* The URL broker connects to, as messages show it (passwords and tokens
 * as ***); NULL for NULL or in a build without libnats. */
const char *odbox_relay_nats_url_shown(const void *broker);

#endif
