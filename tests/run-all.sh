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
# Tiers 1, 2 and 4 run one after the other against one set of servers
# while tier 3 is built and run against a set of its own, at the same
# time: most of a tier's time is spent waiting (on leases, timeouts,
# processes killed and restarted), so two tiers share the cores well, and
# each tier's server restarts cut only its own sessions. Each tier's
# output goes to its own log (build/tier-*.log), shown when it fails.
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

# Tiers 1, 2 and 4, in ./build.
default_tiers() {
    set -euo pipefail
    local jobs
    jobs=$(nproc)
    make -C build -j"$jobs" check || { cat build/test-suite.log; server_logs; exit 1; }
    echo "=== 2/4 unit tier under valgrind"
    make -C build check-valgrind
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
}

# Tier 3, in ./build-asan (configured and built already).
asan_tier() {
    set -euo pipefail
    make -C build-asan -j"$(nproc)" check || { cat build-asan/test-suite.log; server_logs; exit 1; }
}
DISTCHECK_TESTS="tests/unit/unit tests/integration/sqlite.test tests/cli/cli.test tests/headers/headers.test tests/abi/abi.test tests/quickstart/quickstart.test tests/setup/intree.test tests/man/man.test tests/layers/layers.test"
export DISTCHECK_TESTS
export -f default_tiers asan_tier server_logs

logs=(build/tier-default.log build/tier-asan.log)
echo "=== 1/4 make check (default build: -Wall -Wextra -Werror), 2/4 and 4/4 after it: ${logs[0]}"
tests/db/with-servers.sh --standby -- bash -c "cd '$top' && default_tiers" >"${logs[0]}" 2>&1 &
default_pid=$!
echo "=== 3/4 make check with AddressSanitizer + UndefinedBehaviorSanitizer, at the same time: ${logs[1]}"
(
    set -euo pipefail
    tests/configure-dir.sh build-asan --enable-sanitizers
    make -C build-asan -j"$(nproc)" >/dev/null
    tests/db/with-servers.sh --standby -- bash -c "cd '$top' && asan_tier"
) >"${logs[1]}" 2>&1 &
asan_pid=$!
asan_rc=0 default_rc=0
wait "$asan_pid" || asan_rc=$?
wait "$default_pid" || default_rc=$?
for i in 0 1; do
    log=${logs[$i]} rc=$default_rc
    ((i == 0)) || rc=$asan_rc
    if ((rc == 0)); then
        echo "=== $log: passed"
        grep -E '^(=== |# (TOTAL|PASS|SKIP|FAIL|ERROR)|odbox-db: servers ready|odbox-.*archives ready)' "$log"
    else
        echo "=== $log: FAILED (exit $rc)"
        cat "$log"
    fi
done
if ((asan_rc != 0 || default_rc != 0)); then
    # last, where a reader of the output's end finds it: after the
    # servers' logs, which end a failed tier's
    echo "=== what failed (the checks' own lines; the tier logs above have the rest)"
    grep -hE '^(FAIL|ERROR): |^[^ ]+:[0-9]+:[EF]:' "${logs[@]}" | head -40 || true
    exit 1
fi
echo "=== all test tiers passed"
