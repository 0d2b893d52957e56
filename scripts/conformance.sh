#!/usr/bin/env bash
# Runs the MCP conformance suite's server scenarios against the real binary,
# through a loopback proxy that adds a real token (the suite sends none).
# A failed scenario is retried once (the suite is occasionally flaky on a
# loaded 2-core machine); both attempts are reported.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${GATEHOUSE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/gatehouse}
node="$root/tools/node_modules/.bin/node"
suite="$root/tools/node_modules/.bin/conformance"
scenarios=(server-initialize ping tools-list logging-set-level server-sse-multiple-streams dns-rebinding-protection)

work=$(mktemp -d)
cleanup() { kill "${gh_pid:-}" "${proxy_pid:-}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$bin" --listen 127.0.0.1:0 --data-dir "$work/data" >"$work/out" 2>"$work/err" &
gh_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
url=$(grep -o 'listening on http://[0-9.:]*' "$work/out" | awk '{print $3}')
[ -n "$url" ] || { echo "gatehouse did not start"; cat "$work/err"; exit 1; }
token=$("$bin" --data-dir "$work/data" token issue --agent conformance --json | "$node" -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).token))')

port=$((20000 + RANDOM % 20000))
"$node" "$root/end2end/conformance/auth-proxy.mjs" "$port" "$url" "$token" >"$work/proxy" 2>&1 &
proxy_pid=$!
for _ in $(seq 50); do grep -q "auth proxy" "$work/proxy" 2>/dev/null && break; sleep 0.1; done

passed=0; failed=0; flaky=()
for s in "${scenarios[@]}"; do
  if "$node" "$suite" server --url "http://localhost:$port/mcp" --scenario "$s" >"$work/$s.log" 2>&1; then
    echo "PASS $s"; passed=$((passed + 1))
  elif "$node" "$suite" server --url "http://localhost:$port/mcp" --scenario "$s" >"$work/$s.retry.log" 2>&1; then
    echo "PASS $s (failed once, passed on retry)"; passed=$((passed + 1)); flaky+=("$s")
    sed 's/^/    first attempt: /' "$work/$s.log" | tail -20
  else
    echo "FAIL $s"; failed=$((failed + 1))
    sed 's/^/    /' "$work/$s.retry.log" | tail -40
  fi
done
echo "conformance: $passed passed, $failed failed of ${#scenarios[@]}${flaky:+ (retried: ${flaky[*]})}"
[ "$failed" -eq 0 ]
