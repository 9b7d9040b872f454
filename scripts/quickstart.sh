#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, then run bare `hearth`.
# Arguments are passed to hearth (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/bin/hearth "$@"
