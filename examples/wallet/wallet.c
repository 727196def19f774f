/* odbox-wallet — the wallet model, its events and its actions.
 *
 * Each perform callback only reads (odbox_repo_find on the primary, so it
 * sees the latest committed version) and stages: the updated rows and the
 * events that describe the change. It never writes; the executor writes the
 * rows (optimistically: WHERE id = ? AND version = ?) and the events in one
 * transaction, and re-runs the action when a row changed in between. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "wallet.h"

/* ---- the model and its events --------------------------------------------- */

static const odbox_column wallet_columns[] = {
    {.name = "owner", .type = ODBOX_TYPE_TEXT, .nullable = 0, .max_length = WALLET_OWNER_MAX},
    {.name = "balance", .type = ODBOX_TYPE_INT64, .nullable = 0},
};

const odbox_model_type wallet_model_type = {
    .name = "Wallet",
    .table = "wallets",
    .kind = ODBOX_KIND_MODEL,
    .columns = wallet_columns,
    .ncolumns = sizeof wallet_columns / sizeof wallet_columns[0],
};

static const odbox_event_type ev_opened = {"WalletOpenedEvent"};
static const odbox_event_type ev_deposited = {"WalletMoneyDepositedEvent"};
static const odbox_event_type ev_withdrawn = {"WalletMoneyWithdrawnEvent"};
static const odbox_event_type ev_sent = {"WalletTransferSentEvent"};
static const odbox_event_type ev_received = {"WalletTransferReceivedEvent"};

const odbox_event_type *const wallet_event_types[WALLET_NEVENT_TYPES] = {&ev_opened, &ev_deposited, &ev_withdrawn,
                                                                        &ev_sent, &ev_received};

int wallet_executor_open(odbox_registry *r, const odbox_exec_config *defaults, odbox_executor **out,
                         odbox_error *err)
{
    odbox_executor *exe = NULL;
    int rc = odbox_executor_open(WALLET_NAMESPACE, r, defaults, &exe, err);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(exe, &wallet_model_type, err);
    for (size_t i = 0; rc == ODBOX_OK && i < WALLET_NEVENT_TYPES; i++)
        rc = odbox_executor_register_event(exe, wallet_event_types[i], err);
    if (rc != ODBOX_OK)
        odbox_executor_free(&exe);
    *out = exe;
    return rc;
}

/* ---- helpers ---------------------------------------------------------------- */

static int param_text(json_object *params, const char *key, const char **out, odbox_error *err)
{
    json_object *v;
    if (!json_object_object_get_ex(params, key, &v) || !json_object_is_type(v, json_type_string))
        return odbox_error_set(err, ODBOX_EINVAL, "parameter '%s' missing or not a string", key);
    *out = json_object_get_string(v);
    return ODBOX_OK;
}

static int param_amount(json_object *params, int64_t *out, odbox_error *err)
{
    json_object *v;
    if (!json_object_object_get_ex(params, "amount", &v) || !json_object_is_type(v, json_type_int) ||
        (*out = json_object_get_int64(v)) <= 0)
        return odbox_error_set(err, ODBOX_EINVAL, "parameter 'amount' missing or not a positive integer");
    return ODBOX_OK;
}

/* Reads a wallet for this attempt, from the primary. */
static int load(odbox_context *ctx, const char *id, wallet_reply *reply, odbox_model **out, odbox_error *err)
{
    int rc = odbox_repo_find(odbox_context_registry(ctx), &wallet_model_type, id, ODBOX_READ_PRIMARY, out, err);
    if (rc == ODBOX_ENOTFOUND) {
        reply->refusal = WALLET_REFUSED_NOT_FOUND;
        return odbox_error_set(err, rc, "no wallet %s", id);
    }
    return rc;
}

static int64_t balance_of(const odbox_model *m)
{
    int64_t b = 0;
    odbox_model_get_int64(m, "balance", &b, NULL);
    return b;
}

/* {"id", "owner", "balance", "version"} of m as it will be after commit. */
static json_object *view_json(const odbox_model *m, int64_t version)
{
    const char *owner = "";
    odbox_model_get_text(m, "owner", &owner, NULL);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_string(odbox_model_id(m)));
    json_object_object_add(o, "owner", json_object_new_string(owner));
    json_object_object_add(o, "balance", json_object_new_int64(balance_of(m)));
    json_object_object_add(o, "version", json_object_new_int64(version));
    return o;
}

static void view_from_json(json_object *o, wallet_view *v)
{
    json_object *x;
    if (json_object_object_get_ex(o, "id", &x))
        snprintf(v->id, sizeof v->id, "%s", json_object_get_string(x));
    if (json_object_object_get_ex(o, "owner", &x))
        snprintf(v->owner, sizeof v->owner, "%s", json_object_get_string(x));
    if (json_object_object_get_ex(o, "balance", &x))
        v->balance = json_object_get_int64(x);
    if (json_object_object_get_ex(o, "version", &x))
        v->version = json_object_get_int64(x);
}

/* Emits et on m with payload {"amount", "balance"} plus one extra text
 * field (key NULL: none). */
static int emit_money(odbox_plan *plan, const odbox_model *m, const odbox_event_type *et, int64_t amount,
                      const char *key, const char *value, odbox_error *err)
{
    json_object *p = json_object_new_object();
    if (key)
        json_object_object_add(p, key, json_object_new_string(value));
    json_object_object_add(p, "amount", json_object_new_int64(amount));
    json_object_object_add(p, "balance", json_object_new_int64(balance_of(m)));
    int rc = odbox_plan_emit(plan, m, et, p, err);
    json_object_put(p);
    return rc;
}

/* ---- perform callbacks -------------------------------------------------------- */

/* params: {"owner", "shard": "G.M"} */
static int perform_open(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user,
                        odbox_error *err)
{
    wallet_reply *reply = user;
    const char *owner, *shard_text;
    odbox_shard_id shard;
    odbox_model *m = NULL;
    int rc;
    reply->refusal = WALLET_REFUSED_NONE;
    if ((rc = param_text(params, "owner", &owner, err)) != ODBOX_OK ||
        (rc = param_text(params, "shard", &shard_text, err)) != ODBOX_OK ||
        (rc = odbox_shard_id_parse(shard_text, &shard, err)) != ODBOX_OK ||
        (rc = odbox_model_new_in_shard(&wallet_model_type, shard, &m, err)) != ODBOX_OK)
        return rc;
    if ((rc = odbox_model_set_text(m, "owner", owner, err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(m, "balance", 0, err)) == ODBOX_OK &&
        (rc = odbox_plan_add(plan, m, err)) == ODBOX_OK) {
        json_object *p = json_object_new_object();
        json_object_object_add(p, "owner", json_object_new_string(owner));
        rc = odbox_plan_emit(plan, m, &ev_opened, p, err);
        json_object_put(p);
    }
    if (rc == ODBOX_OK)
        odbox_plan_set_result(plan, view_json(m, odbox_model_version(m)));
    odbox_model_free(&m);
    return rc;
}

/* Deposit (sign +1) or withdraw (sign -1). params: {"wallet_id", "amount"} */
static int change_balance(odbox_context *ctx, json_object *params, odbox_plan *plan, wallet_reply *reply,
                          int sign, odbox_error *err)
{
    const char *id;
    int64_t amount, next = 0;
    odbox_model *m = NULL;
    int rc;
    reply->refusal = WALLET_REFUSED_NONE;
    if ((rc = param_text(params, "wallet_id", &id, err)) != ODBOX_OK ||
        (rc = param_amount(params, &amount, err)) != ODBOX_OK || (rc = load(ctx, id, reply, &m, err)) != ODBOX_OK)
        return rc;
    int64_t balance = balance_of(m);
    if (sign > 0 && balance > INT64_MAX - amount) {
        reply->refusal = WALLET_REFUSED_OVERFLOW;
        rc = odbox_error_set(err, ODBOX_EINVAL, "balance would overflow: %lld + %lld", (long long)balance,
                             (long long)amount);
    } else if (sign < 0 && balance < amount) {
        reply->refusal = WALLET_REFUSED_INSUFFICIENT;
        rc = odbox_error_set(err, ODBOX_EINVAL, "insufficient balance: %lld < %lld", (long long)balance,
                             (long long)amount);
    } else if ((rc = odbox_model_set_int64(m, "balance", sign > 0 ? balance + amount : balance - amount, err)) ==
                   ODBOX_OK &&
               (rc = odbox_plan_update(plan, m, &next, err)) == ODBOX_OK &&
               (rc = emit_money(plan, m, sign > 0 ? &ev_deposited : &ev_withdrawn, amount, NULL, NULL, err)) ==
                   ODBOX_OK) {
        odbox_plan_set_result(plan, view_json(m, next));
    }
    odbox_model_free(&m);
    return rc;
}

static int perform_deposit(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user,
                           odbox_error *err)
{
    return change_balance(ctx, params, plan, user, +1, err);
}

static int perform_withdraw(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user,
                            odbox_error *err)
{
    return change_balance(ctx, params, plan, user, -1, err);
}

/* params: {"from", "to", "amount"} */
static int perform_transfer(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user,
                            odbox_error *err)
{
    wallet_reply *reply = user;
    const char *from_id, *to_id;
    int64_t amount, fb, tb, from_next = 0, to_next = 0;
    odbox_model *from = NULL, *to = NULL;
    int rc;
    reply->refusal = WALLET_REFUSED_NONE;
    if ((rc = param_text(params, "from", &from_id, err)) != ODBOX_OK ||
        (rc = param_text(params, "to", &to_id, err)) != ODBOX_OK ||
        (rc = param_amount(params, &amount, err)) != ODBOX_OK)
        return rc;
    if (!strcasecmp(from_id, to_id))
        return odbox_error_set(err, ODBOX_EINVAL, "cannot transfer from a wallet to itself");
    if ((rc = load(ctx, from_id, reply, &from, err)) != ODBOX_OK || (rc = load(ctx, to_id, reply, &to, err)) != ODBOX_OK)
        goto out;
    fb = balance_of(from);
    tb = balance_of(to);
    if (fb < amount) {
        reply->refusal = WALLET_REFUSED_INSUFFICIENT;
        rc = odbox_error_set(err, ODBOX_EINVAL, "insufficient balance: %lld < %lld", (long long)fb, (long long)amount);
        goto out;
    }
    if (tb > INT64_MAX - amount) {
        reply->refusal = WALLET_REFUSED_OVERFLOW;
        rc = odbox_error_set(err, ODBOX_EINVAL, "balance of %s would overflow: %lld + %lld", to_id, (long long)tb,
                             (long long)amount);
        goto out;
    }
    if ((rc = odbox_model_set_int64(from, "balance", fb - amount, err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(to, "balance", tb + amount, err)) == ODBOX_OK &&
        (rc = odbox_plan_update(plan, from, &from_next, err)) == ODBOX_OK &&
        (rc = odbox_plan_update(plan, to, &to_next, err)) == ODBOX_OK &&
        (rc = emit_money(plan, from, &ev_sent, amount, "to", odbox_model_id(to), err)) == ODBOX_OK &&
        (rc = emit_money(plan, to, &ev_received, amount, "from", odbox_model_id(from), err)) == ODBOX_OK) {
        json_object *res = json_object_new_object();
        json_object_object_add(res, "from", view_json(from, from_next));
        json_object_object_add(res, "to", view_json(to, to_next));
        odbox_plan_set_result(plan, res);
    }
out:
    odbox_model_free(&from);
    odbox_model_free(&to);
    return rc;
}

static const odbox_action open_action = {.name = "WalletOpenAction", .perform = perform_open};
static const odbox_action deposit_action = {.name = "WalletDepositAction", .perform = perform_deposit};
static const odbox_action withdraw_action = {.name = "WalletWithdrawAction", .perform = perform_withdraw};
static const odbox_action transfer_action = {.name = "WalletTransferAction", .perform = perform_transfer};

/* ---- running them ------------------------------------------------------------- */

/* Runs proto with reply as its user data; takes params. */
static int run(odbox_executor *exe, const odbox_action *proto, json_object *params, const char *key,
               const odbox_exec_config *cfg, wallet_reply *reply, odbox_error *err)
{
    odbox_action a = *proto;
    odbox_result res;
    memset(reply, 0, sizeof *reply);
    memset(&res, 0, sizeof res);
    a.user = reply;
    int rc = key ? odbox_execute_keyed(exe, &a, params, key, cfg, &res, err)
                 : odbox_execute(exe, &a, params, cfg, &res, err);
    snprintf(reply->action_id, sizeof reply->action_id, "%s", res.action_id);
    reply->attempts = res.attempts;
    reply->replayed = res.replayed;
    if (rc == ODBOX_OK && res.value) {
        json_object *from, *to;
        if (json_object_object_get_ex(res.value, "from", &from) && json_object_object_get_ex(res.value, "to", &to)) {
            view_from_json(from, &reply->wallet);
            view_from_json(to, &reply->other);
        } else {
            view_from_json(res.value, &reply->wallet);
        }
    }
    odbox_result_clear(&res);
    json_object_put(params);
    return rc;
}

int wallet_open(odbox_executor *exe, const char *owner, odbox_shard_id shard, const odbox_exec_config *cfg,
                wallet_reply *reply, odbox_error *err)
{
    char text[16];
    snprintf(text, sizeof text, "%d.%d", shard.group, shard.member);
    json_object *p = json_object_new_object();
    json_object_object_add(p, "owner", json_object_new_string(owner));
    json_object_object_add(p, "shard", json_object_new_string(text));
    return run(exe, &open_action, p, NULL, cfg, reply, err);
}

static json_object *money_params(const char *id, int64_t amount)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "wallet_id", json_object_new_string(id));
    json_object_object_add(p, "amount", json_object_new_int64(amount));
    return p;
}

int wallet_deposit(odbox_executor *exe, const char *id, int64_t amount, const char *key, const odbox_exec_config *cfg,
                   wallet_reply *reply, odbox_error *err)
{
    return run(exe, &deposit_action, money_params(id, amount), key, cfg, reply, err);
}

int wallet_withdraw(odbox_executor *exe, const char *id, int64_t amount, const char *key,
                    const odbox_exec_config *cfg, wallet_reply *reply, odbox_error *err)
{
    return run(exe, &withdraw_action, money_params(id, amount), key, cfg, reply, err);
}

int wallet_transfer(odbox_executor *exe, const char *from, const char *to, int64_t amount, const char *key,
                    const odbox_exec_config *cfg, wallet_reply *reply, odbox_error *err)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "from", json_object_new_string(from));
    json_object_object_add(p, "to", json_object_new_string(to));
    json_object_object_add(p, "amount", json_object_new_int64(amount));
    return run(exe, &transfer_action, p, key, cfg, reply, err);
}

int wallet_find(odbox_registry *r, const char *id, wallet_view *out, odbox_error *err)
{
    odbox_model *m = NULL;
    int rc = odbox_repo_find(r, &wallet_model_type, id, ODBOX_READ_PRIMARY, &m, err);
    if (rc == ODBOX_ENOTFOUND)
        return odbox_error_set(err, rc, "no wallet %s", id);
    if (rc != ODBOX_OK)
        return rc;
    const char *owner = "";
    odbox_model_get_text(m, "owner", &owner, NULL);
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", odbox_model_id(m));
    snprintf(out->owner, sizeof out->owner, "%s", owner);
    out->balance = balance_of(m);
    out->version = odbox_model_version(m);
    odbox_model_free(&m);
    return ODBOX_OK;
}
