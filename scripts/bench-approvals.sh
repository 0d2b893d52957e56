#!/usr/bin/env bash
# Approval benchmarks (wake latency, memory with many watched pending calls)
# against the release binary. Usage: scripts/bench-approvals.sh [approvals] [watchers]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
cargo build --release --bin gatehouse --example bench_approvals >&2
ulimit -n "$(ulimit -Hn)"  # the watchers need one socket each, on both sides
"$CARGO_TARGET_DIR/release/examples/bench_approvals" "$CARGO_TARGET_DIR/release/gatehouse" "${1:-1000}" "${2:-10000}"
