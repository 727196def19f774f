# shellcheck shell=bash
# tests/db/lib.sh - shared helpers for the throwaway-server scripts.
#
# Sourced by with-servers.sh, restart-server.sh and stop-servers.sh; not meant
# to be run. Everything here works with bash builtins, coreutils, util-linux
# (setsid, setpriv) and /proc, so a fresh Debian 12 needs nothing beyond the
# database packages installed by install-deps.sh.
#
# Layout of a state directory (one per with-servers.sh run):
#   STATE/.odbox-db-state        marker (stop-servers.sh refuses other dirs)
#   STATE/env                    "export VAR=..." lines handed to CMD (0600)
#   STATE/pg/state.sh            PostgreSQL variables (port, paths)
#   STATE/pg/data/               PGDATA (owned by the postgres OS user as root)
#   STATE/pg/sock/               unix socket directory (0700)
#   STATE/pg/server.log          postmaster log
#   STATE/pg-standby/            a streaming standby of STATE/pg, same layout
#                                (with-servers.sh --standby, start-standby.sh)
#   STATE/mariadb/state.sh       MariaDB variables
#   STATE/mariadb/my.cnf         the only option file mariadbd reads
#   STATE/mariadb/client.cnf     [client] credentials for the odbox user (0600)
#   STATE/mariadb/data/          datadir (owned by the mysql OS user as root)
#   STATE/mariadb/mariadbd.sock  unix socket
#   STATE/mariadb/server.log     mariadbd stderr (error log)

ODB_USER=odbox
ODB_PASSWORD=odbox-test-pw
ODB_HOST=127.0.0.1
ODB_START_TIMEOUT=${ODBOX_DB_START_TIMEOUT:-60}
ODB_STOP_TIMEOUT=${ODBOX_DB_STOP_TIMEOUT:-30}

odb_log() { printf 'odbox-db: %s\n' "$*" >&2; }
odb_die() { odb_log "error: $*"; exit 1; }

# Print the last lines of a server log to stderr (startup failures).
odb_log_tail() {
    local f=$1
    if [[ -f $f ]]; then
        odb_log "last lines of $f:"
        tail -n "${2:-25}" "$f" | sed 's/^/    /' >&2
    fi
}

# ---------------------------------------------------------------- processes

# True when PID exists, is not a zombie and its command line contains NEEDLE
# (guards against signalling a recycled pid).
odb_proc_matches() {
    local pid=$1 needle=$2 stat cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    read -r stat 2>/dev/null <"/proc/$pid/stat" || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]] || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmd == *"$needle"* ]]
}

odb_proc_alive() {
    local pid=$1 stat
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    read -r stat 2>/dev/null <"/proc/$pid/stat" || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# All descendants of PID (one pass over /proc, bash builtins only).
odb_descendants() {
    local f stat pid rest ppid i
    local -A kids=()
    for f in /proc/[0-9]*/stat; do
        read -r stat 2>/dev/null <"$f" || continue
        pid=${stat%% *}
        rest=${stat##*) } # "S PPID PGRP ..."
        rest=${rest#* }
        ppid=${rest%% *}
        kids[$ppid]+="$pid "
    done
    local queue=("$1") out=()
    for ((i = 0; i < ${#queue[@]}; i++)); do
        for pid in ${kids[${queue[i]}]:-}; do
            queue+=("$pid")
            out+=("$pid")
        done
    done
    ((${#out[@]} == 0)) || printf '%s\n' "${out[@]}"
}

# Wait until none of the given pids is alive; return 1 on timeout.
odb_wait_gone() {
    local timeout=$1 p alive
    shift
    local deadline=$((SECONDS + timeout))
    while :; do
        alive=0
        for p in "$@"; do odb_proc_alive "$p" && alive=1; done
        ((alive)) || return 0
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

# ------------------------------------------------------------------- ports

# True when some TCP socket (any state, any address, v4 or v6) uses PORT
# as its local port.
odb_port_in_use() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p="$hex" 'FNR > 1 { n = split($2, a, ":"); if (a[n] == p) { f = 1; exit } }
                     END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Print a currently free port from 20000-31999 (below Linux's ephemeral
# range so outgoing connections never grab it). A race with another process
# is still possible; callers retry with a new port when the bind fails.
odb_pick_port() {
    local i p
    for ((i = 0; i < 500; i++)); do
        p=$((20000 + (RANDOM * 32768 + RANDOM + $$) % 12000))
        odb_port_in_use "$p" || { printf '%s\n' "$p"; return 0; }
    done
    odb_die "no free TCP port found in 20000-31999"
}

# ------------------------------------------------------------- privileges

odb_is_root() { [[ $(id -u) == 0 ]]; }

# Run a command as the PostgreSQL OS user when we are root (initdb and
# postgres refuse to run as root); as ourselves otherwise. Uses setpriv, which
# execs in place (no extra parent process), so $! of a background launch is
# the server's pid.
odb_as_pg() {
    if odb_is_root; then
        setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
    else
        "$@"
    fi
}

# chown to a service user when root (no-op otherwise).
odb_chown() {
    local user=$1
    shift
    if odb_is_root; then chown -R "$user:" "$@"; fi
}

# --------------------------------------------------------------- binaries

odb_find_pg_bindir() {
    local d best=
    for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V); do
        [[ -x $d/postgres && -x $d/initdb ]] && best=$d
    done
    [[ -n $best ]] || odb_die "no PostgreSQL server under /usr/lib/postgresql/*/bin (run tests/db/install-deps.sh)"
    printf '%s\n' "$best"
}

odb_find_prog() {
    local n d
    for n in "$@"; do
        if command -v "$n" >/dev/null 2>&1; then command -v "$n"; return 0; fi
        for d in /usr/sbin /usr/bin /sbin; do
            [[ -x $d/$n ]] && { printf '%s\n' "$d/$n"; return 0; }
        done
    done
    return 1
}

# ------------------------------------------------------------------- state

odb_load_state() {
    local dir=$1
    [[ -f $dir/.odbox-db-state ]] || odb_die "$dir is not an odbox-db state directory"
    ODB_STATE=$dir
    # shellcheck disable=SC1091
    [[ -f $dir/pg/state.sh ]] && . "$dir/pg/state.sh"
    # shellcheck disable=SC1091
    [[ -f $dir/mariadb/state.sh ]] && . "$dir/mariadb/state.sh"
    return 0
}

# ============================================================== PostgreSQL

odb_pg_paths() {
    PG_DIR=$ODB_STATE/pg
    PG_DATA=$PG_DIR/data
    PG_SOCKDIR=$PG_DIR/sock
    PG_LOG=$PG_DIR/server.log
}

odb_pg_write_state() {
    {
        printf 'PG_BINDIR=%q\nPG_DIR=%q\nPG_DATA=%q\nPG_SOCKDIR=%q\n' \
            "$PG_BINDIR" "$PG_DIR" "$PG_DATA" "$PG_SOCKDIR"
        printf 'PG_LOG=%q\nPG_PORT=%q\nPG_VERSION=%q\n' "$PG_LOG" "$PG_PORT" "${PG_VERSION:-}"
    } >"$PG_DIR/state.sh"
}

odb_pg_write_conf() {
    cat >"$PG_DATA/odbox.conf" <<EOF
# written by tests/db (odbox); included from postgresql.conf
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCKDIR'
unix_socket_permissions = 0700
timezone = 'UTC'
log_timezone = 'UTC'
shared_buffers = 128MB
max_connections = 200
log_line_prefix = '%m [%p] %q%u@%d '
# durability left at the defaults on purpose (benchmarks report them):
# fsync = on, synchronous_commit = on, full_page_writes = on
EOF
    odb_chown postgres "$PG_DATA/odbox.conf"
}

odb_pg_initdb() {
    mkdir -p "$PG_DIR" "$PG_SOCKDIR"
    chmod 0700 "$PG_DIR" "$PG_SOCKDIR"
    : >"$PG_LOG"
    odb_chown postgres "$PG_DIR"
    # --no-sync only skips fsync of the freshly created files (throwaway
    # cluster); the running server keeps fsync = on.
    if ! odb_as_pg "$PG_BINDIR/initdb" -D "$PG_DATA" -U postgres -E UTF8 \
        --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 \
        --no-sync --no-instructions >"$PG_DIR/initdb.log" 2>&1; then
        odb_log_tail "$PG_DIR/initdb.log"
        odb_die "initdb failed"
    fi
    printf "\ninclude 'odbox.conf'\n" >>"$PG_DATA/postgresql.conf"
}

# Start the postmaster and wait until it accepts connections.
# Returns 0 ready, 2 port already in use (caller may pick another), 1 other.
odb_pg_launch() {
    odb_pg_write_conf
    local from old
    # After a SIGKILL the lock file stays behind, and a killed postmaster
    # that nobody has reaped yet (a zombie) still "exists" for PostgreSQL's
    # kill(pid, 0) check, so it would refuse to start. Drop the lock files
    # when their pid is not a live postmaster of this data directory.
    local lock
    for lock in "$PG_DATA/postmaster.pid" "$PG_SOCKDIR/.s.PGSQL.$PG_PORT.lock"; do
        [[ -f $lock ]] || continue
        old=$(head -n 1 "$lock" 2>/dev/null) || old=
        if odb_proc_matches "$old" "$PG_DATA"; then
            odb_log "PostgreSQL already running (pid $old)"
            return 1
        fi
        rm -f "$lock"
    done
    from=$(wc -l <"$PG_LOG")
    # setsid: own session, so a Ctrl-C on the terminal of the caller does not
    # reach the server; setpriv/exec keep the pid, so $! is the postmaster.
    if odb_is_root; then
        (cd / && exec setsid setpriv --reuid=postgres --regid=postgres --init-groups -- \
            "$PG_BINDIR/postgres" -D "$PG_DATA") </dev/null >>"$PG_LOG" 2>&1 &
    else
        (cd / && exec setsid "$PG_BINDIR/postgres" -D "$PG_DATA") </dev/null >>"$PG_LOG" 2>&1 &
    fi
    local pid=$!
    printf '%s\n' "$pid" >"$PG_DIR/launch.pid"
    local deadline=$((SECONDS + ODB_START_TIMEOUT))
    while :; do
        if ! odb_proc_alive "$pid"; then
            if tail -n +"$((from + 1))" "$PG_LOG" | grep -q 'Address already in use'; then
                return 2
            fi
            odb_log_tail "$PG_LOG"
            odb_log "PostgreSQL exited during startup"
            return 1
        fi
        if "$PG_BINDIR/pg_isready" -q -h "$PG_SOCKDIR" -p "$PG_PORT" -U postgres -d postgres; then
            return 0
        fi
        if ((SECONDS >= deadline)); then
            odb_log_tail "$PG_LOG"
            odb_log "PostgreSQL not accepting connections after ${ODB_START_TIMEOUT}s"
            return 1
        fi
        sleep 0.1
    done
}

# Run psql as the bootstrap superuser over the private unix socket.
odb_pg_psql() {
    "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCKDIR" -p "$PG_PORT" -U postgres "$@"
}

# Starts the server of the current PG_* paths on a free port (a port lost
# to a race is tried again); $1 names it in messages.
odb_pg_launch_on_a_free_port() {
    local attempt rc
    for attempt in 1 2 3 4 5 6 7 8; do
        PG_PORT=$(odb_pick_port)
        odb_pg_write_state
        rc=0
        odb_pg_launch || rc=$?
        [[ $rc == 0 ]] && break
        [[ $rc == 2 ]] || odb_die "$1 failed to start (log: $PG_LOG)"
        odb_log "$1: port $PG_PORT taken, retrying (attempt $attempt)"
    done
    [[ $rc == 0 ]] || odb_die "$1: could not bind a free port"
}

# Full first-time setup: initdb, start on a free port, create user and dbs.
odb_pg_setup() {
    PG_BINDIR=$(odb_find_pg_bindir)
    odb_pg_paths
    odb_pg_initdb
    odb_pg_launch_on_a_free_port PostgreSQL
    # Password travels on stdin, never on a command line.
    odb_pg_psql -d postgres >/dev/null <<EOF || odb_die "PostgreSQL: creating user/databases failed"
CREATE ROLE $ODB_USER LOGIN SUPERUSER PASSWORD '$ODB_PASSWORD';
CREATE DATABASE odbox_test OWNER $ODB_USER;
CREATE DATABASE odbox_test2 OWNER $ODB_USER;
EOF
    PG_VERSION=$(odb_pg_psql -d postgres -At -c 'SHOW server_version') || PG_VERSION='?'
    PG_VERSION=${PG_VERSION%% *}
    odb_pg_write_state
    odb_log "PostgreSQL $PG_VERSION on $ODB_HOST:$PG_PORT"
}

odb_pg_pid() {
    local pid=
    [[ -f $PG_DATA/postmaster.pid ]] && pid=$(head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null)
    if ! odb_proc_matches "$pid" "$PG_DATA"; then
        pid=$(cat "$PG_DIR/launch.pid" 2>/dev/null) || pid=
        odb_proc_matches "$pid" "$PG_DATA" || return 1
    fi
    printf '%s\n' "$pid"
}

# Stop PostgreSQL. MODE: smart|fast|immediate|kill (default fast).
odb_pg_stop() {
    local mode=${1:-fast} pid sig kids
    pid=$(odb_pg_pid) || return 0
    kids=$(odb_descendants "$pid")
    case $mode in
        smart) sig=TERM ;;
        fast) sig=INT ;;
        immediate) sig=QUIT ;;
        kill) sig=KILL ;;
        *) odb_die "unknown stop mode '$mode'" ;;
    esac
    kill -s "$sig" "$pid" 2>/dev/null || true
    # shellcheck disable=SC2086
    [[ $sig == KILL && -n $kids ]] && kill -s KILL $kids 2>/dev/null
    # shellcheck disable=SC2086
    if ! odb_wait_gone "$ODB_STOP_TIMEOUT" "$pid" $kids; then
        odb_log "PostgreSQL did not stop in ${ODB_STOP_TIMEOUT}s ($mode); killing"
        kids="$kids $(odb_descendants "$pid")"
        # shellcheck disable=SC2086
        kill -s KILL "$pid" $kids 2>/dev/null
        # shellcheck disable=SC2086
        odb_wait_gone 10 "$pid" $kids || odb_log "PostgreSQL pid $pid survived SIGKILL"
    fi
    return 0
}

# Start again (same port) after odb_pg_stop; waits until ready.
odb_pg_start() {
    local rc=0 deadline=$((SECONDS + 15))
    while :; do
        rc=0
        odb_pg_launch || rc=$?
        [[ $rc == 2 && $SECONDS -lt $deadline ]] || break
        sleep 0.5
    done
    [[ $rc == 0 ]] || odb_die "PostgreSQL failed to restart on port $PG_PORT (log: $PG_LOG)"
    odb_log "PostgreSQL restarted on $ODB_HOST:$PG_PORT"
}

# ======================================================= PostgreSQL standby
# A streaming standby of the throwaway primary (STATE/pg-standby, same
# layout as STATE/pg): pg_basebackup -R over the primary's unix socket
# (initdb's pg_hba trusts local replication), its own port and socket,
# hot_standby on (the default). The odbox role and databases come with the
# copy. Call with the primary's variables loaded (odb_load_state).

odb_pgs_paths() {
    PG_DIR=$ODB_STATE/pg-standby
    PG_DATA=$PG_DIR/data
    PG_SOCKDIR=$PG_DIR/sock
    PG_LOG=$PG_DIR/server.log
}

odb_pgs_setup() {
    local src_sock=$PG_SOCKDIR src_port=$PG_PORT
    odb_pgs_paths
    mkdir -p "$PG_DIR" "$PG_SOCKDIR"
    chmod 0700 "$PG_DIR" "$PG_SOCKDIR"
    : >"$PG_LOG"
    odb_chown postgres "$PG_DIR"
    # -c fast: an immediate checkpoint instead of a spread one (seconds).
    # -C -S: a physical replication slot, so the primary keeps every WAL
    # segment the standby has not received yet; without one, a standby cut
    # off by the restarts of the faults tier can find its next segment
    # recycled and never replay again.
    odb_pg_psql -d postgres -At -c \
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'odbox_standby'" \
        >/dev/null
    if ! odb_as_pg "$PG_BINDIR/pg_basebackup" -h "$src_sock" -p "$src_port" -U postgres -D "$PG_DATA" \
        -R -X stream -C -S odbox_standby -c fast --no-sync >"$PG_DIR/basebackup.log" 2>&1; then
        odb_log_tail "$PG_DIR/basebackup.log"
        odb_die "pg_basebackup failed"
    fi
    rm -f "$PG_DATA/postmaster.pid" "$PG_DATA/postmaster.opts"
    odb_pg_launch_on_a_free_port "PostgreSQL standby"
    [[ $(odb_pg_psql -d postgres -At -c 'SELECT pg_is_in_recovery()') == t ]] ||
        odb_die "PostgreSQL standby is not in recovery"
    odb_pg_write_state
    odb_log "PostgreSQL standby of port $src_port on $ODB_HOST:$PG_PORT"
}

# The standby's exports (after odb_pgs_setup, or with its state loaded).
odb_pgs_exports() {
    printf 'export ODBOX_TEST_PG_REPLICA_DSN=%q\n' \
        "postgresql://$ODB_USER:$ODB_PASSWORD@$ODB_HOST:$PG_PORT/odbox_test"
    printf 'export ODBOX_PG_REPLICA_PORT=%q\n' "$PG_PORT"
}

# ================================================================= MariaDB

odb_my_paths() {
    MY_DIR=$ODB_STATE/mariadb
    MY_DATA=$MY_DIR/data
    MY_SOCK=$MY_DIR/mariadbd.sock
    MY_CNF=$MY_DIR/my.cnf
    MY_CLIENT_CNF=$MY_DIR/client.cnf
    MY_PIDFILE=$MY_DIR/mariadbd.pid
    MY_LOG=$MY_DIR/server.log
    MY_INIT=$MY_DIR/init.sql
}

odb_my_write_state() {
    {
        printf 'MY_BIN=%q\nMY_CLIENT=%q\nMY_DIR=%q\nMY_DATA=%q\nMY_SOCK=%q\n' \
            "$MY_BIN" "$MY_CLIENT" "$MY_DIR" "$MY_DATA" "$MY_SOCK"
        printf 'MY_CNF=%q\nMY_CLIENT_CNF=%q\nMY_PIDFILE=%q\nMY_LOG=%q\nMY_INIT=%q\n' \
            "$MY_CNF" "$MY_CLIENT_CNF" "$MY_PIDFILE" "$MY_LOG" "$MY_INIT"
        printf 'MY_PORT=%q\nMY_VERSION=%q\n' "$MY_PORT" "${MY_VERSION:-}"
    } >"$MY_DIR/state.sh"
}

odb_my_write_conf() {
    {
        cat <<EOF
# written by tests/db (odbox); the only option file this mariadbd reads
[mariadbd]
datadir = $MY_DATA
socket = $MY_SOCK
port = $MY_PORT
bind-address = 127.0.0.1
pid-file = $MY_PIDFILE
tmpdir = $MY_DIR/tmp
character-set-server = utf8mb4
default-time-zone = +00:00
max_connections = 300
skip-name-resolve
# durability left at the defaults on purpose (benchmarks report them):
# innodb_flush_log_at_trx_commit = 1, sync_binlog n/a (no binlog)
EOF
        odb_is_root && printf 'user = mysql\n'
    } >"$MY_CNF"
    cat >"$MY_CLIENT_CNF" <<EOF
[client]
user = $ODB_USER
password = $ODB_PASSWORD
host = 127.0.0.1
port = $MY_PORT
EOF
    chmod 0644 "$MY_CNF"
    chmod 0600 "$MY_CLIENT_CNF"
}

odb_my_install() {
    mkdir -p "$MY_DIR/tmp"
    chmod 0700 "$MY_DIR"
    : >"$MY_LOG"
    # Executed once by the server itself at first start (--init-file), so no
    # client login is needed to bootstrap (works as root and as non-root).
    cat >"$MY_INIT" <<EOF
CREATE USER IF NOT EXISTS '$ODB_USER'@'127.0.0.1' IDENTIFIED BY '$ODB_PASSWORD';
CREATE USER IF NOT EXISTS '$ODB_USER'@'localhost' IDENTIFIED BY '$ODB_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO '$ODB_USER'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '$ODB_USER'@'localhost' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS odbox_test CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS odbox_test2 CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS odbox_test_mysql CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS odbox_test_mysql2 CHARACTER SET utf8mb4;
EOF
    chmod 0600 "$MY_INIT"
    MY_PORT=0
    odb_my_write_conf
    odb_chown mysql "$MY_DIR"
    local inst
    inst=$(odb_find_prog mariadb-install-db mysql_install_db) ||
        odb_die "mariadb-install-db not found (run tests/db/install-deps.sh)"
    local userarg=()
    odb_is_root && userarg=(--user=mysql)
    if ! "$inst" --defaults-file="$MY_CNF" --datadir="$MY_DATA" "${userarg[@]}" \
        --skip-test-db --auth-root-authentication-method=socket \
        >"$MY_DIR/install.log" 2>&1 </dev/null; then
        odb_log_tail "$MY_DIR/install.log"
        odb_die "mariadb-install-db failed"
    fi
}

# Start mariadbd and wait until it accepts connections.
# Returns 0 ready, 2 port already in use, 1 other failure.
odb_my_launch() {
    local first=${1:-} from extra=()
    [[ $first == first ]] && extra=(--init-file="$MY_INIT")
    odb_my_write_conf
    odb_chown mysql "$MY_CNF"
    from=$(wc -l <"$MY_LOG")
    # As root mariadbd switches to the mysql user itself (user = mysql).
    (cd / && exec setsid "$MY_BIN" --defaults-file="$MY_CNF" "${extra[@]}") \
        </dev/null >>"$MY_LOG" 2>&1 &
    local pid=$!
    printf '%s\n' "$pid" >"$MY_DIR/launch.pid"
    local deadline=$((SECONDS + ODB_START_TIMEOUT))
    while :; do
        if ! odb_proc_alive "$pid"; then
            if tail -n +"$((from + 1))" "$MY_LOG" | grep -q 'Address already in use'; then
                return 2
            fi
            odb_log_tail "$MY_LOG"
            odb_log "MariaDB exited during startup"
            return 1
        fi
        # A real login as the test user over TCP: proves the port, the
        # grants and (on first start) that the init file has run.
        if "$MY_CLIENT" --defaults-file="$MY_CLIENT_CNF" --connect-timeout=2 \
            -N -B -e 'SELECT 1' >/dev/null 2>&1; then
            return 0
        fi
        if ((SECONDS >= deadline)); then
            odb_log_tail "$MY_LOG"
            odb_log "MariaDB not accepting connections after ${ODB_START_TIMEOUT}s"
            return 1
        fi
        sleep 0.1
    done
}

odb_my_setup() {
    MY_BIN=$(odb_find_prog mariadbd mysqld) || odb_die "mariadbd not found (run tests/db/install-deps.sh)"
    MY_CLIENT=$(odb_find_prog mariadb mysql) || odb_die "mariadb client not found (run tests/db/install-deps.sh)"
    odb_my_paths
    odb_my_install
    local attempt rc
    for attempt in 1 2 3 4 5 6 7 8; do
        MY_PORT=$(odb_pick_port)
        odb_my_write_state
        rc=0
        odb_my_launch first || rc=$?
        [[ $rc == 0 ]] && break
        [[ $rc == 2 ]] || odb_die "MariaDB failed to start (log: $MY_LOG)"
        odb_log "MariaDB: port $MY_PORT taken, retrying (attempt $attempt)"
    done
    [[ $rc == 0 ]] || odb_die "MariaDB: could not bind a free port"
    MY_VERSION=$("$MY_CLIENT" --defaults-file="$MY_CLIENT_CNF" -N -B -e 'SELECT VERSION()') || MY_VERSION='?'
    odb_my_write_state
    odb_log "MariaDB $MY_VERSION on $ODB_HOST:$MY_PORT"
}

odb_my_pid() {
    local pid=
    [[ -f $MY_PIDFILE ]] && pid=$(head -n 1 "$MY_PIDFILE" 2>/dev/null)
    if ! odb_proc_matches "$pid" "$MY_CNF"; then
        pid=$(cat "$MY_DIR/launch.pid" 2>/dev/null) || pid=
        odb_proc_matches "$pid" "$MY_CNF" || return 1
    fi
    printf '%s\n' "$pid"
}

# Stop MariaDB. MODE: fast (SIGTERM: clean shutdown) or kill (SIGKILL).
odb_my_stop() {
    local mode=${1:-fast} pid sig
    pid=$(odb_my_pid) || return 0
    case $mode in
        fast | smart | immediate) sig=TERM ;;
        kill) sig=KILL ;;
        *) odb_die "unknown stop mode '$mode'" ;;
    esac
    kill -s "$sig" "$pid" 2>/dev/null || true
    if ! odb_wait_gone "$ODB_STOP_TIMEOUT" "$pid"; then
        odb_log "MariaDB did not stop in ${ODB_STOP_TIMEOUT}s ($mode); killing"
        kill -s KILL "$pid" 2>/dev/null
        odb_wait_gone 10 "$pid" || odb_log "MariaDB pid $pid survived SIGKILL"
    fi
    return 0
}

odb_my_start() {
    local rc=0 deadline=$((SECONDS + 15))
    while :; do
        rc=0
        odb_my_launch || rc=$?
        [[ $rc == 2 && $SECONDS -lt $deadline ]] || break
        sleep 0.5
    done
    [[ $rc == 0 ]] || odb_die "MariaDB failed to restart on port $MY_PORT (log: $MY_LOG)"
    odb_log "MariaDB restarted on $ODB_HOST:$MY_PORT"
}

# ==================================================================== both

# Stop whatever runs from state dir DIR (quickly: the data is thrown away)
# and remove DIR. Safe to call on a half-initialised directory.
odb_teardown() {
    local dir=$1
    [[ -n $dir && -f $dir/.odbox-db-state ]] || return 0
    (
        set +e
        odb_load_state "$dir"
        if [[ -d $dir/pg-standby ]]; then
            (
                # shellcheck disable=SC1091
                . "$dir/pg-standby/state.sh" 2>/dev/null
                odb_pgs_paths
                odb_pg_stop immediate
            )
        fi &
        if [[ -d $dir/pg ]]; then
            odb_pg_paths
            odb_pg_stop immediate
        fi &
        if [[ -d $dir/mariadb ]]; then
            odb_my_paths
            odb_my_stop kill
        fi &
        wait
    )
    rm -rf -- "$dir"
}
