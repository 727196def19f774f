#!/usr/bin/env bash
# tests/db/install-deps.sh - make sure the Debian packages the real-server
# tests need are installed (PostgreSQL, MariaDB server+client, the ODBC
# drivers and unixODBC). Runs apt-get only when something is missing.
#
# Usage: tests/db/install-deps.sh [--check]
#   --check   only report what is missing (exit 1 if anything is)
#
# Needs root (or password-less sudo) when it has to install.
set -euo pipefail

PACKAGES=(postgresql mariadb-server mariadb-client odbc-postgresql odbc-mariadb
    libsqliteodbc unixodbc)

# the NATS server tests/relay/nats.test starts (with JetStream, on a free port)
PACKAGES+=(nats-server)
# the RabbitMQ relay's tests start a private node (tests/relay/rabbitmq-server.sh)
PACKAGES+=(rabbitmq-server)
# ODBC driver names the tests use, with the template each package ships.
DRIVERS=("PostgreSQL ANSI:/usr/share/psqlodbc/odbcinst.ini.template"
    "MariaDB Unicode:/usr/share/odbc-mariadb/odbcinst.ini.template"
    "SQLite3:/usr/share/sqliteodbc/unixodbc.ini")

check_only=0
case ${1:-} in
    --check) check_only=1 ;;
    "") ;;
    -h | --help)
        sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "install-deps.sh: unknown argument '$1'" >&2
        exit 2
        ;;
esac

log() { printf 'odbox-db: %s\n' "$*" >&2; }

as_root() {
    if [[ $(id -u) == 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        log "error: need root to run: $*"
        exit 1
    fi
}

if ! command -v dpkg-query >/dev/null 2>&1; then
    log "error: not a Debian-like system (no dpkg-query); install PostgreSQL, MariaDB, unixODBC and the psqlODBC/MariaDB/SQLite ODBC drivers yourself"
    exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ $status == installed ]] || missing+=("$p")
done

if ((${#missing[@]})); then
    if ((check_only)); then
        log "missing packages: ${missing[*]}"
        exit 1
    fi
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${missing[@]}" >&2
fi

# The driver packages register their drivers in /etc/odbcinst.ini from
# their postinst; repair the registration if someone removed it.
if command -v odbcinst >/dev/null 2>&1; then
    for d in "${DRIVERS[@]}"; do
        name=${d%%:*}
        tmpl=${d#*:}
        if ! odbcinst -q -d -n "$name" >/dev/null 2>&1; then
            if ((check_only)); then
                log "ODBC driver '$name' not registered"
                exit 1
            fi
            if [[ -f $tmpl ]]; then
                log "registering ODBC driver '$name'"
                as_root odbcinst -i -d -f "$tmpl" >/dev/null
            else
                log "warning: ODBC driver '$name' not registered and $tmpl missing"
            fi
        fi
    done
fi

# psqlODBC takes its process-wide CommLog and Debug from the odbcinst.ini
# sections named after its own libraries ("PostgreSQL ANSI", "PostgreSQL
# Unicode"), whatever a connection string says, and applies them at a
# process's last disconnect. Debian's template has CommLog=1: every process
# that used PostgreSQL would leave a /tmp/psqlodbc_*.log. Turn both off
# (tests/cli/driver-logs.test checks; README, PostgreSQL driver settings).
if command -v odbcinst >/dev/null 2>&1; then
    inst=$(odbcinst -j 2>/dev/null | sed -n 's/^DRIVERS\.*: *//p')
    if [[ -n $inst && -f $inst ]] &&
        awk '/^\[/ { s = ($0 == "[PostgreSQL ANSI]" || $0 == "[PostgreSQL Unicode]") }
             s && tolower($0) ~ /^(commlog|debug) *= *[1-9]/ { found = 1 }
             END { exit !found }' "$inst"; then
        if ((check_only)); then
            log "psqlODBC's CommLog or Debug is on in $inst (leaves /tmp/psqlodbc_*.log files)"
            exit 1
        fi
        log "turning psqlODBC's CommLog and Debug off in $inst"
        tmp=$(mktemp)
        awk '/^\[/ { s = ($0 == "[PostgreSQL ANSI]" || $0 == "[PostgreSQL Unicode]") }
             s && tolower($0) ~ /^commlog *=/ { print "CommLog=0"; next }
             s && tolower($0) ~ /^debug *=/ { print "Debug=0"; next }
             { print }' "$inst" >"$tmp"
        as_root cp "$tmp" "$inst"
        rm -f "$tmp"
    fi
fi

# Sanity: the binaries the harness runs.
ok=1
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || { log "no initdb under /usr/lib/postgresql/*/bin"; ok=0; }
for b in mariadbd mariadb-install-db mariadb isql; do
    command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || { log "missing program: $b"; ok=0; }
done
((ok)) || exit 1
