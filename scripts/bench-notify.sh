#!/usr/bin/env bash
# Wake latency with and without a [[notify]] target, in one run, against the
# release binary. Usage: scripts/bench-notify.sh [approvals]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
build_release bench_notify
run bench_notify "$rel/examples/bench_notify" "$bin" "${1:-1000}"
