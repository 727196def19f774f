#!/usr/bin/env bash
# bench/run.sh - single-row INSERT transactions: odbox vs pgbench, same
# statement, same server, same run. See bench/README.md.
#
# Usage: bench/run.sh
#
# Environment:
#   ODBOX_BUILDDIR        build directory (default: <repo>/build)
#   BENCH_SECONDS         seconds per measurement (default 10)
#   BENCH_CLIENTS         client counts (default "1 8")
#   BENCH_TABLE           table name (default bench_insert; dropped and recreated)
#   BENCH_ROUNDS          rounds of all client counts; figures are medians (default 1)
#   BENCH_WARMUP          warm-up seconds per tool before round 1, not reported (default 3)
#   BENCH_FSYNC_SECONDS   seconds per pg_test_fsync test (default 2; 0 skips it)
#   BENCH_QUIET_WAIT      before each run, wait up to this many seconds for the
#                         machine to be idle (< 0.2 CPU busy; default 30, 0 = don't)
#   CC                    compiler (default gcc)
# Without ODBOX_TEST_PG_DSN the script re-runs itself under
# tests/db/with-servers.sh --only pg (a throwaway PostgreSQL).
#
# Exit status: non-zero when anything fails to run. The ratio never fails
# the run (benchmarks are not timed tests); the goal is only reported.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_CLIENTS=${BENCH_CLIENTS:-"1 8"}
BENCH_TABLE=${BENCH_TABLE:-bench_insert}
BENCH_FSYNC_SECONDS=${BENCH_FSYNC_SECONDS:-2}
BENCH_ROUNDS=${BENCH_ROUNDS:-1}
BENCH_WARMUP=${BENCH_WARMUP:-3}
BENCH_QUIET_WAIT=${BENCH_QUIET_WAIT:-30}
GOAL=0.9
# The JSON both sides insert, byte for byte (pgbench binds it as :payload).
PAYLOAD='{"type":"bench.insert","aggregate":"order","version":1,"data":{"sku":"A-1234","qty":3,"note":"benchmark payload"}}'


[[ $BENCH_SECONDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS must be a positive integer"
[[ $BENCH_FSYNC_SECONDS =~ ^[0-9]+$ ]] || die "BENCH_FSYNC_SECONDS must be an integer"
[[ $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
[[ $BENCH_WARMUP =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be an integer"
[[ $BENCH_QUIET_WAIT =~ ^[0-9]+$ ]] || die "BENCH_QUIET_WAIT must be an integer"
read -ra CLIENTS <<<"$BENCH_CLIENTS"
((${#CLIENTS[@]})) || die "BENCH_CLIENTS is empty"
for n in "${CLIENTS[@]}"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "BENCH_CLIENTS must be positive integers, got '$n'"
done
[[ $BENCH_TABLE =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "BENCH_TABLE must be a plain identifier"
[[ $BUILDDIR = /* ]] || BUILDDIR=$PWD/$BUILDDIR

# ---- (a) build -------------------------------------------------------------
BIN=$BUILDDIR/bench/odbox-bench-insert
build_bench bench/odbox-bench-insert

# ---- (b) a server ----------------------------------------------------------------
under_pg_servers "$HERE/run.sh" "$@"
pg_clients

bench_tmp

# ---- (c) the table -------------------------------------------------------------
pgsql "DROP TABLE IF EXISTS $BENCH_TABLE" >/dev/null
pgsql "CREATE TABLE $BENCH_TABLE (id uuid PRIMARY KEY, client bigint NOT NULL,
     payload jsonb NOT NULL, created timestamptz NOT NULL)
     WITH (autovacuum_enabled = off)" >/dev/null

ODBOX_SQL=$("$BIN" --print-sql --table "$BENCH_TABLE")
# pgbench -M prepared turns :client_id and :payload into $1 and $2, exactly
# where psqlODBC puts $1 and $2 for the two '?'.
SCRIPT=$TMP/insert.sql
printf '%s;\n' "$(sed 's/?/:client_id/; s/?/:payload/' <<<"$ODBOX_SQL")" >"$SCRIPT"
grep -q '?' "$SCRIPT" && die "unexpected '?' left in the pgbench script"

# ---- (d) machine, fsync rate, durability -------------------------------------------
has_db() { [[ $1 == pg ]]; }
report_setup

# ---- (e) the runs ------------------------------------------------------------------
# Before every run: empty table and a checkpoint, so each run starts from
# the same state (no checkpoint or full-page-write burst inherited).
reset_table() {
    pgsql "TRUNCATE $BENCH_TABLE" >/dev/null
    pgsql "CHECKPOINT" >/dev/null 2>&1 || say "bench: warning: CHECKPOINT failed (not superuser?)"
}

# Checks the rows one run left: count equals the reported transactions,
# every row carries the same payload, one distinct client id per client.
check_rows() { # label transactions clients
    local got
    got=$(pgsql "SELECT count(*) || ' ' || count(DISTINCT client) || ' ' ||
                      count(*) FILTER (WHERE payload <> '$PAYLOAD'::jsonb) FROM $BENCH_TABLE")
    read -r rows distinct badpayload <<<"$got"
    [[ $rows == "$2" ]] || die "$1: reported $2 transactions but the table has $rows rows"
    [[ $distinct == "$3" ]] || die "$1: expected $3 distinct client ids, found $distinct"
    [[ $badpayload == 0 ]] || die "$1: $badpayload rows with a different payload"
}

# ---- other load on the machine ------------------------------------------------
# This is meant for a quiet machine; on a shared one, other processes take
# CPU from the server and the clients at random. Each run therefore reports
# the CPU that was NOT ours: busy time from /proc/stat (user+nice+system)
# minus the server's (postmaster + live children + reaped children) and this
# script's reaped children (the clients, psql). In CPUs (1.0 = one core).
PG_PM_PID=
if [[ -n ${ODBOX_PG_DATADIR:-} && -r $ODBOX_PG_DATADIR/postmaster.pid ]]; then
    PG_PM_PID=$(head -1 "$ODBOX_PG_DATADIR/postmaster.pid")
fi
server_ticks() {
    local t=0 c
    if [[ -n $PG_PM_PID ]]; then
        t=$(proc_ticks "$PG_PM_PID" 1)
        for c in $(pgrep -P "$PG_PM_PID" || true); do
            t=$((t + $(proc_ticks "$c")))
        done
    fi
    echo "$t"
}
HZ=$(getconf CLK_TCK)
declare -A OTHER # "clients:round:tool" -> CPUs used by other processes
declare -A CLI_US SRV_US # "clients:round:tool" -> client / server CPU per transaction, us
# WAL flushes (pg_stat_wal, cumulative): count, time in ms (0 unless
# track_wal_io_timing is on), bytes.
wal_stats() { pgsql "SELECT wal_sync || ' ' || wal_sync_time || ' ' || wal_bytes FROM pg_stat_wal"; }
declare -A WAL # "clients:round:tool" -> text
measure_start() {
    read -r M_SYNC M_SYNC_MS M_WAL_BYTES <<<"$(wal_stats)"
    M_BUSY=$(busy_ticks) M_CLI=$(client_ticks) M_SRV=$(server_ticks) M_T0=$(date +%s.%N)
}
# Right after the client exited: its CPU, without the psql calls that follow.
client_done() { M_CLI_END=$(client_ticks); }
measure_end() { # key transactions
    local busy cli srv own t1 sync sync_ms wal_bytes
    busy=$(busy_ticks) cli=$(client_ticks) srv=$(server_ticks) t1=$(date +%s.%N)
    own=$((cli - M_CLI + srv - M_SRV))
    CLI_US[$1]=$(awk -v t=$((M_CLI_END - M_CLI)) -v hz="$HZ" -v tx="$2" 'BEGIN {printf "%.1f", (tx > 0 ? t * 1e6 / hz / tx : 0)}')
    if [[ -n $PG_PM_PID ]]; then
        SRV_US[$1]=$(awk -v t=$((srv - M_SRV)) -v hz="$HZ" -v tx="$2" 'BEGIN {printf "%.1f", (tx > 0 ? t * 1e6 / hz / tx : 0)}')
    else
        SRV_US[$1]=n/a
    fi
    read -r sync sync_ms wal_bytes <<<"$(wal_stats)"
    WAL[$1]=$(awk -v n=$((sync - M_SYNC)) -v ms="$(awk -v a="$sync_ms" -v b="$M_SYNC_MS" 'BEGIN {print a - b}')" \
        -v by=$((wal_bytes - M_WAL_BYTES)) -v tx="$2" -v timing="$TRACK_WAL_IO_TIMING" 'BEGIN {
            printf "%.2f WAL fsyncs/tx", (tx > 0 ? n / tx : 0)
            if (timing == "on" && n > 0) printf ", %.0f us/fsync", 1000 * ms / n
            printf ", %.0f WAL bytes/tx", (tx > 0 ? by / tx : 0) }')
    if [[ -n $PG_PM_PID ]]; then
        OTHER[$1]=$(awk -v b=$((busy - M_BUSY)) -v o="$own" -v hz="$HZ" -v t0="$M_T0" -v t1="$t1" \
            'BEGIN {x = (b - o) / hz / (t1 - t0); printf "%.2f", (x < 0 ? 0 : x)}')
    else
        OTHER[$1]=n/a
    fi
}
# Before a run: wait up to BENCH_QUIET_WAIT seconds for a second in which
# less than 0.2 CPU is busy, so a burst of other work can pass.

# Results per run, keyed "clients:round".
declare -A PGB_TPS PGB_LAT PGB_TX OBX_TPS OBX_P50 OBX_P99 OBX_AVG OBX_TX

run_pgbench() { # clients round seconds [quiet]
    local n=$1 k=$1:$2 secs=$3 out=$TMP/pgbench.$1.$2.out failed
    reset_table
    [[ -n ${4:-} ]] || wait_quiet
    [[ -n ${4:-} ]] || say "-- round $2: pgbench, $n client(s), ${secs}s"
    measure_start
    if ! pg "$PGBENCH" -n -M prepared -c "$n" -j "$n" -T "$secs" -f "$SCRIPT" \
        -D "payload=$PAYLOAD" >"$out" 2>&1; then
        cat "$out" >&2
        die "pgbench failed"
    fi
    client_done
    PGB_TPS[$k]=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out" | tail -1)
    PGB_LAT[$k]=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$out")
    PGB_TX[$k]=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
    [[ -n ${PGB_TPS[$k]} && -n ${PGB_TX[$k]} ]] || { cat "$out" >&2; die "cannot parse pgbench output"; }
    [[ -z $failed || $failed == 0 ]] || { cat "$out" >&2; die "pgbench: $failed failed transactions"; }
    check_rows "pgbench -c $n" "${PGB_TX[$k]}" "$n"
    measure_end "$k:pgbench" "${PGB_TX[$k]}"
    [[ -n ${4:-} ]] ||
        say "   tps ${PGB_TPS[$k]}, latency avg ${PGB_LAT[$k]:-?} ms, ${PGB_TX[$k]} transactions" \
            "| CPU/tx: client ${CLI_US[$k:pgbench]} us, server ${SRV_US[$k:pgbench]} us" \
            "| ${WAL[$k:pgbench]} | other load ${OTHER[$k:pgbench]} CPU"
}

run_odbox() { # clients round seconds [quiet]
    local n=$1 k=$1:$2 secs=$3 out=$TMP/odbox.$1.$2.json pid rc=0 f
    reset_table
    [[ -n ${4:-} ]] || wait_quiet
    [[ -n ${4:-} ]] || say "-- round $2: odbox-bench-insert, $n client(s), ${secs}s"
    measure_start
    # DSN from the environment (ODBOX_TEST_PG_DSN): not on the command line.
    "$BIN" --clients "$n" --seconds "$secs" --table "$BENCH_TABLE" \
        --payload "$PAYLOAD" --json >"$out" &
    pid=$!
    ODBC_PIDS+=("$pid")
    wait "$pid" || rc=$?
    client_done
    ((rc == 0)) || die "odbox-bench-insert failed (exit $rc)"
    f=$(for key in tps p50 p99 avg transactions cpu_us_per_transaction; do json_num "$key" "$out"; done | paste -s) ||
        die "cannot parse odbox-bench-insert output"
    [[ $(wc -w <<<"$f") == 6 ]] || die "cannot parse odbox-bench-insert output: $(cat "$out")"
    local cpu
    read -r "OBX_TPS[$k]" "OBX_P50[$k]" "OBX_P99[$k]" "OBX_AVG[$k]" "OBX_TX[$k]" cpu <<<"$f"
    check_rows "odbox -c $n" "${OBX_TX[$k]}" "$n"
    measure_end "$k:odbox" "${OBX_TX[$k]}"
    # Its own figure (getrusage over the measured window): the outside one
    # would also charge it the driver loading and N logins before the clock
    # starts. pgbench's outside figure includes its logins: ~0.2 us/tx.
    CLI_US[$k:odbox]=$cpu
    [[ -n ${4:-} ]] ||
        say "   tps ${OBX_TPS[$k]}, latency avg ${OBX_AVG[$k]} p50 ${OBX_P50[$k]} p99 ${OBX_P99[$k]} ms," \
            "${OBX_TX[$k]} transactions | CPU/tx: client ${CLI_US[$k:odbox]} us, server ${SRV_US[$k:odbox]} us" \
            "| ${WAL[$k:odbox]} | other load ${OTHER[$k:odbox]} CPU"
}

# Steal time is CPU the hypervisor gave to someone else: on a shared VM it
# is the first suspect when two runs of the same thing disagree.

# Median of the values of array $1 for clients $2 over all rounds (keys
# "clients:round", or "clients:round:$3" when $3 is given).
median() {
    local -n arr=$1
    local r vals=()
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do vals+=("${arr[$2:$r${3:+:$3}]:-0}"); done
    printf '%s\n' "${vals[@]}" | sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

say
say "== runs (1 row per transaction, autocommit, ${BENCH_SECONDS}s each, $BENCH_ROUNDS round(s))"
say "   odbox:   $ODBOX_SQL"
say "   pgbench: $(cat "$SCRIPT")"
say "   payload: $PAYLOAD"
say "   before every run: TRUNCATE + CHECKPOINT; autovacuum is off for the table"
say "   load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the figures)"
maxc=$(printf '%s\n' "${CLIENTS[@]}" | sort -n | tail -1)
if ((BENCH_WARMUP > 0)); then
    # Creates the WAL segments a fresh cluster lacks and warms both clients'
    # code and the server, so the first measured run is not penalised.
    say "-- warm-up: pgbench and odbox-bench-insert, $maxc client(s), ${BENCH_WARMUP}s each (not reported)"
    run_pgbench "$maxc" 0 "$BENCH_WARMUP" quiet
    run_odbox "$maxc" 0 "$BENCH_WARMUP" quiet
fi
declare -A RATIO
read -r ticks0 steal0 < <(cpu_ticks)
for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    i=0
    for n in "${CLIENTS[@]}"; do
        # Alternate who goes first: pgbench for the 1st client count of
        # round 1, odbox for the 2nd, and the other way round next round.
        if (((i + r) % 2 == 1)); then
            run_pgbench "$n" "$r" "$BENCH_SECONDS"
            run_odbox "$n" "$r" "$BENCH_SECONDS"
        else
            run_odbox "$n" "$r" "$BENCH_SECONDS"
            run_pgbench "$n" "$r" "$BENCH_SECONDS"
        fi
        # The pair ran back to back: their ratio is the least noisy figure.
        RATIO[$n:$r]=$(awk -v a="${OBX_TPS[$n:$r]}" -v b="${PGB_TPS[$n:$r]}" \
            'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
        say "   => round $r, $n client(s): odbox/pgbench = ${RATIO[$n:$r]}"
        i=$((i + 1))
    done
done
read -r ticks1 steal1 < <(cpu_ticks)
steal_pct=$(awk -v t=$((ticks1 - ticks0)) -v s=$((steal1 - steal0)) 'BEGIN {printf "%.1f", (t > 0 ? 100 * s / t : 0)}')
pgsql "TRUNCATE $BENCH_TABLE" >/dev/null

# ---- (f) the table --------------------------------------------------------------------
say
say "== results: PostgreSQL $PG_VERSION, ${BENCH_SECONDS}s per run, 1 row per transaction (batch size 1), autocommit"
say "   workers: pgbench -c N -j N (N connections, N threads, -M prepared);"
say "            odbox-bench-insert N threads, pool size N, one prepared statement each"
say "   machine: ${cpu:-unknown}, nproc $(nproc); fsync: ${fsync_rate:-not measured}; fsync=$(pgsql "SHOW fsync"), synchronous_commit=$(pgsql "SHOW synchronous_commit"); CPU steal during the runs: ${steal_pct}%"
((BENCH_ROUNDS == 1)) ||
    say "   $BENCH_ROUNDS rounds: tps and latencies are medians; odbox/pgbench is the median of the per-round ratios (range: min-max)"
say "   latency: pgb avg = pgbench's average; odbox avg/p50/p99 from its per-transaction histogram"
say "   cpu/tx: client CPU (user+sys) per transaction of pgbench and of odbox-bench-insert"
say "   other load: the most CPU other processes used during one of the runs (1.0 = a core)"
printf '%7s %7s %11s %11s %13s %11s %9s %9s %9s %9s %10s %10s %10s\n' clients rows/tx "pgbench tps" "odbox tps" \
    "odbox/pgbench" "range" "pgb avg" "odbox avg" "odbox p50" "odbox p99" "pgb cpu/tx" "obx cpu/tx" "other load"
met=1 noisy=0
for n in "${CLIENTS[@]}"; do
    ptps=$(median PGB_TPS "$n") otps=$(median OBX_TPS "$n")
    ratio=$(median RATIO "$n")
    range=$(for ((r = 1; r <= BENCH_ROUNDS; r++)); do echo "${RATIO[$n:$r]}"; done | sort -g |
        awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.2f-%.2f", lo, hi}')
    other=$(for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        echo "${OTHER[$n:$r:pgbench]}"
        echo "${OTHER[$n:$r:odbox]}"
    done | sort -g | tail -1)
    awk -v r="$ratio" -v g="$GOAL" 'BEGIN {exit !(r >= g)}' || met=0
    if [[ $other != n/a ]] && awk -v x="$other" 'BEGIN {exit !(x >= 0.2)}'; then noisy=1; fi
    printf '%7s %7s %11.1f %11.1f %13.3f %11s %7.3fms %7.3fms %7.3fms %7.3fms %8.1fus %8.1fus %10s\n' \
        "$n" 1 "$ptps" "$otps" "$ratio" "$range" "$(median PGB_LAT "$n")" "$(median OBX_AVG "$n")" \
        "$(median OBX_P50 "$n")" "$(median OBX_P99 "$n")" "$(median CLI_US "$n" pgbench)" \
        "$(median CLI_US "$n" odbox)" "$other"
done
((noisy == 0)) ||
    say "warning: other processes used >= 0.2 CPU during some runs: re-run on a quiet machine (or with BENCH_ROUNDS=3)"
if ((met)); then
    say "goal $GOAL: met (odbox/pgbench >= $GOAL at every client count)"
else
    say "goal $GOAL: not met (odbox/pgbench < $GOAL at some client count)"
fi
