#!/usr/bin/env bash
# tests/configure-dir.sh DIR [configure options...] - configures DIR, a
# folder below the top of the source tree, as an out-of-tree build, unless
# it is configured already. tests/setup.sh makes ./build with it and
# tests/run-all.sh ./build-asan.
#
# A source tree configured in place (./configure, as README's Install
# does) refuses out-of-tree builds ("source directory already
# configured"), and its objects would stand in for theirs through VPATH.
# So such a tree is cleaned first with `make distclean`, as automake asks.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: tests/configure-dir.sh DIR [configure options...]}
shift
if [[ -f "$top/config.status" ]]; then
    echo "odbox-setup: $top was configured in place (./configure): running 'make distclean' there so that" \
        "./$dir can be configured out of tree (run ./configure again to build in place)" >&2
    if [[ -f "$top/Makefile" ]]; then
        make -C "$top" distclean >/dev/null
    else
        rm -f "$top/config.status"
    fi
fi
mkdir -p "$top/$dir"
cd "$top/$dir"
[[ -f Makefile ]] || "$top/configure" --quiet "$@"
