#!/bin/sh
# make installcheck: builds tests/install/program.c with nothing but
# `pkg-config --cflags --libs odbox` from the installed odbox.pc and runs
# it, builds examples/quickstart/quickstart.c the same way (strict C99)
# and runs it on SQLite with the installed migrations, and checks that
# --static lists what libodbox.a needs.
# Usage: installcheck.sh SRCDIR LIBDIR CC
set -eu
src=$1 libdir=$2 cc=$3
if [ -n "${DESTDIR:-}" ]; then
    echo "installcheck: checks the installed copy at its configured prefix; DESTDIR ($DESTDIR) is not supported" >&2
    exit 1
fi
[ -f "$libdir/pkgconfig/odbox.pc" ] || { echo "installcheck: $libdir/pkgconfig/odbox.pc not found: run make install first" >&2; exit 1; }
tmp=$(mktemp -d /tmp/odbox-installcheck.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
cflags=$(pkg-config --cflags odbox)
libs=$(pkg-config --libs odbox)
echo "installcheck: $cc $cflags program.c $libs"
# shellcheck disable=SC2086 # the flags are words
$cc $cflags -o "$tmp/program" "$src/tests/install/program.c" $libs
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/program"
# the README's program, as the README builds it, run on a SQLite file with
# the installed framework migrations (tests/quickstart/quickstart.test runs
# it on the servers)
# shellcheck disable=SC2086
$cc -std=c99 -Wall -Wextra -Wpedantic -Werror "$src/examples/quickstart/quickstart.c" $cflags $libs -o "$tmp/quickstart"
env -u ODBOX_MIGRATIONS_DIR -u ODBOX_CONFIG LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    ODBOX_DSN="sqlite://$tmp/quickstart.db" QUICKSTART_MIGRATIONS="$src/examples/quickstart/migrations" \
    "$tmp/quickstart" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; echo "installcheck: the quickstart failed on SQLite" >&2; exit 1; }
grep -q '^deposited 150: balance 150, version 2$' "$tmp/out" || { cat "$tmp/out" >&2; echo "installcheck: the quickstart printed no deposit" >&2; exit 1; }
static=$(pkg-config --static --libs odbox)
# libpq only in a build that found it (configure --without-libpq: none)
pq=
case " $(pkg-config --print-requires-private odbox | tr '\n' ' ') " in *" libpq "*) pq=-lpq ;; esac
# shellcheck disable=SC2086 # pq is empty or one word
for lib in -lodbox -ljson-c -lodbc -luuid $pq; do
    case " $static " in
    *" $lib "*) ;;
    *) echo "installcheck: pkg-config --static --libs odbox lacks $lib: $static" >&2; exit 1 ;;
    esac
done
echo "installcheck: a program builds and runs with pkg-config's flags for odbox alone"
