#!/usr/bin/env bash
# Runs the two relaying scenarios of the MCP conformance suite 0.1.16,
# tools-call-sampling and tools-call-elicitation, RUNS times each (default 50),
# one suite process per run, through Gatehouse with its default limits (no
# max_* overrides) and no retries, fronting:
#   - the suite's reference server, where conformance-next.sh has set it up
#     in $ref_cache (GATEHOUSE_CONFORMANCE_REF_CACHE);
#   - else the project's everything fixture made to behave as that reference
#     did (--ask-on-standalone: the questions go on the session's standalone
#     stream, unrelated to the call) on a busy server (--hold-get-ms: that
#     stream opens late), the race that lost one relayed question in ten.
# A run that does not pass within PER_RUN seconds (default 20; a passing run
# takes about 1 s) fails the script: a relayed request lost on the way shows
# as a hang, not as a slow run. A failure prints the suite's errors and the
# end of Gatehouse's log (run with RUST_LOG=info,rmcp=debug to see the
# upstream client's streams).
set -uo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
node="$root/tools/node_modules/.bin/node"
suite="$root/tools/node_modules/@modelcontextprotocol/conformance/dist/index.js"
ref_cache=${GATEHOUSE_CONFORMANCE_REF_CACHE:-$HOME/.cache/gatehouse/conformance-ref}
runs=${1:-50}
per_run=${PER_RUN:-20}

for need in "$bin:scripts/build.sh" "$suite:.ci/install.sh"; do
  [ -e "${need%%:*}" ] || { echo "missing ${need%%:*}: run ${need#*:}" >&2; exit 1; }
done

tsx="$ref_cache/node_modules/tsx/dist/cli.mjs"
if [ -e "$tsx" ]; then
  fronting="the suite's reference server"
  ref_port=$(free_port)
  start_until "running on" reference env PORT="$ref_port" "$node" "$tsx" "$ref_cache/everything-server.ts"
  upstream="http://127.0.0.1:$ref_port/mcp"
else
  fronting="the everything fixture asking on a late standalone stream"
  start fixture "$node" "$root/end2end/fixtures/everything_server.mjs" --port 0 --ask-on-standalone --hold-get-ms 100
  upstream="$(url_of fixture)/mcp"
fi
cat >"$work/gatehouse.toml" <<TOML
[[upstream]]
name = "reference"
url = "$upstream"
prefix = ""

[[policy]]
pattern = "test_*"
action = "allow"
TOML
start_gatehouse --config "$work/gatehouse.toml"
url=$(url_of gatehouse)
token=$(issue_token conformance)
api_token=$(issue_api_token conformance)
for _ in $(seq 150); do
  curl -fsS -H "Authorization: Bearer $api_token" "$url/metrics" 2>/dev/null |
    grep -q 'gatehouse_upstream_up{upstream="reference",health="up"} 1' && break
  sleep 0.1
done
start_until "auth proxy" proxy "$node" "$root/end2end/conformance/auth-proxy.mjs" 0 "$url" "$token"
port=$(sed -n 's|^auth proxy on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$work/proxy.out" | head -1)
target="http://localhost:$port/mcp"

failed=0
started=$(date +%s)
for i in $(seq "$runs"); do
  for s in tools-call-sampling tools-call-elicitation; do
    if ! timeout "$per_run" "$node" "$suite" server --url "$target" --scenario "$s" >"$work/run.log" 2>&1 ||
      ! grep -q 'Passed: 1/1' "$work/run.log"; then
      failed=$((failed + 1))
      echo "FAIL run $i $s (within ${per_run} s):"
      grep -E 'FAIL|rror' "$work/run.log" | head -5 | sed 's/^/    /'
      tail -20 "$work/gatehouse.err" | sed 's/^/    gatehouse: /'
    fi
  done
done
echo "conformance relays: $((2 * runs - failed)) of $((2 * runs)) passed in $(($(date +%s) - started)) s" \
  "(tools-call-sampling and tools-call-elicitation, $runs runs each, default limits, no retries, fronting $fronting)"
[ "$failed" -eq 0 ]
