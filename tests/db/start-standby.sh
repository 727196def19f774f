#!/usr/bin/env bash
# tests/db/start-standby.sh - start a PostgreSQL streaming standby of the
# throwaway primary of a `with-servers.sh --keep` run, and print its
# "export ..." lines (eval-able): ODBOX_TEST_PG_REPLICA_DSN (the standby's
# odbox_test) and ODBOX_PG_REPLICA_PORT. stop-servers.sh stops it too.
#
# Usage: eval "$(tests/db/start-standby.sh [DIR])"   (default: $ODBOX_DB_STATE_DIR)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

dir=${1:-${ODBOX_DB_STATE_DIR:-}}
[[ -n $dir ]] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
odb_load_state "$dir"
[[ -f $dir/pg/state.sh ]] || odb_die "$dir has no PostgreSQL primary"
[[ ! -e $dir/pg-standby ]] || odb_die "$dir has a standby already"
odb_pgs_setup
odb_pgs_exports | tee -a "$dir/env"
