#!/usr/bin/env bash
# examples/demo.sh - the README's first command. On a fresh Debian 12 machine
# (as root) it installs only what building odbox and running its SQLite demo
# need (no database server), builds odbox out of tree in ./build, and runs
# `odbox demo`: a SQLite file (build/odbox-demo.db), a few hundred wallet
# actions, their events delivered to two handlers in the same process, and a
# summary. Run it again to run the demo again on the same file.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(gcc make autoconf automake libtool pkg-config unixodbc unixodbc-dev libjson-c-dev uuid-dev check
    libsqliteodbc)
missing=()
for p in "${PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true) == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "demo: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
# the SQLite ODBC driver under the name odbox's sqlite:// DSNs use
if ! odbcinst -q -d -n SQLite3 >/dev/null 2>&1; then
    odbcinst -i -d -f /usr/share/sqliteodbc/unixodbc.ini >/dev/null
fi

[[ -x configure ]] || ./autogen.sh >/dev/null
tests/configure-dir.sh build
make -C build -j"$(nproc)" odbox >/dev/null
cd build
exec ./odbox demo
