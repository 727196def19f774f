#!/usr/bin/env bash
# tests/db/with-servers.sh - run a command against throwaway PostgreSQL and
# MariaDB servers started from the Debian packages.
#
# Usage: tests/db/with-servers.sh [--only pg|mariadb] [--standby] [--keep] [--] CMD [ARGS...]
#        tests/db/with-servers.sh --keep [--only pg|mariadb] [--standby]
#
#   --only pg|mariadb  start just one server (only its variables are set)
#   --standby          also a PostgreSQL streaming standby of the primary
#                      (ODBOX_TEST_PG_REPLICA_DSN; see start-standby.sh)
#   --keep             leave the servers running afterwards and print the
#                      "export ..." lines on stdout (eval-able); stop them
#                      later with tests/db/stop-servers.sh DIR. CMD optional.
#
# Each run gets its own mktemp -d directory and free loopback ports, so runs
# can overlap. The system clusters and services are never touched. The exit
# status is CMD's; the servers and the directory are always removed (unless
# --keep), also on failure, SIGINT and SIGTERM. See tests/db/README.md.
# shellcheck disable=SC2317 # functions below are invoked from traps
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

usage() {
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

want_pg=1
want_my=1
keep=0
want_standby=0
while (($#)); do
    case $1 in
        --only)
            (($# >= 2)) || usage
            case $2 in
                pg | postgres | postgresql) want_my=0 ;;
                mariadb | mysql) want_pg=0 ;;
                *) usage ;;
            esac
            shift 2
            ;;
        --only=*)
            case ${1#--only=} in
                pg | postgres | postgresql) want_my=0 ;;
                mariadb | mysql) want_pg=0 ;;
                *) usage ;;
            esac
            shift
            ;;
        --keep) keep=1; shift ;;
        --standby) want_standby=1; shift ;;
        -h | --help) usage ;;
        --) shift; break ;;
        -*) usage ;;
        *) break ;;
    esac
done
(($# || keep)) || usage

if [[ ${ODBOX_DB_SKIP_INSTALL:-0} != 1 ]]; then
    "$HERE/install-deps.sh"
fi

# ------------------------------------------------------------ state dir
# /tmp by default rather than $TMPDIR: unix socket paths must stay short
# (~100 bytes) and, as root, the postgres/mysql users must be able to reach
# the directory.
base=${ODBOX_DB_TMPDIR:-/tmp}
ODB_STATE=$(mktemp -d "$base/odbox-db.XXXXXXXX")
touch "$ODB_STATE/.odbox-db-state"
chmod 0711 "$ODB_STATE" # traverse only: the servers' users need to get in
((${#ODB_STATE} <= 60)) || odb_log "warning: long state dir path $ODB_STATE (unix socket limits)"

setup_pids=()
cmd_pid=
started=0

kill_tree() { # SIG PID...: signal processes and all their descendants
    local sig=$1 p all=()
    shift
    for p in "$@"; do
        [[ -n $p ]] || continue
        all+=("$p")
        mapfile -t -O "${#all[@]}" all < <(odb_descendants "$p")
    done
    ((${#all[@]})) || return 0
    kill -s "$sig" "${all[@]}" 2>/dev/null || true
    odb_wait_gone 5 "${all[@]}" || kill -s KILL "${all[@]}" 2>/dev/null || true
    return 0
}

on_exit() {
    local rc=$?
    set +e
    trap '' INT TERM HUP
    kill_tree TERM "${setup_pids[@]}" "$cmd_pid"
    if ((keep && started)); then
        exit "$rc"
    fi
    odb_teardown "$ODB_STATE"
    exit "$rc"
}
on_signal() {
    local sig=$1 num=$2
    set +e
    trap '' INT TERM HUP
    odb_log "caught SIG$sig, stopping servers"
    kill_tree "$sig" "$cmd_pid"
    cmd_pid=
    exit $((128 + num))
}
trap on_exit EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

# ---------------------------------------------------------------- start
# Both servers are initialised and started in parallel (2 cores are
# enough; each is mostly waiting on I/O).
t0=$SECONDS
if ((want_pg)); then
    (odb_pg_setup) &
    setup_pids+=($!)
fi
if ((want_my)); then
    (odb_my_setup) &
    setup_pids+=($!)
fi
failed=0
for p in "${setup_pids[@]}"; do
    wait "$p" || failed=1
done
setup_pids=()
((failed == 0)) || odb_die "server startup failed"
odb_load_state "$ODB_STATE"
if ((want_standby && want_pg)); then
    (odb_pgs_setup) || odb_die "standby startup failed"
fi
odb_log "servers ready in $((SECONDS - t0))s (state dir $ODB_STATE)"

# ------------------------------------------------------------- exports
pw=$ODB_PASSWORD
vars=(ODBOX_DB_STATE_DIR)
export ODBOX_DB_STATE_DIR=$ODB_STATE
pg_vars=(ODBOX_TEST_PG_DSN ODBOX_TEST_PG_DSN2 ODBOX_PG_HOST ODBOX_PG_PORT
    ODBOX_PG_BINDIR ODBOX_PG_DATADIR ODBOX_PG_SOCKDIR ODBOX_PG_USER ODBOX_PG_PASSWORD)
my_vars=(ODBOX_TEST_MARIADB_DSN ODBOX_TEST_MARIADB_DSN2 ODBOX_TEST_MYSQL_DSN
    ODBOX_TEST_MYSQL_DSN2 ODBOX_MARIADB_HOST ODBOX_MARIADB_PORT ODBOX_MARIADB_SOCKET
    ODBOX_MARIADB_DATADIR ODBOX_MARIADB_USER ODBOX_MARIADB_PASSWORD)
if ((want_pg)); then
    export ODBOX_TEST_PG_DSN="postgresql://$ODB_USER:$pw@$ODB_HOST:$PG_PORT/odbox_test"
    export ODBOX_TEST_PG_DSN2="postgresql://$ODB_USER:$pw@$ODB_HOST:$PG_PORT/odbox_test2"
    export ODBOX_PG_HOST=$ODB_HOST ODBOX_PG_PORT=$PG_PORT ODBOX_PG_BINDIR=$PG_BINDIR
    export ODBOX_PG_DATADIR=$PG_DATA ODBOX_PG_SOCKDIR=$PG_SOCKDIR
    export ODBOX_PG_USER=$ODB_USER ODBOX_PG_PASSWORD=$pw
    vars+=("${pg_vars[@]}")
else
    unset "${pg_vars[@]}"
fi
unset ODBOX_TEST_PG_REPLICA_DSN ODBOX_PG_REPLICA_PORT
if [[ -d $ODB_STATE/pg-standby ]]; then
    eval "$(. "$ODB_STATE/pg-standby/state.sh" && odb_pgs_exports)"
    vars+=(ODBOX_TEST_PG_REPLICA_DSN ODBOX_PG_REPLICA_PORT)
fi
if ((want_my)); then
    export ODBOX_TEST_MARIADB_DSN="mariadb://$ODB_USER:$pw@$ODB_HOST:$MY_PORT/odbox_test"
    export ODBOX_TEST_MARIADB_DSN2="mariadb://$ODB_USER:$pw@$ODB_HOST:$MY_PORT/odbox_test2"
    export ODBOX_TEST_MYSQL_DSN="mysql://$ODB_USER:$pw@$ODB_HOST:$MY_PORT/odbox_test_mysql"
    export ODBOX_TEST_MYSQL_DSN2="mysql://$ODB_USER:$pw@$ODB_HOST:$MY_PORT/odbox_test_mysql2"
    export ODBOX_MARIADB_HOST=$ODB_HOST ODBOX_MARIADB_PORT=$MY_PORT
    export ODBOX_MARIADB_SOCKET=$MY_SOCK ODBOX_MARIADB_DATADIR=$MY_DATA
    export ODBOX_MARIADB_USER=$ODB_USER ODBOX_MARIADB_PASSWORD=$pw
    vars+=("${my_vars[@]}")
else
    unset "${my_vars[@]}"
fi
(
    umask 077
    for v in "${vars[@]}"; do printf 'export %s=%q\n' "$v" "${!v}"; done >"$ODB_STATE/env"
)
started=1

if ((keep)); then
    # The export lines (they include the fixed test password) go to stdout
    # only, for eval; the human-readable hint goes to stderr.
    cat "$ODB_STATE/env"
    odb_log "servers kept running: . $ODB_STATE/env   stop: $HERE/stop-servers.sh $ODB_STATE"
    (($#)) || exit 0
fi

# ------------------------------------------------------------------ run
# CMD runs in the background so that SIGTERM/SIGINT reach our trap at once
# (bash defers traps while a foreground child runs). Bash gives background
# commands /dev/null as stdin and ignored SIGINT/SIGQUIT: fd 3 hands CMD our
# stdin and env --default-signal restores Ctrl-C.
exec 3<&0
env --default-signal=INT,QUIT -- "$@" 0<&3 3<&- &
cmd_pid=$!
exec 3<&-
rc=0
wait "$cmd_pid" || rc=$?
cmd_pid=
exit "$rc"
