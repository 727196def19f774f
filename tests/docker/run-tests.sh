#!/usr/bin/env bash
# tests/docker/run-tests.sh - run the integration tests against PostgreSQL 16,
# MySQL 8.4 and MariaDB 11, and the Kafka relay's against a Kafka 3.9 broker,
# in Docker (tests/docker/compose.yml).
#
# Usage: tests/docker/run-tests.sh [CMD [ARGS...]]    (default: make check,
#        run in the repository's top directory)
#
# Starts the containers and waits until they are healthy (docker compose
# up -d --wait), exports the ODBOX_TEST_* DSNs pointing at them (the MySQL
# dialect at the real MySQL 8.4 container) and ODBOX_TEST_KAFKA_BOOTSTRAP
# (tests/relay/kafka.test then runs its checks against that broker instead
# of librdkafka's mock cluster), runs CMD and always removes the
# containers and their volumes (docker compose down -v) on exit. The exit
# status is CMD's. The host ports are fixed (55432, 53306, 53307, 59092), so only one
# run per machine at a time. ODBOX_DB_STATE_DIR is not set: fault tests that
# need tests/db/restart-server.sh skip here.
# shellcheck disable=SC2317 # functions below are invoked from traps
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PROJECT=${ODBOX_COMPOSE_PROJECT:-odbox-test}
COMPOSE=(docker compose -f "$HERE/compose.yml" -p "$PROJECT")

log() { printf 'odbox-docker: %s\n' "$*" >&2; }

if ! docker compose version >/dev/null 2>&1; then
    log "error: 'docker compose' (Compose v2 plugin) is not available"
    exit 1
fi

cmd_pid=
# Descendants of PID, from /proc (so an interrupted CMD leaves nothing behind).
descendants() {
    local f stat pid rest i
    local -A kids=()
    for f in /proc/[0-9]*/stat; do
        read -r stat 2>/dev/null <"$f" || continue
        pid=${stat%% *}
        rest=${stat##*) }
        rest=${rest#* }
        kids[${rest%% *}]+="$pid "
    done
    local queue=("$1")
    for ((i = 0; i < ${#queue[@]}; i++)); do
        for pid in ${kids[${queue[i]}]:-}; do
            queue+=("$pid")
            printf '%s\n' "$pid"
        done
    done
}
cleanup() {
    local rc=$?
    set +e
    trap '' INT TERM HUP
    if [[ -n $cmd_pid ]]; then
        # shellcheck disable=SC2046
        kill -TERM "$cmd_pid" $(descendants "$cmd_pid") 2>/dev/null
        sleep 1
        # shellcheck disable=SC2046
        kill -KILL "$cmd_pid" $(descendants "$cmd_pid") 2>/dev/null
    fi
    log "removing containers"
    "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

log "starting postgres:16, mysql:8.4, mariadb:11, apache/kafka:3.9.0"
if ! "${COMPOSE[@]}" up -d --wait; then
    "${COMPOSE[@]}" ps >&2 || true
    "${COMPOSE[@]}" logs --tail 40 >&2 || true
    log "error: containers did not become healthy"
    exit 1
fi
log "containers healthy"

pw=odbox-test-pw
export ODBOX_TEST_PG_DSN="postgresql://odbox:$pw@127.0.0.1:55432/odbox_test"
export ODBOX_TEST_PG_DSN2="postgresql://odbox:$pw@127.0.0.1:55432/odbox_test2"
export ODBOX_TEST_MYSQL_DSN="mysql://odbox:$pw@127.0.0.1:53306/odbox_test_mysql"
export ODBOX_TEST_MYSQL_DSN2="mysql://odbox:$pw@127.0.0.1:53306/odbox_test_mysql2"
export ODBOX_TEST_MARIADB_DSN="mariadb://odbox:$pw@127.0.0.1:53307/odbox_test"
export ODBOX_TEST_MARIADB_DSN2="mariadb://odbox:$pw@127.0.0.1:53307/odbox_test2"
export ODBOX_PG_HOST=127.0.0.1 ODBOX_PG_PORT=55432 ODBOX_PG_USER=odbox ODBOX_PG_PASSWORD=$pw
export ODBOX_MYSQL_HOST=127.0.0.1 ODBOX_MYSQL_PORT=53306 ODBOX_MYSQL_USER=odbox ODBOX_MYSQL_PASSWORD=$pw
export ODBOX_MARIADB_HOST=127.0.0.1 ODBOX_MARIADB_PORT=53307 ODBOX_MARIADB_USER=odbox ODBOX_MARIADB_PASSWORD=$pw
export ODBOX_TEST_KAFKA_BOOTSTRAP=127.0.0.1:59092
# Only meaningful for tests/db servers (local binaries, data dirs, restart).
unset ODBOX_DB_STATE_DIR ODBOX_PG_BINDIR ODBOX_PG_DATADIR ODBOX_PG_SOCKDIR \
    ODBOX_MARIADB_SOCKET ODBOX_MARIADB_DATADIR

(($#)) || set -- make -C "$ROOT" check

# Background + wait so that SIGTERM reaches the trap (and the cleanup) at
# once; fd 3 gives CMD our stdin, env --default-signal restores Ctrl-C.
exec 3<&0
env --default-signal=INT,QUIT -- "$@" 0<&3 3<&- &
cmd_pid=$!
exec 3<&-
rc=0
wait "$cmd_pid" || rc=$?
cmd_pid=
exit "$rc"
