#!/usr/bin/env bash
# The cost of the Gatehouse hop: tools/call straight to an upstream (the rmcp
# reference server) against the same call through Gatehouse fronting it
# (Streamable HTTP upstream, prefix ref__, policy allow), in the same run.
# Usage: scripts/bench-upstream.sh [seconds per run, default 10]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
secs=${1:-10}
build_release bench_rmcp_reference bench_rmcp_client

start ref "$rel/examples/bench_rmcp_reference" 127.0.0.1:0
ref=$(url_of ref)
cat >"$work/gatehouse.toml" <<TOML
[[upstream]]
name = "ref"
url = "$ref/mcp"

[[policy]]
pattern = "ref__*"
action = "allow"
TOML
GATEHOUSE_LOG=warn start_gatehouse --config "$work/gatehouse.toml"
gh=$(url_of gatehouse)
token=$(issue_token bench)

ref_sid=$(mcp_initialize "$ref" "")
gh_sid=$(mcp_initialize "$gh" "$token")
# The upstream's tools appear once its client has connected.
for _ in $(seq 100); do
  curl -s -X POST "$gh/mcp" -H "authorization: Bearer $token" -H "mcp-session-id: $gh_sid" -H 'mcp-protocol-version: 2025-11-25' \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' | grep -q ref__gatehouse_status && break
  sleep 0.1
done

echo "| path | conns | req/s | p50 ms | p99 ms | errors |"
echo "|---|---|---|---|---|---|"
for c in 1 32; do
  read -r dq dp50 dp99 derr <<<"$(wrk_tools_call "$secs" "$ref" "" "$ref_sid" gatehouse_status $c)"
  read -r gq gp50 gp99 gerr <<<"$(wrk_tools_call "$secs" "$gh" "$token" "$gh_sid" ref__gatehouse_status $c)"
  echo "| straight to the upstream | $c | $dq | $dp50 | $dp99 | $derr |"
  echo "| through Gatehouse | $c | $gq | $gp50 | $gp99 | $gerr |"
  awk -v dq="$dq" -v gq="$gq" -v d50="$dp50" -v g50="$gp50" -v d99="$dp99" -v g99="$gp99" -v c="$c" \
    'BEGIN{printf "\nat %s connection(s): added latency p50 +%.3f ms (%.0f%%), p99 +%.3f ms (%.0f%%); throughput ratio %.2f\n\n", c, g50-d50, (g50/d50-1)*100, g99-d99, (g99/d99-1)*100, gq/dq}'
done
# The client's share: the same call from rmcp's Streamable HTTP client (the one
# Gatehouse uses upstream), one call after another, straight to the upstream.
read -r _ cp50 cp99 <<<"$("$rel/examples/bench_rmcp_client" "$ref/mcp" gatehouse_status "$secs" | awk '/^RESULT/{split($3,a,"=");split($4,b,"="); print "x", a[2], b[2]}')"
echo "rmcp's client straight to the upstream, 1 call at a time: p50 $cp50 ms, p99 $cp99 ms"
