#!/bin/sh
# Runs the integration suites for one dialect (pg | mariadb | mysql | sqlite).
export ODBOX_TEST_DIALECT="$1"
exec "${ODBOX_BUILDDIR:-.}/tests/integration/integration"
