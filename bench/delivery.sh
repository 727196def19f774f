#!/usr/bin/env bash
# bench/delivery.sh - how the in-process delivery performs (issue 14):
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
#   BENCH_PARTS             "drain latency scale" (default: all three)
#   BENCH_DATABASES         drain and latency: "pg mariadb" (default); also mysql, sqlite
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
BENCH_PARTS=${BENCH_PARTS:-"drain latency scale"}
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

for v in BENCH_EVENTS BENCH_LATENCY_SECONDS BENCH_POLL_MS BENCH_OLD BENCH_REPEAT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ $BENCH_FSYNC_SECONDS =~ ^[0-9]+$ ]] || die "BENCH_FSYNC_SECONDS must be an integer"
read -ra PARTS <<<"$BENCH_PARTS"
read -ra DBS <<<"$BENCH_DATABASES"
read -ra SDBS <<<"$BENCH_SCALE_DATABASES"
read -ra BATCHES <<<"$BENCH_BATCHES"
read -ra WORKERS <<<"$BENCH_WORKERS"
read -ra RATES <<<"$BENCH_RATES"
for p in "${PARTS[@]}"; do [[ $p =~ ^(drain|latency|scale)$ ]] || die "BENCH_PARTS: unknown part '$p'"; done
for db in "${DBS[@]}" "${SDBS[@]}"; do
    [[ $db =~ ^(pg|mariadb|mysql|sqlite)$ ]] || die "unknown database '$db' (pg, mariadb, mysql, sqlite)"
done
for b in "${BATCHES[@]}"; do [[ $b =~ ^[1-9][0-9]*/[1-9][0-9]*$ ]] || die "BENCH_BATCHES: '$b' is not F/H"; done
for w in "${WORKERS[@]}"; do [[ $w =~ ^[1-9][0-9]*$ ]] || die "BENCH_WORKERS: '$w'"; done
for r in "${RATES[@]}"; do [[ $r =~ ^[1-9][0-9]*$ ]] || die "BENCH_RATES: '$r'"; done
[[ $BUILDDIR = /* ]] || BUILDDIR=$PWD/$BUILDDIR
has_part() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
USED=()
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
say "batches:    fan-out/handling $BENCH_BATCHES; handler threads $BENCH_WORKERS; backlog $BENCH_EVENTS events, 1 no-op handler"

# ---- (d) drain ---------------------------------------------------------------------------------
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
now_s() { date +%s.%N; }
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

# ---- (e) latency ---------------------------------------------------------------------------------
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

# ---- (f) scale ---------------------------------------------------------------------------------
if has_part scale; then
    say
    say "== scale: rounds with $BENCH_OLD old rows per table against empty tables"
    for db in "${SDBS[@]}"; do
        obx "$db" "$BIN" --mode scale --old "$BENCH_OLD" --repeat "$BENCH_REPEAT"
    done
fi
