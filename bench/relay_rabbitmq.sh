#!/usr/bin/env bash
# bench/relay_rabbitmq.sh - events/s from the outbox into RabbitMQ through
# `odbox relay` (1 and 4 relay processes), next to a raw librabbitmq loop
# publishing the same kind of messages (persistent, same properties, a
# body of the relay's size) with publisher confirms and the SAME window of
# unconfirmed messages: a relay process of W workers has at most W
# publishes in flight, all on one connection (W <= the relay's
# max_in_flight_per_connection, 16 by default), so the raw loop runs one
# connection per relay process, each keeping up to W unconfirmed. Both
# publish to the same topic exchange, bound to one durable queue.
#
# The relay's figure: BENCH_EVENTS events committed first (not timed), then
# from the start of the relay processes until every notification is
# SUCCEEDED in PostgreSQL (one session looks every 50 ms): fan-out,
# claim, publish, confirm and the outcome written, start-up included. The
# queue is then read back: every event once.
# The drain alone: the same run in the database's time, from its first
# notification to its last outcome (the processes' start left out, as the
# raw publisher's connection is). The ceiling: the same drain by as many
# odbox-bench-relay-ceiling processes, the delivery with `odbox relay`'s
# settings and a broker that confirms at once: what the outbox side alone
# drains on this machine, so relay/ceiling says how much the broker's
# publishes take. Relay, raw and ceiling runs alternate, BENCH_ROUNDS times
# each; the ratio is the median of the rounds' (bench/lib.sh relay_rounds).
#
# Usage: bench/relay_rabbitmq.sh
# Environment:
#   BENCH_PG_DRIVER  odbc (default) or libpq: odbox's client of PostgreSQL (bench/lib.sh)
#   ODBOX_BUILDDIR   build directory (default: <repo>/build)
#   BENCH_EVENTS     events per run (default 40000: the relay processes' start,
#                    in their time, stays a small part of it)
#   BENCH_WORKERS    publishing threads per relay process (default 16)
#   BENCH_PROCS      relay process counts (default "1 4")
#   BENCH_ROUNDS     rounds of each kind (default 3)
#   BENCH_LOOPS      handling loops per relay and ceiling process (default 4,
#                    `odbox relay`'s for RabbitMQ)
# Without ODBOX_TEST_PG_DSN it re-runs itself under tests/db/with-servers.sh
# --only pg. Starts a private RabbitMQ node (tests/relay/rabbitmq-server.sh)
# and stops it at the end. Benchmarks are not timed tests: the ratio is
# reported, never a failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
N=${BENCH_EVENTS:-40000}
WORKERS=${BENCH_WORKERS:-16}
PROCS=${BENCH_PROCS:-1 4}
ROUNDS=${BENCH_ROUNDS:-3}
LOOPS=${BENCH_LOOPS:-4}
GOAL=0.8
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS: a positive integer"

under_pg_servers "$HERE/relay_rabbitmq.sh" "$@"
((WORKERS <= 16)) || die "BENCH_WORKERS $WORKERS: at most 16 (one connection per relay process)"
make -C "$BUILDDIR" -s odbox tests/relay/relay-writer tests/relay/rabbitmq-check bench/odbox-bench-relay-ceiling >/dev/null ||
    die "build failed (configure with librabbitmq-dev installed)"
O=$BUILDDIR/odbox W=$BUILDDIR/tests/relay/relay-writer CEILING=$BUILDDIR/bench/odbox-bench-relay-ceiling C=$BUILDDIR/tests/relay/rabbitmq-check
[[ -x $C ]] || die "odbox was built without RabbitMQ (install librabbitmq-dev, configure --with-rabbitmq)"
S=$SRCDIR/tests/relay/rabbitmq-server.sh

tmp=$(mktemp -d /tmp/odbox-bench-rabbit.XXXXXX)
base=${ODBOX_TEST_PG_DSN%%\?*}
rabbit_dir='' dbs=()
cleanup() {
    kill_relays
    [[ -z $rabbit_dir ]] || "$S" stop "$rabbit_dir"
    for db in "${dbs[@]}"; do
        psql_on "${base##*/}" "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT


"$S" start >"$tmp/env" 2>"$tmp/start.err" || die "rabbitmq-server did not start: $(cat "$tmp/start.err")"
# shellcheck disable=SC1091
source "$tmp/env"
rabbit_dir=$ODBOX_RABBIT_DIR
url=$ODBOX_RABBIT_URL

# relay_run PROCS ROUND: events/s of PROCS relay processes; sets rate and
# drain_rate
relay_run() {
    local procs=$1 db="rabbit_bench_$$_$1"
    dbs+=("$db")
    psql_on "${base##*/}" "DROP DATABASE IF EXISTS $db" && psql_on "${base##*/}" "CREATE DATABASE $db"
    local dsn
    dsn=$(pg_db_dsn "$db" "")
    "$O" migrate --dsn "$dsn" --migrations "$SRCDIR/migrations" >/dev/null
    "$C" declare - "$url" "$N" >/dev/null
    cat >"$tmp/r$procs.json" <<EOF
{"shards": [{"group": 0, "member": 0, "primary": "$dsn"}],
 "relays": [{"name": "bench", "kind": "rabbitmq", "event_types": ["RelayProbed"],
             "settings": {"url": "$url", "exchange": "odbox-test", "routing_key": "{model_type}.{event_type}"}}]}
EOF
    "$W" "$dsn" "$N" 100 100
    relay_timed "$tmp/r$procs.json" "$procs" "relay x$procs" "$(drained_sql eventlog)" psql_on "$db"
    "$C" count - "$url" "$N" >"$tmp/count" || die "relay x$procs: the queue: $(cat "$tmp/count")"
    rate=$((N * 1000 / relay_ms))
    drain_rate=$((N * 1000 / $(psql_on "$db" "$(drain_ms_sql eventlog)")))
}

# raw_run PROCS ROUND: the raw loop, a connection per relay process; sets raw
raw_run() {
    raw=$("$C" raw - "$url" "$N" "$1" "$WORKERS" | sed -n 's/.*: \([0-9]*\) msg\/s/\1/p')
}

say "== odbox relay -> RabbitMQ vs a raw librabbitmq loop (persistent messages, publisher confirms), $N events, $ROUNDS rounds"
say "$(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg)"
say "RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?'), a private node; a topic exchange bound to one durable queue"
say "PostgreSQL: $base (throwaway, tests/db defaults), odbox through $BENCH_PG_DRIVER; relay: $WORKERS workers/process (one connection each, up to $WORKERS unconfirmed), $LOOPS loops/process, poll 100 ms, writer batches of 100, handling batch defaults"
for procs in $PROCS; do
    relay_rounds "$procs" "raw librabbitmq, $procs connection(s) x $WORKERS unconfirmed"
done
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
