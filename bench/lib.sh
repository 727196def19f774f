# shellcheck shell=bash
# bench/lib.sh - helpers the benchmark scripts share (sourced, not run).
# Needs BUILDDIR; wait_quiet also HZ and BENCH_QUIET_WAIT; fsync_report also
# PG_TEST_FSYNC, BENCH_FSYNC_SECONDS and TMP; pg and pgsql the ODBOX_PG_*
# variables, PGDB and PSQL.

die() { echo "bench: $*" >&2; exit 1; }
say() { printf '%s\n' "$*"; }

# Builds a benchmark program through the build tree's Makefile (make knows
# its sources, flags and what is stale). $1: the program's path relative
# to BUILDDIR, e.g. bench/odbox-bench-insert.
build_bench() {
    [[ -f $BUILDDIR/Makefile ]] ||
        die "no build directory at $BUILDDIR (configure first, or set ODBOX_BUILDDIR)"
    make -C "$BUILDDIR" -s -j"$(nproc)" "$1" >&2 || die "building $1 failed"
}

# A private TMP and the ODBC client processes run (ODBC_PIDS), both
# cleaned up at exit: psqlODBC (CommLog=1 in Debian's odbcinst.ini) leaves
# one log per process, /tmp/psqlodbc_<program>_<user><pid>.log, where
# <program> is sometimes garbled or empty (then without the '_'). Ours only,
# matched by user+pid.
bench_tmp() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/odbox-bench.XXXXXX")
    ODBC_PIDS=()
    trap bench_cleanup EXIT
}
bench_cleanup() {
    local p me
    split_cpus_restore
    me=$(id -un)
    for p in "${ODBC_PIDS[@]}"; do
        rm -f /tmp/psqlodbc_*"$me$p".log
    done
    rm -rf "$TMP"
}

# The CPU's model name, and the line every benchmark starts its figures
# with (what follows the model is the caller's).
cpu_model() { sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1; }
machine_line() { echo "machine: $(nproc --all) CPUs, $(cpu_model)"; }

# under_pg_servers SCRIPT ARGS...: without ODBOX_TEST_PG_DSN, runs SCRIPT
# again under tests/db/with-servers.sh --only pg (a throwaway PostgreSQL;
# BENCH_UNDER_SERVERS says so); with it, returns. Needs BUILDDIR, SRCDIR.
under_pg_servers() {
    [[ -z ${ODBOX_TEST_PG_DSN:-} ]] || return 0
    [[ -z ${BENCH_UNDER_SERVERS:-} ]] || die "with-servers.sh did not set ODBOX_TEST_PG_DSN"
    export BENCH_UNDER_SERVERS=1 ODBOX_BUILDDIR=$BUILDDIR
    exec bash "$SRCDIR/tests/db/with-servers.sh" --only pg -- bash "$@"
}

# BENCH_SPLIT_CPUS=1: the tests/db servers (PostgreSQL's postmaster and
# its processes, mariadbd) on CPU 0, and this script with every client it
# starts on the other CPUs, as when clients and database run on machines
# of their own; with 0 (the default) all share every CPU. The servers get
# every CPU back at exit (split_cpus_restore, from bench_cleanup).
split_cpus() {
    [[ ${BENCH_SPLIT_CPUS:-0} == 1 ]] || return 0
    (($(nproc --all) >= 2)) || die "BENCH_SPLIT_CPUS=1 needs 2 CPUs or more"
    [[ -n ${ODBOX_PG_DATADIR:-} || -n ${ODBOX_MARIADB_SOCKET:-} ]] ||
        die "BENCH_SPLIT_CPUS=1 pins the servers of tests/db/with-servers.sh only (ODBOX_PG_DATADIR, ODBOX_MARIADB_SOCKET)"
    split_cpus_servers 0 || die "could not pin the servers to CPU 0 (taskset)"
    taskset -p -c "1-$(($(nproc --all) - 1))" $$ >/dev/null || die "could not pin the clients (taskset)"
    SPLIT_CPUS=1
}
split_cpus_servers() { # cpu list: every server process (and thread) onto it
    local f p pids=()
    f=${ODBOX_PG_DATADIR:+$ODBOX_PG_DATADIR/postmaster.pid}
    [[ -n $f && -r $f ]] && pids+=("$(head -1 "$f")") && mapfile -t -O ${#pids[@]} pids < <(pgrep -P "${pids[0]}")
    f=${ODBOX_MARIADB_SOCKET:+$(dirname "$ODBOX_MARIADB_SOCKET")/mariadbd.pid}
    [[ -n $f && -r $f ]] && pids+=("$(cat "$f")")
    ((${#pids[@]})) || return 1
    for p in "${pids[@]}"; do taskset -a -p -c "$1" "$p" >/dev/null 2>&1 || true; done
}
split_cpus_restore() {
    [[ ${SPLIT_CPUS:-0} == 1 ]] || return 0
    SPLIT_CPUS=0
    split_cpus_servers "0-$(($(nproc --all) - 1))" || true
}
cpus_line() { # what BENCH_SPLIT_CPUS chose, for the figures' header
    if [[ ${SPLIT_CPUS:-0} == 1 ]]; then
        local last=$(($(nproc --all) - 1))
        echo "CPUs: servers on CPU 0, clients on CPU 1$( ((last == 1)) || echo "-$last") (BENCH_SPLIT_CPUS=1)"
    else
        echo "CPUs: servers and clients share all $(nproc --all) (BENCH_SPLIT_CPUS=0)"
    fi
}

# The PostgreSQL password only in the environment of each client command,
# never on a command line or printed.
pg() { PGPASSWORD=$ODBOX_PG_PASSWORD "$@" -h "$ODBOX_PG_HOST" -p "$ODBOX_PG_PORT" -U "$ODBOX_PG_USER" "$PGDB"; }
pgsql() { PGOPTIONS='-c client_min_messages=warning' pg "$PSQL" -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }

# The PostgreSQL server of the ODBOX_PG_* variables (tests/db/with-servers.sh
# exports them) and its clients: sets PGDB, PSQL and PGBENCH.
pg_clients() {
    local v b
    for v in ODBOX_PG_HOST ODBOX_PG_PORT ODBOX_PG_USER ODBOX_PG_PASSWORD ODBOX_PG_BINDIR; do
        [[ -n ${!v:-} ]] || die "$v is not set (run under tests/db/with-servers.sh or export it)"
    done
    PGDB=${ODBOX_TEST_PG_DSN##*/}
    PGDB=${PGDB%%\?*}
    [[ -n $PGDB ]] || die "cannot read the database name from ODBOX_TEST_PG_DSN"
    PSQL=$ODBOX_PG_BINDIR/psql
    PGBENCH=$ODBOX_PG_BINDIR/pgbench
    for b in "$PSQL" "$PGBENCH"; do [[ -x $b ]] || die "$b not found"; done
}
# The same for MariaDB (ODBOX_MARIADB_*): sets MYDB and MARIADB.
mariadb_clients() {
    local v
    for v in ODBOX_MARIADB_HOST ODBOX_MARIADB_PORT ODBOX_MARIADB_USER ODBOX_MARIADB_PASSWORD; do
        [[ -n ${!v:-} ]] || die "$v is not set (run under tests/db/with-servers.sh or export it)"
    done
    MYDB=${ODBOX_TEST_MARIADB_DSN##*/}
    MYDB=${MYDB%%\?*}
    [[ -n $MYDB ]] || die "cannot read the database name from ODBOX_TEST_MARIADB_DSN"
    MARIADB=$(command -v mariadb || command -v mysql) || die "mariadb client not found"
}

busy_ticks() { awk '/^cpu / {print $2 + $3 + $4}' /proc/stat; }
client_ticks() { sed 's/^.*) //' "/proc/$$/stat" | awk '{print $14 + $15}'; } # reaped children
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9}' /proc/stat; }
proc_ticks() { # pid [with-children]: utime+stime (+cutime+cstime)
    [[ -n $1 && -r /proc/$1/stat ]] || { echo 0; return; }
    sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null |
        awk -v c="${2:-}" '{print $12 + $13 + (c ? $14 + $15 : 0)}' || echo 0
}

# pg_test_fsync's first block ("using one 8kB write"), run on a test file
# in $1 for BENCH_FSYNC_SECONDS seconds (TMP holds its output): a line per
# sync method, the one named $2 marked "<- $3". Sets FSYNC_RATE to that
# method's rate ("not measured" if pg_test_fsync did not list it).
fsync_report() { # dir method label
    local testfile=$1/odbox-bench-fsync.$$ lines line mark
    FSYNC_RATE="not measured"
    if ! "$PG_TEST_FSYNC" -s "$BENCH_FSYNC_SECONDS" -f "$testfile" >"$TMP/fsync.out" 2>&1; then
        rm -f "$testfile"
        cat "$TMP/fsync.out" >&2
        die "pg_test_fsync failed"
    fi
    rm -f "$testfile"
    lines=$(awk '/using one 8kB write/ {on=1; next} on && /^Compare|^$/ && n {exit}
         on && /ops\/sec|n\/a/ {n++; sub(/^[ \t]+/, ""); print}' "$TMP/fsync.out")
    [[ -n $lines ]] || { cat "$TMP/fsync.out" >&2; die "cannot parse pg_test_fsync output"; }
    while IFS= read -r line; do
        mark=""
        if [[ ${line%% *} == "$2" ]]; then
            mark="   <- $3"
            FSYNC_RATE="$2 $(awk '{print $2}' <<<"$line") ops/sec"
        fi
        say "  $line$mark"
    done <<<"$lines"
}

now_ms() { date +%s%3N; }

# psql_on DB SQL: SQL's rows on database DB of the tests/db PostgreSQL.
psql_on() {
    PGPASSWORD=$ODBOX_PG_PASSWORD PGOPTIONS='-c client_min_messages=warning' \
        "${ODBOX_PG_BINDIR:+$ODBOX_PG_BINDIR/}psql" -X -q -At -v ON_ERROR_STOP=1 -h "$ODBOX_PG_HOST" \
        -p "$ODBOX_PG_PORT" -U "$ODBOX_PG_USER" -d "$1" -c "$2"
}

# machine_us N T0: the whole machine's CPU (user + system, every core)
# since busy_ticks printed T0, in microseconds per event of N: on a
# machine whose cores the database, the broker and the relays share, a
# run that keeps them busy cannot go faster than cores / that.
machine_us() { echo $((($(busy_ticks) - $2) * 1000000 / $(getconf CLK_TCK) / $1)); }

# drained_sql SCHEMA: SQL that prints 0 while an event of the eventlog
# SCHEMA is not fanned out or a notification is PENDING or FAILED (claimed
# rows are PENDING), then the count of SUCCEEDED notifications. The test
# reads the undelivered and the due index, and the count runs once, at the
# end: a count every 100 ms took 10-16 ms of the database's CPU each time
# from the run it measured.
drained_sql() {
    echo "SELECT CASE WHEN EXISTS (SELECT 1 FROM $1.events WHERE delivered = FALSE)" \
        "OR EXISTS (SELECT 1 FROM $1.event_notifications WHERE state IN ('PENDING', 'FAILED'))" \
        "THEN 0 ELSE (SELECT count(*) FROM $1.event_notifications WHERE state = 'SUCCEEDED') END"
}

# drain_ms_sql SCHEMA: SQL that prints how long the drain of the eventlog
# SCHEMA took in the database's time, in ms: from its first notification
# (the first fan-out round) to its last outcome. The relay processes'
# start (connections, LISTEN, the broker's connection), which relay_ms
# includes, comes before it, as a raw publisher's connection comes
# before its clock starts.
drain_ms_sql() {
    echo "SELECT GREATEST(1, CAST(1000 * EXTRACT(EPOCH FROM max(updated_date) - min(created_date)) AS BIGINT))" \
        "FROM $1.event_notifications"
}

# wait_sql QUERY N SECONDS: SQL for one database session that runs QUERY
# every 50 ms until it returns N or more, and fails after SECONDS. Each
# run of QUERY sees what committed before it (READ COMMITTED takes a
# snapshot per statement, in a DO block too). Each poll ends with a
# COMMIT: the DO statement's own snapshot, held otherwise until its end,
# kept the server's oldest xmin at the run's start, so no row version the
# run replaced could be pruned and every later index read of the run
# stepped over all of them (measured: the fan-out's read of the next
# events cost 20 us per event instead of 2). A poll by a psql of its own
# cost 46 ms of the machine's CPU (psql's start, a SCRAM login on both
# ends, a new backend): at 10 polls a second about a quarter of a 2-core
# machine, taken from the run it timed.
wait_sql() {
    echo "DO \$\$ DECLARE n BIGINT; t0 TIMESTAMPTZ := clock_timestamp(); BEGIN LOOP n := ($1); EXIT WHEN n >= $2;" \
        "IF clock_timestamp() > t0 + INTERVAL '$3 seconds' THEN RAISE EXCEPTION '% of % after % s', n, $2, $3; END IF;" \
        "PERFORM pg_sleep(0.05); COMMIT; END LOOP; END \$\$"
}

# relay_timed CONFIG PROCS WHAT QUERY RUN...: the relay benchmarks' timing.
# Starts PROCS `$O relay --config CONFIG` processes of WORKERS workers and,
# when LOOPS is set, LOOPS handling loops (or,
# with CONFIG "ceiling:DSN", odbox-bench-relay-ceiling processes on DSN:
# the same delivery with a broker that confirms at once; CEILING names the
# program), waits in one database session (the command RUN... given the
# SQL of wait_sql) until QUERY returns N or more (the SUCCEEDED rows, by
# drained_sql; WHAT names the run in a failure after 600 s), then stops
# them with SIGTERM (a clean stop, else die). Sets relay_ms: from their
# start to the end of that wait, and relay_cpu_us, machine_us over it.
# relay_pids holds them while they run, for a script's exit trap
# (kill_relays).
relay_pids=()
kill_relays() { ((${#relay_pids[@]} == 0)) || kill -9 "${relay_pids[@]}" 2>/dev/null || true; }
relay_timed() {
    local cfg=$1 procs=$2 what=$3 query=$4 t0 b0
    shift 4
    b0=$(busy_ticks)
    t0=$(now_ms)
    for _ in $(seq "$procs"); do
        if [[ $cfg == ceiling:* ]]; then
            "$CEILING" "${cfg#ceiling:}" ceiling "$WORKERS" 100 ${LOOPS:+"$LOOPS"} >>"$tmp/relay.log" 2>&1 &
        else
            "$O" relay --config "$cfg" --poll-ms 100 --workers "$WORKERS" ${LOOPS:+--loops "$LOOPS"} \
                >>"$tmp/relay.log" 2>&1 &
        fi
        relay_pids+=($!)
    done
    "$@" "$(wait_sql "$query" "$N" 600)" >/dev/null || die "$what: not drained"
    relay_ms=$(($(now_ms) - t0))
    relay_cpu_us=$(machine_us "$N" "$b0")
    kill "${relay_pids[@]}"
    wait "${relay_pids[@]}" || die "$what: not a clean stop"
    relay_pids=()
}

# ratio A B: A / B with two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# BENCH_PG_DRIVER: the client odbox reaches PostgreSQL through, odbc (the
# default) or libpq (a DSN with driver=libpq, docs/dsn.md).
BENCH_PG_DRIVER=${BENCH_PG_DRIVER:-odbc}
[[ $BENCH_PG_DRIVER == odbc || $BENCH_PG_DRIVER == libpq ]] || die "BENCH_PG_DRIVER: odbc or libpq"
# pg_db_dsn DB QUERY: odbox's URL of database DB on base's server (base:
# ODBOX_TEST_PG_DSN without its query) with QUERY's options (a=b&c=d or
# ""), through BENCH_PG_DRIVER.
pg_db_dsn() {
    local q=$2
    [[ $BENCH_PG_DRIVER == odbc ]] || q=${q:+$q&}driver=libpq
    echo "${base%/*}/$1${q:+?$q}"
}

# ceiling_db_run PROCS: N events written as the relay runs write them,
# into a database of their own (dbs, for the script's cleanup), drained by
# PROCS odbox-bench-relay-ceiling processes (relay_timed); sets ceil and
# ceil_drain (events/s with their start and of the drain alone).
ceiling_db_run() {
    local db="ceiling_bench_$$_$1" dsn
    dbs+=("$db")
    psql_on "${base##*/}" "DROP DATABASE IF EXISTS $db" && psql_on "${base##*/}" "CREATE DATABASE $db"
    dsn=$(pg_db_dsn "$db" "")
    "$O" migrate --dsn "$dsn" --migrations "$SRCDIR/migrations" >/dev/null
    "$W" "$dsn" "$N" 100 100
    relay_timed "ceiling:$dsn" "$1" "ceiling x$1" "$(drained_sql eventlog)" psql_on "$db"
    ceil=$((N * 1000 / relay_ms))
    ceil_drain=$((N * 1000 / $(psql_on "$db" "$(drain_ms_sql eventlog)")))
}

# relay_rounds PROCS RAW_WHAT: BENCH_ROUNDS rounds of relay_run PROCS
# ROUND, raw_run PROCS ROUND and ceiling_db_run PROCS, back to back (each
# sets rate, drain_rate, raw, ceil and ceil_drain), a line per round, then
# the medians and the median of the rounds' ratios with their range: a
# shared machine's load moves single runs by a third or more, and a pair
# run back to back shares most of it. RAW_WHAT names the raw publisher.
relay_rounds() {
    local procs=$1 what=$2 r rates=() drains=() raws=() ceils=() ratios=() b0 raw_cpu_us
    for ((r = 1; r <= ROUNDS; r++)); do
        relay_run "$procs" "$r"
        b0=$(busy_ticks)
        raw_run "$procs" "$r"
        raw_cpu_us=$(machine_us "$N" "$b0")
        ceiling_db_run "$procs"
        rates+=("$rate") drains+=("$drain_rate") raws+=("$raw") ceils+=("$ceil") ratios+=("$(ratio "$rate" "$raw")")
        say "  round $r, x$procs: relay $rate events/s (the drain alone $drain_rate), raw $raw msg/s${size:+ ($size-byte messages)}, ratio ${ratios[-1]};" \
            "ceiling $ceil (the drain alone $ceil_drain); machine CPU per event: relay $relay_cpu_us us, raw $raw_cpu_us us"
    done
    local sorted m_rate m_ceil
    sorted=$(tr ' ' '\n' <<<"${ratios[*]}" | sort -g)
    m_rate=$(median "${rates[@]}") m_ceil=$(median "${ceils[@]}")
    say "relay x$procs: median $m_rate events/s (the drain alone $(median "${drains[@]}")) | $what: median $(median "${raws[@]}") msg/s |" \
        "ratio, the median of $ROUNDS rounds: $(median_ratio "${ratios[@]}") ($(head -1 <<<"$sorted")-$(tail -1 <<<"$sorted")), goal $GOAL |" \
        "ceiling median $m_ceil, relay/ceiling $(ratio "$m_rate" "$m_ceil")"
}

# A number from a benchmark program's one-line JSON (its keys are unique).
# The median of the numbers on stdin, one per line.
# median X...: the median of its integer arguments (of the middle two: their
# mean, an integer); median_ratio X...: of ratios with two decimals.
median() { tr ' ' '\n' <<<"$*" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
median_ratio() { tr ' ' '\n' <<<"$*" | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
median_lines() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
json_num() { sed -n "s/.*\"$1\":\([-0-9.eE+]*\).*/\1/p" "$2"; }

wait_quiet() {
    local waited=0 b0 b1 busy said=0
    ((BENCH_QUIET_WAIT > 0)) || return 0
    while :; do
        b0=$(busy_ticks)
        sleep 1
        b1=$(busy_ticks)
        busy=$(awk -v d=$((b1 - b0)) -v hz="$HZ" 'BEGIN {printf "%.2f", d / hz}')
        awk -v x="$busy" 'BEGIN {exit !(x < 0.2)}' && return 0
        waited=$((waited + 1))
        if ((waited >= BENCH_QUIET_WAIT)); then
            say "   (machine still busy: $busy CPU in use before the run; running anyway)"
            return 0
        fi
        ((said)) || say "   (waiting up to ${BENCH_QUIET_WAIT}s for the machine to quiet down: $busy CPU in use)"
        said=1
    done
}

# The machine, the fsync rate and the servers' durability settings, as
# every benchmark prints them before its figures. Needs has_db, BUILDDIR,
# SRCDIR, TMP; pgsql (pg), mysql_ and MARIADB (mariadb),
# BENCH_FSYNC_SECONDS; optional PGBENCH, SLAP, PG_TEST_FSYNC (else the
# server's or the newest installed pg_test_fsync). On the
# throwaway servers (BENCH_UNDER_SERVERS) turns on track_wal_io_timing.
# Sets cpu, fsync_rate, PG_VERSION, MY_VERSION, PG_WAL_SYNC and
# TRACK_WAL_IO_TIMING.
report_setup() {
    PG_TEST_FSYNC=${PG_TEST_FSYNC:-${ODBOX_PG_BINDIR:-}/pg_test_fsync}
    if [[ ! -x $PG_TEST_FSYNC ]]; then
        PG_TEST_FSYNC=$(printf '%s\n' /usr/lib/postgresql/*/bin/pg_test_fsync | sort -V | tail -1)
    fi
    say "== machine"
    cpu=$(cpu_model)
    mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
    say "cpu:        ${cpu:-unknown} (nproc $(nproc))"
    say "memory:     $mem"
    say "kernel:     $(uname -sr)"
    say "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15-min load average before the runs; other work skews the figures)"
    say "tree:       $(git -C "$SRCDIR" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$SRCDIR" status --porcelain -- src dialects include 2>/dev/null | grep -q . && echo ' + uncommitted changes in src/, dialects/ or include/')"
    fsdir=
    if has_db pg; then
        PG_VERSION=$(pgsql "SHOW server_version")
        say "postgresql: $PG_VERSION, $ODBOX_PG_HOST:$ODBOX_PG_PORT (TCP, ssl=$(pgsql "SHOW ssl"))"
        if [[ -n ${ODBOX_PG_DATADIR:-} && -d $ODBOX_PG_DATADIR ]]; then
            say "            data dir $ODBOX_PG_DATADIR ($(df -PT "$ODBOX_PG_DATADIR" | awk 'NR==2 {print $2 " on " $1}'))"
            fsdir=$(dirname "$ODBOX_PG_DATADIR")
            [[ -w $fsdir && $(stat -c %d "$fsdir") == $(stat -c %d "$ODBOX_PG_DATADIR") ]] || fsdir=
        fi
    fi
    if has_db mariadb; then
        MY_VERSION=$(mysql_ "SELECT VERSION()")
        say "mariadb:    $MY_VERSION, $ODBOX_MARIADB_HOST:$ODBOX_MARIADB_PORT (TCP, have_ssl=$(mysql_ "SELECT @@have_ssl"); clients connect with --skip-ssl, odbox without SSL)"
        if [[ -n ${ODBOX_MARIADB_DATADIR:-} && -d $ODBOX_MARIADB_DATADIR ]]; then
            say "            data dir $ODBOX_MARIADB_DATADIR ($(df -PT "$ODBOX_MARIADB_DATADIR" | awk 'NR==2 {print $2 " on " $1}'))"
            if [[ -z $fsdir ]]; then
                fsdir=$(dirname "$ODBOX_MARIADB_DATADIR")
                [[ -w $fsdir ]] || fsdir=
            fi
        fi
    fi
    say "odbc:       $(dpkg-query -W -f='${Package} ${Version}, ' odbc-postgresql odbc-mariadb unixodbc 2>/dev/null | sed 's/, $//')"
    say "clients:    $("${PGBENCH:-pgbench}" --version 2>/dev/null || echo "pgbench n/a"); $("${SLAP:-mariadb-slap}" --version 2>/dev/null | sed 's/,.*//' || echo "mariadb-slap n/a")"
    [[ -n $fsdir ]] || fsdir=${TMPDIR:-/tmp}

    PG_WAL_SYNC=$(has_db pg && pgsql "SHOW wal_sync_method" || echo fdatasync)
    say
    say "== fsync rate (pg_test_fsync -s $BENCH_FSYNC_SECONDS in $fsdir, one 8kB write)"
    fsync_rate="not measured"
    if ((BENCH_FSYNC_SECONDS == 0)); then
        say "skipped (BENCH_FSYNC_SECONDS=0)"
    elif [[ ! -x $PG_TEST_FSYNC ]]; then
        say "skipped (pg_test_fsync not found)"
    else
        fsync_report "$fsdir" "$PG_WAL_SYNC" "PostgreSQL wal_sync_method"
        fsync_rate=$FSYNC_RATE
    fi

    # On the throwaway servers this script started, time WAL flushes (a clock
    # read per flush, the same for both clients) and keep autovacuum off the
    # two tables (they are reset before every run); elsewhere leave the
    # server's configuration alone.
    if has_db pg && [[ -n ${BENCH_UNDER_SERVERS:-} ]]; then
        pgsql "ALTER SYSTEM SET track_wal_io_timing = on" >/dev/null
        pgsql "SELECT pg_reload_conf()" >/dev/null
        sleep 0.2
    fi
    say
    say "== durability settings"
    if has_db pg; then
        TRACK_WAL_IO_TIMING=$(pgsql "SHOW track_wal_io_timing")
        say "PostgreSQL:"
        pgsql "SELECT rpad(name, 32) || setting || coalesce(' ' || unit, '')
         FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'wal_sync_method',
           'full_page_writes', 'commit_delay', 'commit_siblings', 'wal_level', 'shared_buffers',
           'default_transaction_isolation', 'track_wal_io_timing')
         ORDER BY array_position(ARRAY['fsync', 'synchronous_commit', 'wal_sync_method',
           'full_page_writes', 'commit_delay', 'commit_siblings', 'wal_level', 'shared_buffers',
           'default_transaction_isolation', 'track_wal_io_timing']::text[], name::text)" | sed 's/^/  /'
    fi
    if has_db mariadb; then
        say "MariaDB:"
        mysql_ "SELECT CONCAT(RPAD(LOWER(VARIABLE_NAME), 32), VARIABLE_VALUE) FROM information_schema.GLOBAL_VARIABLES
         WHERE VARIABLE_NAME IN ('INNODB_FLUSH_LOG_AT_TRX_COMMIT', 'SYNC_BINLOG', 'LOG_BIN', 'INNODB_FLUSH_METHOD',
           'INNODB_DOUBLEWRITE', 'INNODB_BUFFER_POOL_SIZE', 'INNODB_LOG_FILE_SIZE', 'TX_ISOLATION')
         ORDER BY FIELD(VARIABLE_NAME, 'INNODB_FLUSH_LOG_AT_TRX_COMMIT', 'SYNC_BINLOG', 'LOG_BIN',
           'INNODB_FLUSH_METHOD', 'INNODB_DOUBLEWRITE', 'INNODB_BUFFER_POOL_SIZE', 'INNODB_LOG_FILE_SIZE',
           'TX_ISOLATION')" | sed 's/^/  /'
    fi
}
