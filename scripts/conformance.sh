#!/usr/bin/env bash
# Runs every server scenario of the MCP conformance suite (the active suite
# and the pending ones) against
# Gatehouse fronting the "everything" fixture (end2end/fixtures/everything_server.mjs,
# a Streamable HTTP upstream with prefix "" and a policy that allows its
# tools), through a loopback proxy that adds a real token (the suite sends
# none). A scenario that fails fails the run: no retries (a retry hid relays
# lost under load, issue #15); each failure is reported with its errors.
set -uo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
node="$root/tools/node_modules/.bin/node"
# The package's own entry point: `.bin/conformance` may be the 0.2 alias's
# (conformance-next installs a binary of the same name).
suite="$root/tools/node_modules/@modelcontextprotocol/conformance/dist/index.js"

start fixture "$node" "$root/end2end/fixtures/everything_server.mjs" --port 0
upstream="$(url_of fixture)/mcp"

# Gatehouse's default limits: each scenario runs in a suite process of its
# own through a credential of its own (the auth proxy reads the current
# token from a file), as separate clients would; none is raised, so a slot
# a relayed request fails to free shows as a failure, not a quiet retry.
cat >"$work/gatehouse.toml" <<EOF
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

start_gatehouse --config "$work/gatehouse.toml"
url=$(url_of gatehouse)
token=$(issue_token conformance)
# /metrics needs an admin: an admin API token reads it.
metrics_token=$(issue_api_token conformance)
# The upstream's tools must be listed before the suite starts.
for _ in $(seq 100); do
  curl -fsS -H "Authorization: Bearer $metrics_token" "$url/metrics" 2>/dev/null | grep -q 'gatehouse_upstream_up{upstream="everything",health="up"} 1' && break
  sleep 0.1
done

# Port 0: the kernel picks a free one (a random pick could collide with a
# socket of the tests that ran before) and the proxy says which.
printf '%s\n' "$token" >"$work/token"
start_until "auth proxy" proxy "$node" "$root/end2end/conformance/auth-proxy.mjs" 0 "$url" "@$work/token"
port=$(sed -n 's|^auth proxy on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$work/proxy.out" | head -1)
[ -n "$port" ] || { echo "the auth proxy did not say its port" >&2; exit 1; }
target="http://localhost:$port/mcp"

mapfile -t scenarios < <("$node" "$suite" list 2>/dev/null | sed -n '/^Server scenarios/,/^$/p' | grep -o '^  - [a-z0-9-]*' | sed 's/^  - //')
# Every server scenario: the active suite plus the two pending ones (both pass).
: >"$work/suite.log"
for s in "${scenarios[@]}"; do
  scenario_token=$(issue_token "conformance-$s")
  [ -n "$scenario_token" ] || { echo "could not issue a token for $s" >&2; exit 1; }
  printf '%s\n' "$scenario_token" >"$work/token.next" && mv "$work/token.next" "$work/token"
  echo "=== Running scenario: $s ===" >>"$work/suite.log"
  # A scenario that hangs (a lost relayed request) fails, not the whole CI.
  timeout 120 "$node" "$suite" server --url "$target" --scenario "$s" -o "$work/results" >>"$work/suite.log" 2>&1
done
# Each scenario's results land in server-<scenario>-<timestamp>/; one without
# results, or with a failed check, fails the run.
passed=0; failed=0; failures=()
for s in "${scenarios[@]}"; do
  checks=$(cat "$work/results/server-$s"-2*/checks.json 2>/dev/null)
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
