/* quickstart: odbox in one file. Opens an account, then deposits into
 * it; each action writes the account row and its event in ONE
 * transaction. Build and run against an installed odbox:
 *
 *     cc quickstart.c $(pkg-config --cflags --libs odbox) -o quickstart
 *     ODBOX_DSN=postgresql://user:pass@localhost/app ./quickstart
 *
 * ODBOX_CONFIG=FILE names a registry config file instead of ODBOX_DSN.
 * QUICKSTART_MIGRATIONS names this example's migrations folder (default:
 * examples/quickstart/migrations, from the top of the source tree). */
#include <odbox/odbox.h>
#include <stdio.h>
#include <stdlib.h>

static const odbox_column account_columns[] = {
    {"owner", ODBOX_TYPE_TEXT, 0, 200},
    {"balance", ODBOX_TYPE_INT64, 0, 0},
};
static const odbox_model_type Account = {"Account", "accounts", ODBOX_KIND_MODEL, account_columns, 2};
static const odbox_event_type Opened = {"AccountOpenedEvent"};
static const odbox_event_type Deposited = {"AccountDepositedEvent"};

/* A perform reads and stages changes on the plan; the executor writes. */
static int open_account(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    const char *owner = json_object_get_string(json_object_object_get(params, "owner"));
    odbox_model *a = NULL;
    (void)ctx, (void)user;
    int rc = odbox_model_new(&Account, NULL, &a, err);
    if (rc == 0 && (rc = odbox_model_set_text(a, "owner", owner, err)) == 0 &&
        (rc = odbox_model_set_int64(a, "balance", 0, err)) == 0 && (rc = odbox_plan_add(plan, a, err)) == 0 &&
        (rc = odbox_plan_emit(plan, a, &Opened, params, err)) == 0)
        odbox_plan_set_result(plan, json_object_new_string(odbox_model_id(a)));
    odbox_model_free(&a);
    return rc;
}

static int deposit(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    const char *id = json_object_get_string(json_object_object_get(params, "id"));
    int64_t amount = json_object_get_int64(json_object_object_get(params, "amount"));
    int64_t balance = 0;
    odbox_model *a = NULL;
    (void)user;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &Account, id, ODBOX_READ_PRIMARY, &a, err);
    if (rc == 0 && (rc = odbox_model_get_int64(a, "balance", &balance, err)) == 0 &&
        (rc = odbox_model_set_int64(a, "balance", balance + amount, err)) == 0 &&
        (rc = odbox_plan_update(plan, a, NULL, err)) == 0)
        rc = odbox_plan_emit(plan, a, &Deposited, params, err);
    odbox_model_free(&a);
    return rc;
}

int main(void)
{
    const char *config = getenv("ODBOX_CONFIG"), *dsn = getenv("ODBOX_DSN");
    const char *migrations = getenv("QUICKSTART_MIGRATIONS");
    odbox_migrate_options mo = {.user_dir = migrations ? migrations : "examples/quickstart/migrations",
                                .user_set = "quickstart"};
    const odbox_action open_action = {"OpenAccountAction", open_account, NULL};
    const odbox_action deposit_action = {"DepositAction", deposit, NULL};
    odbox_registry *registry = NULL;
    odbox_executor *exe = NULL;
    odbox_model *account = NULL;
    odbox_result res = {0};
    odbox_error err = {0};
    int64_t balance = 0;
    char id[37] = "";
    if (!config && !dsn) {
        fprintf(stderr, "quickstart: set ODBOX_DSN (or ODBOX_CONFIG)\n");
        return 2;
    }

    /* the framework's tables and this example's, then an executor */
    int rc = config ? odbox_registry_load(config, &registry, &err) : odbox_registry_open_dsn(dsn, &registry, &err);
    if (rc == 0 && (rc = odbox_migrate_registry(registry, &mo, &err)) == 0 &&
        (rc = odbox_executor_open("com.example.quickstart", registry, NULL, &exe, &err)) == 0)
        rc = odbox_executor_register_model(exe, &Account, &err);

    /* open an account: its row and an AccountOpenedEvent commit together */
    json_object *params = json_object_new_object();
    json_object_object_add(params, "owner", json_object_new_string("alice"));
    if (rc == 0 && (rc = odbox_execute(exe, &open_action, params, NULL, &res, &err)) == 0) {
        snprintf(id, sizeof id, "%s", json_object_get_string(res.value));
        printf("opened account %s for alice\n", id);
    }
    odbox_result_clear(&res);
    json_object_put(params);

    /* deposit 150: the new balance and an AccountDepositedEvent */
    params = json_object_new_object();
    json_object_object_add(params, "id", json_object_new_string(id));
    json_object_object_add(params, "amount", json_object_new_int64(150));
    if (rc == 0 && (rc = odbox_execute(exe, &deposit_action, params, NULL, &res, &err)) == 0 &&
        (rc = odbox_repo_find(registry, &Account, id, ODBOX_READ_PRIMARY, &account, &err)) == 0 &&
        (rc = odbox_model_get_int64(account, "balance", &balance, &err)) == 0)
        printf("deposited 150: balance %lld, version %lld\n", (long long)balance,
               (long long)odbox_model_version(account));
    odbox_result_clear(&res);
    json_object_put(params);

    if (rc != 0)
        fprintf(stderr, "quickstart: %s: %s\n", odbox_errname(rc), err.message);
    odbox_model_free(&account);
    odbox_executor_free(&exe);
    odbox_registry_free(&registry);
    return rc == 0 ? 0 : 1;
}
