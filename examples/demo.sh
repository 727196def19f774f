#!/usr/bin/env bash
# examples/demo.sh - from a fresh Debian machine (root): builds odbox, starts a
# throwaway local PostgreSQL, migrates it with `odbox migrate` and shows
# `odbox status`. The server and its files are removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
tests/setup.sh
demo() {
    set -euo pipefail
    export ODBOX_MIGRATIONS_DIR="$PWD/migrations"
    echo "\$ odbox migrate --dsn postgresql://odbox:***@127.0.0.1:$ODBOX_PG_PORT/odbox_test"
    build/odbox migrate --dsn "$ODBOX_TEST_PG_DSN"
    echo
    echo "\$ odbox status --dsn postgresql://odbox:***@127.0.0.1:$ODBOX_PG_PORT/odbox_test"
    build/odbox status --dsn "$ODBOX_TEST_PG_DSN"
}
export -f demo
tests/db/with-servers.sh --only pg -- bash -c demo
