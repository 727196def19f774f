#!/usr/bin/env bash
# tests/relay/rabbitmq-server.sh - a private, throwaway RabbitMQ node for the
# relay tests: not the Debian service, nothing on the default ports (its
# own AMQP, distribution and epmd ports), its state under a mktemp dir.
#
#   tests/relay/rabbitmq-server.sh start   prints shell exports:
#       ODBOX_RABBIT_URL ODBOX_RABBIT_NODE ODBOX_RABBIT_DIR ODBOX_RABBIT_PORT
#       ODBOX_RABBIT_EPMD_PORT ODBOX_RABBIT_START_S (seconds to start)
#   tests/relay/rabbitmq-server.sh stop-app|start-app|restart|sever|stall|resume|stop DIR
#       (the node's state dir, ODBOX_RABBIT_DIR; restart: the whole node
#       stopped, then started on the same data and ports; sever: the
#       node closes every client connection, sockets and all; stall:
#       the node's processes stopped with SIGSTOP; resume: continued)
#   tests/relay/rabbitmq-server.sh max-message-size DIR BYTES
#       the node's max_message_size, for channels opened from now on
# Every wait is bounded (RABBIT_START_TIMEOUT, default 60 s).
set -euo pipefail
# the bare scripts, not /usr/sbin wrappers that switch to the rabbitmq user (who cannot read our mktemp dir)
PATH=/usr/lib/rabbitmq/bin:$PATH
log() { printf 'rabbitmq-server.sh: %s\n' "$*" >&2; }
TIMEOUT=${RABBIT_START_TIMEOUT:-60}

free_port() {
    python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])
PY
}

# rabbitmqctl against the node of DIR
ctl() {
    local dir=$1
    shift
    # shellcheck disable=SC1091
    source "$dir/env"
    timeout "$TIMEOUT" rabbitmqctl -n "$RABBITMQ_NODENAME" "$@"
}

# launch DIR: starts the node of DIR (its env, its data) and waits until it is up
launch() {
    local dir=$1
    # shellcheck disable=SC1091
    source "$dir/env"
    setsid rabbitmq-server >>"$dir/log/stdout" 2>&1 </dev/null &
    echo $! >"$dir/server.pid"
    # await_startup fails at once while the node is not yet registered: ask again until the deadline
    local deadline=$((SECONDS + TIMEOUT))
    while ((SECONDS < deadline)); do
        if timeout "$TIMEOUT" rabbitmqctl -n "$RABBITMQ_NODENAME" await_startup --timeout "$TIMEOUT" >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$(cat "$dir/server.pid")" 2>/dev/null || break
        sleep 0.5
    done
    log "the node did not start within ${TIMEOUT}s; its log:"
    tail -20 "$dir/log/stdout" >&2 || true
    return 1
}

# restart DIR: the whole node stopped (rabbitmqctl stop: the Erlang VM
# exits), then started again on the same data directory and ports
restart() {
    local dir=$1 pid i
    pid=$(cat "$dir/server.pid")
    ctl "$dir" stop >/dev/null
    for i in $(seq $((TIMEOUT * 10))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "the node did not stop within ${TIMEOUT}s"
        return 1
    fi
    launch "$dir"
}

start() {
    command -v rabbitmq-server >/dev/null || { log "rabbitmq-server not installed (apt-get install rabbitmq-server)"; exit 77; }
    local dir port dist epmd node t0
    dir=$(mktemp -d /tmp/odbox-rabbit.XXXXXX)
    port=$(free_port)
    dist=$(free_port)
    epmd=$(free_port)
    node="odbox-$(basename "$dir" | cut -d. -f2)@localhost"
    mkdir -p "$dir/mnesia" "$dir/log" "$dir/home"
    # no management plugin, no other plugin: a plain AMQP node
    printf '[].\n' >"$dir/enabled_plugins"
    printf 'loopback_users = none\n' >"$dir/rabbitmq.conf"
    cat >"$dir/env" <<ENV
export RABBITMQ_NODENAME=$node RABBITMQ_NODE_PORT=$port RABBITMQ_DIST_PORT=$dist ERL_EPMD_PORT=$epmd
export RABBITMQ_MNESIA_BASE=$dir/mnesia RABBITMQ_LOG_BASE=$dir/log RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins HOME=$dir/home
ENV
    t0=$(date +%s.%N)
    launch "$dir" || { stop "$dir"; exit 1; }
    echo "export ODBOX_RABBIT_URL=amqp://guest:guest@127.0.0.1:$port/ ODBOX_RABBIT_NODE=$node ODBOX_RABBIT_DIR=$dir"
    echo "export ODBOX_RABBIT_PORT=$port ODBOX_RABBIT_EPMD_PORT=$epmd"
    echo "export ODBOX_RABBIT_START_S=$(echo "$(date +%s.%N) - $t0" | bc)"
}

stop() {
    local dir=$1 pid
    [[ -f $dir/env ]] || return 0
    ctl "$dir" stop >/dev/null 2>&1 || true
    pid=$(cat "$dir/server.pid" 2>/dev/null || true)
    # the script's process group: the beam, epmd and their helpers
    [[ -n $pid ]] && kill -9 -- "-$pid" 2>/dev/null || true
    # the node's epmd daemonised out of that group: it serves our port
    # only, and refuses to die until it has seen the node go (bounded)
    local i
    for i in $(seq 50); do
        epmd -kill >/dev/null 2>&1 && break
        sleep 0.1
    done
    rm -rf "$dir"
}

case ${1:-} in
    start) start ;;
    stop) stop "$2" ;;
    restart) restart "$2" ;;
    stop-app) ctl "$2" stop_app >/dev/null ;;
    start-app) ctl "$2" start_app >/dev/null ;;
    sever) ctl "$2" close_all_connections "odbox test: severed" >/dev/null ;;
    max-message-size) ctl "$2" eval "application:set_env(rabbit, max_message_size, $3)." >/dev/null ;;
    # the node's processes stopped (SIGSTOP: its sockets stay open, unread) and continued
    stall) kill -STOP -- "-$(cat "$2/server.pid")" ;;
    resume) kill -CONT -- "-$(cat "$2/server.pid")" ;;
    *)
        sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
