# shellcheck shell=bash
# Sourced by every script under scripts/ that starts a process; sets nothing of
# the shell's options (each script does). Gives:
#   root, rel      the repository; the release dir of CARGO_TARGET_DIR (exported,
#                  $root/target unless set)
#   bin            the gatehouse binary: GATEHOUSE_BIN, else $rel/gatehouse
#   work           a scratch dir, removed on exit
#   spawn, run, start, start_until, start_gatehouse, stop, at_exit
#                  processes (below)
#   url_of NAME    the URL server NAME listens on
#   build_release, issue_token, issue_api_token, json_get, free_port, alive,
#   mcp_initialize, wrk_tools_call, wrk_command, wrk_result, haproxy_cfg,
#   use_postgres
# JSON is read in one way only: Python's json module (json_get).
#
# Processes. Everything a script starts in the background goes through spawn
# (start and run use it): it runs in a session of its own (setsid), so it and
# whatever it starts in turn (a stdio upstream's child, a bench example's
# Gatehouse, wrk's workers) end together, even the ones whose parent died
# first; its pid and name are appended to the file $work/procs, so a process
# started in a subshell or command substitution is recorded all the same. On
# exit — normal, `exit 1`, set -e, Ctrl-C (INT), TERM or HUP — cleanup sends
# TERM to every process of every recorded session, waits up to 10 s for them
# to end, KILLs what is left and reports each one so left as
#   FAIL: process PID (command, of NAME) survived
# which makes the script exit non-zero; then it runs the steps registered with
# at_exit (last first: drop a database, then stop the PostgreSQL it was on),
# whose failure fails the script too, and removes $work. A script never sets
# its own EXIT, INT, TERM or HUP trap: it registers steps with at_exit.
#
# (A command in the foreground, wrk or cargo, gets Ctrl-C from the terminal
# with the script; a script that is sent a signal alone runs its trap once
# the foreground command returns. A long foreground step goes through `run`,
# whose wait the signal interrupts at once.)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
rel="$CARGO_TARGET_DIR/release"
bin=${GATEHOUSE_BIN:-$rel/gatehouse}
work=$(mktemp -d)
: >"$work/procs"
exit_steps=()

# at_exit COMMAND: a shell command (one string, eval'd) cleanup runs after
# every started process has ended; the last registered runs first. Its
# failure fails the script.
at_exit() { exit_steps+=("$1"); }

# alive PID: whether process PID exists and is not a zombie (init may leave a
# dead orphan unreaped for a while).
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${stat:0:1}" != Z ]
}

# start_time PID: when process PID started (clock ticks since boot), or "-".
start_time() {
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo -; return; }
  read -ra fields <<<"${stat##*) }"
  echo "${fields[19]}"
}

# ours PID START: whether session PID (spawned at START) may still have
# processes of this script: process PID is gone (then a process of session
# PID is one of ours: the kernel reuses no pid that still names a session),
# or it is the same process (started at START), not a reuse of its pid.
ours() {
  [ -e "/proc/$1" ] || return 0
  [ "$(start_time "$1")" = "$2" ]
}

# session_members SID...: the live (non-zombie) processes of sessions SID,
# one "pid sid command" a line.
session_members() {
  [ "$#" -gt 0 ] || return 0
  ps -e -o pid=,sid=,stat=,comm= | awk -v sids=" $* " '
    index(sids, " " $2 " ") && $3 !~ /^Z/ { print $1, $2, $4 }'
}

# end_sessions TIMEOUT SID...: TERM to every process of sessions SID (each
# spawned, so its session id is the pid spawn recorded; check `ours` first),
# then up to TIMEOUT seconds for them all to end; whatever is left is printed
# ("pid sid command" a line) and KILLed. Whether nothing was left.
end_sessions() {
  local timeout=$1 pid sid comm left
  shift
  [ "$#" -gt 0 ] || return 0
  for sid in "$@"; do kill -TERM -- "-$sid" 2>/dev/null; done
  for _ in $(seq $((timeout * 10))); do
    left=$(session_members "$@")
    [ -n "$left" ] || break
    # Members in process groups of their own, or forked since: TERM them too.
    while read -r pid sid comm; do kill -TERM "$pid" 2>/dev/null; done <<<"$left"
    sleep 0.1
  done
  left=$(session_members "$@")
  [ -n "$left" ] || return 0
  echo "$left"
  while read -r pid sid comm; do kill -KILL "$pid" 2>/dev/null; done <<<"$left"
  return 1
}

cleanup() {
  local rc=$? pid start name sid comm step i
  set +e
  trap - ERR INT TERM HUP
  local -A name_of=()
  while read -r pid start name; do
    if ours "$pid" "$start"; then name_of[$pid]=$name; fi
  done <"$work/procs"
  if [ "${#name_of[@]}" -gt 0 ]; then
    while read -r pid sid comm; do
      [ -n "$pid" ] || continue
      echo "FAIL: process $pid ($comm, of ${name_of[$sid]}) survived" >&2
      rc=1
    done < <(end_sessions 10 "${!name_of[@]}")
    # Reap this shell's own children among them (others are not ours to wait for).
    for pid in "${!name_of[@]}"; do wait "$pid" 2>/dev/null; done
  fi
  for ((i = ${#exit_steps[@]} - 1; i >= 0; i--)); do
    step=${exit_steps[i]}
    if ! eval "$step"; then
      echo "FAIL: at exit: $step" >&2
      rc=1
    fi
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# spawn NAME COMMAND...: runs COMMAND in the background in a session of its
# own (stdin from /dev/null; stdout and stderr as the caller redirects spawn's),
# recorded in $work/procs and $work/NAME.pid and ended at exit; $! is its pid.
# (setsid does not fork here: a background job of a script is no process
# group leader, so the pid stays COMMAND's.)
spawn() {
  local name=$1
  shift
  setsid "$@" </dev/null &
  echo "$! $(start_time "$!") $name" >>"$work/procs"
  echo "$!" >"$work/$name.pid"
}

# run NAME COMMAND...: spawn, then wait for it; its exit status. For a long
# step in the foreground, so a signal to the script interrupts it at once.
run() {
  spawn "$@"
  local pid=$! rc=0
  wait "$pid" || rc=$?
  return "$rc"
}

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
    if [ -n "${3:-}" ] && ! alive "$3"; then break; fi
    sleep 0.1
  done
  grep -q "$2" "$1" 2>/dev/null
}

# start_until PATTERN NAME COMMAND...: spawns COMMAND (stdout in $work/NAME.out,
# stderr in $work/NAME.err, pid in $work/NAME.pid); returns once its stdout has
# a line matching PATTERN, or exits the script saying why not.
start_until() {
  local pattern=$1 name=$2
  shift 2
  spawn "$name" "$@" >"$work/$name.out" 2>"$work/$name.err"
  if ! wait_for "$work/$name.out" "$pattern" "$!"; then
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

# stop NAME: ends process NAME (spawned above) and everything it started, and
# waits for them (10 s, then KILL, which fails the script).
stop() {
  local pid start left
  pid=$(cat "$work/$1.pid")
  start=$(awk -v p="$pid" '$1 == p { print $2 }' "$work/procs")
  if ours "$pid" "$start" && ! left=$(end_sessions 10 "$pid"); then
    echo "FAIL: stopping $1: these outlived TERM by 10 s (killed): $left" >&2
    exit 1
  fi
  wait "$pid" 2>/dev/null || true
}

# url_of NAME: the base URL server NAME printed in its "listening on" line.
url_of() {
  awk 'match($0, /listening on https?:\/\/[0-9.:]+/) { print substr($0, RSTART + 13, RLENGTH - 13); exit }' \
    "$work/$1.out"
}

# free_port: a TCP port nothing listens on at 127.0.0.1 (the kernel picks it).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
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

# wrk_command SECONDS URL TOKEN SID TOOL CONNECTIONS: sets the array wrk_cmd to
# wrk's tools/call of TOOL at URL/mcp (benches/wrk/tools_call.lua).
wrk_command() {
  wrk_cmd=(env "TOKEN=$3" "SID=$4" "TOOL=$5" wrk -t $(($6 > 1 ? 2 : 1)) -c "$6" -d "$1s" --latency
    -s "$root/benches/wrk/tools_call.lua" "$2/mcp")
}

# wrk_result: wrk's output (stdin) → "rps p50_ms p99_ms errors", errors being
# socket errors, non-2xx answers and JSON-RPC errors together.
wrk_result() {
  awk '/^RESULT/{split($2,a,"=");split($3,b,"=");split($4,c,"=");split($5,d,"=");split($6,e,"=");split($7,f,"=");
    print a[2], b[2], c[2], d[2]+e[2]+f[2]}'
}

# wrk_tools_call SECONDS URL TOKEN SID TOOL CONNECTIONS: wrk_command, run →
# "rps p50_ms p99_ms errors" (wrk_result).
wrk_tools_call() {
  wrk_command "$@"
  "${wrk_cmd[@]}" | wrk_result
}

# haproxy_cfg LB A B [SED-EXPRESSION...]: deploy/haproxy.cfg on stdout with the
# balancer on 127.0.0.1:LB, the replicas on 127.0.0.1:A and 127.0.0.1:B, and
# the further sed expressions applied; fails unless all three ports made it in.
haproxy_cfg() {
  local lb=$1 a=$2 b=$3 cfg port
  shift 3
  local exprs=(-e "s/127\.0\.0\.1:8080/127.0.0.1:$lb/" -e "s/127\.0\.0\.1:8081/127.0.0.1:$a/"
    -e "s/127\.0\.0\.1:8082/127.0.0.1:$b/")
  for port in "$@"; do exprs+=(-e "$port"); done
  cfg=$(sed "${exprs[@]}" "$root/deploy/haproxy.cfg") || return 1
  for port in "$lb" "$a" "$b"; do
    grep -q "127\.0\.0\.1:$port\$" <<<"$cfg" || {
      echo "haproxy_cfg: could not rewrite the ports of deploy/haproxy.cfg" >&2
      return 1
    }
  done
  printf '%s\n' "$cfg"
}

# use_postgres [own]: a throw-away PostgreSQL (scripts/postgres.sh): the
# running one if any, else one started here and stopped at exit (its stop
# failing, or the server surviving it, fails the script). With `own`, a
# server of this script's own state file (no race with another script
# starting or stopping the shared one). Sets pg_url (its database
# `gatehouse`) and pg_started (1 if started here).
# shellcheck disable=SC2034,SC2120 # pg_url and pg_started are for the caller; the argument is optional
use_postgres() {
  command -v psql >/dev/null ||
    PATH="$PATH:$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1)"
  pg_started=0
  if bash "$root/scripts/postgres.sh" status >/dev/null 2>&1; then
    pg_url=$(bash "$root/scripts/postgres.sh" url)
    return
  fi
  if [ "${1:-}" = own ]; then export GATEHOUSE_PG_STATE=$work/postgres.state; fi
  pg_started=1
  at_exit stop_postgres
  pg_url=$(bash "$root/scripts/postgres.sh" start)
}

# stop_postgres: stops the PostgreSQL use_postgres started; whether it is gone.
stop_postgres() {
  local datadir pg_ctl
  if ! timeout 60 bash "$root/scripts/postgres.sh" stop; then
    # (A server that inherited postgres.sh's lock descriptor blocks the
    # stop's flock for ever: stop it directly, then let stop clean up.)
    echo "FAIL: scripts/postgres.sh stop did not finish within 60 s; stopping the server directly" >&2
    datadir=$(sed -n 's/^datadir=//p' "${GATEHOUSE_PG_STATE:-/tmp/gatehouse-postgres.state}" 2>/dev/null)
    pg_ctl=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -name pg_ctl 2>/dev/null | sort -V | tail -1)
    if [ -n "$datadir" ] && [ -n "$pg_ctl" ]; then
      if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$pg_ctl" -D "$datadir" -m fast -w -t 30 stop >/dev/null 2>&1
      else
        "$pg_ctl" -D "$datadir" -m fast -w -t 30 stop >/dev/null 2>&1
      fi
    fi
    timeout 60 bash "$root/scripts/postgres.sh" stop
    return 1
  fi
  if bash "$root/scripts/postgres.sh" status >/dev/null 2>&1; then
    echo "FAIL: the PostgreSQL this script started survived" >&2
    return 1
  fi
}
