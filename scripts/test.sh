#!/usr/bin/env bash
# The whole test suite: set up, build, then every test that needs no GPU.
# Ends with CTest's summary line ("100% tests passed, 0 tests failed out of N").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
cd build
ctest -LE gpu --output-on-failure -j"$(nproc)" --timeout 900
