#!/usr/bin/env bash
# Restart benchmark (issue #12): the release binary's time from process start
# to serving with N paused executions stored by a previous run, against an
# empty data dir. Usage: scripts/bench-restore.sh [executions]
# (The example seeds the data dir through the stores, then starts the binary;
# run ends it, and what it started, however the script ends.)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
build_release bench_restore
run bench_restore "$rel/examples/bench_restore" "$bin" "${1:-10000}"
