#!/usr/bin/env bash
# Runs every server scenario of the MCP conformance suite (the active suite
# and the pending ones) against
# Gatehouse fronting the "everything" fixture (end2end/fixtures/everything_server.mjs,
# a Streamable HTTP upstream with prefix "" and a policy that allows its
# tools), through a loopback proxy that adds a real token (the suite sends
# none). A scenario that fails fails the run: no retries (a retry hid relays
# lost under load, issue #15); each failure is reported with its errors.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${GATEHOUSE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/gatehouse}
node="$root/tools/node_modules/.bin/node"
suite="$root/tools/node_modules/.bin/conformance"

work=$(mktemp -d)
cleanup() { kill "${gh_pid:-}" "${proxy_pid:-}" "${fixture_pid:-}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

wait_for() { # file pattern
  for _ in $(seq 150); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

"$node" "$root/end2end/fixtures/everything_server.mjs" --port 0 >"$work/fixture" 2>"$work/fixture.err" &
fixture_pid=$!
wait_for "$work/fixture" "listening on" || { echo "fixture did not start"; cat "$work/fixture.err"; exit 1; }
upstream=$(grep -o 'http://[0-9.:]*/mcp' "$work/fixture")

# The suite's clients all come through one token (the auth proxy's), and many
# of its scenarios open a session without ending it: one credential stands in
# for dozens of clients here, so it may hold that many sessions.
cat >"$work/gatehouse.toml" <<EOF
max_sessions_per_credential = 1000

[[upstream]]
name = "everything"
url = "$upstream"
prefix = ""

[[policy]]
pattern = "test_*"
action = "allow"

[[policy]]
pattern = "json_schema_*"
action = "allow"
EOF

"$bin" --config "$work/gatehouse.toml" --listen 127.0.0.1:0 --data-dir "$work/data" >"$work/out" 2>"$work/err" &
gh_pid=$!
wait_for "$work/out" "listening on" || { echo "gatehouse did not start"; cat "$work/err"; exit 1; }
url=$(grep -o 'listening on http://[0-9.:]*' "$work/out" | awk '{print $3}')
token=$("$bin" --data-dir "$work/data" token issue --agent conformance --json | "$node" -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).token))')
# /metrics needs an admin: an admin API token reads it.
metrics_token=$("$bin" --data-dir "$work/data" api-token issue --name conformance --json | "$node" -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).token))')
# The upstream's tools must be listed before the suite starts.
for _ in $(seq 100); do
  curl -fsS -H "Authorization: Bearer $metrics_token" "$url/metrics" 2>/dev/null | grep -q 'gatehouse_upstream_up{upstream="everything",health="up"} 1' && break
  sleep 0.1
done

port=$((20000 + RANDOM % 20000))
"$node" "$root/end2end/conformance/auth-proxy.mjs" "$port" "$url" "$token" >"$work/proxy" 2>&1 &
proxy_pid=$!
wait_for "$work/proxy" "auth proxy" || { echo "auth proxy did not start"; cat "$work/proxy"; exit 1; }
target="http://localhost:$port/mcp"

mapfile -t scenarios < <("$node" "$suite" list 2>/dev/null | sed -n '/^Server scenarios/,/^$/p' | grep -o '^  - [a-z0-9-]*' | sed 's/^  - //')
# `--suite all`: the active suite plus the two pending scenarios (both pass).
"$node" "$suite" server --url "$target" --suite all -o "$work/results" >"$work/suite.log" 2>&1
# Each scenario's results land in server-<scenario>-<timestamp>/; one without
# results, or with a failed check, fails the run.
passed=0; failed=0; failures=()
for s in "${scenarios[@]}"; do
  checks=$(cat "$work/results"/server-"$s"-2*/checks.json 2>/dev/null)
  if [ -n "$checks" ] && ! grep -q '"status": *"FAILURE"' <<<"$checks"; then
    passed=$((passed + 1)); continue
  fi
  echo "FAIL $s"; failed=$((failed + 1)); failures+=("$s")
  if [ -z "$checks" ]; then
    echo "    no results; the suite said:"
    awk -v s="=== Running scenario: $s ===" '$0 == s {p = 1; next} /^=== Running scenario:/ {p = 0} p' \
      "$work/suite.log" | head -20 | sed 's/^/    /'
  else
    grep -o '"errorMessage": *"[^"]*"' <<<"$checks" | sed 's/^/    /' | head -5
  fi
done
grep -E "^(✓|✗|Total)" "$work/suite.log"
echo "conformance (all server scenarios, through Gatehouse fronting the everything fixture): $passed passed, $failed failed of ${#scenarios[@]}${failures:+ (failed: ${failures[*]})}"
[ "${#scenarios[@]}" -gt 0 ] && [ "$failed" -eq 0 ]
