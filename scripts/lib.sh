# shellcheck shell=bash
# Sourced by the scripts that run Gatehouse (test.sh, conformance.sh and the
# bench scripts); sets nothing of the shell's options (each script does). Gives:
#   root, rel      the repository; the release dir of CARGO_TARGET_DIR (exported,
#                  $root/target unless set)
#   bin            the gatehouse binary: GATEHOUSE_BIN, else $rel/gatehouse
#   work           a scratch dir, removed on exit with every server started here
#   start ...      a server in the background, once it says it is listening
#   url_of NAME    the URL it listens on
#   build_release, stop, issue_token, issue_api_token, json_get,
#   mcp_initialize, wrk_tools_call
# JSON is read in one way only: Python's json module (json_get).

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
rel="$CARGO_TARGET_DIR/release"
bin=${GATEHOUSE_BIN:-$rel/gatehouse}
work=$(mktemp -d)
pids=()

cleanup() {
  if [ "${#pids[@]}" -gt 0 ]; then kill "${pids[@]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# build_release EXAMPLE...: cargo builds the release binary and these examples
# (its output on stderr); bin is then that binary, whatever GATEHOUSE_BIN says.
build_release() {
  local example examples=()
  for example in "$@"; do examples+=(--example "$example"); done
  cargo build --release --bin gatehouse "${examples[@]}" >&2
  bin="$rel/gatehouse"
}

# wait_for FILE PATTERN [PID]: until FILE has a line matching PATTERN (15 s at
# most, and no longer than process PID lives); whether it came.
wait_for() {
  for _ in $(seq 150); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then break; fi
    sleep 0.1
  done
  grep -q "$2" "$1" 2>/dev/null
}

# start_until PATTERN NAME COMMAND...: runs COMMAND in the background (stdout in
# $work/NAME.out, stderr in $work/NAME.err, pid in $work/NAME.pid), stopped on
# exit; returns once its stdout has a line matching PATTERN, or exits the script
# saying why not.
start_until() {
  local pattern=$1 name=$2
  shift 2
  "$@" >"$work/$name.out" 2>"$work/$name.err" &
  local pid=$!
  pids+=("$pid")
  echo "$pid" >"$work/$name.pid"
  if ! wait_for "$work/$name.out" "$pattern" "$pid"; then
    echo "$name did not start:" >&2
    cat "$work/$name.out" "$work/$name.err" >&2
    exit 1
  fi
}

# start NAME COMMAND...: start_until its "listening on" line.
start() { start_until "listening on" "$@"; }

# start_gatehouse [ARGS...]: $bin on a free loopback port with the data dir
# $work/data, as server "gatehouse".
# shellcheck disable=SC2120 # the arguments are optional
start_gatehouse() { start gatehouse "$bin" --listen 127.0.0.1:0 --data-dir "$work/data" "$@"; }

# stop NAME: ends server NAME (started above) and waits for it.
stop() {
  local pid
  pid=$(cat "$work/$1.pid")
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# url_of NAME: the base URL server NAME printed in its "listening on" line.
url_of() {
  awk 'match($0, /listening on https?:\/\/[0-9.:]+/) { print substr($0, RSTART + 13, RLENGTH - 13); exit }' \
    "$work/$1.out"
}

# json_get KEY: the top-level KEY of the JSON object on stdin.
json_get() {
  local python="$root/tools/.venv/bin/python"
  [ -x "$python" ] || python=python3
  "$python" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# issue_token AGENT: a new agent token from $bin on $work/data.
issue_token() { "$bin" --data-dir "$work/data" token issue --agent "$1" --json | json_get token; }

# issue_api_token NAME: a new admin API token from $bin on $work/data.
issue_api_token() { "$bin" --data-dir "$work/data" api-token issue --name "$1" --json | json_get token; }

# mcp_initialize URL TOKEN: initializes an MCP session at URL/mcp (TOKEN may
# be empty); its session id.
mcp_initialize() {
  curl -s -D - -o /dev/null -X POST "$1/mcp" -H "authorization: Bearer $2" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}' \
    | awk 'tolower($1)=="mcp-session-id:"{print $2}' | tr -d '\r'
}

# wrk_tools_call SECONDS URL TOKEN SID TOOL CONNECTIONS: wrk's tools/call of
# TOOL at URL/mcp (benches/wrk/tools_call.lua) → "rps p50_ms p99_ms errors".
wrk_tools_call() {
  TOKEN=$3 SID=$4 TOOL=$5 wrk -t $(($6 > 1 ? 2 : 1)) -c "$6" -d "$1s" --latency -s "$root/benches/wrk/tools_call.lua" "$2/mcp" \
    | awk '/^RESULT/{split($2,a,"=");split($3,b,"=");split($4,c,"=");split($5,d,"=");split($6,e,"="); print a[2], b[2], c[2], d[2]+e[2]}'
}
