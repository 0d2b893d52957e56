#!/usr/bin/env bash
# Cold-start benchmark (issue #16): the release binary's time from spawn to
# /readyz answering 200, over a data dir seeded with 1,000 agent credentials
# and 10,000 audit rows, against an empty one.
# Usage: scripts/bench-startup.sh [credentials] [audit rows] [runs]
# (The example seeds the data dirs through the stores, then starts the binary;
# run ends it, and what it started, however the script ends.)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
build_release bench_startup
run bench_startup "$rel/examples/bench_startup" "$bin" "${1:-1000}" "${2:-10000}" "${3:-10}"
