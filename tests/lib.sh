# tests/lib.sh - shared by the script tests (sourced, POSIX sh): result
# counting, expectations on a command's output, SQL through the servers'
# own clients, and one run per dialect whose server the test run has.
# The sourcing script sets tmp (a private directory) first.
# shellcheck shell=sh disable=SC2154 # tmp

pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# expect CODE DESCRIPTION -- COMMAND...: runs it, stdout+stderr in $tmp/out
expect() {
    want=$1 what=$2; shift 3
    "$@" >"$tmp/out" 2>&1
    got=$?
    if [ "$got" = "$want" ]; then ok; else bad "$what: exit $got, want $want"; sed 's/^/    /' "$tmp/out" >&2; fi
}
contains() { if grep -q -- "$2" "$tmp/out"; then ok; else bad "$1: output lacks '$2'"; sed 's/^/    /' "$tmp/out" >&2; fi; }
# lacks DESCRIPTION TEXT: an empty TEXT (a password SQLite has not) is lacking
lacks() { if [ -n "$2" ] && grep -q -- "$2" "$tmp/out"; then bad "$1: output contains '$2'"; else ok; fi; }
same() { if [ "$2" = "$3" ]; then ok; else bad "$1: got '$2', want '$3'"; fi; }

# dsn_parts DSN: d_user d_pass d_host d_port d_db from scheme://user:pass@host:port/db
dsn_parts() {
    rest=${1#*://}
    userinfo=${rest%%@*} hostpart=${rest#*@}
    d_user=${userinfo%%:*} d_pass=${userinfo#*:}
    hostport=${hostpart%%/*} d_db=${hostpart#*/}
    d_db=${d_db%%\?*}
    d_host=${hostport%:*} d_port=${hostport##*:}
    [ "$d_host" != "$hostport" ] || d_port=
}
PSQL=psql
[ -n "${ODBOX_PG_BINDIR:-}" ] && [ -x "$ODBOX_PG_BINDIR/psql" ] && PSQL="$ODBOX_PG_BINDIR/psql"
MYSQLC=$(command -v mariadb || command -v mysql || echo mariadb)
tab=$(printf '\t')

# sql DIALECT DSN DATABASE STATEMENT: prints rows tab-separated, no headers.
# DATABASE "" = none (MySQL/MariaDB) or the DSN's own.
sql() {
    if [ "$1" = sqlite ]; then # through unixODBC's isql: no other client needed
        echo "$4" | isql -b -x0x09 -k "Driver=SQLite3;Database=${2#sqlite://}"
        return
    fi
    dsn_parts "$2"
    if [ "$1" = pg ]; then
        PGPASSWORD=$d_pass PGCONNECT_TIMEOUT=10 PGOPTIONS='-c client_min_messages=warning' "$PSQL" -X -q -At -F "$tab" -v ON_ERROR_STOP=1 -h "$d_host" \
            ${d_port:+-p "$d_port"} -U "$d_user" -d "${3:-$d_db}" -c "$4"
    else
        MYSQL_PWD=$d_pass "$MYSQLC" --protocol=TCP -h "$d_host" ${d_port:+-P "$d_port"} -u "$d_user" \
            -N -B -e "$4" ${3:+"$3"}
    fi
}

# each_dialect NAME FUNCTION: calls FUNCTION DIALECT DSN for sqlite (a
# file in $tmp, no server needed), pg, mariadb and mysql. A dialect without
# a server fails under CI=true and is skipped loudly otherwise; ran counts
# the dialects that ran.
ran=0
each_dialect() {
    for d in sqlite pg mariadb mysql; do
        case $d in
            sqlite) var='' dsn="sqlite://$tmp/$1.db" ;;
            pg) var=ODBOX_TEST_PG_DSN dsn=${ODBOX_TEST_PG_DSN:-} ;;
            mariadb) var=ODBOX_TEST_MARIADB_DSN dsn=${ODBOX_TEST_MARIADB_DSN:-} ;;
            mysql) var=ODBOX_TEST_MYSQL_DSN dsn=${ODBOX_TEST_MYSQL_DSN:-} ;;
        esac
        if [ -n "$dsn" ]; then
            "$2" "$d" "$dsn"
            ran=$((ran + 1))
        elif [ "${CI:-}" = true ]; then
            bad "$d: no server under CI=true ($var unset)"
        else
            echo "*** SKIPPED: $1 tests on $d — $var unset (run through tests/db/with-servers.sh)" >&2
        fi
    done
}

# finish NAME: the summary line and the exit status (77: nothing ran).
finish() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" = 0 ] || exit 1
    [ "$ran" -gt 0 ] || exit 77
    exit 0
}
