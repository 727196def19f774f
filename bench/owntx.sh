#!/usr/bin/env bash
# bench/owntx.sh - a deposit written in the caller's own transaction
# (odbox/tx.h: BEGIN, the caller's own UPDATE ... SET balance = balance + 1,
# one event through odbox_tx_emit, COMMIT) through odbox-bench-deposit
# --owntx, next to the raw client running the same statements plus the
# event INSERT in one transaction, on the same server in the same run:
# pgbench on PostgreSQL, mariadb-slap on MariaDB. Prints transactions per
# second and the ratio odbox / raw (goal: 0.97 at 1 and 8 clients).
#
# Usage: bench/owntx.sh   (under tests/db/with-servers.sh, or with the
# ODBOX_TEST_*_DSN and ODBOX_PG_* / ODBOX_MARIADB_* variables it exports)
#
# Environment: ODBOX_BUILDDIR (default <repo>/build), BENCH_DATABASES
# ("pg mariadb"), BENCH_SECONDS (10), BENCH_CLIENTS ("1 8"), BENCH_ROUNDS
# (1; figures are medians), BENCH_TABLE (bench_wallets, dropped and
# recreated), BENCH_SPLIT_CPUS (0; 1: servers on CPU 0, clients on the
# others, bench/lib.sh), BENCH_PG_DRIVER (odbc; libpq: odbox's PostgreSQL
# DSN with driver=libpq, docs/dsn.md). The ratio never fails the run.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
BENCH_DATABASES=${BENCH_DATABASES:-"pg mariadb"}
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_CLIENTS=${BENCH_CLIENTS:-"1 8"}
BENCH_ROUNDS=${BENCH_ROUNDS:-1}
BENCH_TABLE=${BENCH_TABLE:-bench_wallets}
EVENTLOG=eventlog
RAW_TS='2025-01-01 00:00:00.000000'
[[ $BENCH_SECONDS =~ ^[1-9][0-9]*$ && $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS, BENCH_ROUNDS: positive integers"
[[ $BENCH_TABLE =~ ^[a-z_][a-z0-9_]*$ ]] || die "BENCH_TABLE must be a plain lower-case identifier"
read -ra CLIENTS <<<"$BENCH_CLIENTS"
read -ra DBS <<<"$BENCH_DATABASES"
BIN=$BUILDDIR/bench/odbox-bench-deposit
make -C "$BUILDDIR" -s -j2 bench/odbox-bench-deposit >&2 || die "building odbox-bench-deposit failed"
export ODBOX_MIGRATIONS_DIR=${ODBOX_MIGRATIONS_DIR:-$SRCDIR/migrations}
bench_tmp
split_cpus
say "$(machine_line); $(cpus_line)"

obx() { # db args...
    local db=$1 dsn
    shift
    if [[ $db == pg ]]; then dsn=$ODBOX_TEST_PG_DSN; else dsn=$ODBOX_TEST_MARIADB_DSN; fi
    if [[ $db == pg && $BENCH_PG_DRIVER == libpq ]]; then
        if [[ $dsn == *\?* ]]; then dsn="$dsn&driver=libpq"; else dsn="$dsn?driver=libpq"; fi
    fi
    ODBOX_BENCH_DSN=$dsn "$BIN" --table "$BENCH_TABLE" --eventlog "$EVENTLOG" "$@"
}
# A fresh table and eventlog before every run, then on PostgreSQL a
# CHECKPOINT: the run before leaves dirty pages and WAL, whose checkpoint
# would otherwise land in whichever run comes next.
reset_db() {
    obx "$1" --setup --clients "$2" >/dev/null || die "odbox-bench-deposit --setup failed"
    [[ $1 != pg ]] || pgsql "CHECKPOINT" || die "CHECKPOINT failed"
}
subst() { # text values...: each '?' in order
    local text=$1 r
    shift
    for r in "$@"; do
        [[ $text == *'?'* ]] || return 1
        text=${text/\?/$r}
    done
    [[ $text != *'?'* ]] || return 1
    printf '%s' "$text"
}
sqlq() { local s=${1//\\/\\\\}; printf "'%s'" "${s//\'/\'\'}"; }
declare -A Q
load_sql() { # db dialect clients: the event INSERT odbox sends (deliver_after NULL, as odbox binds it)
    local k v
    while IFS='=' read -r k v; do Q[$1:$k]=$v; done < <("$BIN" --dialect "$2" --print-sql --clients "$3" \
        --table "$BENCH_TABLE" --eventlog "$EVENTLOG")
    v=${Q[$1:insert]/event_date, delivered)/event_date, deliver_after, delivered)}
    Q[$1:insert]=${v/,FALSE)/,NULL,FALSE)}
}

# pgbench: per client (an \if branch each) BEGIN, the same UPDATE as
# odbox's, the same INSERT (gen_random_uuid() where odbox binds ids it
# made), COMMIT.
make_pgbench() { # clients file
    local n=$1 k ins
    ins=${Q[pg:insert]/"CAST(? AS UUID)"/gen_random_uuid()}
    ins=${ins/"CAST(? AS UUID)"/gen_random_uuid()}
    {
        for ((k = 0; k < n; k++)); do
            if ((k == 0)); then printf '\\if :client_id = 0\n'; else printf '\\elif :client_id = %d\n' "$k"; fi
            echo "BEGIN;"
            echo "UPDATE $BENCH_TABLE SET balance = balance + 1 WHERE id = CAST(:wallet$k AS UUID);"
            subst "$ins" :namespace :action_name ":params$k" :ts ":wallet$k" :model_type :event_type :payload ||
                die "unexpected INSERT: $ins"
            printf ';\nCOMMIT;\n'
        done
        printf '\\else\n\\set no_wallet_for_this_client 1 / 0\n\\endif\n'
    } >"$2"
}
run_pgbench() { # clients -> tps
    local n=$1 k vars=()
    make_pgbench "$n" "$TMP/owntx.pgbench"
    for ((k = 0; k < n; k++)); do vars+=(-D "wallet$k=${Q[pg:wallet.$k]}" -D "params$k=${Q[pg:params.$k]}"); done
    vars+=(-D "namespace=${Q[pg:namespace]}" -D "action_name=${Q[pg:action_name]}" -D "model_type=${Q[pg:model_type]}"
        -D "event_type=${Q[pg:event_type]}" -D "payload=${Q[pg:payload]}" -D "ts=$RAW_TS")
    reset_db pg "$n"
    pg "$PGBENCH" -n -M prepared -c "$n" -j "$n" -T "$BENCH_SECONDS" -f "$TMP/owntx.pgbench" "${vars[@]}" \
        >"$TMP/pgbench.out" 2>&1 || { cat "$TMP/pgbench.out" >&2; die "pgbench failed"; }
    sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$TMP/pgbench.out" | tail -1
}

# mariadb-slap: each connection claims its own wallet at connect
# (GET_LOCK), then START TRANSACTION, the UPDATE, the INSERT, COMMIT;
# sized from odbox's rate to run about as long.
SLAP_UUID="CONCAT(LOWER(HEX(RANDOM_BYTES(4))), '-', LOWER(HEX(RANDOM_BYTES(2))), '-4', SUBSTR(LOWER(HEX(RANDOM_BYTES(2))), 2), '-8', SUBSTR(LOWER(HEX(RANDOM_BYTES(2))), 2), '-', LOWER(HEX(RANDOM_BYTES(6))))"
run_slap() { # clients odbox-tps -> tps
    local n=$1 per ts ins p0 w0 pre post init out=$TMP/slap.out secs
    per=$(awk -v r="$2" -v n="$n" -v s="$BENCH_SECONDS" 'BEGIN {x = int(r / n * s + 0.5); print (x < 50 ? 50 : x)}')
    ts=$(sqlq "$RAW_TS")
    ins=$(subst "${Q[mariadb:insert]}" "$SLAP_UUID" "$(sqlq "${Q[mariadb:namespace]}")" "$SLAP_UUID" \
        "$(sqlq "${Q[mariadb:action_name]}")" @p "$ts" @w "$(sqlq "${Q[mariadb:model_type]}")" \
        "$(sqlq "${Q[mariadb:event_type]}")" "$(sqlq "${Q[mariadb:payload]}")") || die "unexpected INSERT"
    printf 'START TRANSACTION;\nUPDATE %s SET balance = balance + 1 WHERE id = @w;\n%s;\nCOMMIT;\n' \
        "$BENCH_TABLE" "$ins" >"$TMP/owntx.slap"
    p0=${Q[mariadb:params.0]} w0=${Q[mariadb:wallet.0]}
    pre=${p0%%"$w0"*} post=${p0#*"$w0"}
    init="SET @p = CONCAT($(sqlq "$pre"), @w := (SELECT CAST(id AS CHAR) FROM $BENCH_TABLE WHERE GET_LOCK(CONCAT('odbox_bench_', id), 0) = 1 ORDER BY id LIMIT 1), $(sqlq "$post"))"
    reset_db mariadb "$n"
    "$SLAP" --defaults-file="$MYCNF" --skip-ssl --create-schema="$MYDB" --no-drop --concurrency="$n" --iterations=1 \
        --number-of-queries=$((n * 4 * per)) --delimiter=';' --query="$TMP/owntx.slap" --init-command="$init" \
        >"$out" 2>&1 || { cat "$out" >&2; die "mariadb-slap failed"; }
    secs=$(sed -n 's/^[[:space:]]*Average number of seconds to run all queries: \([0-9.]*\) seconds.*/\1/p' "$out")
    [[ -n $secs ]] || { cat "$out" >&2; die "cannot parse mariadb-slap output"; }
    local events
    events=$(mysql_ "SELECT COUNT(*) FROM $EVENTLOG.events")
    ((events == n * per)) || die "mariadb-slap: $events events, want $((n * per))"
    awk -v t=$((n * per)) -v s="$secs" 'BEGIN {printf "%.1f", (s > 0 ? t / s : 0)}'
}
run_odbox() { # db clients -> tps (and checks the events)
    local n=$2 out=$TMP/odbox.json tps tx events
    reset_db "$1" "$n"
    obx "$1" --owntx --clients "$n" --seconds "$BENCH_SECONDS" --json >"$out" || die "odbox-bench-deposit --owntx failed"
    tps=$(json_num tps "$out") tx=$(json_num actions "$out")
    if [[ $1 == pg ]]; then events=$(pgsql "SELECT COUNT(*) FROM $EVENTLOG.events"); else events=$(mysql_ "SELECT COUNT(*) FROM $EVENTLOG.events"); fi
    ((events == tx)) || die "odbox --owntx: $events events for $tx transactions"
    printf '%s' "$tps"
}

for db in "${DBS[@]}"; do
    case $db in
        pg) pg_clients; load_sql pg postgresql 8 ;;
        mariadb)
            mariadb_clients
            SLAP=$(command -v mariadb-slap || command -v mysqlslap) || die "mariadb-slap not found"
            MYCNF=$TMP/my.cnf
            (umask 077; printf '[client]\nuser=%s\npassword=%s\nhost=%s\nport=%s\n' "$ODBOX_MARIADB_USER" \
                "$ODBOX_MARIADB_PASSWORD" "$ODBOX_MARIADB_HOST" "$ODBOX_MARIADB_PORT" >"$MYCNF")
            mysql_() { "$MARIADB" --defaults-file="$MYCNF" --skip-ssl -N -B "$MYDB" -e "$1"; }
            load_sql mariadb mariadb 8 ;;
        *) die "BENCH_DATABASES: unknown database '$db'" ;;
    esac
    if [[ $db == pg ]]; then
        say "== PostgreSQL $(pgsql 'SHOW server_version'), fsync=$(pgsql 'SHOW fsync'), synchronous_commit=$(pgsql 'SHOW synchronous_commit'), odbox through $BENCH_PG_DRIVER"
    else
        say "== MariaDB $(mysql_ 'SELECT VERSION()'), innodb_flush_log_at_trx_commit=$(mysql_ 'SELECT @@innodb_flush_log_at_trx_commit'), sync_binlog=$(mysql_ 'SELECT @@sync_binlog')"
    fi
    for n in "${CLIENTS[@]}"; do
        : >"$TMP/o" && : >"$TMP/r"
        for ((round = 1; round <= BENCH_ROUNDS; round++)); do
            # odbox first in odd rounds, the raw client first in even ones
            # (mariadb-slap is sized from odbox's rate: the first round's
            # when it goes first)
            if ((round % 2 == 0)) && [[ $db == pg ]]; then r=$(run_pgbench "$n"); fi
            if ((round % 2 == 0)) && [[ $db != pg ]]; then r=$(run_slap "$n" "$o"); fi
            o=$(run_odbox "$db" "$n")
            if ((round % 2 == 1)) && [[ $db == pg ]]; then r=$(run_pgbench "$n"); fi
            if ((round % 2 == 1)) && [[ $db != pg ]]; then r=$(run_slap "$n" "$o"); fi
            echo "$o" >>"$TMP/o"
            echo "$r" >>"$TMP/r"
            say "   $n client(s), round $round: odbox_tx $o tx/s, raw $r tx/s"
        done
        o=$(median_lines <"$TMP/o") r=$(median_lines <"$TMP/r")
        say "$db, $n client(s): odbox_tx $o tx/s, raw $r tx/s, ratio $(awk -v a="$o" -v b="$r" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}') (goal 0.97)"
    done
done
