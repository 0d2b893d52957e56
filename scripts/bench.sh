#!/usr/bin/env bash
# Benchmarks /mcp tools/call of gatehouse_status over one established session
# beside (a) a server built only from rmcp and (b) a bare axum ceiling, in the
# same run, at 1 and 32 connections. Prints a Markdown table for BENCHMARKS.md.
# Needs wrk (Debian) and a release build (scripts/build.sh).
# Usage: scripts/bench.sh [seconds per run, default 10]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
secs=${1:-10}
build_release bench_rmcp_reference bench_axum_ceiling

start_gatehouse
gh_url=$(url_of gatehouse)
token=$(issue_token bench)
gh_sid=$(mcp_initialize "$gh_url" "$token")
start rmcp "$rel/examples/bench_rmcp_reference" 127.0.0.1:0
rm_url=$(url_of rmcp)
rm_sid=$(mcp_initialize "$rm_url" "")
start axum "$rel/examples/bench_axum_ceiling" 127.0.0.1:0
ax_url=$(url_of axum)

rss() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$(cat "$work/$1.pid")/status"; }

echo "| server | conns | req/s | p50 ms | p99 ms | errors | RSS MiB |"
echo "|---|---|---|---|---|---|---|"
declare -A rps
for c in 1 32; do
  for s in gatehouse rmcp axum; do
    case $s in
      gatehouse) r=$(wrk_tools_call "$secs" "$gh_url" "$token" "$gh_sid" gatehouse_status $c) ;;
      rmcp) r=$(wrk_tools_call "$secs" "$rm_url" "" "$rm_sid" gatehouse_status $c) ;;
      axum) r=$(wrk_tools_call "$secs" "$ax_url" "" "" gatehouse_status $c) ;;
    esac
    read -r q p50 p99 err <<<"$r"
    rps[$s$c]=$q
    echo "| $s | $c | $q | $p50 | $p99 | $err | $(rss $s) |"
  done
done
for c in 1 32; do
  awk -v g="${rps[gatehouse$c]}" -v r="${rps[rmcp$c]}" -v a="${rps[axum$c]}" -v c="$c" \
    'BEGIN{printf "\nratios at %s connection(s): gatehouse/rmcp = %.2f, gatehouse/ceiling = %.2f\n", c, g/r, g/a}'
done
