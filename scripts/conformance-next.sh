#!/usr/bin/env bash
# Runs the MCP conformance suite 0.2 (tools/node_modules/conformance-next,
# @modelcontextprotocol/conformance@0.2.0-alpha.12) by requirement set:
# `--requirements 2025-11-25` (the stateful wire) and then
# `--requirements 2026-07-28` (the stateless wire), against Gatehouse fronting
# two upstreams, both with prefix "": the "everything" fixture
# (end2end/fixtures/everything_server.mjs: the 2025 tools, resources and
# prompts) and the "everything-modern" fixture ($CARGO_TARGET_DIR/release/
# everything-modern, `cargo build --release -p gatehouse-fixtures`: the tools
# only the 2026-07-28 wire has). The suite reaches Gatehouse through the
# loopback auth proxy (it sends no token) at a localhost URL, which the
# dns-rebinding scenario needs.
#
# Every scored scenario of both sets must pass, and against the project's
# fixtures so must the tasks extension's `tasks-*` (not scored by the suite,
# but Gatehouse serves tasks and passes an upstream's through). The other
# not-scored ones (pending) are run and counted, and do not fail the run.
#
# Then, if the suite's reference server is at hand (a directory named by
# GATEHOUSE_CONFORMANCE_REF holding examples/servers/typescript, or that folder
# itself; else a git repository or bare mirror of the suite named by
# GATEHOUSE_CONFORMANCE_MIRROR; there is no default), it is set up in
# $HOME/.cache/gatehouse/conformance-ref (npm install once), and both sets run
# against it directly and through Gatehouse fronting it (prefix ""): a
# scenario that passes directly and fails through Gatehouse fails the run.
# Without the reference, that comparison is skipped, saying so.
set -uo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
node="$root/tools/node_modules/.bin/node"
package="$root/tools/node_modules/conformance-next"
suite="$package/dist/index.js"
modern="$rel/everything-modern"
revisions=(2025-11-25 2026-07-28)
mirror=${GATEHOUSE_CONFORMANCE_MIRROR:-}
ref_cache="$HOME/.cache/gatehouse/conformance-ref"

missing=0
for need in "$bin:scripts/build.sh (the gatehouse binary)" \
  "$modern:cargo build --release -p gatehouse-fixtures" \
  "$node:.ci/install.sh (node in tools/)" "$suite:.ci/install.sh (conformance-next in tools/)"; do
  [ -e "${need%%:*}" ] || { echo "missing ${need%%:*}: run ${need#*:}" >&2; missing=1; }
done
[ "$missing" -eq 0 ] || exit 1

# scored REV / not_scored REV: the server scenarios requirement set REV
# scores, and those it runs without scoring (its frozen YAML file, one a line).
requirements() { echo "$package/requirements/$1.yaml"; }
scored() {
  awk '/^[a-z_]+:/ { inside = ($0 == "server:"); next } inside && /^  - / { print $2 }' "$(requirements "$1")"
}
not_scored() {
  awk '/^[a-z_]+:/ { inside = ($0 == "not_scored:"); next }
    inside && /^  - scenario:/ { name = $3 } inside && /^    leg: server$/ { print name }' "$(requirements "$1")"
}

# verdict DIR SCENARIO: PASS, FAIL or NONE (no results) for SCENARIO's checks
# in the suite's output dir DIR.
verdict() {
  local checks
  checks=$(cat "$1/server-$2"-2*/checks.json 2>/dev/null)
  if [ -z "$checks" ]; then
    echo NONE
  elif grep -q '"status": *"FAILURE"' <<<"$checks"; then
    echo FAIL
  else
    echo PASS
  fi
}

# explain DIR SCENARIO VERDICT: why SCENARIO did not pass (its failed checks'
# messages, or what the suite said about it).
explain() {
  if [ "$3" = NONE ]; then
    echo "    no results; the suite said:"
    awk -v s="=== Running scenario: $2 ===" '$0 == s {p = 1; next} /^=== Running scenario:/ {p = 0} p' \
      "$1.log" | head -20 | sed 's/^/    /'
  else
    cat "$1/server-$2"-2*/checks.json | grep -o '"errorMessage": *"[^"]*"' | head -5 | sed 's/^/    /'
  fi
}

# run_set NAME URL REV DETAIL: runs requirement set REV against URL into
# $work/NAME-REV (results) and $work/NAME-REV.log; writes the scenarios that
# passed, one a line, to $work/NAME-REV.pass; prints the failures (with their
# reasons if DETAIL is "detail") and a summary. Whether every scored one (and,
# with DETAIL, every tasks-* one) passed.
run_set() {
  local name=$1 url=$2 rev=$3 detail=$4 out="$work/$1-$3" s v
  local -a scored_list not_scored_list scored_failed=() not_scored_failed=() tasks_failed=()
  mapfile -t scored_list < <(scored "$rev")
  mapfile -t not_scored_list < <(not_scored "$rev")
  if [ "${#scored_list[@]}" -eq 0 ]; then
    echo "FAIL: no scored server scenarios found in $(requirements "$rev")"
    return 1
  fi
  # The suite's exit status says less than the checks (it ignores not-scored
  # scenarios); the checks are read below.
  run "suite-$name-$rev" "$node" "$suite" server --url "$url" --requirements "$rev" -o "$out" >"$out.log" 2>&1
  : >"$out.pass"
  for s in "${scored_list[@]}"; do
    v=$(verdict "$out" "$s")
    if [ "$v" = PASS ]; then echo "$s" >>"$out.pass"; continue; fi
    scored_failed+=("$s")
    if [ "$detail" = detail ]; then echo "FAIL $s ($rev, $name)"; explain "$out" "$s" "$v"; fi
  done
  for s in "${not_scored_list[@]}"; do
    v=$(verdict "$out" "$s")
    if [ "$v" = PASS ]; then echo "$s" >>"$out.pass"; continue; fi
    not_scored_failed+=("$s")
    # The tasks extension is Gatehouse's to serve and pass through (issue 28):
    # against the project's fixtures its scenarios count as if scored.
    if [ "$detail" = detail ] && [[ $s == tasks-* ]]; then tasks_failed+=("$s"); fi
    if [ "$detail" = detail ]; then echo "not scored, failed: $s ($rev, $name)"; explain "$out" "$s" "$v"; fi
  done
  echo "conformance-next $rev, $name: scored $((${#scored_list[@]} - ${#scored_failed[@]})) passed," \
    "${#scored_failed[@]} failed of ${#scored_list[@]}${scored_failed[*]:+ (failed: ${scored_failed[*]})};" \
    "not scored $((${#not_scored_list[@]} - ${#not_scored_failed[@]})) passed, ${#not_scored_failed[@]} failed" \
    "of ${#not_scored_list[@]}${not_scored_failed[*]:+ (failed: ${not_scored_failed[*]})}"
  [ "${#scored_failed[@]}" -eq 0 ] && [ "${#tasks_failed[@]}" -eq 0 ]
}

# front NAME CONFIG UPSTREAM...: starts Gatehouse as NAME (data in
# $work/NAME-data) with CONFIG, waits until every UPSTREAM is up, and puts the
# auth proxy NAME-proxy before it; sets front_url to the proxy's localhost URL.
front() {
  local name=$1 config=$2 data="$work/$1-data" url token api_token upstream port
  shift 2
  start "$name" "$bin" --listen 127.0.0.1:0 --data-dir "$data" --config "$config"
  url=$(url_of "$name")
  token=$("$bin" --data-dir "$data" token issue --agent conformance --json | json_get token)
  # /metrics needs an admin: an admin API token reads it.
  api_token=$("$bin" --data-dir "$data" api-token issue --name conformance --json | json_get token)
  for upstream in "$@"; do
    for _ in $(seq 150); do
      curl -fsS -H "Authorization: Bearer $api_token" "$url/metrics" 2>/dev/null |
        grep -q "gatehouse_upstream_up{upstream=\"$upstream\",health=\"up\"} 1" && continue 2
      sleep 0.1
    done
    echo "FAIL: upstream $upstream is not up in Gatehouse ($name) after 15 s:" >&2
    cat "$work/$name.err" >&2
    exit 1
  done
  # Port 0: the kernel picks a free one and the proxy says which.
  start_until "auth proxy" "$name-proxy" "$node" "$root/end2end/conformance/auth-proxy.mjs" 0 "$url" "$token"
  port=$(sed -n 's|^auth proxy on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$work/$name-proxy.out" | head -1)
  [ -n "$port" ] || { echo "the auth proxy of $name did not say its port" >&2; exit 1; }
  front_url="http://localhost:$port/mcp"
}

# gatehouse_config UPSTREAM=URL...: a Gatehouse config on stdout fronting each
# UPSTREAM at URL with prefix "", allowing the suite's tools.
gatehouse_config() {
  local pair pattern
  # The suite's clients all come through one token (the auth proxy's), and
  # many of its scenarios leave a session or a stream open: one credential
  # stands in for dozens of clients here, with as many requests in progress.
  # The session cap stays at its default: the token's least recently used
  # session not in use makes room for its next one.
  printf 'max_requests_per_credential = 1000\n'
  for pair in "$@"; do
    printf '\n[[upstream]]\nname = "%s"\nurl = "%s"\nprefix = ""\n' "${pair%%=*}" "${pair#*=}"
  done
  for pattern in "test_*" "json_schema_*" greet slow_compute failing_job protocol_error_job confirm_delete \
    multi_input; do
    printf '\n[[policy]]\npattern = "%s"\naction = "allow"\n' "$pattern"
  done
}

failed=0

# 1. Gatehouse fronting both fixtures.
start fixture "$node" "$root/end2end/fixtures/everything_server.mjs" --port 0
# The triggers listed too: Gatehouse forwards only the tools it lists.
start modern "$modern" --port 0 --list-triggers
gatehouse_config "everything=$(url_of fixture)/mcp" "modern=$(url_of modern)/mcp" >"$work/gatehouse.toml"
front gatehouse "$work/gatehouse.toml" everything modern
for rev in "${revisions[@]}"; do
  run_set gatehouse "$front_url" "$rev" detail || failed=1
done
for name in gatehouse-proxy gatehouse modern fixture; do stop "$name"; done

# 2. The reference server, directly and through Gatehouse.
ref_source=""
if [ -n "${GATEHOUSE_CONFORMANCE_REF:-}" ]; then
  for dir in "$GATEHOUSE_CONFORMANCE_REF/examples/servers/typescript" "$GATEHOUSE_CONFORMANCE_REF"; do
    if [ -f "$dir/everything-server.ts" ] && [ -f "$dir/package.json" ]; then ref_source=$dir; break; fi
  done
  [ -n "$ref_source" ] ||
    echo "GATEHOUSE_CONFORMANCE_REF=$GATEHOUSE_CONFORMANCE_REF holds no everything-server.ts and package.json"
elif [ -n "$mirror" ] && git -C "$mirror" cat-file -e HEAD:examples/servers/typescript/everything-server.ts 2>/dev/null; then
  ref_source="$work/ref-source"
  mkdir -p "$ref_source"
  git -C "$mirror" archive HEAD examples/servers/typescript | tar -x -C "$ref_source" --strip-components=3 ||
    { echo "FAIL: could not extract the reference server from $mirror"; exit 1; }
fi
if [ -z "$ref_source" ]; then
  echo "reference server unavailable (set GATEHOUSE_CONFORMANCE_REF or GATEHOUSE_CONFORMANCE_MIRROR; see README):" \
    "skipping the direct-versus-Gatehouse comparison"
  [ "$failed" -eq 0 ]
  exit
fi

# Files are replaced only when they changed, so the installed packages stay
# (npm install runs again only when package.json changed).
mkdir -p "$ref_cache"
for file in "$ref_source"/*; do
  [ -f "$file" ] || continue
  cmp -s "$file" "$ref_cache/${file##*/}" || cp "$file" "$ref_cache/"
done
if [ ! -d "$ref_cache/node_modules" ] || [ "$ref_cache/package.json" -nt "$ref_cache/node_modules/.package-lock.json" ]; then
  echo "installing the reference server's packages in $ref_cache"
  if ! (cd "$ref_cache" && PATH="$root/tools/node_modules/.bin:$PATH" npm install --no-audit --no-fund >"$work/ref-npm.log" 2>&1); then
    echo "FAIL: npm install of the reference server failed:"
    tail -20 "$work/ref-npm.log"
    exit 1
  fi
fi
tsx="$ref_cache/node_modules/tsx/dist/cli.mjs"
[ -f "$tsx" ] || { echo "FAIL: tsx is missing from $ref_cache/node_modules (its package.json must list it)"; exit 1; }

ref_port=$(free_port)
start_until "running on" reference env PORT="$ref_port" "$node" "$tsx" "$ref_cache/everything-server.ts"
gatehouse_config "reference=http://127.0.0.1:$ref_port/mcp" >"$work/gatehouse-ref.toml"
front gatehouse-ref "$work/gatehouse-ref.toml" reference
for rev in "${revisions[@]}"; do
  # Direct: the reference's own failures are its own; only what it passes counts.
  run_set reference "http://localhost:$ref_port/mcp" "$rev" summary || true
  run_set via-gatehouse "$front_url" "$rev" summary || true
  direct=$(sort "$work/reference-$rev.pass")
  fronted=$(sort "$work/via-gatehouse-$rev.pass")
  lost=$(comm -23 <(echo "$direct") <(echo "$fronted"))
  echo "conformance-next $rev, reference directly passes: $(echo "$direct" | tr '\n' ' ')"
  echo "conformance-next $rev, reference through Gatehouse passes: $(echo "$fronted" | tr '\n' ' ')"
  if [ -n "$lost" ]; then
    failed=1
    echo "FAIL: conformance-next $rev: passes against the reference directly, fails through Gatehouse:" \
      "$(echo "$lost" | tr '\n' ' ')"
    while read -r s; do explain "$work/via-gatehouse-$rev" "$s" "$(verdict "$work/via-gatehouse-$rev" "$s")"; done <<<"$lost"
  else
    echo "conformance-next $rev: everything the reference passes directly also passes through Gatehouse"
  fi
done
[ "$failed" -eq 0 ]
