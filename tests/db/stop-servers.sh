#!/usr/bin/env bash
# tests/db/stop-servers.sh - stop the servers of a `with-servers.sh --keep`
# run and delete its state directory.
#
# Usage: tests/db/stop-servers.sh [DIR]    (default: $ODBOX_DB_STATE_DIR)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

dir=${1:-${ODBOX_DB_STATE_DIR:-}}
[[ -n $dir ]] || { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ -f $dir/.odbox-db-state ]] || odb_die "$dir is not an odbox-db state directory"
odb_teardown "$dir"
odb_log "stopped and removed $dir"
