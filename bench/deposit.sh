#!/usr/bin/env bash
# bench/deposit.sh - deposit actions (read a wallet; then in one
# transaction one optimistic UPDATE and one event row) through the odbox
# executor, next to the raw client running the same statements on the same
# server in the same run: pgbench on PostgreSQL, mariadb-slap on MariaDB.
# On PostgreSQL odbox sends the UPDATE and the INSERT as one statement (no
# BEGIN/COMMIT); a second pgbench run sends that same statement, so both
# "the same two statements in a transaction" and "the same wire work" are
# compared. See bench/README.md.
#
# Usage: bench/deposit.sh
#
# Environment:
#   ODBOX_BUILDDIR        build directory (default: <repo>/build)
#   BENCH_DATABASES       "pg mariadb" (default), "pg" or "mariadb"
#   BENCH_SECONDS         seconds per measurement (default 10)
#   BENCH_CLIENTS         client counts (default "1 8")
#   BENCH_ROUNDS          rounds of all client counts; figures are medians (default 1)
#   BENCH_WARMUP          warm-up seconds per tool and database, not reported (default 3)
#   BENCH_FSYNC_SECONDS   seconds per pg_test_fsync test (default 2; 0 skips it)
#   BENCH_QUIET_WAIT      before each run, wait up to this many seconds for the
#                         machine to be idle (< 0.2 CPU busy; default 30, 0 = don't)
#   BENCH_VERIFY          1 (default): on the throwaway servers, log every statement
#                         of a 1-second run of each tool and check the texts and the
#                         statements per transaction; 0 skips it
#   BENCH_TABLE           wallet table (default bench_wallets; dropped and recreated)
#   CC                    compiler (default gcc)
# Without ODBOX_TEST_PG_DSN / ODBOX_TEST_MARIADB_DSN (for the databases
# asked for) the script re-runs itself under tests/db/with-servers.sh.
#
# Exit status: non-zero when anything fails to run or a check fails. The
# ratio never fails the run (benchmarks are not timed tests); the goal is
# only reported.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
BENCH_DATABASES=${BENCH_DATABASES:-"pg mariadb"}
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_CLIENTS=${BENCH_CLIENTS:-"1 8"}
BENCH_TABLE=${BENCH_TABLE:-bench_wallets}
BENCH_FSYNC_SECONDS=${BENCH_FSYNC_SECONDS:-2}
BENCH_ROUNDS=${BENCH_ROUNDS:-1}
BENCH_WARMUP=${BENCH_WARMUP:-3}
BENCH_QUIET_WAIT=${BENCH_QUIET_WAIT:-30}
BENCH_VERIFY=${BENCH_VERIFY:-1}
GOAL=0.9
EVENTLOG=eventlog
# The raw clients write this fixed time where odbox binds the current time
# (updated_date, started_date; completion_date and event_date are the
# database's clock in the statement, as odbox sends it): same type,
# same text length. pgbench cannot produce a clock value as a parameter.
RAW_TS='2025-01-01 00:00:00.000000'


[[ $BENCH_SECONDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS must be a positive integer"
[[ $BENCH_FSYNC_SECONDS =~ ^[0-9]+$ ]] || die "BENCH_FSYNC_SECONDS must be an integer"
[[ $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
[[ $BENCH_WARMUP =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be an integer"
[[ $BENCH_QUIET_WAIT =~ ^[0-9]+$ ]] || die "BENCH_QUIET_WAIT must be an integer"
[[ $BENCH_VERIFY =~ ^[01]$ ]] || die "BENCH_VERIFY must be 0 or 1"
read -ra CLIENTS <<<"$BENCH_CLIENTS"
((${#CLIENTS[@]})) || die "BENCH_CLIENTS is empty"
for n in "${CLIENTS[@]}"; do
    if ! [[ $n =~ ^[1-9][0-9]*$ ]] || ((n > 1000)); then
        die "BENCH_CLIENTS must be integers in 1..1000, got '$n'"
    fi
done
read -ra DBS <<<"$BENCH_DATABASES"
((${#DBS[@]})) || die "BENCH_DATABASES is empty"
for db in "${DBS[@]}"; do
    [[ $db == pg || $db == mariadb ]] || die "BENCH_DATABASES: unknown database '$db' (pg, mariadb)"
done
[[ $BENCH_TABLE =~ ^[a-z_][a-z0-9_]*$ ]] || die "BENCH_TABLE must be a plain lower-case identifier"
[[ $BUILDDIR = /* ]] || BUILDDIR=$PWD/$BUILDDIR
has_db() { [[ " ${DBS[*]} " == *" $1 "* ]]; }

# ---- (a) build ---------------------------------------------------------------
BIN=$BUILDDIR/bench/odbox-bench-deposit
build_bench bench/odbox-bench-deposit

# ---- (b) servers ---------------------------------------------------------------
need_servers=0
has_db pg && [[ -z ${ODBOX_TEST_PG_DSN:-} ]] && need_servers=1
has_db mariadb && [[ -z ${ODBOX_TEST_MARIADB_DSN:-} ]] && need_servers=1
if ((need_servers)); then
    [[ -z ${BENCH_UNDER_SERVERS:-} ]] || die "with-servers.sh did not set the DSNs"
    export BENCH_UNDER_SERVERS=1 ODBOX_BUILDDIR=$BUILDDIR
    only=()
    ((${#DBS[@]} == 1)) && only=(--only "${DBS[0]}")
    exec bash "$SRCDIR/tests/db/with-servers.sh" "${only[@]}" -- bash "$HERE/deposit.sh" "$@"
fi
has_db pg && pg_clients
if has_db mariadb; then
    mariadb_clients
    SLAP=$(command -v mariadb-slap || command -v mysqlslap) || die "mariadb-slap not found"
fi
# Framework migrations of this tree (--setup applies them).
export ODBOX_MIGRATIONS_DIR=${ODBOX_MIGRATIONS_DIR:-$SRCDIR/migrations}

bench_tmp
# The MariaDB password only in a 0600 file, never on a command line.
MYCNF=$TMP/my.cnf
if has_db mariadb; then
    (
        umask 077
        printf '[client]\nuser=%s\npassword=%s\nhost=%s\nport=%s\n' "$ODBOX_MARIADB_USER" \
            "$ODBOX_MARIADB_PASSWORD" "$ODBOX_MARIADB_HOST" "$ODBOX_MARIADB_PORT" >"$MYCNF"
    )
fi
mysql_() { "$MARIADB" --defaults-file="$MYCNF" --skip-ssl -N -B "$MYDB" -e "$1"; }

# odbox-bench-deposit against database $1 (DSN from the environment).
# Remembers its pid for the psqlODBC log cleanup. Output to stdout.
obx() {
    local db=$1 pid rc=0 dsn
    shift
    if [[ $db == pg ]]; then dsn=$ODBOX_TEST_PG_DSN; else dsn=$ODBOX_TEST_MARIADB_DSN; fi
    ODBOX_BENCH_DSN=$dsn "$BIN" --table "$BENCH_TABLE" --eventlog "$EVENTLOG" "$@" &
    pid=$!
    ODBC_PIDS+=("$pid")
    wait "$pid" || rc=$?
    return "$rc"
}

# ---- (c) the statements ----------------------------------------------------------------
# Replaces the '?' of $1 in order by the remaining arguments; fails when
# the counts differ.
subst() {
    local text=$1 r
    shift
    for r in "$@"; do
        [[ $text == *'?'* ]] || return 1
        text=${text/\?/$r}
    done
    [[ $text != *'?'* ]] || return 1
    printf '%s' "$text"
}
sqlq() { local s=${1//\\/\\\\}; printf "'%s'" "${s//\'/\'\'}"; } # a MariaDB string literal
pglit() { printf "'%s'" "${1//\'/\'\'}"; }                          # a PostgreSQL one
maxc=$(printf '%s\n' "${CLIENTS[@]}" | sort -n | tail -1)
declare -A Q    # "db:key" -> value from --print-sql
load_sql() { # db
    local db=$1 k v dialect
    if [[ $db == pg ]]; then dialect=postgresql; else dialect=mariadb; fi
    "$BIN" --dialect "$dialect" --print-sql --clients "$maxc" --table "$BENCH_TABLE" \
        --eventlog "$EVENTLOG" >"$TMP/sql.$db" || die "odbox-bench-deposit --print-sql failed"
    while IFS='=' read -r k v; do Q[$db:$k]=$v; done <"$TMP/sql.$db"
    [[ -n ${Q[$db:select]:-} && -n ${Q[$db:update]:-} && -n ${Q[$db:insert]:-} ]] ||
        die "cannot read odbox-bench-deposit --print-sql"
}

# pgbench: the same SELECT (\gset), BEGIN, the same UPDATE, the same
# INSERT but for the two ids (gen_random_uuid() where odbox binds ids it
# generated), COMMIT. With "one": the same SELECT, then the one statement
# odbox sends instead (write=, the same substitutions), in autocommit.
# pgbench cannot build strings, so each client's wallet id and
# action_params come from -D variables; an \if branch per client picks its
# own (client k <-> wallet k).
raw_ids() { local t=${1/"CAST(? AS UUID)"/gen_random_uuid()}; printf '%s' "${t/"CAST(? AS UUID)"/gen_random_uuid()}"; }
make_pgbench_script() { # clients file [one]
    local n=$1 f=$2 one=${3:-} k sel upd ins ins_k head
    if [[ -n $one ]]; then
        # the UPDATE's WITH item, then the INSERT that depends on it
        head=${Q[pg:write]%%INSERT INTO*}
        ins="INSERT INTO${Q[pg:write]#*INSERT INTO}"
        [[ -n $head && $head != "${Q[pg:write]}" ]] || die "unexpected write from --print-sql: ${Q[pg:write]}"
    else
        head=${Q[pg:update]} ins=${Q[pg:insert]}
    fi
    upd=$(subst "$head" :w_state :ts :w_owner :nb :w_id :w_version) ||
        die "unexpected UPDATE from --print-sql: $head"
    ins=$(raw_ids "$ins")
    {
        for ((k = 0; k < n; k++)); do
            if ((k == 0)); then printf '\\if :client_id = 0\n'; else printf '\\elif :client_id = %d\n' "$k"; fi
            sel=$(subst "${Q[pg:select]}" ":wallet$k") || die "unexpected SELECT from --print-sql"
            echo "$sel \\gset w_"
            echo "\\set nb :w_balance + $DEPOSIT"
            [[ -n $one ]] || echo "BEGIN;"
            [[ -n $one ]] || echo "$upd;"
            ins_k=$(subst "$ins" :namespace :action_name ":params$k" :ts :w_id :model_type :event_type \
                :payload) || die "unexpected INSERT from --print-sql: $ins"
            if [[ -n $one ]]; then echo "$upd$ins_k;"; else echo "$ins_k;"; fi
            [[ -n $one ]] || echo "COMMIT;"
        done
        printf '\\else\n'
        echo "\\set no_wallet_for_this_client 1 / 0"
        printf '\\endif\n'
    } >"$f"
}
DEPOSIT=1
pgbench_vars() { # clients -> PGB_VARS
    local n=$1 k
    PGB_VARS=()
    for ((k = 0; k < n; k++)); do
        PGB_VARS+=(-D "wallet$k=${Q[pg:wallet.$k]}" -D "params$k=${Q[pg:params.$k]}")
    done
    PGB_VARS+=(-D "namespace=${Q[pg:namespace]}" -D "action_name=${Q[pg:action_name]}"
        -D "model_type=${Q[pg:model_type]}" -D "event_type=${Q[pg:event_type]}"
        -D "payload=${Q[pg:payload]}" -D "ts=$RAW_TS")
}

# mariadb-slap runs one statement list on every connection and cannot carry
# values between statements, so the values travel in session variables:
# the SELECT assigns what it returns (@id, @v, @st, @ow, @b), the UPDATE
# and INSERT use them. Each connection claims its own wallet once, at
# connect (--init-command): the first wallet whose GET_LOCK it gets; @p is
# that wallet's action_params text, byte for byte what odbox binds.
# Event ids: random version-4 UUIDs made by the server (odbox binds v4
# ids it generated; UUID() would be v1, time-ordered, cheaper to index).
SLAP_UUID="CONCAT(LOWER(HEX(RANDOM_BYTES(4))), '-', LOWER(HEX(RANDOM_BYTES(2))), '-4', SUBSTR(LOWER(HEX(RANDOM_BYTES(2))), 2), '-8', SUBSTR(LOWER(HEX(RANDOM_BYTES(2))), 2), '-', LOWER(HEX(RANDOM_BYTES(6))))"
SLAP_COLS='SELECT `id`, `version`, `state`, `created_date`, `updated_date`, `owner`, `balance` FROM'
make_slap_files() { # query-file -> SLAP_INIT
    local f=$1 sel upd ins ts p0 w0 pre post
    sel=${Q[mariadb:select]}
    [[ $sel == "$SLAP_COLS "* ]] || die "unexpected SELECT from --print-sql: $sel"
    sel='SELECT @id := `id` AS id, @v := `version` AS version, @st := `state` AS state, `created_date`, `updated_date`, @ow := `owner` AS owner, @b := `balance` AS balance FROM'"${sel#"$SLAP_COLS"}"
    sel=$(subst "$sel" "@w") || die "unexpected SELECT from --print-sql"
    ts=$(sqlq "$RAW_TS")
    upd=$(subst "${Q[mariadb:update]}" @st "$ts" @ow "@b + $DEPOSIT" @id @v) ||
        die "unexpected UPDATE from --print-sql: ${Q[mariadb:update]}"
    ins=$(subst "${Q[mariadb:insert]}" "$SLAP_UUID" "$(sqlq "${Q[mariadb:namespace]}")" "$SLAP_UUID" \
        "$(sqlq "${Q[mariadb:action_name]}")" @p "$ts" @id "$(sqlq "${Q[mariadb:model_type]}")" \
        "$(sqlq "${Q[mariadb:event_type]}")" "$(sqlq "${Q[mariadb:payload]}")") ||
        die "unexpected INSERT from --print-sql: ${Q[mariadb:insert]}"
    printf '%s;\nSTART TRANSACTION;\n%s;\n%s;\nCOMMIT;\n' "$sel" "$upd" "$ins" >"$f"
    grep -q ';.*;' "$f" && die "a statement for mariadb-slap contains ';'"
    # action_params of wallet 0, split around its id: the same shape for all.
    p0=${Q[mariadb:params.0]} w0=${Q[mariadb:wallet.0]}
    pre=${p0%%"$w0"*} post=${p0#*"$w0"}
    [[ $pre$w0$post == "$p0" && $pre != "$p0" ]] || die "cannot split action_params '$p0'"
    SLAP_INIT="SET @p = CONCAT($(sqlq "$pre"), @w := (SELECT CAST(id AS CHAR) FROM $BENCH_TABLE WHERE GET_LOCK(CONCAT('odbox_bench_', id), 0) = 1 ORDER BY id LIMIT 1), $(sqlq "$post"))"
}

# ---- (d) machine, fsync rate, durability -----------------------------------------------
report_setup

# ---- (e) measuring ------------------------------------------------------------------------
# Same as bench/run.sh: CPU of the clients (this script's reaped
# children), of the server, and of everything else ("other load").
PG_PM_PID='' MY_PID=''
if has_db pg && [[ -n ${ODBOX_PG_DATADIR:-} && -r $ODBOX_PG_DATADIR/postmaster.pid ]]; then
    PG_PM_PID=$(head -1 "$ODBOX_PG_DATADIR/postmaster.pid")
fi
if has_db mariadb; then
    f=$(mysql_ "SELECT @@pid_file")
    [[ $f == /* ]] || f=${ODBOX_MARIADB_DATADIR:-/nonexistent}/$f
    [[ -r $f ]] && MY_PID=$(head -1 "$f")
fi
client_user_ticks() { sed 's/^.*) //' "/proc/$$/stat" | awk '{print $14}'; }   # their user time
server_ticks() { # db
    local t=0 c
    if [[ $1 == pg && -n $PG_PM_PID ]]; then
        t=$(proc_ticks "$PG_PM_PID" 1)
        for c in $(pgrep -P "$PG_PM_PID" || true); do
            t=$((t + $(proc_ticks "$c")))
        done
    elif [[ $1 == mariadb && -n $MY_PID ]]; then
        t=$(proc_ticks "$MY_PID")
    fi
    echo "$t"
}
server_known() { [[ ($1 == pg && -n $PG_PM_PID) || ($1 == mariadb && -n $MY_PID) ]]; }
HZ=$(getconf CLK_TCK)
# Log flushes: PostgreSQL pg_stat_wal (count, ms, bytes); MariaDB: InnoDB
# fsyncs (redo log and data files; 10.11 has no redo-only counter), redo
# bytes written, and Questions = statements the clients sent (COM_PING
# and COM_STMT_PREPARE/CLOSE are not counted).
log_stats() { # db
    if [[ $1 == pg ]]; then
        pgsql "SELECT wal_sync || ' ' || wal_sync_time || ' ' || wal_bytes FROM pg_stat_wal"
    else
        mysql_ "SELECT CONCAT_WS(' ', $(for v in INNODB_DATA_FSYNCS INNODB_OS_LOG_WRITTEN QUESTIONS; do
            printf "COALESCE((SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '%s'), 0)," "$v"
        done | sed 's/,$//'))"
    fi
}
declare -A OTHER CLI_US CLI_SPLIT SRV_US LOGTXT # "db:clients:round:tool"
measure_start() { # db
    read -r M_A M_B M_C <<<"$(log_stats "$1")"
    M_BUSY=$(busy_ticks) M_CLI=$(client_ticks) M_CLI_U=$(client_user_ticks) M_SRV=$(server_ticks "$1")
    M_T0=$(date +%s.%N)
}
client_done() { M_CLI_END=$(client_ticks) M_CLI_U_END=$(client_user_ticks); }
measure_end() { # db key transactions
    local db=$1 key=$2 tx=$3 busy cli srv own t1 a b c
    busy=$(busy_ticks) cli=$(client_ticks) srv=$(server_ticks "$db") t1=$(date +%s.%N)
    read -r a b c <<<"$(log_stats "$db")"
    own=$((cli - M_CLI + srv - M_SRV))
    CLI_US[$key]=$(awk -v t=$((M_CLI_END - M_CLI)) -v hz="$HZ" -v tx="$tx" 'BEGIN {printf "%.1f", (tx > 0 ? t * 1e6 / hz / tx : 0)}')
    CLI_SPLIT[$key]=$(awk -v u=$((M_CLI_U_END - M_CLI_U)) -v t=$((M_CLI_END - M_CLI)) -v hz="$HZ" -v tx="$tx" \
        'BEGIN {if (tx > 0) printf "user %.1f + sys %.1f", u * 1e6 / hz / tx, (t - u) * 1e6 / hz / tx}')
    if server_known "$db"; then
        SRV_US[$key]=$(awk -v t=$((srv - M_SRV)) -v hz="$HZ" -v tx="$tx" 'BEGIN {printf "%.1f", (tx > 0 ? t * 1e6 / hz / tx : 0)}')
        OTHER[$key]=$(awk -v b=$((busy - M_BUSY)) -v o="$own" -v hz="$HZ" -v t0="$M_T0" -v t1="$t1" \
            'BEGIN {x = (b - o) / hz / (t1 - t0); printf "%.2f", (x < 0 ? 0 : x)}')
    else
        SRV_US[$key]=n/a OTHER[$key]=n/a
    fi
    if [[ $db == pg ]]; then
        LOGTXT[$key]=$(awk -v n=$((a - M_A)) -v ms="$(awk -v x="$b" -v y="$M_B" 'BEGIN {print x - y}')" \
            -v by=$((c - M_C)) -v tx="$tx" -v timing="$TRACK_WAL_IO_TIMING" 'BEGIN {
            printf "%.2f WAL fsyncs/tx", (tx > 0 ? n / tx : 0)
            if (timing == "on" && n > 0) printf ", %.0f us/fsync", 1000 * ms / n
            printf ", %.0f WAL bytes/tx", (tx > 0 ? by / tx : 0) }')
    else
        # Questions also counts the checks' and this script's statements
        # (a handful per run); per transaction that is < 0.01.
        LOGTXT[$key]=$(awk -v n=$((a - M_A)) -v by=$((b - M_B)) -v q=$((c - M_C)) -v tx="$tx" 'BEGIN {
            printf "%.2f InnoDB fsyncs/tx, %.0f redo bytes/tx, %.2f statements/tx", (tx > 0 ? n / tx : 0),
                (tx > 0 ? by / tx : 0), (tx > 0 ? q / tx : 0) }')
    fi
}

# Before every run: fresh wallets (one per client, balance 0, version 1),
# empty events; PostgreSQL also checkpoints.
reset_db() { # db clients
    obx "$1" --setup --clients "$2" >/dev/null || die "odbox-bench-deposit --setup failed"
    if [[ $1 == pg ]]; then
        if [[ -n ${BENCH_UNDER_SERVERS:-} ]]; then
            pgsql "ALTER TABLE $BENCH_TABLE SET (autovacuum_enabled = off);
                   ALTER TABLE $EVENTLOG.events SET (autovacuum_enabled = off)" >/dev/null
        fi
        pgsql "CHECKPOINT" >/dev/null 2>&1 || say "bench: warning: CHECKPOINT failed (not superuser?)"
    fi
}

# After every run: the database agrees with what the tool reported.
#  - events rows = transactions = sum of balances; every wallet has
#    version = balance + 1 and as many events as its balance; every
#    client's wallet was used;
#  - every event carries the fixed texts and its wallet's action_params;
#  - per_wallet (optional, "n0,n1,..."): each wallet's balance.
check_db() { # db label transactions clients [per_wallet]
    local db=$1 label=$2 tx=$3 n=$4 per=${5:-} got rows sum used bad badev bals
    if [[ $db == pg ]]; then
        got=$(pgsql "SELECT (SELECT count(*) FROM $EVENTLOG.events) || ' ' ||
          (SELECT coalesce(sum(balance), 0) FROM $BENCH_TABLE) || ' ' ||
          (SELECT count(*) FROM $BENCH_TABLE WHERE balance > 0) || ' ' ||
          (SELECT count(*) FROM $BENCH_TABLE w LEFT JOIN (SELECT model_id, count(*) AS n FROM $EVENTLOG.events
             GROUP BY model_id) e ON e.model_id = w.id::text
           WHERE w.version <> w.balance + 1 OR w.balance <> coalesce(e.n, 0)) || ' ' ||
          (SELECT count(*) FROM $EVENTLOG.events WHERE payload <> $(pglit "${Q[pg:payload]}")::jsonb
             OR action_params <> jsonb_build_object('wallet_id', model_id, 'amount', $DEPOSIT)
             OR namespace <> $(pglit "${Q[pg:namespace]}") OR action_name <> $(pglit "${Q[pg:action_name]}")
             OR model_type <> $(pglit "${Q[pg:model_type]}") OR event_type <> $(pglit "${Q[pg:event_type]}")
             OR delivered) || ' ' ||
          (SELECT string_agg(balance::text, ',' ORDER BY id) FROM $BENCH_TABLE)")
    else
        got=$(mysql_ "SET SESSION group_concat_max_len = 1000000;
          SELECT CONCAT_WS(' ', (SELECT COUNT(*) FROM $EVENTLOG.events),
          (SELECT COALESCE(SUM(balance), 0) FROM $BENCH_TABLE),
          (SELECT COUNT(*) FROM $BENCH_TABLE WHERE balance > 0),
          (SELECT COUNT(*) FROM $BENCH_TABLE w LEFT JOIN (SELECT model_id, COUNT(*) AS n FROM $EVENTLOG.events
             GROUP BY model_id) e ON e.model_id = CAST(w.id AS CHAR)
           WHERE w.version <> w.balance + 1 OR w.balance <> COALESCE(e.n, 0)),
          (SELECT COUNT(*) FROM $EVENTLOG.events WHERE payload <> $(sqlq "${Q[mariadb:payload]}")
             OR action_params <> CONCAT('{\"wallet_id\":\"', model_id, '\",\"amount\":$DEPOSIT}')
             OR namespace <> $(sqlq "${Q[mariadb:namespace]}") OR action_name <> $(sqlq "${Q[mariadb:action_name]}")
             OR model_type <> $(sqlq "${Q[mariadb:model_type]}") OR event_type <> $(sqlq "${Q[mariadb:event_type]}")
             OR delivered <> 0),
          (SELECT GROUP_CONCAT(balance ORDER BY id SEPARATOR ',') FROM $BENCH_TABLE))")
    fi
    read -r rows sum used bad badev bals <<<"$got"
    [[ $rows == "$tx" ]] || die "$label: reported $tx transactions but $EVENTLOG.events has $rows rows"
    [[ $sum == "$tx" ]] || die "$label: reported $tx transactions but the balances add up to $sum"
    [[ $used == "$n" ]] || die "$label: $used of $n wallets were deposited to"
    [[ $bad == 0 ]] || die "$label: $bad wallets whose version or event count does not match their balance"
    [[ $badev == 0 ]] || die "$label: $badev events with unexpected contents"
    [[ -z $per || $bals == "$per" ]] || die "$label: balances per wallet $bals, the clients reported $per"
}

# Results per run, keyed "db:clients:round".
declare -A RAW_TPS RAW_LAT RAW_TX OBX_TPS OBX_P50 OBX_P99 OBX_AVG OBX_TX OBX_RETRIES
declare -A SLAP_RATE # "clients" -> transactions per second per client, for sizing slap runs

# one: the script sending odbox's one statement; its figures are kept
# under "...:one" (RAW_*) and "...:one" (measurements) instead of ":raw".
run_pgbench() { # clients round seconds [quiet] [one]
    local n=$1 secs=$3 one=${5:-} out=$TMP/pgbench.$1.$2${5:+.one}.out failed label=pgbench
    local k=pg:$1:$2${5:+:one} m=pg:$1:$2:${5:-raw}
    [[ -z $one ]] || label="pgbench (odbox's one statement)"
    reset_db pg "$n"
    make_pgbench_script "$n" "$TMP/deposit.pgbench" "$one"
    pgbench_vars "$n"
    [[ -n ${4:-} ]] || wait_quiet
    [[ -n ${4:-} ]] || say "-- PostgreSQL round $2: $label, $n client(s), ${secs}s"
    measure_start pg
    if ! pg "$PGBENCH" -n -M prepared -c "$n" -j "$n" -T "$secs" -f "$TMP/deposit.pgbench" \
        "${PGB_VARS[@]}" >"$out" 2>&1; then
        cat "$out" >&2
        die "pgbench failed"
    fi
    client_done
    RAW_TPS[$k]=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out" | tail -1)
    RAW_LAT[$k]=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$out")
    RAW_TX[$k]=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
    [[ -n ${RAW_TPS[$k]} && -n ${RAW_TX[$k]} ]] || { cat "$out" >&2; die "cannot parse pgbench output"; }
    [[ -z $failed || $failed == 0 ]] || { cat "$out" >&2; die "pgbench: $failed failed transactions"; }
    check_db pg "$label -c $n" "${RAW_TX[$k]}" "$n"
    measure_end pg "$m" "${RAW_TX[$k]}"
    [[ -n ${4:-} ]] ||
        say "   tps ${RAW_TPS[$k]}, latency avg ${RAW_LAT[$k]:-?} ms, ${RAW_TX[$k]} transactions" \
            "| CPU/tx: client ${CLI_US[$m]} us (${CLI_SPLIT[$m]}), server ${SRV_US[$m]} us" \
            "| ${LOGTXT[$m]} | other load ${OTHER[$m]} CPU"
}

# mariadb-slap runs a fixed number of statements per client, not a time:
# each run is sized from the rate of the previous one at that client count
# (warm-up / calibration first) to last about the given seconds. Its time
# includes connecting (a few ms).
run_slap() { # clients round seconds [quiet]
    local n=$1 k=mariadb:$1:$2 secs=$3 out=$TMP/slap.$1.$2.out per secs_run tx rate
    per=$(awk -v r="${SLAP_RATE[$n]:-0}" -v s="$secs" 'BEGIN {x = int(r * s + 0.5); print (x < 50 ? 50 : x)}')
    reset_db mariadb "$n"
    [[ -n ${4:-} ]] || wait_quiet
    [[ -n ${4:-} ]] || say "-- MariaDB round $2: mariadb-slap, $n client(s), $per transactions each (sized for ~${secs}s)"
    measure_start mariadb
    if ! "$SLAP" --defaults-file="$MYCNF" --skip-ssl --create-schema="$MYDB" --no-drop \
        --concurrency="$n" --iterations=1 --number-of-queries=$((n * 5 * per)) --delimiter=';' \
        --query="$TMP/deposit.slap" --init-command="$SLAP_INIT" >"$out" 2>&1; then
        cat "$out" >&2
        die "mariadb-slap failed"
    fi
    client_done
    secs_run=$(sed -n 's/^[[:space:]]*Average number of seconds to run all queries: \([0-9.]*\) seconds.*/\1/p' "$out")
    [[ -n $secs_run ]] || { cat "$out" >&2; die "cannot parse mariadb-slap output"; }
    tx=$((n * per))
    rate=$(awk -v t="$tx" -v s="$secs_run" 'BEGIN {printf "%.3f", (s > 0 ? t / s : 0)}')
    SLAP_RATE[$n]=$(awk -v r="$rate" -v n="$n" 'BEGIN {printf "%.3f", r / n}')
    RAW_TPS[$k]=$rate RAW_TX[$k]=$tx
    RAW_LAT[$k]=$(awk -v s="$secs_run" -v p="$per" 'BEGIN {printf "%.3f", (p > 0 ? 1000 * s / p : 0)}')
    local wallets
    wallets=$(for ((i = 0; i < n; i++)); do echo "$per"; done | paste -sd,)
    check_db mariadb "mariadb-slap -c $n" "$tx" "$n" "$wallets"
    measure_end mariadb "$k:raw" "$tx"
    [[ -n ${4:-} ]] ||
        say "   tps $rate, latency avg ${RAW_LAT[$k]} ms, $tx transactions in ${secs_run}s" \
            "| CPU/tx: client ${CLI_US[$k:raw]} us (${CLI_SPLIT[$k:raw]}), server ${SRV_US[$k:raw]} us" \
            "| ${LOGTXT[$k:raw]} | other load ${OTHER[$k:raw]} CPU"
}

run_odbox() { # db clients round seconds [quiet]
    local db=$1 n=$2 k=$1:$2:$3 secs=$4 out=$TMP/odbox.$1.$2.$3.json f per name
    if [[ $db == pg ]]; then name=PostgreSQL; else name=MariaDB; fi
    reset_db "$db" "$n"
    [[ -n ${5:-} ]] || wait_quiet
    [[ -n ${5:-} ]] || say "-- $name round $3: odbox-bench-deposit, $n client(s), ${secs}s"
    measure_start "$db"
    obx "$db" --clients "$n" --seconds "$secs" --json >"$out" || die "odbox-bench-deposit failed"
    client_done
    f=$(for key in tps p50 p99 avg actions retries cpu_us_per_action; do json_num "$key" "$out"; done | paste -s) ||
        die "cannot parse odbox-bench-deposit output"
    [[ $(wc -w <<<"$f") == 7 ]] || die "cannot parse odbox-bench-deposit output: $(cat "$out")"
    local cpu
    read -r "OBX_TPS[$k]" "OBX_P50[$k]" "OBX_P99[$k]" "OBX_AVG[$k]" "OBX_TX[$k]" "OBX_RETRIES[$k]" cpu <<<"$f"
    per=$(sed -n 's/.*"actions_per_client":\[\([0-9,]*\)\].*/\1/p' "$out")
    check_db "$db" "odbox -c $n" "${OBX_TX[$k]}" "$n" "$per"
    measure_end "$db" "$k:odbox" "${OBX_TX[$k]}"
    # Its own figure (getrusage over the measured window), without loading
    # the driver and logging in; the raw clients' include their logins.
    CLI_US[$k:odbox]=$cpu
    [[ -n ${5:-} ]] ||
        say "   actions/s ${OBX_TPS[$k]}, latency avg ${OBX_AVG[$k]} p50 ${OBX_P50[$k]} p99 ${OBX_P99[$k]} ms," \
            "${OBX_TX[$k]} actions, ${OBX_RETRIES[$k]} retries | CPU/tx: client ${CLI_US[$k:odbox]} us" \
            "(user $(json_num cpu_user_us_per_action "$out") + sys $(json_num cpu_sys_us_per_action "$out")), server ${SRV_US[$k:odbox]} us" \
            "| ${LOGTXT[$k:odbox]} | other load ${OTHER[$k:odbox]} CPU"
}

run_raw() { # db clients round seconds [quiet]
    if [[ $1 == pg ]]; then run_pgbench "${@:2}"; else run_slap "${@:2}"; fi
}

# ---- (f) what goes over the wire, once ----------------------------------------------
# On the throwaway servers: log every statement of a 1-second, 1-client run
# of each tool, then count the statements per transaction and check that
# the texts are the ones --print-sql gave (PostgreSQL: log_statement=all
# in the server log; MariaDB: the general log, written to a table).
verify_pg() {
    local log=${ODBOX_DB_STATE_DIR:-}/pg/server.log tool start end tx out t want=() names i
    [[ -r $log ]] || { say "   (no server log at $log: skipped)"; return 0; }
    # psqlODBC and pgbench -M prepared both send $1, $2, ... for the parameters.
    number() { local s=$1 n=0; while [[ $s == *'?'* ]]; do n=$((n + 1)); s=${s/\?/\$$n}; done; printf '%s' "$s"; }
    for tool in odbox pgbench ${Q[pg:write]:+pgbench-one}; do
        reset_db pg 1
        start=$(wc -l <"$log")
        pgsql "ALTER SYSTEM SET log_statement = 'all'" >/dev/null
        pgsql "SELECT pg_reload_conf()" >/dev/null
        sleep 0.3
        want=("$(number "${Q[pg:select]}")")
        if [[ $tool == odbox ]]; then
            obx pg --clients 1 --seconds 1 --json >"$TMP/verify.json" || die "odbox-bench-deposit failed"
            tx=$(json_num actions "$TMP/verify.json")
            if [[ -n ${Q[pg:write]} ]]; then
                want+=("$(number "${Q[pg:write]}")") names="SELECT, the joined UPDATE + INSERT"
            else
                want+=(BEGIN "$(number "${Q[pg:update]}")" "$(number "${Q[pg:insert]}")" COMMIT)
                names="SELECT, BEGIN, UPDATE, INSERT, COMMIT"
            fi
        else
            make_pgbench_script 1 "$TMP/verify.pgbench" "${tool#pgbench}"
            pgbench_vars 1
            pg "$PGBENCH" -n -M prepared -c 1 -j 1 -T 1 -f "$TMP/verify.pgbench" "${PGB_VARS[@]}" \
                >"$TMP/verify.out" 2>&1 || { cat "$TMP/verify.out" >&2; die "pgbench failed"; }
            tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$TMP/verify.out")
            if [[ $tool == pgbench ]]; then
                want+=(BEGIN "$(number "${Q[pg:update]}")" "$(number "$(raw_ids "${Q[pg:insert]}")")" COMMIT)
                names="SELECT, BEGIN, UPDATE, INSERT, COMMIT"
            else
                t=${Q[pg:write]%%INSERT INTO*}
                want+=("$(number "$t$(raw_ids "INSERT INTO${Q[pg:write]#*INSERT INTO}")")")
                names="SELECT, the joined UPDATE + INSERT"
            fi
        fi
        pgsql "ALTER SYSTEM RESET log_statement" >/dev/null
        pgsql "SELECT pg_reload_conf()" >/dev/null
        sleep 0.3
        end=$(wc -l <"$log")
        # "LOG:  statement: X" (simple protocol) and "LOG:  execute NAME: X".
        sed -n "$((start + 1)),${end}p" "$log" |
            sed -n 's/.* LOG:  statement: \(.*\)/\1/p; s/.* LOG:  execute [^:]*: \(.*\)/\1/p' |
            sed 's/[; ]*$//' |
            grep -v -e 'log_statement' -e 'pg_reload_conf' | sort | uniq -c | sort -rn >"$TMP/verify.$tool"
        # Statements sent once per transaction: count == transactions.
        out=$(awk -v tx="$tx" '$1 == tx {c = $1; $1 = ""; sub(/^ /, ""); print}' "$TMP/verify.$tool")
        for t in "${want[@]}"; do
            grep -qxF -- "$t" <<<"$out" ||
                { cat "$TMP/verify.$tool" >&2; die "verify ($tool): not sent once per transaction: $t"; }
        done
        i=$(awk -v tx="$tx" '$1 == tx {n++} END {print n + 0}' "$TMP/verify.$tool")
        say "   $tool: $tx transactions; sent once per transaction: $i statements ($names);" \
            "others: $(awk -v tx="$tx" '$1 != tx {n += $1} END {print n + 0}' "$TMP/verify.$tool") in all (session setup, catalog lookups, DEALLOCATE)"
        ((i == ${#want[@]})) ||
            { cat "$TMP/verify.$tool" >&2; die "verify ($tool): expected ${#want[@]} statements per transaction, got $i"; }
    done
    say "   texts: the same SELECT, UPDATE and INSERT (or joined statement) on every side, but for gen_random_uuid() in pgbench where odbox binds the two ids it made"
}

verify_mariadb() {
    local tool tx
    for tool in odbox slap; do
        reset_db mariadb 1
        mysql_ "SET GLOBAL log_output = 'TABLE'; TRUNCATE TABLE mysql.general_log; SET GLOBAL general_log = 1" ||
            { say "   (cannot switch the general log on: skipped)"; return 0; }
        if [[ $tool == odbox ]]; then
            obx mariadb --clients 1 --seconds 1 --json >"$TMP/verify.json" || die "odbox-bench-deposit failed"
            tx=$(json_num actions "$TMP/verify.json")
        else
            "$SLAP" --defaults-file="$MYCNF" --skip-ssl --create-schema="$MYDB" --no-drop --concurrency=1 \
                --iterations=1 --number-of-queries=$((5 * 300)) --delimiter=';' --query="$TMP/deposit.slap" \
                --init-command="$SLAP_INIT" >"$TMP/verify.out" 2>&1 || { cat "$TMP/verify.out" >&2; die "mariadb-slap failed"; }
            tx=300
        fi
        mysql_ "SET GLOBAL general_log = 0"
        # Per transaction: command (Query = text protocol, Execute = a
        # prepared statement) and the statement's first words.
        mysql_ "SELECT COUNT(*), command_type, LEFT(argument, 24) FROM mysql.general_log
                WHERE argument NOT LIKE '%general_log%' GROUP BY command_type, LEFT(argument, 24)
                ORDER BY MIN(event_time)" >"$TMP/verify.$tool"
        mysql_ "SELECT argument FROM mysql.general_log WHERE command_type = 'Prepare'" >"$TMP/verify.$tool.prepared"
        say "   $tool: $tx transactions; per transaction:" \
            "$(awk -F'\t' -v tx="$tx" '$1 >= tx && $1 <= tx + 1 {printf "%s%s %s", (n++ ? ", " : ""), $2, $3} END {print ""}' "$TMP/verify.$tool")"
        if [[ $tool == odbox ]]; then
            for t in "${Q[mariadb:select]}" "${Q[mariadb:update]}" "${Q[mariadb:insert]}"; do
                grep -qxF -- "$t" "$TMP/verify.$tool.prepared" ||
                    { cat "$TMP/verify.$tool.prepared" >&2; die "verify (odbox): not prepared as printed: $t"; }
            done
        fi
    done
    mysql_ "TRUNCATE TABLE mysql.general_log; SET GLOBAL log_output = 'FILE'"
    say "   texts: odbox prepares exactly the --print-sql statements (checked); mariadb-slap sends $TMP/deposit.slap (below)"
}

# ---- (g) the runs ---------------------------------------------------------------------------
declare -A RATIO RATIO1 STEAL
# Steal time is CPU the hypervisor gave to someone else: on a shared VM it
# is the first suspect when two runs of the same thing disagree.
for db in "${DBS[@]}"; do
    load_sql "$db"
    if [[ $db == pg ]]; then
        name=PostgreSQL raw=pgbench
        make_pgbench_script 1 "$TMP/show.pgbench"
        [[ -z ${Q[pg:write]} ]] || make_pgbench_script 1 "$TMP/show1.pgbench" one
    else
        name=MariaDB raw=mariadb-slap
        make_slap_files "$TMP/deposit.slap"
    fi
    say
    say "== $name: deposit actions, odbox vs $raw (${BENCH_SECONDS}s per run, $BENCH_ROUNDS round(s))"
    if [[ $db == pg ]]; then
        say "   odbox, per action (each statement one round trip; prepared once per pooled connection):"
        say "                      ${Q[$db:select]}"
        say "                      ${Q[$db:write]}"
        say "                      (autocommit: the statement is the transaction; the INSERT writes only if the UPDATE matched)"
    else
        say "   odbox, per action (each line one round trip; statements prepared once per pooled connection):"
        say "                      ${Q[$db:select]}"
        say "                      START TRANSACTION  (the dialect's begin statement; autocommit stays on)"
        say "                      ${Q[$db:update]}"
        say "                      ${Q[$db:insert]}"
        say "                      COMMIT"
    fi
    if [[ $db == pg ]]; then
        say "   pgbench -M prepared -c N -j N -T S, per transaction (client 0's branch of the script):"
        sed -n '2,7p' "$TMP/show.pgbench" | sed 's/^/                      /'
        if [[ -n ${Q[pg:write]} ]]; then
            say "   and pgbench sending odbox's one statement instead, per transaction:"
            sed -n '2,4p' "$TMP/show1.pgbench" | sed 's/^/                      /'
        fi
    else
        say "   mariadb-slap --concurrency=N --query=FILE, per transaction (text protocol):"
        sed 's/^/                      /' "$TMP/deposit.slap"
        say "   once per connection (--init-command): $SLAP_INIT"
    fi
    say "   event payload: ${Q[$db:payload]}"
    if ((BENCH_VERIFY)) && [[ -n ${BENCH_UNDER_SERVERS:-} ]]; then
        say "-- statements on the wire (1 client, 1 s, statement logging on; not measured)"
        if [[ $db == pg ]]; then verify_pg; else verify_mariadb; fi
    fi
    if [[ $db == mariadb ]]; then
        # Size the slap runs at each client count: 100 transactions per
        # client, then about a second's worth (not reported).
        for n in "${CLIENTS[@]}"; do
            SLAP_RATE[$n]=100
            run_slap "$n" 0 1 quiet
            run_slap "$n" 0 1 quiet
        done
    fi
    if ((BENCH_WARMUP > 0)); then
        say "-- warm-up: $raw and odbox-bench-deposit, $maxc client(s), ${BENCH_WARMUP}s each (not reported)"
        run_raw "$db" "$maxc" 0 "$BENCH_WARMUP" quiet
        [[ $db != pg || -z ${Q[pg:write]} ]] || run_pgbench "$maxc" 0 "$BENCH_WARMUP" quiet one
        run_odbox "$db" "$maxc" 0 "$BENCH_WARMUP" quiet
    fi
    read -r ticks0 steal0 < <(cpu_ticks)
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do
        i=0
        for n in "${CLIENTS[@]}"; do
            # Alternate who goes first, as bench/run.sh does; pgbench with
            # odbox's one statement, where there is one, runs in between.
            one=
            [[ $db != pg || -z ${Q[pg:write]} ]] || one=1
            if (((i + r) % 2 == 1)); then
                run_raw "$db" "$n" "$r" "$BENCH_SECONDS"
                [[ -z $one ]] || run_pgbench "$n" "$r" "$BENCH_SECONDS" "" one
                run_odbox "$db" "$n" "$r" "$BENCH_SECONDS"
            else
                run_odbox "$db" "$n" "$r" "$BENCH_SECONDS"
                [[ -z $one ]] || run_pgbench "$n" "$r" "$BENCH_SECONDS" "" one
                run_raw "$db" "$n" "$r" "$BENCH_SECONDS"
            fi
            RATIO[$db:$n:$r]=$(awk -v a="${OBX_TPS[$db:$n:$r]}" -v b="${RAW_TPS[$db:$n:$r]}" \
                'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
            say "   => round $r, $n client(s): odbox/$raw = ${RATIO[$db:$n:$r]}"
            if [[ -n $one ]]; then
                RATIO1[$db:$n:$r]=$(awk -v a="${OBX_TPS[$db:$n:$r]}" -v b="${RAW_TPS[$db:$n:$r:one]}" \
                    'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
                say "   => round $r, $n client(s): odbox/(pgbench sending odbox's one statement) = ${RATIO1[$db:$n:$r]}"
            fi
            i=$((i + 1))
        done
    done
    read -r ticks1 steal1 < <(cpu_ticks)
    STEAL[$db]=$(awk -v t=$((ticks1 - ticks0)) -v s=$((steal1 - steal0)) 'BEGIN {printf "%.1f", (t > 0 ? 100 * s / t : 0)}')
done

# ---- (h) the tables -----------------------------------------------------------------------------
median() { # array key-prefix [suffix]: median over the rounds
    local -n arr=$1
    local r vals=()
    for ((r = 1; r <= BENCH_ROUNDS; r++)); do vals+=("${arr[$2:$r${3:+:$3}]:-0}"); done
    printf '%s\n' "${vals[@]}" | sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
say
say "== results (${BENCH_SECONDS}s per run; machine: ${cpu:-unknown}, nproc $(nproc); fsync: $fsync_rate)"
say "   one action = 1 SELECT (autocommit) + 1 transaction with 1 UPDATE and 1 INSERT (1 event row); 1 wallet per client, no conflicts"
say "   (PostgreSQL: odbox writes the UPDATE and the INSERT as one statement, its own transaction; pgbench runs"
say "   BEGIN, UPDATE, INSERT, COMMIT, the goal's reference, and in a second run odbox's one statement: pgb-1)"
say "   workers: raw client N connections (pgbench -c N -j N; mariadb-slap --concurrency=N, one process);"
say "            odbox-bench-deposit N threads, one executor, pool size N"
((BENCH_ROUNDS == 1)) ||
    say "   $BENCH_ROUNDS rounds: figures are medians; odbox/raw is the median of the per-round ratios (range: min-max)"
say "   latency: raw avg = pgbench's average / mariadb-slap's seconds per transaction and client;"
say "            odbox avg/p50/p99 per action (the read included) from its histogram"
say "   cpu/tx: client CPU (user+sys) per transaction; other load: most CPU other processes used in a run (1.0 = a core)"
for db in "${DBS[@]}"; do
    if [[ $db == pg ]]; then
        name="PostgreSQL $PG_VERSION" raw=pgbench
        say
        say "-- $name: fsync=$(pgsql "SHOW fsync"), synchronous_commit=$(pgsql "SHOW synchronous_commit"), wal_sync_method=$PG_WAL_SYNC, full_page_writes=$(pgsql "SHOW full_page_writes"); CPU steal during the runs: ${STEAL[$db]}%"
    else
        name="MariaDB $MY_VERSION" raw=slap
        say
        say "-- $name: innodb_flush_log_at_trx_commit=$(mysql_ "SELECT @@innodb_flush_log_at_trx_commit"), sync_binlog=$(mysql_ "SELECT @@sync_binlog"), log_bin=$(mysql_ "SELECT @@log_bin"), innodb_flush_method=$(mysql_ "SELECT @@innodb_flush_method"); CPU steal during the runs: ${STEAL[$db]}%"
    fi
    printf '%7s %11s %11s %11s %11s %9s %9s %9s %9s %10s %10s %7s %10s\n' clients "$raw tps" "odbox act/s" \
        "odbox/$raw" range "raw avg" "odbox avg" "odbox p50" "odbox p99" "raw cpu/tx" "obx cpu/tx" retries "other load"
    met=1 noisy=0
    for n in "${CLIENTS[@]}"; do
        ratio=$(median RATIO "$db:$n")
        range=$(for ((r = 1; r <= BENCH_ROUNDS; r++)); do echo "${RATIO[$db:$n:$r]}"; done | sort -g |
            awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.2f-%.2f", lo, hi}')
        other=$(for ((r = 1; r <= BENCH_ROUNDS; r++)); do
            echo "${OTHER[$db:$n:$r:raw]}"
            echo "${OTHER[$db:$n:$r:odbox]}"
        done | sort -g | tail -1)
        retries=$(for ((r = 1; r <= BENCH_ROUNDS; r++)); do echo "${OBX_RETRIES[$db:$n:$r]}"; done |
            awk '{s += $1} END {print s + 0}')
        awk -v x="$ratio" -v g="$GOAL" 'BEGIN {exit !(x >= g)}' || met=0
        if [[ $other != n/a ]] && awk -v x="$other" 'BEGIN {exit !(x >= 0.2)}'; then noisy=1; fi
        printf '%7s %11.1f %11.1f %11.3f %11s %7.3fms %7.3fms %7.3fms %7.3fms %8.1fus %8.1fus %7s %10s\n' \
            "$n" "$(median RAW_TPS "$db:$n")" "$(median OBX_TPS "$db:$n")" "$ratio" "$range" \
            "$(median RAW_LAT "$db:$n")" "$(median OBX_AVG "$db:$n")" "$(median OBX_P50 "$db:$n")" \
            "$(median OBX_P99 "$db:$n")" "$(median CLI_US "$db:$n" raw)" "$(median CLI_US "$db:$n" odbox)" \
            "$retries" "$other"
    done
    if [[ $db == pg && -n ${Q[pg:write]} ]]; then
        say "   the same wire work: pgbench sending odbox's one statement (pgb-1)"
        printf '%7s %11s %11s %11s %11s %9s %10s\n' clients "pgb-1 tps" "odbox act/s" "odbox/pgb-1" range \
            "pgb-1 avg" "pgb-1 cpu"
        for n in "${CLIENTS[@]}"; do
            range=$(for ((r = 1; r <= BENCH_ROUNDS; r++)); do echo "${RATIO1[$db:$n:$r]}"; done | sort -g |
                awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.2f-%.2f", lo, hi}')
            printf '%7s %11.1f %11.1f %11.3f %11s %7.3fms %8.1fus\n' "$n" "$(median RAW_TPS "$db:$n" one)" \
                "$(median OBX_TPS "$db:$n")" "$(median RATIO1 "$db:$n")" "$range" "$(median RAW_LAT "$db:$n" one)" \
                "$(median CLI_US "$db:$n" one)"
        done
    fi
    ((noisy == 0)) ||
        say "warning: other processes used >= 0.2 CPU during some runs: re-run on a quiet machine (or with BENCH_ROUNDS=3)"
    if ((met)); then
        say "goal $GOAL: met (odbox/$raw >= $GOAL at every client count)"
    else
        say "goal $GOAL: not met (odbox/$raw < $GOAL at some client count)"
    fi
done
