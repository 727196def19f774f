#!/usr/bin/env bash
# tests/db/restart-server.sh - stop one of the servers started by
# with-servers.sh and start it again on the same port (for fault tests).
#
# Usage: tests/db/restart-server.sh [--mode fast|immediate|kill] [--down SECS] pg|mariadb
#        tests/db/restart-server.sh --stop [--mode ...] pg|mariadb   (leave it down)
#        tests/db/restart-server.sh --start pg|mariadb               (bring it back)
#
#   --mode fast       (default) PostgreSQL fast shutdown (SIGINT: clients
#                     disconnected, checkpoint); MariaDB SIGTERM (clean)
#   --mode immediate  PostgreSQL SIGQUIT (crash recovery on start); MariaDB
#                     same as fast
#   --mode kill       SIGKILL to the server (and PostgreSQL's children):
#                     a crash; recovery runs on start
#   --down SECS       stay down this long before starting again (default 0)
#
# Reads the state directory from $ODBOX_DB_STATE_DIR (exported to the command
# run by with-servers.sh), or --state-dir DIR. Returns once the server
# accepts connections again. Run it as the same OS user as with-servers.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

mode=fast
down=0
action=restart
state=${ODBOX_DB_STATE_DIR:-}
which=
while (($#)); do
    case $1 in
        --mode) (($# >= 2)) || usage; mode=$2; shift 2 ;;
        --mode=*) mode=${1#--mode=}; shift ;;
        --down) (($# >= 2)) || usage; down=$2; shift 2 ;;
        --state-dir) (($# >= 2)) || usage; state=$2; shift 2 ;;
        --stop) action=stop; shift ;;
        --start) action=start; shift ;;
        pg | postgres | postgresql) which=pg; shift ;;
        mariadb | mysql) which=mariadb; shift ;;
        *) usage ;;
    esac
done
[[ -n $which ]] || usage
case $mode in fast | immediate | kill) ;; *) usage ;; esac
[[ -n $state ]] || odb_die "ODBOX_DB_STATE_DIR is not set (run under tests/db/with-servers.sh)"
odb_load_state "$state"

if [[ $which == pg ]]; then
    [[ -f $ODB_STATE/pg/state.sh ]] || odb_die "no PostgreSQL in $ODB_STATE"
    [[ $action == start ]] || odb_pg_stop "$mode"
    [[ $action == stop ]] && { odb_log "PostgreSQL stopped ($mode)"; exit 0; }
    sleep "$down"
    odb_pg_start
else
    [[ -f $ODB_STATE/mariadb/state.sh ]] || odb_die "no MariaDB in $ODB_STATE"
    [[ $action == start ]] || odb_my_stop "$mode"
    [[ $action == stop ]] && { odb_log "MariaDB stopped ($mode)"; exit 0; }
    sleep "$down"
    odb_my_start
fi
