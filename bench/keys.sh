#!/usr/bin/env bash
# bench/keys.sh - the cost of an idempotency key: deposits through
# odbox-bench-deposit without and with --keys (every deposit its own key,
# as every request would carry one), on the action path (odbox_execute /
# odbox_execute_keyed) and in the caller's own transaction (--owntx,
# odbox_tx_config.idempotency_key), alternating in the same run on the same
# server; on the action path also with the key claimed before perform on
# every dialect (--claim-keys-first, odbox_executor_claim_keys_first).
# Prints transactions per second, medians, and the ratio key / no key.
# The goal is in statements, not time: a key costs at most one extra
# statement, in the same transaction (bench/README.md counts them in the
# servers' statement logs).
#
# Usage: bench/keys.sh   (under tests/db/with-servers.sh, or with the
# ODBOX_TEST_*_DSN and ODBOX_PG_* / ODBOX_MARIADB_* variables it exports)
#
# Environment: ODBOX_BUILDDIR (default <repo>/build), BENCH_DATABASES
# ("pg mariadb"), BENCH_SECONDS (5), BENCH_CLIENTS ("1 8"), BENCH_ROUNDS
# (3; figures are medians). odbox-bench-deposit checks the database after
# every run (events, balances and, with --keys, one key per deposit) and
# fails the run on a mismatch.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRCDIR=$(cd "$HERE/.." && pwd)
BUILDDIR=${ODBOX_BUILDDIR:-$SRCDIR/build}
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
BENCH_DATABASES=${BENCH_DATABASES:-"pg mariadb"}
BENCH_SECONDS=${BENCH_SECONDS:-5}
BENCH_CLIENTS=${BENCH_CLIENTS:-"1 8"}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
[[ $BENCH_SECONDS =~ ^[1-9][0-9]*$ && $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS, BENCH_ROUNDS: positive integers"
read -ra CLIENTS <<<"$BENCH_CLIENTS"
read -ra DBS <<<"$BENCH_DATABASES"
BIN=$BUILDDIR/bench/odbox-bench-deposit
build_bench bench/odbox-bench-deposit
export ODBOX_MIGRATIONS_DIR=${ODBOX_MIGRATIONS_DIR:-$SRCDIR/migrations}
bench_tmp

run() { # dsn clients [options...] -> tps; a fresh table and eventlog each run
    local dsn=$1 n=$2
    shift 2
    ODBOX_BENCH_DSN=$dsn "$BIN" --table bench_keys --eventlog eventlog_keys --setup --clients "$n" >/dev/null ||
        die "odbox-bench-deposit --setup failed"
    [[ $dsn != postgresql* ]] || pgsql "CHECKPOINT" || die "CHECKPOINT failed"
    ODBOX_BENCH_DSN=$dsn "$BIN" --table bench_keys --eventlog eventlog_keys --clients "$n" \
        --seconds "$BENCH_SECONDS" --json "$@" >"$TMP/out.json" || die "odbox-bench-deposit $* failed"
    json_num tps "$TMP/out.json"
}

for db in "${DBS[@]}"; do
    case $db in
        pg)
            pg_clients
            dsn=$ODBOX_TEST_PG_DSN
            say "== PostgreSQL $(pgsql 'SHOW server_version'), fsync=$(pgsql 'SHOW fsync'), synchronous_commit=$(pgsql 'SHOW synchronous_commit'), $(nproc) cores"
            ;;
        mariadb)
            mariadb_clients
            dsn=$ODBOX_TEST_MARIADB_DSN
            say "== MariaDB $(MYSQL_PWD=$ODBOX_MARIADB_PASSWORD "$MARIADB" --skip-ssl -h "$ODBOX_MARIADB_HOST" -P "$ODBOX_MARIADB_PORT" \
                -u "$ODBOX_MARIADB_USER" -N -B -e 'SELECT CONCAT(VERSION(), ", innodb_flush_log_at_trx_commit=",
                @@innodb_flush_log_at_trx_commit)'), $(nproc) cores"
            ;;
        *) die "BENCH_DATABASES: unknown database '$db'" ;;
    esac
    for path in action owntx; do
        opt=()
        [[ $path == action ]] || opt=(--owntx)
        for n in "${CLIENTS[@]}"; do
            : >"$TMP/plain" && : >"$TMP/keyed" && : >"$TMP/first"
            for ((round = 1; round <= BENCH_ROUNDS; round++)); do
                # without a key first in odd rounds, with one first in even ones
                if ((round % 2 == 0)); then k=$(run "$dsn" "$n" "${opt[@]}" --keys); fi
                p=$(run "$dsn" "$n" "${opt[@]}")
                if ((round % 2 == 1)); then k=$(run "$dsn" "$n" "${opt[@]}" --keys); fi
                # an action's key claimed before perform on every dialect
                f=-
                [[ $path == owntx ]] || f=$(run "$dsn" "$n" --keys --claim-keys-first)
                echo "$p" >>"$TMP/plain"
                echo "$k" >>"$TMP/keyed"
                echo "$f" >>"$TMP/first"
                r="   $path, $n client(s), round $round: no key $p tx/s, key $k tx/s"
                [[ $f == - ]] || r+=", key claimed first $f tx/s"
                say "$r"
            done
            p=$(median_lines <"$TMP/plain") k=$(median_lines <"$TMP/keyed")
            line="$db, $path, $n client(s): no key $p tx/s, key $k tx/s, ratio $(awk -v a="$k" -v b="$p" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')"
            if [[ $path == action ]]; then
                f=$(median_lines <"$TMP/first")
                line+="; key claimed first (odbox_executor_claim_keys_first) $f tx/s, ratio $(awk -v a="$f" -v b="$p" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')"
            fi
            say "$line"
        done
    done
done
