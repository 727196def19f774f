/* odbox — umbrella header: the whole public surface. */
#ifndef ODBOX_H
#define ODBOX_H

#define ODBOX_VERSION_STRING "0.1.0" /* keep in step with configure.ac */

#include "error.h"
#include "log.h"
#include "dsn.h"
#include "db.h"
#include "dialect.h"
#include "registry.h"
#include "migrate.h"
#include "uuid.h"
#include "lock.h"
#include "model.h"
#include "action.h"
#include "tx.h"
#include "clock.h"
#include "jobs.h"
#include "notifications.h"
#include "handlers.h"
#include "relay.h"
#include "relay_nats.h"
#include "relay_kafka.h"
#include "relay_rabbitmq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, e.g. "0.1.0". */
const char *odbox_version(void);

#ifdef __cplusplus
}
#endif
#endif
