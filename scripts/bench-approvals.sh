#!/usr/bin/env bash
# Approval benchmarks (wake latency, memory with many watched pending calls)
# against the release binary. Usage: scripts/bench-approvals.sh [approvals] [watchers]
# (BENCH_HTTP2=1: the watchers share HTTP/2 connections, 100 streams each;
# BENCH_TLS=1: Gatehouse serves HTTPS and the clients speak TLS)
# (The example starts the binary, issues its token and signs in itself; run
# ends it, and what it started, however the script ends.)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
build_release bench_approvals
ulimit -n "$(ulimit -Hn)"  # the watchers need one socket each, on both sides
run bench_approvals "$rel/examples/bench_approvals" "$bin" "${1:-1000}" "${2:-10000}"
