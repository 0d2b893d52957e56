#!/usr/bin/env bash
# Benchmarks /mcp tools/call of gatehouse_status over one established session
# beside (a) a server built only from rmcp and (b) a bare axum ceiling, in the
# same run, at 1 and 32 connections. Prints a Markdown table for BENCHMARKS.md.
# Needs wrk (Debian) and a release build (scripts/build.sh).
# Usage: scripts/bench.sh [seconds per run, default 10]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
secs=${1:-10}
cargo build --release --bin gatehouse --example bench_rmcp_reference --example bench_axum_ceiling >&2
rel="$CARGO_TARGET_DIR/release"
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

start() { # name, command... → prints base URL
  local name=$1; shift
  "$@" >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  echo $! >"$work/$name.pid"
  for _ in $(seq 100); do grep -q "listening on" "$work/$name.out" 2>/dev/null && break; sleep 0.1; done
  grep -o 'listening on http://[0-9.:]*' "$work/$name.out" | awk '{print $3}'
}

initialize() { # url, token → session id
  curl -s -D - -o /dev/null -X POST "$1/mcp" -H "authorization: Bearer $2" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}' \
    | awk 'tolower($1)=="mcp-session-id:"{print $2}' | tr -d '\r'
}

gh_url=$(start gatehouse "$rel/gatehouse" --listen 127.0.0.1:0 --data-dir "$work/data")
token=$("$rel/gatehouse" --data-dir "$work/data" token issue --agent bench --json | sed 's/.*"token":"\([^"]*\)".*/\1/')
gh_sid=$(initialize "$gh_url" "$token")
rm_url=$(start rmcp "$rel/examples/bench_rmcp_reference" 127.0.0.1:0)
rm_sid=$(initialize "$rm_url" "")
ax_url=$(start axum "$rel/examples/bench_axum_ceiling" 127.0.0.1:0)

run() { # url, token, sid, connections → "rps p50 p99 errors"
  TOKEN=$2 SID=$3 wrk -t $(( $4 > 1 ? 2 : 1 )) -c "$4" -d "${secs}s" --latency -s benches/wrk/tools_call.lua "$1/mcp" \
    | awk '/^RESULT/{split($2,a,"=");split($3,b,"=");split($4,c,"=");split($5,d,"=");split($6,e,"="); print a[2], b[2], c[2], d[2]+e[2]}'
}
rss() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$(cat "$work/$1.pid")/status"; }

echo "| server | conns | req/s | p50 ms | p99 ms | errors | RSS MiB |"
echo "|---|---|---|---|---|---|---|"
declare -A rps
for c in 1 32; do
  for s in gatehouse rmcp axum; do
    case $s in
      gatehouse) r=$(run "$gh_url" "$token" "$gh_sid" $c) ;;
      rmcp) r=$(run "$rm_url" "" "$rm_sid" $c) ;;
      axum) r=$(run "$ax_url" "" "" $c) ;;
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
