#!/usr/bin/env bash
# bench/delivery.sh - how the in-process delivery performs (issues 14, 19):
#   handling: handling throughput with 1, 2 and 4 worker processes sharing
#            one eventlog (leased claims: FOR UPDATE SKIP LOCKED, claim
#            UPDATE, outcome UPDATE guarded by lease_owner), a no-op and a
#            5 ms handler, on a backlog of notifications already fanned out;
#            next to a raw client doing the same claim work with 1, 2 and 4
#            concurrent connections (odbox/raw ratio);
#   fresh:   the drain (fan-out and handling at once) at the default
#            settings on a fresh eventlog, never analyzed, and the plan of
#            the handling's due read on it;
#   drain:   a backlog of BENCH_EVENTS events, one no-op handler, the
#            fan-out and handling jobs running at once until every
#            success is written (events/s), per batch size and worker
#            count; next to a raw client doing the same database work in
#            the same run (pgbench on PostgreSQL, the mariadb client on
#            MariaDB) and odbox's own rounds one job after the other;
#   latency: actions committed at a steady rate, commit to handler start
#            (p50, p99, max), in one process and across processes;
#   scale:   a fan-out and a handling round on tables holding BENCH_OLD
#            delivered events and SUCCEEDED notifications, against the
#            same rounds on empty tables, with the plans of the reads.
# See bench/README.md.
#
# Usage: bench/delivery.sh
#
# Environment:
#   ODBOX_BUILDDIR          build directory (default: <repo>/build)
#   BENCH_PARTS             any of "handling fresh drain latency scale" (default
#                           "handling fresh", about 3 minutes; the other three take
#                           about 17 minutes more)
#   BENCH_DATABASES         handling, fresh, drain and latency: "pg mariadb" (default); also
#                           mysql, sqlite (no raw client nor plan for them)
#   BENCH_PROCS             handling: worker process counts (default "1 2 4")
#   BENCH_HANDLER_MS        handling: handler durations in ms, 0 = no-op (default "0 5")
#   BENCH_NOOP_EVENTS       handling: backlog for the no-op handler (default 10000)
#   BENCH_SLOW_EVENTS       handling: backlog for a handler of more than 0 ms (default 3000)
#   BENCH_HANDLING_BATCH    handling: notifications per round (default 100, odbox's default)
#   BENCH_HANDLER_THREADS   handling: handler threads per process (default 8, odbox's default)
#   BENCH_FRESH_EVENTS      fresh: backlog (default 10000)
#   BENCH_SCALE_DATABASES   scale: "pg mariadb mysql sqlite" (default)
#   BENCH_EVENTS            drain backlog (default 100000)
#   BENCH_BATCHES           fan-out/handling batch pairs (default "200/100 1000/500 2000/1000")
#   BENCH_WORKERS           handler thread counts (default "8")
#   BENCH_RATES             latency: actions per second (default "200 1000")
#   BENCH_LATENCY_SECONDS   latency: seconds per run (default 10)
#   BENCH_POLL_MS           latency across processes without a wake-up: the poll delay (default 100)
#   BENCH_OLD               scale: old rows per table (default 1000000)
#   BENCH_REPEAT            scale: measured turns per eventlog (default 5)
#   BENCH_FSYNC_SECONDS     seconds per pg_test_fsync test (default 2; 0 skips it)
# Without the DSNs of the databases asked for, the script re-runs itself
# under tests/db/with-servers.sh (throwaway PostgreSQL and MariaDB).
#
# Exit status: non-zero when anything fails to run or a check of the raw
# client's work fails. No figure fails the run (not timed tests).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
BENCH_PARTS=${BENCH_PARTS:-"handling fresh"}
BENCH_PROCS=${BENCH_PROCS:-"1 2 4"}
BENCH_HANDLER_MS=${BENCH_HANDLER_MS:-"0 5"}
BENCH_NOOP_EVENTS=${BENCH_NOOP_EVENTS:-10000}
BENCH_SLOW_EVENTS=${BENCH_SLOW_EVENTS:-3000}
BENCH_HANDLING_BATCH=${BENCH_HANDLING_BATCH:-100}
BENCH_HANDLER_THREADS=${BENCH_HANDLER_THREADS:-8}
BENCH_FRESH_EVENTS=${BENCH_FRESH_EVENTS:-10000}
BENCH_DATABASES=${BENCH_DATABASES:-"pg mariadb"}
BENCH_SCALE_DATABASES=${BENCH_SCALE_DATABASES:-"pg mariadb mysql sqlite"}
BENCH_EVENTS=${BENCH_EVENTS:-100000}
BENCH_BATCHES=${BENCH_BATCHES:-"200/100 1000/500 2000/1000"}
BENCH_WORKERS=${BENCH_WORKERS:-8}
BENCH_RATES=${BENCH_RATES:-"200 1000"}
BENCH_LATENCY_SECONDS=${BENCH_LATENCY_SECONDS:-10}
BENCH_POLL_MS=${BENCH_POLL_MS:-100}
BENCH_OLD=${BENCH_OLD:-1000000}
BENCH_REPEAT=${BENCH_REPEAT:-5}
BENCH_FSYNC_SECONDS=${BENCH_FSYNC_SECONDS:-2}
EVENTLOG=bench_delivery
GOAL_EVS=20000

for v in BENCH_EVENTS BENCH_LATENCY_SECONDS BENCH_POLL_MS BENCH_OLD BENCH_REPEAT BENCH_NOOP_EVENTS \
    BENCH_SLOW_EVENTS BENCH_HANDLING_BATCH BENCH_HANDLER_THREADS BENCH_FRESH_EVENTS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ $BENCH_FSYNC_SECONDS =~ ^[0-9]+$ ]] || die "BENCH_FSYNC_SECONDS must be an integer"
read -ra PARTS <<<"$BENCH_PARTS"
read -ra DBS <<<"$BENCH_DATABASES"
read -ra SDBS <<<"$BENCH_SCALE_DATABASES"
read -ra BATCHES <<<"$BENCH_BATCHES"
read -ra WORKERS <<<"$BENCH_WORKERS"
read -ra RATES <<<"$BENCH_RATES"
read -ra PROCS <<<"$BENCH_PROCS"
read -ra HMS <<<"$BENCH_HANDLER_MS"
for p in "${PARTS[@]}"; do [[ $p =~ ^(handling|fresh|drain|latency|scale)$ ]] || die "BENCH_PARTS: unknown part '$p'"; done
for k in "${PROCS[@]}"; do [[ $k =~ ^[1-9][0-9]*$ ]] || die "BENCH_PROCS: '$k'"; done
for m in "${HMS[@]}"; do [[ $m =~ ^[0-9]+$ ]] || die "BENCH_HANDLER_MS: '$m'"; done
for db in "${DBS[@]}" "${SDBS[@]}"; do
    [[ $db =~ ^(pg|mariadb|mysql|sqlite)$ ]] || die "unknown database '$db' (pg, mariadb, mysql, sqlite)"
done
for b in "${BATCHES[@]}"; do [[ $b =~ ^[1-9][0-9]*/[1-9][0-9]*$ ]] || die "BENCH_BATCHES: '$b' is not F/H"; done
for w in "${WORKERS[@]}"; do [[ $w =~ ^[1-9][0-9]*$ ]] || die "BENCH_WORKERS: '$w'"; done
for r in "${RATES[@]}"; do [[ $r =~ ^[1-9][0-9]*$ ]] || die "BENCH_RATES: '$r'"; done
[[ $BUILDDIR = /* ]] || BUILDDIR=$PWD/$BUILDDIR
has_part() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
USED=()
has_part handling && USED+=("${DBS[@]}")
has_part fresh && USED+=("${DBS[@]}")
has_part drain && USED+=("${DBS[@]}")
has_part latency && USED+=("${DBS[@]}")
has_part scale && USED+=("${SDBS[@]}")
has_db() { [[ " ${USED[*]} " == *" $1 "* || ($1 == mariadb && " ${USED[*]} " == *" mysql "*) ]]; }

# ---- (a) build ---------------------------------------------------------------
BIN=$BUILDDIR/bench/odbox-bench-delivery
LAT=$BUILDDIR/bench/odbox-bench-latency
build_bench bench/odbox-bench-delivery
build_bench bench/odbox-bench-latency

# ---- (b) servers ---------------------------------------------------------------
need_servers=0
has_db pg && [[ -z ${ODBOX_TEST_PG_DSN:-} ]] && need_servers=1
has_db mariadb && [[ -z ${ODBOX_TEST_MARIADB_DSN:-} ]] && need_servers=1
has_db mysql && [[ -z ${ODBOX_TEST_MYSQL_DSN:-} ]] && need_servers=1
if ((need_servers)); then
    [[ -z ${BENCH_UNDER_SERVERS:-} ]] || die "with-servers.sh did not set the DSNs"
    export BENCH_UNDER_SERVERS=1 ODBOX_BUILDDIR=$BUILDDIR
    exec bash "$SRCDIR/tests/db/with-servers.sh" -- bash "$HERE/delivery.sh" "$@"
fi
PGBENCH= SLAP=
has_db pg && pg_clients
has_db mariadb && mariadb_clients
export ODBOX_MIGRATIONS_DIR=${ODBOX_MIGRATIONS_DIR:-$SRCDIR/migrations}

bench_tmp
MYCNF=$TMP/my.cnf # the MariaDB password only in a 0600 file
if has_db mariadb; then
    (
        umask 077
        printf '[client]\nuser=%s\npassword=%s\nhost=%s\nport=%s\n' "$ODBOX_MARIADB_USER" \
            "$ODBOX_MARIADB_PASSWORD" "$ODBOX_MARIADB_HOST" "$ODBOX_MARIADB_PORT" >"$MYCNF"
    )
fi
mysql_() { "$MARIADB" --defaults-file="$MYCNF" --skip-ssl -N -B "$MYDB" -e "$1"; }
SQLITE_DB=$TMP/delivery.db

# The DSN of database $1 (passwords stay in the environment: the programs
# read ODBOX_BENCH_DSN) and the eventlog name it uses.
dsn_of() {
    case $1 in
    pg) printf '%s' "$ODBOX_TEST_PG_DSN" ;;
    mariadb) printf '%s' "$ODBOX_TEST_MARIADB_DSN" ;;
    mysql) printf '%s' "$ODBOX_TEST_MYSQL_DSN" ;;
    sqlite) printf 'sqlite://%s' "$SQLITE_DB" ;;
    esac
}
eventlog_of() { if [[ $1 == mysql ]]; then echo "${EVENTLOG}_my"; else echo "$EVENTLOG"; fi; }
# An odbox benchmark program against database $1; remembers its pid for
# the psqlODBC log cleanup.
obx() {
    local db=$1 prog=$2 rc=0
    shift 2
    ODBOX_BENCH_DSN=$(dsn_of "$db") "$prog" --eventlog "$(eventlog_of "$db")" "$@" &
    ODBC_PIDS+=($!)
    wait $! || rc=$?
    return $rc
}

# ---- (c) machine, fsync rate, durability ---------------------------------------------
report_setup
if has_part drain; then
    say "drain:      batches fan-out/handling $BENCH_BATCHES; handler threads $BENCH_WORKERS; backlog $BENCH_EVENTS events, 1 no-op handler"
fi
if has_part handling; then
    say "handling:   worker processes $BENCH_PROCS; handlers of $BENCH_HANDLER_MS ms (0: no-op), 1 handler; handling batch $BENCH_HANDLING_BATCH; $BENCH_HANDLER_THREADS handler threads per process; backlog $BENCH_NOOP_EVENTS (no-op) / $BENCH_SLOW_EVENTS (slower) notifications"
fi
if has_part fresh; then
    say "fresh:      the drain at default settings (fan-out 200, handling 100, 8 handler threads) of $BENCH_FRESH_EVENTS events on a new eventlog, no ANALYZE"
fi
if has_db pg; then
    say "autovacuum: PostgreSQL $(pgsql "SHOW autovacuum"), naptime $(pgsql "SHOW autovacuum_naptime"), analyze threshold $(pgsql "SHOW autovacuum_analyze_threshold") + $(pgsql "SHOW autovacuum_analyze_scale_factor") x rows"
fi

# ---- (d) handling: worker processes sharing one eventlog (issue 19) ----------------------
HEVENTLOG=bench_handling
now_s() { date +%s.%N; }
dbq() { if [[ $1 == pg ]]; then pgsql "$2"; else mysql_ "$2"; fi; }
num_sum() { awk '{s += $1} END {printf "%.3f\n", s}'; }

# Starts $2 programs of mode $3 on database $1 in the background (the
# rest: their options), each with its output in $TMP/w<i>.out and .err,
# and waits (up to 120 s) until each has printed "ready". Sets WPIDS.
start_workers() { # db k mode args...
    local db=$1 k=$2 mode=$3 i ready waited=0
    shift 3
    WPIDS=()
    rm -f "$TMP/go" "$TMP/stop" "$TMP"/w*.out "$TMP"/w*.err
    for ((i = 1; i <= k; i++)); do
        ODBOX_BENCH_DSN=$(dsn_of "$db") "$BIN" --mode "$mode" --eventlog "$HEVENTLOG" --go "$TMP/go" "$@" \
            >"$TMP/w$i.out" 2>"$TMP/w$i.err" &
        WPIDS+=($!)
        ODBC_PIDS+=($!)
    done
    while :; do
        ready=0
        for ((i = 1; i <= k; i++)); do
            grep -qx ready "$TMP/w$i.out" 2>/dev/null && ready=$((ready + 1))
        done
        ((ready == k)) && return 0
        if ((waited++ > 2400)); then
            touch "$TMP/stop"
            cat "$TMP"/w*.err >&2
            die "$mode: $((k - ready)) of $k processes not ready after 120 s"
        fi
        sleep 0.05
    done
}
wait_workers() {
    local p rc=0
    for p in "${WPIDS[@]}"; do wait "$p" || rc=$?; done
    if ((rc)); then
        cat "$TMP"/w*.err >&2
        die "a worker process failed (exit status $rc)"
    fi
}
# The workers' JSON lines summed up: sets W_OK W_ROUNDS W_EMPTY W_STALE
# W_WARN W_RETRY W_ERR (failed rounds; raw: rounds retried after a 40001)
# W_CPU and W_SECS (the earliest start to the latest
# round with a success).
sum_workers() {
    local f k=${#WPIDS[@]} i start=0 last=0 s l
    W_OK=0 W_ROUNDS=0 W_EMPTY=0 W_STALE=0 W_WARN=0 W_RETRY=0 W_CPU=0 W_ERR=0
    for ((i = 1; i <= k; i++)); do
        f=$TMP/w$i.json
        grep '^{' "$TMP/w$i.out" >"$f" || die "worker $i printed no result"
        W_OK=$((W_OK + $(json_num succeeded "$f")))
        W_ROUNDS=$((W_ROUNDS + $(json_num rounds "$f")))
        W_EMPTY=$((W_EMPTY + $(json_num empty_rounds "$f")))
        W_STALE=$((W_STALE + $(json_num stale "$f")))
        W_WARN=$((W_WARN + $(json_num warnings "$f")))
        W_RETRY=$((W_RETRY + $(json_num retries "$f")))
        W_ERR=$((W_ERR + $(json_num round_errors "$f")))
        W_CPU=$(awk -v a="$W_CPU" -v b="$(json_num cpu_s "$f")" 'BEGIN {printf "%.2f", a + b}')
        s=$(json_num start_ns "$f") l=$(json_num last_ns "$f")
        ((start == 0 || s < start)) && start=$s
        ((l > last)) && last=$l
    done
    W_SECS=$(awk -v a="$start" -v b="$last" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
    if [[ -s $TMP/w1.err ]] || ((W_WARN)); then
        say "   (the workers' stderr:)"
        cat "$TMP"/w*.err | head -10 | sed 's/^/   | /'
    fi
}
# A backlog of $2 PENDING notifications on database $1 (fanned out by
# odbox's fan-out rounds in one process), analyzed.
prepare_backlog() {
    local db=$1 n=$2 nt
    obx "$db" "$BIN" --eventlog "$HEVENTLOG" --mode fanout --events "$n" >"$TMP/f.out"
    nt=$HEVENTLOG.event_notifications
    if [[ $db == pg ]]; then
        pgsql "ANALYZE $HEVENTLOG.events, $nt"
    elif [[ $db == mariadb || $db == mysql ]]; then
        mysql_ "ANALYZE TABLE $HEVENTLOG.events, $nt" >/dev/null
    fi
    [[ $(dbq "$db" "SELECT count(*) FROM $nt WHERE state = 'PENDING'") == "$n" ]] ||
        die "$db: the backlog is not $n PENDING notifications"
}
unfinished() { dbq "$1" "SELECT count(*) FROM $HEVENTLOG.event_notifications WHERE state IN ('PENDING', 'FAILED')"; }
# Waits up to 300 s until no notification of database $1 is PENDING or
# FAILED, taking as little CPU as it can from the workers it times (the
# raw clients' run has no such wait): one session on PostgreSQL
# (wait_sql), a client a poll elsewhere (a MariaDB client's costs 7 ms).
wait_finished() { # db
    local waited=0
    if [[ $1 == pg ]]; then
        pgsql "$(wait_sql "SELECT CASE WHEN EXISTS (SELECT 1 FROM $HEVENTLOG.event_notifications WHERE state IN ('PENDING', 'FAILED')) THEN 0 ELSE 1 END" 1 300)" >/dev/null
        return
    fi
    while (($(unfinished "$1") > 0)); do
        ((waited++ < 3000)) || return 1
        sleep 0.1
    done
}
# odbox: k worker processes, handler of hms ms, backlog n. Sets RATE
# and prints a line.
odbox_handling() { # db hms k n
    local db=$1 hms=$2 k=$3 n=$4 t0 t1 ok poll
    prepare_backlog "$db" "$n"
    start_workers "$db" "$k" handle --reuse --stop "$TMP/stop" --handler-ms "$hms" \
        --handling-batch "$BENCH_HANDLING_BATCH" --workers "$BENCH_HANDLER_THREADS"
    t0=$(now_s)
    touch "$TMP/go"
    if ! wait_finished "$db"; then
        touch "$TMP/stop"
        wait_workers
        die "$db: $(unfinished "$db") notifications not handled after 300 s"
    fi
    t1=$(now_s)
    touch "$TMP/stop"
    wait_workers
    sum_workers
    ok=$(dbq "$db" "SELECT count(*) FROM $HEVENTLOG.event_notifications WHERE state = 'SUCCEEDED'")
    ((ok == n)) || say "   !! $ok of $n notifications SUCCEEDED"
    ((W_OK == n)) || say "   !! the workers counted $W_OK successes for $n notifications (calls of a row twice?)"
    poll=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
    RATE=$(awk -v n="$n" -v s="$W_SECS" 'BEGIN {printf "%.0f", n / s}')
    say "   odbox, $k process(es): $n in $W_SECS s: $RATE/s (the poll saw the end after $poll s); rounds $W_ROUNDS" \
        "(empty $W_EMPTY), stale outcomes $W_STALE, failed rounds $W_ERR (warnings logged $W_WARN, $W_RETRY of them"\
        "40001/deadlock; a failed round waits handling_poll_ms, 1 s); workers' CPU $W_CPU s"
}
# The raw client: k connections doing the same claim work. Sets RATE.
raw_handling() { # db hms k n
    local db=$1 hms=$2 k=$3 n=$4 ok
    prepare_backlog "$db" "$n"
    start_workers "$db" "$k" raw --handler-ms "$hms" --handling-batch "$BENCH_HANDLING_BATCH" \
        --workers "$BENCH_HANDLER_THREADS"
    touch "$TMP/go"
    wait_workers
    sum_workers
    ok=$(dbq "$db" "SELECT count(*) FROM $HEVENTLOG.event_notifications WHERE state = 'SUCCEEDED'")
    ((ok == n)) || say "   !! raw client: $ok of $n notifications SUCCEEDED"
    RATE=$(awk -v n="$ok" -v s="$W_SECS" 'BEGIN {printf "%.0f", n / s}')
    say "   raw,   $k client(s):    $ok in $W_SECS s: $RATE/s; rounds $W_ROUNDS, stale $W_STALE, rounds or outcomes" \
        "retried at once after a 40001: $W_ERR; clients' CPU $W_CPU s"
}

if has_part handling; then
    say
    say "== handling: worker processes sharing eventlog $HEVENTLOG (leased claims), handling batch $BENCH_HANDLING_BATCH," \
        "$BENCH_HANDLER_THREADS handler threads per process"
    say "   odbox: odbox-bench-delivery --mode handle, K processes, the handling only (no fan-out), from a file"
    say "     that starts them all to the last round with a success; the backlog fanned out and ANALYZEd first"
    say "   raw: odbox-bench-delivery --mode raw, K plain ODBC connections (odbox's db layer only), per round the"
    say "     same transaction (the dialect's isolation and claim_begin_sql as odbox sets them), due read (FOR UPDATE"
    say "     SKIP LOCKED), claim UPDATE and outcome UPDATE; for a handler of M ms a sleep of"
    say "     ceil(rows / $BENCH_HANDLER_THREADS) x M ms between claim and outcome (what the handler threads would take)"
    HROWS=()
    for db in "${DBS[@]}"; do
        for hms in "${HMS[@]}"; do
            n=$BENCH_NOOP_EVENTS
            ((hms > 0)) && n=$BENCH_SLOW_EVENTS
            hname="no-op"
            ((hms > 0)) && hname="${hms} ms"
            base_o="" base_r=""
            for k in "${PROCS[@]}"; do
                say "-- $db, $hname handler, $k process(es), $n notifications"
                odbox_handling "$db" "$hms" "$k" "$n"
                ro=$RATE
                raw_handling "$db" "$hms" "$k" "$n"
                rr=$RATE
                [[ -n $base_o ]] || base_o=$ro base_r=$rr
                HROWS+=("$(printf '%-8s %-7s %5s %8s %10s %9s %10s %9s %10s' "$db" "$hname" "$k" "$n" "$ro" \
                    "$(awk -v a="$ro" -v b="$base_o" 'BEGIN {printf "%.2f", a / b}')" "$rr" \
                    "$(awk -v a="$rr" -v b="$base_r" 'BEGIN {printf "%.2f", a / b}')" \
                    "$(awk -v a="$ro" -v b="$rr" 'BEGIN {printf "%.2f", a / b}')")")
            done
        done
    done
    say
    say "== handling results (notifications/s; machine: ${cpu:-unknown}, nproc $(nproc); fsync: $fsync_rate)"
    say "   scale: against 1 process (client) of the same kind; odbox/raw: at the same count"
    printf '%-8s %-7s %5s %8s %10s %9s %10s %9s %10s\n' db handler procs backlog "odbox/s" "scale" "raw/s" \
        "scale" "odbox/raw"
    printf '%s\n' "${HROWS[@]}"
fi

# ---- (e) fresh: the drain at default settings on a new eventlog, and the due read's plan ---------
# A plan's nodes, outermost first ("Limit > LockRows > Index Scan using ...").
plan_shape() { grep '(cost=' | sed -E 's/^ *(-> *)?//; s/ +\(cost=.*//' | paste -sd'>' | sed 's/>/ > /g'; }
# Prints the plans of the handling's due read on eventlog $2 of database
# $1, in a transaction begun as a claim begins it (what --mode due-sql
# prints: the dialect's delivery_isolation_sql before the begin, its
# claim_begin_sql after it), and says whether it is the ordered scan of
# event_notifications_handler_due.
due_plan() { # db eventlog what
    local db=$1 ev=$2 out iso begin sql plan verdict q mode
    out=$(ODBOX_BENCH_DSN=$(dsn_of "$db") "$BIN" --mode due-sql --eventlog "$ev")
    iso=$(awk -F'\t' '$1 == "isolation" {print $2}' <<<"$out")
    begin=$(awk -F'\t' '$1 == "begin" {print $2}' <<<"$out")
    sql=$(awk -F'\t' '$1 == "due" {print $2}' <<<"$out")
    if [[ $db == pg ]]; then
        sql=$(awk '{n = 0; out = ""; for (i = 1; i <= length($0); i++) {c = substr($0, i, 1);
            if (c == "?") {n++; out = out "$" n} else out = out c}; print out}' <<<"$sql")
        say "   the claim's due read as odbox runs it (src/delivery_claim.c; \$1 handler name, \$2 now, \$3 batch):"
        [[ -z $iso ]] || say "     $iso"
        say "     BEGIN"
        [[ -z $begin ]] || say "     $begin"
        say "     $sql"
        # psqlODBC prepares on the server and odbox keeps its statements:
        # after five executions PostgreSQL may use the generic plan
        for mode in force_custom_plan force_generic_plan ""; do
            q=(${iso:+"$iso;"} "BEGIN;" ${begin:+"$begin;"})
            [[ -n $mode ]] || q=("BEGIN;") # for comparison: without them
            plan=$(printf '%s\n' "SET TimeZone = 'UTC';" "${q[@]}" "PREPARE due AS $sql;" \
                "SET LOCAL plan_cache_mode = ${mode:-force_custom_plan};" \
                "EXPLAIN EXECUTE due('bench-1', LOCALTIMESTAMP, 100);" "ROLLBACK;" |
                PGOPTIONS='-c client_min_messages=warning' pg "$PSQL" -X -q -At -v ON_ERROR_STOP=1 -f -)
            verdict="the ordered index scan on event_notifications_handler_due"
            if ! grep -q 'Index Scan using event_notifications_handler_due' <<<"$plan" || grep -q 'Sort' <<<"$plan"; then
                verdict="!! NOT the ordered index scan on event_notifications_handler_due"
            fi
            if [[ -n $mode ]]; then
                say "   plan ($3, plan_cache_mode = $mode): $verdict"
                sed 's/^/     | /' <<<"$plan"
            else
                say "   for comparison, not what odbox runs: without '${begin:-(no claim_begin_sql)}', custom plan:" \
                    "$(plan_shape <<<"$plan")"
            fi
        done
    else
        say "   the claim's due reads as odbox runs them (one per state; ? = 'bench-1', UTC_TIMESTAMP(6), 100), after:"
        [[ -z $iso ]] || say "     $iso"
        say "     START TRANSACTION"
        [[ -z $begin ]] || say "     $begin"
        while IFS= read -r q; do
            q=$(sed "s/handler_name = ?/handler_name = 'bench-1'/; s/<= ?/<= UTC_TIMESTAMP(6)/; s/LIMIT ?/LIMIT 100/" <<<"$q")
            say "     $q"
            plan=$(mysql_ "${iso:+$iso; }START TRANSACTION; ${begin:+$begin; }EXPLAIN $q; COMMIT")
            verdict="an ordered scan of event_notifications_handler_due (no filesort)"
            if ! grep -q 'event_notifications_handler_due' <<<"$plan" || grep -q 'filesort' <<<"$plan"; then
                verdict="!! NOT an ordered scan of event_notifications_handler_due"
            fi
            say "   plan ($3, state = $(sed -n "s/.*AND state = '\([A-Z]*\)'.*/\1/p" <<<"$q")): $verdict"
            sed 's/^/     | /' <<<"$plan"
        done <<<"$sql"
    fi
}
pg_table_stats() { # eventlog
    pgsql "SELECT rpad(s.relname, 20) || ' live ' || s.n_live_tup || ', dead ' || s.n_dead_tup || ', relpages ' || c.relpages
             || ', reltuples ' || c.reltuples || ', last analyze ' || coalesce(s.last_analyze::text, 'never')
             || ', last autoanalyze ' || coalesce(s.last_autoanalyze::text, 'never')
           FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
           WHERE s.schemaname = '$1' AND s.relname IN ('events', 'event_notifications') ORDER BY 1" | sed 's/^/     /'
}
drop_eventlog() { # db eventlog
    if [[ $1 == pg ]]; then pgsql "DROP SCHEMA $2 CASCADE"; else mysql_ "DROP DATABASE $2"; fi
}

if has_part fresh; then
    say
    say "== fresh: the drain at default settings on a new eventlog (never analyzed), $BENCH_FRESH_EVENTS events, 1 no-op handler"
    FROWS=()
    for db in "${DBS[@]}"; do
        ev=bench_fresh_$(date +%s)
        say "-- $db, eventlog $ev"
        obx "$db" "$BIN" --eventlog "$ev" --mode drain --events "$BENCH_FRESH_EVENTS" >"$TMP/d.out"
        sed 's/^/   /' "$TMP/d.out"
        drain=$(sed -n 's/.*: \([0-9]*\) events\/s.*/\1/p' "$TMP/d.out")
        FROWS+=("$(printf '%-8s %10s' "$db" "$drain")")
        if [[ $db == pg ]]; then
            say "   statistics after the drain:"
            pg_table_stats "$ev"
        fi
        if [[ $db == pg || $db == mariadb ]]; then
            # a second new eventlog with the backlog fanned out and not yet handled:
            # what the handling's first rounds plan against
            obx "$db" "$BIN" --eventlog "${ev}_b" --mode fanout --events "$BENCH_FRESH_EVENTS" >/dev/null
            say "   eventlog ${ev}_b: $BENCH_FRESH_EVENTS events fanned out, none handled, never analyzed"
            [[ $db == pg ]] && pg_table_stats "${ev}_b"
            due_plan "$db" "${ev}_b" "backlog of $BENCH_FRESH_EVENTS PENDING, no statistics"
            due_plan "$db" "$ev" "after the drain"
            drop_eventlog "$db" "${ev}_b"
        fi
        drop_eventlog "$db" "$ev"
    done
    say
    say "== fresh results (events/s, drain at default settings on a new eventlog)"
    printf '%-8s %10s\n' db "drain/s"
    printf '%s\n' "${FROWS[@]}"
fi

# ---- (f) drain ---------------------------------------------------------------------------------
NOTIF_COLS="id, event_id, handler_name, namespace, action_id, action_name, action_params, started_date, completion_date, model_id, model_type, event_type, payload, event_date, state, attempts, next_retry_at, created_date, updated_date"
CTX_COLS="e.namespace, e.action_id, e.action_name, e.action_params, e.started_date, e.completion_date, e.model_id, e.model_type, e.event_type, e.payload, e.event_date"
DUE_COLS="id, event_id, handler_name, namespace, action_id, action_name, action_params, started_date, completion_date, model_id, model_type, event_type, payload, event_date, state, attempts, next_retry_at, created_date"

# The raw client's fan-out and handling of one batch each, written to
# $TMP/raw-fanout.sql and $TMP/raw-handling.sql: the work of odbox's
# rounds done by the server alone (no ids to the client and back, no
# handler calls). PostgreSQL: one statement each, like odbox's joined
# fan-out write; the handling returns the due rows as odbox's read does.
raw_scripts_pg() { # fanout-batch handling-batch
    local ev=$EVENTLOG.events nt=$EVENTLOG.event_notifications
    cat >"$TMP/raw-fanout.sql" <<EOF
WITH ev AS (SELECT id FROM $ev WHERE delivered = FALSE AND event_type = 'BenchDelivered' ORDER BY event_date LIMIT $1),
 ins AS (INSERT INTO $nt ($NOTIF_COLS) SELECT gen_random_uuid(), e.id, 'bench-1', $CTX_COLS, 'PENDING', 0, e.event_date, LOCALTIMESTAMP, LOCALTIMESTAMP FROM $ev e JOIN ev ON e.id = ev.id ON CONFLICT DO NOTHING)
UPDATE $ev SET delivered = TRUE WHERE id IN (SELECT id FROM ev);
EOF
    cat >"$TMP/raw-handling.sql" <<EOF
WITH due AS (SELECT $DUE_COLS FROM $nt WHERE state IN ('PENDING', 'FAILED') AND next_retry_at <= LOCALTIMESTAMP ORDER BY next_retry_at LIMIT $2),
 u AS (UPDATE $nt n SET state = 'SUCCEEDED', attempts = n.attempts + 1, updated_date = LOCALTIMESTAMP FROM due WHERE n.id = due.id AND n.state NOT IN ('SUCCEEDED', 'EXPIRED'))
SELECT * FROM due;
EOF
}
# MariaDB: odbox's statements without the ids: the fan-out a transaction
# of INSERT IGNORE ... SELECT and the flip, the handling a SELECT of the
# due rows and an UPDATE of the same rows, in autocommit.
raw_scripts_mariadb() { # fanout-batch handling-batch rounds-fanout rounds-handling
    local ev=$EVENTLOG.events nt=$EVENTLOG.event_notifications i
    for ((i = 0; i < $3; i++)); do
        printf '%s\n' "START TRANSACTION;" \
            "INSERT IGNORE INTO $nt ($NOTIF_COLS) SELECT UUID(), e.id, 'bench-1', $CTX_COLS, 'PENDING', 0, e.event_date, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM $ev e WHERE e.delivered = FALSE AND e.event_type = 'BenchDelivered' ORDER BY e.event_date LIMIT $1;" \
            "UPDATE $ev SET delivered = TRUE WHERE delivered = FALSE AND event_type = 'BenchDelivered' ORDER BY event_date LIMIT $1;" \
            "COMMIT;"
    done >"$TMP/raw-fanout.sql"
    for ((i = 0; i < $4; i++)); do
        printf '%s\n' \
            "SELECT $DUE_COLS FROM $nt WHERE state = 'PENDING' AND next_retry_at <= UTC_TIMESTAMP(6) ORDER BY next_retry_at LIMIT $2;" \
            "UPDATE $nt SET state = 'SUCCEEDED', attempts = attempts + 1, updated_date = UTC_TIMESTAMP(6) WHERE state = 'PENDING' AND next_retry_at <= UTC_TIMESTAMP(6) ORDER BY next_retry_at LIMIT $2;"
    done >"$TMP/raw-handling.sql"
}
# Runs the raw client's fan-out and then its handling on database $1
# (batches $2, $3) over the backlog just written; prints events/s of the
# whole, checks that every event is delivered with one SUCCEEDED row.
raw_drain() {
    local db=$1 fb=$2 hb=$3 nf nh t0 t1 t2 delivered succeeded
    nf=$(((BENCH_EVENTS + fb - 1) / fb))
    nh=$(((BENCH_EVENTS + hb - 1) / hb))
    if [[ $db == pg ]]; then
        raw_scripts_pg "$fb" "$hb"
        t0=$(now_s)
        pg "$PGBENCH" -n -c 1 -t "$nf" -f "$TMP/raw-fanout.sql" >"$TMP/pgb.out" 2>&1 || { cat "$TMP/pgb.out" >&2; die "pgbench failed"; }
        t1=$(now_s)
        pg "$PGBENCH" -n -c 1 -t "$nh" -f "$TMP/raw-handling.sql" >"$TMP/pgb.out" 2>&1 || { cat "$TMP/pgb.out" >&2; die "pgbench failed"; }
        t2=$(now_s)
        delivered=$(pgsql "SELECT count(*) FROM $EVENTLOG.events WHERE delivered")
        succeeded=$(pgsql "SELECT count(*) FROM $EVENTLOG.event_notifications WHERE state = 'SUCCEEDED'")
    else
        raw_scripts_mariadb "$fb" "$hb" "$nf" "$nh"
        t0=$(now_s)
        "$MARIADB" --defaults-file="$MYCNF" --skip-ssl -N -B "$MYDB" <"$TMP/raw-fanout.sql" >/dev/null
        t1=$(now_s)
        "$MARIADB" --defaults-file="$MYCNF" --skip-ssl -N -B "$MYDB" <"$TMP/raw-handling.sql" >/dev/null
        t2=$(now_s)
        delivered=$(mysql_ "SELECT count(*) FROM $EVENTLOG.events WHERE delivered")
        succeeded=$(mysql_ "SELECT count(*) FROM $EVENTLOG.event_notifications WHERE state = 'SUCCEEDED'")
    fi
    ((delivered == BENCH_EVENTS && succeeded == BENCH_EVENTS)) ||
        die "raw client on $db: $delivered events delivered and $succeeded notifications SUCCEEDED, not $BENCH_EVENTS"
    awk -v n="$BENCH_EVENTS" -v a="$t0" -v b="$t1" -v c="$t2" \
        'BEGIN {printf "%.0f %.0f %.0f\n", n / (c - a), n / (b - a), n / (c - b)}'
}

if has_part drain; then
    say
    say "== drain: $BENCH_EVENTS events, 1 no-op handler"
    ROWS=()
    for db in "${DBS[@]}"; do
        for b in "${BATCHES[@]}"; do
            fb=${b%/*} hb=${b#*/}
            for w in "${WORKERS[@]}"; do
                say "-- $db, batches $fb/$hb, $w handler threads"
                obx "$db" "$BIN" --mode drain --events "$BENCH_EVENTS" --batch "$fb" --handling-batch "$hb" --workers "$w" >"$TMP/d.out"
                sed 's/^/   /' "$TMP/d.out"
                drain=$(sed -n 's/.*: \([0-9]*\) events\/s.*/\1/p' "$TMP/d.out")
                obx "$db" "$BIN" --mode rounds --events "$BENCH_EVENTS" --batch "$fb" --handling-batch "$hb" --workers "$w" >"$TMP/r.out"
                sed 's/^/   /' "$TMP/r.out"
                read -r fo ha < <(awk '/fan-out:/ {split($0, a, ": "); f = a[3]} /handling:/ {split($0, a, ": "); h = a[3]}
                    END {sub(/\/s.*/, "", f); sub(/\/s.*/, "", h); print f, h}' "$TMP/r.out")
                seq=$(awk -v f="$fo" -v h="$ha" 'BEGIN {printf "%.0f", 1 / (1 / f + 1 / h)}')
                raw="-" rawf="-" rawh="-" ratio="-"
                if [[ $db == pg || $db == mariadb ]]; then
                    obx "$db" "$BIN" --mode fill --events "$BENCH_EVENTS" >/dev/null
                    read -r raw rawf rawh < <(raw_drain "$db" "$fb" "$hb")
                    ratio=$(awk -v a="$seq" -v b="$raw" 'BEGIN {printf "%.2f", a / b}')
                    say "   raw client: fan-out $rawf events/s, handling $rawh/s: $raw events/s one after the other"
                fi
                ROWS+=("$(printf '%-8s %6s %6s %7s %10s %10s %10s %10s %10s %10s %8s' "$db" "$fb" "$hb" "$w" "$drain" \
                    "$fo" "$ha" "$seq" "$rawf" "$rawh" "$raw")   $ratio")
            done
        done
    done
    say
    say "== drain results (events/s; machine: ${cpu:-unknown}, nproc $(nproc); fsync: $fsync_rate)"
    say "   drain: both jobs at once through the job registry until every success is written"
    say "   odbox f/h/seq: fan-out rounds, then handling rounds, on one thread; seq = the two one after the other"
    say "   raw f/h/seq: the same database work by pgbench / the mariadb client, one after the other"
    printf '%-8s %6s %6s %7s %10s %10s %10s %10s %10s %10s %8s   %s\n' db fanout handl workers drain "odbox f" "odbox h" \
        "odbox seq" "raw f" "raw h" "raw seq" "odbox/raw (seq)"
    printf '%s\n' "${ROWS[@]}"
    best=$(printf '%s\n' "${ROWS[@]}" | awk '{print $5}' | sort -n | tail -1)
    say "goal $GOAL_EVS events/s (drain): best $best: $(awk -v b="$best" -v g=$GOAL_EVS 'BEGIN {print (b >= g ? "met" : "not met")}')"
fi

# ---- (g) latency ---------------------------------------------------------------------------------
if has_part latency; then
    say
    say "== latency: commit to handler start, ${BENCH_LATENCY_SECONDS}s per run"
    for db in "${DBS[@]}"; do
        for r in "${RATES[@]}"; do
            writers=$(((r + 299) / 300)) # one writer commits ~500-1000 actions/s here
            obx "$db" "$LAT" --rate "$r" --seconds "$BENCH_LATENCY_SECONDS" --writers "$writers"
            if [[ $db == pg ]]; then
                obx "$db" "$LAT" --rate "$r" --seconds "$BENCH_LATENCY_SECONDS" --writers "$writers" --cross-process
            fi
            obx "$db" "$LAT" --rate "$r" --seconds "$BENCH_LATENCY_SECONDS" --writers "$writers" --cross-process \
                --no-wakeup --poll-ms "$BENCH_POLL_MS"
        done
    done
fi

# ---- (h) scale ---------------------------------------------------------------------------------
if has_part scale; then
    say
    say "== scale: rounds with $BENCH_OLD old rows per table against empty tables"
    for db in "${SDBS[@]}"; do
        obx "$db" "$BIN" --mode scale --old "$BENCH_OLD" --repeat "$BENCH_REPEAT"
    done
fi
