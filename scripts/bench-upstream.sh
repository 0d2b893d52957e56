#!/usr/bin/env bash
# The cost of the Gatehouse hop: tools/call straight to an upstream (the rmcp
# reference server) against the same call through Gatehouse fronting it
# (Streamable HTTP upstream, prefix ref__, policy allow), in the same run.
# Usage: scripts/bench-upstream.sh [seconds per run, default 10]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
secs=${1:-10}
cargo build --release --bin gatehouse --example bench_rmcp_reference --example bench_rmcp_client >&2
rel="$CARGO_TARGET_DIR/release"
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

wait_for() { for _ in $(seq 100); do grep -q "listening on" "$1" 2>/dev/null && return; sleep 0.1; done; }
"$rel/examples/bench_rmcp_reference" 127.0.0.1:0 >"$work/ref.out" 2>&1 &
pids+=($!); wait_for "$work/ref.out"
ref=$(grep -o 'http://[0-9.:]*' "$work/ref.out" | head -1)
cat >"$work/gatehouse.toml" <<TOML
[[upstream]]
name = "ref"
url = "$ref/mcp"

[[policy]]
pattern = "ref__*"
action = "allow"
TOML
GATEHOUSE_LOG=warn "$rel/gatehouse" --config "$work/gatehouse.toml" --listen 127.0.0.1:0 --data-dir "$work/data" >"$work/gh.out" 2>&1 &
pids+=($!); wait_for "$work/gh.out"
gh=$(grep -o 'listening on http://[0-9.:]*' "$work/gh.out" | awk '{print $3}')
token=$("$rel/gatehouse" --data-dir "$work/data" token issue --agent bench --json | sed 's/.*"token":"\([^"]*\)".*/\1/')

initialize() { # url, token → session id
  curl -s -D - -o /dev/null -X POST "$1/mcp" -H "authorization: Bearer $2" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}' \
    | awk 'tolower($1)=="mcp-session-id:"{print $2}' | tr -d '\r'
}
ref_sid=$(initialize "$ref" "")
gh_sid=$(initialize "$gh" "$token")
# The upstream's tools appear once its client has connected.
for _ in $(seq 100); do
  curl -s -X POST "$gh/mcp" -H "authorization: Bearer $token" -H "mcp-session-id: $gh_sid" -H 'mcp-protocol-version: 2025-11-25' \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' | grep -q ref__gatehouse_status && break
  sleep 0.1
done

run() { # url, token, sid, tool, connections → "rps p50 p99 errors"
  TOKEN=$2 SID=$3 TOOL=$4 wrk -t $(( $5 > 1 ? 2 : 1 )) -c "$5" -d "${secs}s" --latency -s benches/wrk/tools_call.lua "$1/mcp" \
    | awk '/^RESULT/{split($2,a,"=");split($3,b,"=");split($4,c,"=");split($5,d,"=");split($6,e,"="); print a[2], b[2], c[2], d[2]+e[2]}'
}
echo "| path | conns | req/s | p50 ms | p99 ms | errors |"
echo "|---|---|---|---|---|---|"
for c in 1 32; do
  read -r dq dp50 dp99 derr <<<"$(run "$ref" "" "$ref_sid" gatehouse_status $c)"
  read -r gq gp50 gp99 gerr <<<"$(run "$gh" "$token" "$gh_sid" ref__gatehouse_status $c)"
  echo "| straight to the upstream | $c | $dq | $dp50 | $dp99 | $derr |"
  echo "| through Gatehouse | $c | $gq | $gp50 | $gp99 | $gerr |"
  awk -v dq="$dq" -v gq="$gq" -v d50="$dp50" -v g50="$gp50" -v d99="$dp99" -v g99="$gp99" -v c="$c" \
    'BEGIN{printf "\nat %s connection(s): added latency p50 +%.3f ms (%.0f%%), p99 +%.3f ms (%.0f%%); throughput ratio %.2f\n\n", c, g50-d50, (g50/d50-1)*100, g99-d99, (g99/d99-1)*100, gq/dq}'
done
# The client's share: the same call from rmcp's Streamable HTTP client (the one
# Gatehouse uses upstream), one call after another, straight to the upstream.
read -r _ cp50 cp99 <<<"$("$rel/examples/bench_rmcp_client" "$ref/mcp" gatehouse_status "$secs" | awk '/^RESULT/{split($3,a,"=");split($4,b,"="); print "x", a[2], b[2]}')"
echo "rmcp's client straight to the upstream, 1 call at a time: p50 $cp50 ms, p99 $cp99 ms"
