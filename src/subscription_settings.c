/* odbox — a subscription's settings as its shard records them
 * (odbox_subscription_settings_get): the order (V13) and the max attempts
 * (V16) that the last registration wrote and every process follows, for
 * operators (`odbox handlers`). Dialect-neutral. */
#include "delivery_internal.h"
#include "notifications_internal.h"

static int read_settings(const odbox_shard *sh, const char *name, odbox_subscription_settings *out,
                         odbox_error *err)
{
    odbox_conn *c = NULL;
    char subs[ODBOX_NAME_MAX * 2 + 32];
    int rc = odbox_ops_connect(sh, "subscriptions", &c, subs, sizeof subs, err);
    if (rc != ODBOX_OK)
        return rc; /* named the shard already */
    odbox_buf b = {0};
    odbox_buf_cat(&b, "SELECT ordered, max_attempts FROM ", subs, " WHERE name = ?", (char *)NULL);
    const char *args[] = {name};
    odbox_stmt *s = NULL;
    rc = odbox_subs_run(c, odbox_buf_take(&b), args, 1, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 0)
        rc = odbox_fail(err, ODBOX_ENOTFOUND, "no subscription named '%s'", name);
    int64_t ordered = 0, max = 0;
    int null_ordered = 0, null_max = 0;
    if (rc == 1 && (rc = odbox_stmt_get_int64(s, 1, &ordered, &null_ordered, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_int64(s, 2, &max, &null_max, err)) == ODBOX_OK) {
        out->ordered = !null_ordered && ordered != 0;
        out->max_attempts = odbox_subs_limit_of(max, null_max);
    }
    odbox_stmt_free(&s);
    odbox_ops_release(sh, &c);
    return rc == ODBOX_OK ? rc : odbox_ops_shard_error(sh, rc, err);
}

int odbox_subscription_settings_get(const odbox_registry *r, const odbox_shard *shard, const char *name,
                                    odbox_subscription_settings *out, odbox_error *err)
{
    if (!r || !name || !*name || !out)
        return odbox_fail(err, ODBOX_EINVAL, "subscription settings: registry, name or out is missing");
    if (out->version < 1 || out->version > ODBOX_SUBSCRIPTION_SETTINGS_VERSION)
        return odbox_fail(err, ODBOX_EINVAL,
                          "subscription settings: version %d is not one of 1..%d (set it to "
                          "ODBOX_SUBSCRIPTION_SETTINGS_VERSION)",
                          out->version, ODBOX_SUBSCRIPTION_SETTINGS_VERSION);
    const odbox_shard *sh = shard ? shard : odbox_registry_default_shard(r);
    if (!sh)
        return odbox_fail(err, ODBOX_EINVAL, "subscription settings: the registry has no shard");
    odbox_subscription_settings got = {.version = out->version};
    int rc = read_settings(sh, name, &got, err);
    if (rc != ODBOX_OK)
        return rc;
    /* field by field: a caller of an earlier version has only its own */
    out->ordered = got.ordered;
    out->max_attempts = got.max_attempts;
    return ODBOX_OK;
}
