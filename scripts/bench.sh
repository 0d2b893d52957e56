#!/usr/bin/env bash
# Benchmarks /mcp tools/call of gatehouse_status over one established session
# beside (a) a server built only from rmcp and (b) a bare axum ceiling, in the
# same run, at 1 and 32 connections. Prints a Markdown table for BENCHMARKS.md,
# with each server's CPU time per request (utime+stime over the run).
# Needs wrk (Debian) and a release build (scripts/build.sh).
# Usage: scripts/bench.sh [seconds per run, default 10]
# BASELINE_BIN=path/to/an/older/gatehouse adds it as a row "baseline" (build an
# older commit's binary with `git worktree add` to compare before and after).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
secs=${1:-10}
build_release bench_rmcp_reference bench_axum_ceiling

declare -A url token sid
start_gatehouse
url[gatehouse]=$(url_of gatehouse)
token[gatehouse]=$(issue_token bench)
servers=(gatehouse)
if [ -n "${BASELINE_BIN:-}" ]; then
  start baseline "$BASELINE_BIN" --listen 127.0.0.1:0 --data-dir "$work/baseline"
  url[baseline]=$(url_of baseline)
  token[baseline]=$("$BASELINE_BIN" --data-dir "$work/baseline" token issue --agent bench --json | json_get token)
  servers+=(baseline)
fi
start rmcp "$rel/examples/bench_rmcp_reference" 127.0.0.1:0
url[rmcp]=$(url_of rmcp)
token[rmcp]=
start axum "$rel/examples/bench_axum_ceiling" 127.0.0.1:0
url[axum]=$(url_of axum)
token[axum]=
servers+=(rmcp axum)
for s in "${servers[@]}"; do
  if [ "$s" = axum ]; then sid[$s]=; else sid[$s]=$(mcp_initialize "${url[$s]}" "${token[$s]}"); fi
done

pid_of() { cat "$work/$1.pid"; }
rss() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$(pid_of "$1")/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$(pid_of "$1")/stat"; }

echo "| server | conns | req/s | p50 ms | p99 ms | errors | CPU µs/req | RSS MiB |"
echo "|---|---|---|---|---|---|---|---|"
declare -A rps
ticks=$(getconf CLK_TCK)
for c in 1 32; do
  for s in "${servers[@]}"; do
    before=$(cpu_ticks "$s")
    r=$(wrk_tools_call "$secs" "${url[$s]}" "${token[$s]}" "${sid[$s]}" gatehouse_status $c)
    after=$(cpu_ticks "$s")
    read -r q p50 p99 err <<<"$r"
    rps[$s$c]=$q
    per=$(awk -v t=$((after - before)) -v hz="$ticks" -v q="$q" -v s="$secs" 'BEGIN{printf "%.1f", (q > 0) ? t / hz * 1e6 / (q * s) : 0}')
    echo "| $s | $c | $q | $p50 | $p99 | $err | $per | $(rss "$s") |"
  done
done
for c in 1 32; do
  awk -v g="${rps[gatehouse$c]}" -v r="${rps[rmcp$c]}" -v a="${rps[axum$c]}" -v b="${rps[baseline$c]:-0}" -v c="$c" \
    'BEGIN{printf "\nratios at %s connection(s): gatehouse/rmcp = %.2f, gatehouse/ceiling = %.2f", c, g/r, g/a;
           if (b > 0) printf ", gatehouse/baseline = %.2f, baseline/rmcp = %.2f", g/b, b/r; printf "\n"}'
done
