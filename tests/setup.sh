#!/usr/bin/env bash
# tests/setup.sh - on a Debian machine (as root): install what building odbox
# needs when it is missing, then configure and build into ./build (out of
# tree; a tree configured in place is cleaned first: tests/configure-dir.sh).
#
# Usage: tests/setup.sh [configure options...]
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_PACKAGES=(gcc g++ make autoconf automake libtool pkg-config unixodbc-dev libjson-c-dev
    uuid-dev check valgrind)
BUILD_PACKAGES+=(groff-base) # tests/man/man.test lints the manual pages with groff
BUILD_PACKAGES+=(libpq-dev) # optional for odbox; the wake-up tests need it (PostgreSQL LISTEN)

# optional for odbox: the NATS JetStream relay (configure --with-nats); tests/relay/nats.test needs it
BUILD_PACKAGES+=(libnats-dev)
# optional: the Kafka relay (configure --with-kafka); its tests use the mock
# cluster librdkafka ships, so Kafka needs no server package
BUILD_PACKAGES+=(librdkafka-dev)
BUILD_PACKAGES+=(librabbitmq-dev) # optional: the RabbitMQ relay (configure --with-rabbitmq)
missing=()
for p in "${BUILD_PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true) == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "odbox-setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
tests/db/install-deps.sh

[[ -x configure ]] || ./autogen.sh >/dev/null
tests/configure-dir.sh build "$@"
cd build
make -j"$(nproc)" >/dev/null
echo "odbox-setup: built $(./odbox version) in $(pwd)" >&2
