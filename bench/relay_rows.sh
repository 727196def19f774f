#!/usr/bin/env bash
# bench/relay_rows.sh - the database's work per relayed event in three row
# layouts, on the same PostgreSQL in the same run (bench/relay_rows.sql):
# today's (the fan-out's claimed INSERT and flip, the read by id, the
# outcome UPDATE), a notification row written once with its outcome, and
# no notification row for a success. Each drains BENCH_EVENTS RelayProbed
# events (written by tests/relay/relay-writer, not timed) in batches of
# BENCH_BATCH inside one server session, the broker left out, and prints
# microseconds per event (wall time and the whole machine's CPU) and the
# ratio to today's. A measurement for the design of the relays' storage:
# what fewer row writes per event would save (docs/relays.md).
#
# Usage: bench/relay_rows.sh
# Environment: ODBOX_BUILDDIR (default <repo>/build), BENCH_EVENTS (40000),
# BENCH_BATCH (200: odbox relay's fan-out batch), BENCH_ROUNDS (3; medians).
# Without ODBOX_TEST_PG_DSN it re-runs itself under tests/db/with-servers.sh
# --only pg.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
N=${BENCH_EVENTS:-40000}
BATCH=${BENCH_BATCH:-200}
ROUNDS=${BENCH_ROUNDS:-3}
[[ $N =~ ^[1-9][0-9]*$ && $BATCH =~ ^[1-9][0-9]*$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] ||
    die "BENCH_EVENTS, BENCH_BATCH, BENCH_ROUNDS: positive integers"

under_pg_servers "$HERE/relay_rows.sh" "$@"
build_bench odbox
build_bench tests/relay/relay-writer
base=${ODBOX_TEST_PG_DSN%%\?*}
db="relay_rows_$$"
trap 'psql_on "${base##*/}" "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
LAYOUTS=(current outcome_row events_only)

# run LAYOUT: sets us (wall) and cpu_us (machine) per event
run() {
    psql_on "${base##*/}" "DROP DATABASE IF EXISTS $db" && psql_on "${base##*/}" "CREATE DATABASE $db"
    "$BUILDDIR/odbox" migrate --dsn "${base%/*}/$db" --migrations "$SRCDIR/migrations" >/dev/null
    "$BUILDDIR/tests/relay/relay-writer" "${base%/*}/$db" "$N" 100 100 || die "relay-writer failed"
    PGPASSWORD=$ODBOX_PG_PASSWORD "${ODBOX_PG_BINDIR:+$ODBOX_PG_BINDIR/}psql" -X -q -v ON_ERROR_STOP=1 \
        -h "$ODBOX_PG_HOST" -p "$ODBOX_PG_PORT" -U "$ODBOX_PG_USER" -d "$db" -f "$HERE/relay_rows.sql" >/dev/null
    psql_on "$db" "VACUUM ANALYZE eventlog.events" && psql_on "$db" "CHECKPOINT"
    local t0 b0
    b0=$(busy_ticks) t0=$(now_ms)
    psql_on "$db" "CALL relay_rows_$1($BATCH)"
    us=$((($(now_ms) - t0) * 1000 / N)) cpu_us=$(machine_us "$N" "$b0")
    local left
    left=$(psql_on "$db" "SELECT count(*) FROM eventlog.events WHERE delivered = FALSE")
    [[ $left == 0 ]] || die "$1: $left events left undelivered"
}

say "== the database's work per relayed event, three row layouts, $N events, batches of $BATCH, $ROUNDS round(s)"
say "$(machine_line)"
say "PostgreSQL $(psql_on "${base##*/}" "SHOW server_version"): fsync=$(psql_on "${base##*/}" "SHOW fsync"), synchronous_commit=$(psql_on "${base##*/}" "SHOW synchronous_commit")"
declare -A W C
for ((r = 1; r <= ROUNDS; r++)); do
    for l in "${LAYOUTS[@]}"; do
        run "$l"
        W[$l]+="$us"$'\n' C[$l]+="$cpu_us"$'\n'
        say "   round $r, $l: $us us per event (wall), $cpu_us us machine CPU"
    done
done
wc=$(median_lines <<<"${W[current]%$'\n'}")
for l in "${LAYOUTS[@]}"; do
    w=$(median_lines <<<"${W[$l]%$'\n'}") c=$(median_lines <<<"${C[$l]%$'\n'}")
    say "$l: median $w us per event (wall), $c us machine CPU; wall / current's $(ratio "$w" "$wc")"
done
