#!/usr/bin/env bash
# examples/demo.sh - from a fresh Debian machine (root): builds odbox, starts a
# throwaway local PostgreSQL and runs the wallet example against it: each
# change writes the wallet row and its event in one transaction. Ends with
# `odbox status` and the outbox rows. The server is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
tests/setup.sh
demo() {
    set -euo pipefail
    export ODBOX_MIGRATIONS_DIR="$PWD/migrations" ODBOX_WALLET_MIGRATIONS="$PWD/examples/wallet/migrations"
    export ODBOX_DSN="$ODBOX_TEST_PG_DSN"
    w=build/odbox-wallet
    run() { echo "\$ $*" | sed "s#build/##"; "$@"; }
    run $w migrate
    A=$($w open alice); echo "\$ odbox-wallet open alice   -> $A"
    B=$($w open bob);   echo "\$ odbox-wallet open bob     -> $B"
    run $w deposit "$A" 150
    run $w withdraw "$A" 30
    run $w transfer "$A" "$B" 20
    run $w show "$B"
    echo "\$ odbox-wallet withdraw $B 50"
    $w withdraw "$B" 50 || echo "(exit $?: refused, nothing written)"
    echo
    run build/odbox status
    echo
    echo "\$ psql -c 'SELECT action_name, model_type, event_type, payload FROM eventlog.events ORDER BY completion_date'"
    PGPASSWORD="$ODBOX_PG_PASSWORD" "$ODBOX_PG_BINDIR/psql" -h "$ODBOX_PG_HOST" -p "$ODBOX_PG_PORT" -U "$ODBOX_PG_USER" \
        -d odbox_test -c 'SELECT action_name, model_type, event_type, payload FROM eventlog.events ORDER BY completion_date, event_type'
}
export -f demo
tests/db/with-servers.sh --only pg -- bash -c demo
