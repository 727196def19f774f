/* orders: a small service with its own table and its own SQL, and odbox's
 * outbox in its transactions (odbox/tx.h). Each order is placed by an
 * INSERT of the service's own and an OrderPlaced event, paid by an UPDATE
 * and an OrderPaid event: the row and the event commit together or not at
 * all. Paying an order that is not placed any more changes no row: the
 * service rolls back and no event is written.
 *
 *     cc orders.c $(pkg-config --cflags --libs odbox) -o orders
 *     ODBOX_DSN=postgresql://user:pass@localhost/app ./orders
 *     ./orders sqlite:///tmp/orders.db
 *
 * The DSN is the argument, else ODBOX_DSN; ODBOX_CONFIG=FILE names a
 * registry config file instead.
 * Prints each step, then the counts of orders and paid orders. */
#include <odbox/odbox.h>
#include <stdio.h>
#include <stdlib.h>

static const odbox_event_type OrderPlaced = {"OrderPlaced"};
static const odbox_event_type OrderPaid = {"OrderPaid"};
static const odbox_shard_id SHARD = {0, 0};

/* The service's own schema: not a migration of odbox's, a statement. */
static int create_table(odbox_registry *r, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(r));
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == 0)
        rc = odbox_conn_exec(c,
                             "CREATE TABLE IF NOT EXISTS orders (id VARCHAR(36) PRIMARY KEY, "
                             "customer VARCHAR(200) NOT NULL, amount BIGINT NOT NULL, status VARCHAR(20) NOT NULL)",
                             err);
    odbox_pool_release(pool, &c);
    return rc;
}

/* One statement of the service's: text and integer parameters in order
 * ("t" or "i" per parameter in types); *changed gets its row count. */
static int run(odbox_tx *tx, const char *sql, const char *types, const char *const *text, const int64_t *num,
               int64_t *changed, odbox_error *err)
{
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(odbox_tx_conn(tx), sql, &s, err);
    for (int i = 0; rc == 0 && types[i]; i++)
        rc = types[i] == 't' ? odbox_stmt_bind_text(s, i + 1, text[i], err)
                             : odbox_stmt_bind_int64(s, i + 1, num[i], err);
    if (rc == 0 && (rc = odbox_stmt_execute(s, err)) == 0 && changed)
        *changed = odbox_stmt_rows_affected(s);
    odbox_stmt_free(&s);
    return rc;
}

static int place(odbox_executor *exe, const char *customer, int64_t amount, char *id, odbox_error *err)
{
    odbox_tx *tx = NULL;
    odbox_tx_config cfg = {.action_name = "PlaceOrder"};
    odbox_uuid_v4(id);
    const char *text[] = {id, customer, NULL};
    const int64_t num[] = {0, 0, amount};
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "customer", json_object_new_string(customer));
    json_object_object_add(payload, "amount", json_object_new_int64(amount));
    int rc = odbox_tx_begin(exe, SHARD, &cfg, &tx, err);
    if (rc == 0)
        rc = run(tx, "INSERT INTO orders (id, customer, amount, status) VALUES (?, ?, ?, 'placed')", "tti", text,
                 num, NULL, err);
    if (rc == 0)
        rc = odbox_tx_emit(tx, "Order", id, &OrderPlaced, payload, err);
    if (rc == 0)
        rc = odbox_tx_commit(&tx, err);
    odbox_tx_rollback(&tx); /* after a failure; nothing to do after a commit */
    json_object_put(payload);
    if (rc == 0)
        printf("placed order %s: %s, %lld\n", id, customer, (long long)amount);
    return rc;
}

/* Pays a placed order; 1 when it was not placed (nothing written). */
static int pay(odbox_executor *exe, const char *id, odbox_error *err)
{
    odbox_tx *tx = NULL;
    odbox_tx_config cfg = {.action_name = "PayOrder"};
    const char *text[] = {id};
    int64_t changed = 0;
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "status", json_object_new_string("paid"));
    int rc = odbox_tx_begin(exe, SHARD, &cfg, &tx, err);
    if (rc == 0)
        rc = run(tx, "UPDATE orders SET status = 'paid' WHERE id = ? AND status = 'placed'", "t", text, NULL,
                 &changed, err);
    if (rc == 0 && changed != 1) {
        odbox_tx_rollback(&tx);
        printf("order %s is not placed: rolled back\n", id);
        json_object_put(payload);
        return 1;
    }
    if (rc == 0)
        rc = odbox_tx_emit(tx, "Order", id, &OrderPaid, payload, err);
    if (rc == 0)
        rc = odbox_tx_commit(&tx, err);
    odbox_tx_rollback(&tx);
    json_object_put(payload);
    if (rc == 0)
        printf("paid order %s\n", id);
    return rc;
}

static int count(odbox_registry *r, const char *sql, int64_t *n, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(r));
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == 0)
        rc = odbox_conn_query_int64(c, sql, n, err);
    odbox_pool_release(pool, &c);
    return rc;
}

int main(int argc, char **argv)
{
    const char *config = getenv("ODBOX_CONFIG"), *dsn = argc > 1 ? argv[1] : getenv("ODBOX_DSN");
    if (argc > 2 || (!config && !dsn)) {
        fprintf(stderr, "usage: orders [DSN]   (or set ODBOX_DSN, or ODBOX_CONFIG)\n");
        return 2;
    }
    if (argc > 1)
        config = NULL;
    odbox_registry *registry = NULL;
    odbox_executor *exe = NULL;
    odbox_error err = {0};
    char ids[3][37];
    static const char *const customers[3] = {"alice", "bob", "carol"};
    int64_t orders = 0, paid = 0;
    /* odbox's tables (the eventlog), the service's own, an executor */
    int rc = config ? odbox_registry_load(config, &registry, &err) : odbox_registry_open_dsn(dsn, &registry, &err);
    if (rc == 0 && (rc = odbox_migrate_registry(registry, NULL, &err)) == 0 &&
        (rc = create_table(registry, &err)) == 0)
        rc = odbox_executor_open("com.example.orders", registry, NULL, &exe, &err);
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = place(exe, customers[i], 100 * (i + 1), ids[i], &err);
    if (rc == 0)
        rc = pay(exe, ids[0], &err);
    if (rc == 0 && pay(exe, ids[0], &err) != 1) /* paid already: refused, nothing written */
        rc = -1;
    if (rc == 0 && (rc = count(registry, "SELECT COUNT(*) FROM orders", &orders, &err)) == 0 &&
        (rc = count(registry, "SELECT COUNT(*) FROM orders WHERE status = 'paid'", &paid, &err)) == 0)
        printf("orders: %lld, paid: %lld\n", (long long)orders, (long long)paid);
    if (rc != 0)
        fprintf(stderr, "orders: %s: %s\n", odbox_errname(rc), err.message);
    odbox_executor_free(&exe);
    odbox_registry_free(&registry);
    return rc == 0 ? 0 : 1;
}
