#!/usr/bin/env bash
# The cost of the Gatehouse hop: tools/call straight to an upstream (the rmcp
# reference server) against the same call through Gatehouse fronting it
# (Streamable HTTP upstream, prefix ref__, policy allow), and through the peer
# a user would otherwise pick, FastMCP's proxy (benches/fastmcp_proxy.py:
# create_proxy(url) as FastMCP documents it, a fresh upstream session per
# request; and, as a second row, given one connected upstream session), all
# fronting the same upstream in the same run.
# Needs wrk and a release build; creates the virtualenv tools/.venv-bench
# (tools/requirements-bench.txt, from PyPI) on first use.
# Usage: scripts/bench-upstream.sh [seconds per run, default 10]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
secs=${1:-10}
build_release bench_rmcp_reference bench_rmcp_client

venv=$root/tools/.venv-bench
if [ ! -f "$venv/installed" ] || [ tools/requirements-bench.txt -nt "$venv/installed" ]; then
  echo "installing tools/requirements-bench.txt into $venv" >&2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r tools/requirements-bench.txt >&2
  cp tools/requirements-bench.txt "$venv/installed"
fi

start ref "$rel/examples/bench_rmcp_reference" 127.0.0.1:0
ref=$(url_of ref)
start fastmcp "$venv/bin/python" benches/fastmcp_proxy.py "$ref/mcp"
fm=$(url_of fastmcp)
start fastmcp1 "$venv/bin/python" benches/fastmcp_proxy.py "$ref/mcp" --one-session
fm1=$(url_of fastmcp1)
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
fm_sid=$(mcp_initialize "$fm" "")
fm1_sid=$(mcp_initialize "$fm1" "")
# Each proxy relays the call (no prefix: FastMCP keeps the upstream's names).
for p in "$fm $fm_sid" "$fm1 $fm1_sid"; do
  read -r url sid <<<"$p"
  curl -s -X POST "$url/mcp" -H "mcp-session-id: $sid" -H 'mcp-protocol-version: 2025-11-25' \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gatehouse_status","arguments":{}}}' \
    | grep -q '"isError":false' || { echo "FastMCP's proxy at $url does not relay gatehouse_status" >&2; exit 1; }
done
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
  read -r fq fp50 fp99 ferr <<<"$(wrk_tools_call "$secs" "$fm" "" "$fm_sid" gatehouse_status $c)"
  read -r f1q f1p50 f1p99 f1err <<<"$(wrk_tools_call "$secs" "$fm1" "" "$fm1_sid" gatehouse_status $c)"
  echo "| straight to the upstream | $c | $dq | $dp50 | $dp99 | $derr |"
  echo "| through Gatehouse | $c | $gq | $gp50 | $gp99 | $gerr |"
  echo "| through FastMCP's proxy | $c | $fq | $fp50 | $fp99 | $ferr |"
  echo "| through FastMCP's proxy, one upstream session | $c | $f1q | $f1p50 | $f1p99 | $f1err |"
  awk -v dq="$dq" -v gq="$gq" -v d50="$dp50" -v g50="$gp50" -v d99="$dp99" -v g99="$gp99" -v c="$c" \
    -v fq="$fq" -v f1q="$f1q" '
    function times(a, b) { return b > 0 ? sprintf("%.1f×", a / b) : "∞ (no call answered)" }
    BEGIN {
      printf "\nat %s connection(s): added latency p50 +%.3f ms (%.0f%%), p99 +%.3f ms (%.0f%%); throughput ratio %.2f;", c, g50-d50, (g50/d50-1)*100, g99-d99, (g99/d99-1)*100, gq/dq
      printf " Gatehouse/FastMCP %s, Gatehouse/FastMCP (one upstream session) %s\n\n", times(gq, fq), times(gq, f1q)
    }'
  if [ "$c" = 1 ]; then g1=$gq fq1=$fq; fi
done
awk -v g="$g1" -v f="$fq1" 'BEGIN {
  met = f > 0 && g / f >= 50
  printf "Gatehouse/FastMCP at 1 connection: %s (issue #16 asks at least 50×: %s)\n", (f > 0 ? sprintf("%.0f×", g / f) : "∞"), ((met || f == 0) ? "met" : "NOT met")
}'
# The client's share: the same call from rmcp's Streamable HTTP client (the one
# Gatehouse uses upstream), one call after another, straight to the upstream.
read -r _ cp50 cp99 <<<"$("$rel/examples/bench_rmcp_client" "$ref/mcp" gatehouse_status "$secs" | awk '/^RESULT/{split($3,a,"=");split($4,b,"="); print "x", a[2], b[2]}')"
echo "rmcp's client straight to the upstream, 1 call at a time: p50 $cp50 ms, p99 $cp99 ms"
