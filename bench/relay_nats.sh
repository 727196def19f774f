#!/usr/bin/env bash
# bench/relay_nats.sh - events/s from the outbox into NATS JetStream through
# `odbox relay` (1 and 4 relay processes), next to a raw libnats loop doing
# the same publishes (js_Publish with Nats-Msg-Id, each waiting for its
# PubAck, on as many threads as the relays have workers) into the same kind
# of stream with the same message size, and the ratio (goal 0.8).
#
# The relay's figure: BENCH_EVENTS events committed first (not timed), then
# from the start of the relay processes until every notification is
# SUCCEEDED in PostgreSQL (one session looks every 50 ms): fan-out,
# claim, publish, ack and the outcome written, start-up included.
# The drain alone: the same run in the database's time, from its first
# notification to its last outcome (the processes' start left out, as the
# raw publisher's connection is). The ceiling: the same drain by as many
# odbox-bench-relay-ceiling processes, the delivery with `odbox relay`'s
# settings and a broker that confirms at once: what the outbox side alone
# drains on this machine, so relay/ceiling says how much the broker's
# publishes take. Relay, raw and ceiling runs alternate, BENCH_ROUNDS times
# each; the ratio is the median of the rounds' (bench/lib.sh relay_rounds).
#
# Usage: bench/relay_nats.sh
# Environment:
#   BENCH_PG_DRIVER  odbc (default) or libpq: odbox's client of PostgreSQL (bench/lib.sh)
#   ODBOX_BUILDDIR   build directory (default: <repo>/build)
#   BENCH_EVENTS     events per run (default 40000: the relay processes' start,
#                    in their time, stays a small part of it)
#   BENCH_WORKERS    publishing threads per relay process (default 8)
#   BENCH_ROUNDS     rounds of each kind (default 3)
# Without ODBOX_TEST_PG_DSN it re-runs itself under tests/db/with-servers.sh
# --only pg. Needs nats-server and a build with libnats. Benchmarks are not
# timed tests: the ratio is reported, never a failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
N=${BENCH_EVENTS:-40000}
WORKERS=${BENCH_WORKERS:-8}
ROUNDS=${BENCH_ROUNDS:-3}
GOAL=0.8
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS: a positive integer"

under_pg_servers "$HERE/relay_nats.sh" "$@"
command -v nats-server >/dev/null || die "nats-server not found (tests/db/install-deps.sh installs it)"
make -C "$BUILDDIR" -s odbox tests/relay/relay-writer tests/relay/nats-tool bench/odbox-bench-relay-ceiling >/dev/null ||
    die "build failed (configure with libnats-dev installed)"
O=$BUILDDIR/odbox W=$BUILDDIR/tests/relay/relay-writer CEILING=$BUILDDIR/bench/odbox-bench-relay-ceiling T=$BUILDDIR/tests/relay/nats-tool
[[ -x $T ]] || die "odbox was built without NATS (install libnats-dev, configure --with-nats)"

tmp=$(mktemp -d /tmp/odbox-bench-nats.XXXXXX)
base=${ODBOX_TEST_PG_DSN%%\?*}
nats_pid='' dbs=()
cleanup() {
    kill_relays
    [[ -z $nats_pid ]] || { kill "$nats_pid" 2>/dev/null; wait "$nats_pid" 2>/dev/null || true; }
    for db in "${dbs[@]}"; do
        psql_on "${base##*/}" "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

for try in 1 2 3 4 5; do
    port=$((25000 + ($$ * 13 + try * 211) % 6000))
    nats-server -js -a 127.0.0.1 -p "$port" -sd "$tmp/js" >"$tmp/nats.log" 2>&1 &
    nats_pid=$!
    for _ in $(seq 50); do grep -q "Server is ready" "$tmp/nats.log" && break; sleep 0.1; done
    grep -q "Server is ready" "$tmp/nats.log" && break
    kill "$nats_pid" 2>/dev/null || true
    nats_pid=''
done
[[ -n $nats_pid ]] || die "nats-server did not start: $(cat "$tmp/nats.log")"
url="nats://127.0.0.1:$port"

# relay_run PROCS ROUND: events/s of PROCS relay processes into a stream
# of the round's own; sets rate, drain_rate and size
relay_run() {
    local procs=$1 db="relay_bench_$$_$1" st="R$1x$2" sub="r$1x$2"
    dbs+=("$db")
    psql_on "${base##*/}" "DROP DATABASE IF EXISTS $db" && psql_on "${base##*/}" "CREATE DATABASE $db"
    local dsn
    dsn=$(pg_db_dsn "$db" "")
    "$O" migrate --dsn "$dsn" --migrations "$SRCDIR/migrations" >/dev/null
    "$T" create "$url" "$st" "$sub.>" >/dev/null
    cat >"$tmp/$sub.json" <<EOF
{"shards": [{"group": 0, "member": 0, "primary": "$dsn"}],
 "relays": [{"name": "bench", "kind": "nats", "event_types": ["RelayProbed"],
             "settings": {"url": "$url", "subject": "$sub.{model_type}.{event_type}", "stream": "$st"}}]}
EOF
    "$W" "$dsn" "$N" 100 100
    relay_timed "$tmp/$sub.json" "$procs" "relay x$procs" "$(drained_sql eventlog)" psql_on "$db"
    read -r _ msgs _ _ _ dups _ _ _ size _ <<<"$("$T" count "$url" "$st")"
    [[ $msgs == "$N" && $dups == 0 ]] || die "relay x$procs: stream has $msgs messages, $dups duplicates"
    rate=$((N * 1000 / relay_ms))
    drain_rate=$((N * 1000 / $(psql_on "$db" "$(drain_ms_sql eventlog)")))
}

# raw_run PROCS ROUND: js_Publish + ack loop on as many threads as PROCS
# relays have workers, with relay_run's message size; sets raw
raw_run() {
    "$T" create "$url" "RAW$1x$2" "raw$1x$2.>" >/dev/null
    local out
    out=$("$T" publish "$url" "raw$1x$2.x" "$N" "$size" $((WORKERS * $1)))
    raw=$(sed -n 's/.*: \([0-9]*\) msg\/s/\1/p' <<<"$out")
}

say "== odbox relay -> NATS JetStream vs raw libnats (js_Publish + PubAck), $N events, $ROUNDS rounds"
say "$(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg); nats-server $(nats-server --version | awk '{print $NF}'), file storage"
say "PostgreSQL: $base (throwaway, tests/db defaults), odbox through $BENCH_PG_DRIVER; relay: $WORKERS workers/process, poll 100 ms, batch defaults; raw: as many threads"
for procs in 1 4; do
    relay_rounds "$procs" "raw libnats, $((WORKERS * procs)) threads"
done
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
