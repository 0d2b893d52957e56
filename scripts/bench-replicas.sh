#!/usr/bin/env bash
# Issue #13's benchmark, in one run on one machine: tools/call throughput
# (gatehouse_status over an established session, wrk, 1 and 32 connections) of
#   - one replica on SQLite,
#   - one replica on PostgreSQL,
#   - two replicas on one PostgreSQL behind HAProxy (deploy/haproxy.cfg, its
#     ports rewritten): one session per replica, the connections split between
#     them, throughputs added;
# and the approval wake latency (decision POST → the waiting `resume` returns,
# examples/bench_approvals.rs --running) on SQLite, within one PostgreSQL
# replica, and across replicas (the call waits on A, the decision goes to B).
# Prints Markdown for BENCHMARKS.md. Needs wrk, haproxy, PostgreSQL (Debian).
# Starts a throw-away PostgreSQL if none runs (and stops it again); drops its
# databases and ends every process it started, however it ends (lib.sh).
# Usage: scripts/bench-replicas.sh [seconds per run, default 10] [approvals, default 300]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
secs=${1:-10}
approvals=${2:-300}
command -v haproxy >/dev/null || PATH="$PATH:/usr/sbin"
build_release bench_approvals

use_postgres
pg=$pg_url
# database NAME: a fresh database on the throw-away server (dropped at exit),
# its URL in db_url.
database() {
  at_exit "psql '$pg' -q -c 'DROP DATABASE IF EXISTS $1 WITH (FORCE)' >/dev/null"
  psql "$pg" -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $1" >/dev/null
  db_url="${pg%/*}/$1"
}
suffix=$RANDOM
database "bench_one_$suffix"
pg_one=$db_url
database "bench_two_$suffix"
pg_two=$db_url

# server NAME DATA [ARGS...]: a release replica on a free port.
server() {
  local name=$1 data=$2
  shift 2
  GATEHOUSE_APPROVAL_TTL=1h GATEHOUSE_LOG=warn start "$name" "$bin" --listen 127.0.0.1:0 --data-dir "$data" "$@"
}
# cli DATA [ARGS...]: the CLI on the same database.
cli() {
  local data=$1
  shift
  "$bin" --data-dir "$data" "$@"
}
# setup DATA [ARGS...]: user ada (admin) and an agent token she owns.
setup() {
  local data=$1
  shift
  printf 'bench password' | cli "$data" "$@" user add ada --admin --password-stdin >/dev/null
  cli "$data" "$@" token issue --agent bench --owner ada --json | json_get token
}

lite=$work/lite
token_lite=$(setup "$lite")
server lite "$lite"
token_pg=$(setup "$work/pg1" --database-url "$pg_one")
server pg "$work/pg1" --database-url "$pg_one"
token_two=$(setup "$work/a" --database-url "$pg_two")
server a "$work/a" --database-url "$pg_two"
server b "$work/b" --database-url "$pg_two"

lb=$(free_port)
haproxy_cfg "$lb" "$(url_of a | sed 's/.*://')" "$(url_of b | sed 's/.*://')" 's/^    log stdout.*//' >"$work/haproxy.cfg"
spawn haproxy haproxy -f "$work/haproxy.cfg" >"$work/haproxy.out" 2>&1
lb_url=http://127.0.0.1:$lb
for _ in $(seq 100); do
  curl -sf -H 'host: 127.0.0.1' "$lb_url/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done

# One session per replica through the balancer: initialize is round-robin,
# so keep opening until both replicas hold one (the session id is sticky).
declare -A lb_sid
for _ in $(seq 10); do
  sid=$(mcp_initialize "$lb_url" "$token_two")
  # Which replica holds it: only that one knows the id (another answers 404).
  for r in a b; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$(url_of $r)/mcp" -H "authorization: Bearer $token_two" \
      -H "mcp-session-id: $sid" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
      -H 'mcp-protocol-version: 2025-11-25' -d '{"jsonrpc":"2.0","method":"notifications/initialized"}')
    [ "$code" = 202 ] && lb_sid[$r]=$sid
  done
  [ -n "${lb_sid[a]:-}" ] && [ -n "${lb_sid[b]:-}" ] && break
done
if [ -z "${lb_sid[a]:-}" ] || [ -z "${lb_sid[b]:-}" ]; then
  echo "sessions did not spread over both replicas" >&2
  exit 1
fi

sid_lite=$(mcp_initialize "$(url_of lite)" "$token_lite")
sid_pg=$(mcp_initialize "$(url_of pg)" "$token_pg")

rss() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$(cat "$work/$1.pid")/status"; }

echo "| setup | conns | req/s | p50 ms | p99 ms | errors |"
echo "|---|---|---|---|---|---|"
declare -A rps
for c in 1 32; do
  read -r q p50 p99 err <<<"$(wrk_tools_call "$secs" "$(url_of lite)" "$token_lite" "$sid_lite" gatehouse_status $c)"
  rps[lite$c]=$q
  echo "| one replica, SQLite | $c | $q | $p50 | $p99 | $err |"
  read -r q p50 p99 err <<<"$(wrk_tools_call "$secs" "$(url_of pg)" "$token_pg" "$sid_pg" gatehouse_status $c)"
  rps[pg$c]=$q
  echo "| one replica, PostgreSQL | $c | $q | $p50 | $p99 | $err |"
  if [ "$c" = 1 ]; then
    read -r q p50 p99 err <<<"$(wrk_tools_call "$secs" "$lb_url" "$token_two" "${lb_sid[a]}" gatehouse_status 1)"
    rps[two$c]=$q
    echo "| two replicas behind HAProxy (one session) | 1 | $q | $p50 | $p99 | $err |"
  else
    half=$((c / 2))
    wrk_command "$secs" "$lb_url" "$token_two" "${lb_sid[a]}" gatehouse_status $half
    spawn wrk-a "${wrk_cmd[@]}" >"$work/wrk-a"
    wa=$!
    wrk_command "$secs" "$lb_url" "$token_two" "${lb_sid[b]}" gatehouse_status $half
    spawn wrk-b "${wrk_cmd[@]}" >"$work/wrk-b"
    wb=$!
    wait "$wa" "$wb"
    read -r qa p50a p99a erra < <(wrk_result <"$work/wrk-a")
    read -r qb p50b p99b errb < <(wrk_result <"$work/wrk-b")
    q=$(awk -v a="$qa" -v b="$qb" 'BEGIN{printf "%.0f", a + b}')
    rps[two$c]=$q
    echo "| two replicas behind HAProxy (a session on each, $half conns each) | $c | $q | $p50a / $p50b | $p99a / $p99b | $((erra + errb)) |"
  fi
done
for c in 1 32; do
  awk -v l="${rps[lite$c]}" -v p="${rps[pg$c]}" -v t="${rps[two$c]}" -v c="$c" \
    'BEGIN{printf "\nratios at %s connection(s): PostgreSQL/SQLite = %.2f, two replicas/SQLite = %.2f\n", c, p/l, t/l}'
done
echo
echo "resident memory after the runs: SQLite $(rss lite) MiB, PostgreSQL $(rss pg) MiB, replicas $(rss a) + $(rss b) MiB"
echo
echo "wake latency (decision → the waiting resume returns), $approvals approvals each:"
printf -- '- SQLite, one process: '
run wake-lite "$rel/examples/bench_approvals" --running "$(url_of lite)" "$(url_of lite)" "$token_lite" ada 'bench password' "$approvals"
printf -- '- PostgreSQL, one replica: '
run wake-pg "$rel/examples/bench_approvals" --running "$(url_of pg)" "$(url_of pg)" "$token_pg" ada 'bench password' "$approvals"
printf -- '- PostgreSQL, waiting on A, decided on B: '
run wake-cross "$rel/examples/bench_approvals" --running "$(url_of a)" "$(url_of b)" "$token_two" ada 'bench password' "$approvals"
