#!/usr/bin/env bash
# bench/relay_kafka.sh - events/s from the outbox into Kafka through
# `odbox relay` (1 and 4 relay processes), next to a raw librdkafka
# producer doing the same produces with the same confirms (acks=all,
# idempotent, linger.ms 0, each message waiting for its own delivery
# report) with as many in flight (1 and 4 processes of BENCH_WORKERS
# threads, one producer per process, as the relays have), the same message
# size and keys, and the ratio (goal 0.8).
#
# The cluster is librdkafka's mock cluster (3 brokers, 6 partitions per
# topic), hosted by a process of its own (kafka-relay mock), so neither
# side shares a process with it. Relay and raw rounds alternate, BENCH_ROUNDS
# times each; the figures are the medians, with every round's pair printed,
# since a shared machine's load moves single runs by a factor of 3 or more.
#
# The relay's figure: BENCH_EVENTS events committed first (not timed) into
# an eventlog of the round's own, then from the start of the relay
# processes until every notification is SUCCEEDED in PostgreSQL (one
# session looks every 50 ms): fan-out, claim, produce, delivery report
# and the outcome written, start-up included. The raw figure: from the
# start of its processes to their end (start-up and connection included
# too). The
# ceiling: the same drain by as many processes of `odbox-bench-relay-ceiling`,
# the delivery with `odbox relay`'s settings and a broker that confirms at
# once: what the outbox side alone allows, so relay/ceiling says how much
# of a drain's time the Kafka publishes take.
#
# The relays (and the ceiling) run 4 handling loops (`--loops 4`): a round
# of 200-250 rows waits about 25 ms for its delivery reports from the mock
# cluster (1 ms to produce them), so 2 loops leave the machine idle
# between reports; 4 (`odbox relay`'s default for Kafka) took the median
# at 1 process from 15,414 to 19,258-23,980 events/s.
#
# Usage: bench/relay_kafka.sh
# Environment:
#   BENCH_PG_DRIVER  odbc (default) or libpq: odbox's client of PostgreSQL (bench/lib.sh)
#   ODBOX_BUILDDIR   build directory (default: <repo>/build)
#   BENCH_EVENTS     events per round (default 40000; a multiple of 4 x BENCH_WORKERS)
#   BENCH_WORKERS    publishing threads per relay process (default 8, at most 16)
#   BENCH_LOOPS      handling loops per relay process (default 4)
#   BENCH_ROUNDS     rounds of each kind (default 5)
# Without ODBOX_TEST_PG_DSN it re-runs itself under tests/db/with-servers.sh
# --only pg. Needs a build with librdkafka. Benchmarks are not timed tests:
# the ratio is reported, never a failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
N=${BENCH_EVENTS:-40000}
WORKERS=${BENCH_WORKERS:-8}
LOOPS=${BENCH_LOOPS:-4}
ROUNDS=${BENCH_ROUNDS:-5}
GOAL=0.8

under_pg_servers "$HERE/relay_kafka.sh" "$@"
((WORKERS >= 1 && WORKERS <= 16)) || die "BENCH_WORKERS must be 1..16"
make -C "$BUILDDIR" -s odbox tests/relay/relay-writer tests/relay/kafka-relay bench/odbox-bench-relay-ceiling >/dev/null ||
    die "build failed (configure with librdkafka-dev installed)"
O=$BUILDDIR/odbox W=$BUILDDIR/tests/relay/relay-writer K=$BUILDDIR/tests/relay/kafka-relay
CEILING=$BUILDDIR/bench/odbox-bench-relay-ceiling
[[ -x $K ]] || die "odbox was built without Kafka (install librdkafka-dev, configure --with-kafka)"

tmp=$(mktemp -d /tmp/odbox-bench-kafka.XXXXXX)
base=${ODBOX_TEST_PG_DSN%%\?*}
PGDB=${base##*/}
PSQL=${ODBOX_PG_BINDIR:+$ODBOX_PG_BINDIR/}psql
mock_pid='' logs=()
cleanup() {
    kill_relays
    [[ -z $mock_pid ]] || { kill "$mock_pid" 2>/dev/null; wait "$mock_pid" 2>/dev/null || true; }
    for s in "${logs[@]}"; do
        pgsql "DROP SCHEMA IF EXISTS $s CASCADE; DELETE FROM scheduled_tasks WHERE task_name LIKE '%@$s'" \
            >/dev/null 2>&1 || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

topics=()
for r in $(seq "$ROUNDS"); do for p in 1 4; do topics+=("kb.r${r}p$p" "kb.raw.r${r}p$p"); done; done
"$K" mock "${topics[@]}" >"$tmp/mock" 2>"$tmp/mock.err" &
mock_pid=$!
for _ in $(seq 100); do [[ -s $tmp/mock ]] && break; sleep 0.1; done
boot=$(head -1 "$tmp/mock")
[[ -n $boot ]] || die "the mock cluster did not start: $(cat "$tmp/mock.err")"

# fresh_eventlog NAME: a migrated eventlog NAME holding N events; its DSN in dsn
fresh_eventlog() {
    logs+=("$1")
    dsn=$(pg_db_dsn "${base##*/}" "eventlog=$1")
    "$O" migrate --dsn "$dsn" --migrations "$SRCDIR/migrations" >/dev/null
    "$W" "$dsn" "$N" 100 200
}

# relay_run ROUND PROCS: events/s of PROCS relay processes; sets rate, size
relay_run() {
    local name="r$1p$2" log="kb_$$_r$1p$2" dsn
    fresh_eventlog "$log"
    cat >"$tmp/$name.json" <<EOF
{"shards": [{"group": 0, "member": 0, "primary": "$dsn"}],
 "relays": [{"name": "$name", "kind": "kafka", "event_types": ["RelayProbed"],
             "settings": {"bootstrap_servers": "$boot", "topic": "kb.{handler}"}}]}
EOF
    relay_timed "$tmp/$name.json" "$2" "relay x$2" "$(drained_sql "$log")" pgsql
    local out
    out=$("$K" consume "$boot" "kb.$name" "$N") || die "relay x$2: $out"
    size=$(sed -n 's/.* \([0-9]*\) bytes per body/\1/p' <<<"$out")
    rate=$((N * 1000 / relay_ms))
    drain_rate=$((N * 1000 / $(pgsql "$(drain_ms_sql "$log")")))
}

# ceiling_run ROUND PROCS: events/s of PROCS odbox-bench-relay-ceiling
# processes (the drain with a broker that confirms at once); sets ceil
ceiling_run() {
    local log="kb_$$_c$1p$2" dsn
    fresh_eventlog "$log"
    relay_timed "ceiling:$dsn" "$2" "ceiling x$2" "$(drained_sql "$log")" pgsql
    ceil=$((N * 1000 / relay_ms))
}

# raw_run ROUND PROCS SIZE: PROCS raw producer processes of WORKERS threads,
# N messages in all; sets raw
raw_run() {
    local pids=() t0 t1
    t0=$(now_ms)
    for _ in $(seq "$2"); do
        "$K" raw "$boot" "kb.raw.r$1p$2" $((N / $2)) "$WORKERS" "$3" >>"$tmp/raw.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" || die "raw x$2 failed: $(tail -3 "$tmp/raw.log")"
    t1=$(now_ms)
    raw=$((N * 1000 / (t1 - t0)))
}

say "== odbox relay -> Kafka (librdkafka mock cluster) vs a raw librdkafka producer with the same confirms"
say "$(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg)"
say "librdkafka $(pkg-config --modversion rdkafka 2>/dev/null || echo '?'), mock cluster of 3 brokers in its own process, 6 partitions, acks=all, idempotent, linger.ms 0"
say "PostgreSQL: $base (throwaway, tests/db defaults), odbox through $BENCH_PG_DRIVER; $N events per round (committed 100 per action, 200 model ids); $ROUNDS rounds"
say "relay: odbox relay --workers $WORKERS --loops $LOOPS per process, poll 100 ms, handling batch default; raw: $WORKERS threads per process, one message each in flight"
for procs in 1 4; do
    rates=() drains=() raws=() ceils=()
    for r in $(seq "$ROUNDS"); do
        relay_run "$r" "$procs"
        b0=$(busy_ticks)
        raw_run "$r" "$procs" "$size"
        raw_cpu_us=$(machine_us "$N" "$b0")
        ceiling_run "$r" "$procs"
        rates+=("$rate") drains+=("$drain_rate") raws+=("$raw") ceils+=("$ceil")
        say "  round $r, x$procs: relay $rate events/s (the drain alone $drain_rate), raw $raw msgs/s ($size-byte bodies), ceiling $ceil events/s;" \
            "machine CPU per event: relay $relay_cpu_us us, raw $raw_cpu_us us"
    done
    rm_relay=$(median "${rates[@]}") rm_drain=$(median "${drains[@]}") rm_raw=$(median "${raws[@]}") rm_ceil=$(median "${ceils[@]}")
    ratio=$(ratio "$rm_relay" "$rm_raw") of_ceil=$(ratio "$rm_relay" "$rm_ceil")
    say "relay x$procs ($((WORKERS * procs)) workers): median $rm_relay events/s (${rates[*]}), the drain alone $rm_drain | raw librdkafka, $procs process(es) x $WORKERS threads: median $rm_raw msgs/s (${raws[*]}) | ratio $ratio (goal $GOAL)"
    say "  the same drain with a broker that confirms at once: median $rm_ceil events/s (${ceils[*]}); relay/ceiling $of_ceil"
done
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
