#!/usr/bin/env bash
# tests/run-all.sh - the whole test suite, from a fresh Debian machine (root):
# installs what is missing, builds, starts throwaway PostgreSQL and MariaDB
# servers, and runs:
#   1. make check           unit tier, integration tiers pg / mariadb / mysql / sqlite,
#                           script tests (CLI, demo, wallet, worker, quickstart, ...),
#                           then server restarts and the faults tier (kill -9, restarts)
#   2. make check-valgrind  unit tier under valgrind
#   3. make check           again in a build with AddressSanitizer + UBSan
#   4. make distcheck       the release tarball builds, installs and passes
# The servers are stopped and removed at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

tests/setup.sh

# The last lines of every server's log (the servers are removed on exit).
server_logs() {
    local f
    for f in "$ODBOX_DB_STATE_DIR"/*/server.log; do
        echo "--- the last 40 lines of $f"
        tail -40 "$f"
    done
}

run_suites() {
    set -euo pipefail
    local jobs
    jobs=$(nproc)
    echo "=== 1/4 make check (default build: -Wall -Wextra -Werror)"
    make -C build -j"$jobs" check || { cat build/test-suite.log; server_logs; exit 1; }
    echo "=== 2/4 unit tier under valgrind"
    make -C build check-valgrind
    echo "=== 3/4 make check with AddressSanitizer + UndefinedBehaviorSanitizer"
    (tests/configure-dir.sh build-asan --enable-sanitizers && cd build-asan &&
        make -j"$jobs" >/dev/null && make -j"$jobs" check) || { cat build-asan/test-suite.log; server_logs; exit 1; }
    # The tarball's own check: it builds without the three brokers'
    # libraries (AM_DISTCHECK_CONFIGURE_FLAGS), installs (installcheck) and
    # its unit, SQLite, CLI, header, ABI and quickstart tests pass from it;
    # every server tier already ran above on these same sources.
    echo "=== 4/4 make distcheck"
    make -C build -j"$jobs" distcheck TESTS="$DISTCHECK_TESTS" >build/distcheck.log 2>&1 || {
        tail -100 build/distcheck.log
        cat build/odbox-*/_build/sub/test-suite.log 2>/dev/null
        exit 1
    }
    grep -E '^(# (TOTAL|PASS|SKIP|FAIL|ERROR)|=+$|odbox-.*archives ready)' build/distcheck.log | tail -12
    echo "=== all test tiers passed"
}
DISTCHECK_TESTS="tests/unit/unit tests/integration/sqlite.test tests/cli/cli.test tests/headers/headers.test tests/abi/abi.test tests/quickstart/quickstart.test tests/setup/intree.test tests/man/man.test tests/layers/layers.test"
export DISTCHECK_TESTS
export -f run_suites server_logs
# --standby: the replica suite reads a real streaming standby (a second
# PostgreSQL, started from a pg_basebackup of the first: about a second)
tests/db/with-servers.sh --standby -- bash -c "cd '$top' && run_suites"
