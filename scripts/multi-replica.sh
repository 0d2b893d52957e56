#!/usr/bin/env bash
# Several replicas on one PostgreSQL behind HAProxy (issue #13, item 4): a
# throw-away PostgreSQL (scripts/postgres.sh; a running one is reused) with a
# fresh database `mr_<random>` for this run (none running: one of its own,
# stopped at the end), two Gatehouse replicas (A and B,
# each its own data dir, both on that database) and HAProxy from
# deploy/haproxy.cfg with its ports replaced by free ones, all on loopback.
# This script only sets them up, runs the tests and stops everything; the
# checks are Playwright specs in end2end/tests/ (the release binary is only
# run, never built: GATEHOUSE_BIN, else $CARGO_TARGET_DIR/release/gatehouse).
#
#   bash scripts/multi-replica.sh          sets up, runs the two specs below
#   bash scripts/multi-replica.sh --keep   sets up only, prints the variables
#                                          below and keeps everything up until
#                                          Ctrl-C (for debugging)
#
# 1. multi-replica-api.spec.ts (HTTP API, psql and the Python SDK; needs both
#    replicas up, so it runs first, in a `npx playwright test` of its own):
#    - the Python SDK client (end2end/clients/python_client.py) through the
#      balancer, session-less (2026-07-28) and with a session (2025-11-25);
#    - a credential revoked on B (DELETE /api/credentials/{id}, admin API
#      token) is refused with 401 on A's own URL at A's next request;
#    - a policy rule saved on B (/api/fn/policy_save) is enforced on A at A's
#      next request, and its removal too;
#    - 20 gated calls paused through A, 100 decisions (5 per execution,
#      accept and decline mixed; one admin on A, another on B) fired at A and
#      B at once: one outcome per execution (the rest 409, or 200 agreeing),
#      one decision row per execution in audit_events (psql), and once the
#      calls are resumed both replicas' gatehouse_approval_store_entries and
#      gatehouse_approvals_pending gauges at 0;
#    - eight page streams through the balancer that nobody reads
#      (end2end/fixtures/stalled_streams.py) hold up no other: a ninth counts
#      all of 200 new waiting calls;
#    - the Python SDK in native mode (end2end/clients/python_native.py)
#      through the balancer: a gated call on 2026-07-28 whose decision and
#      retries the balancer spreads over both replicas, approved and declined.
# 2. then multi-replica.spec.ts (TypeScript SDK through the balancer,
#    approvals on B's page; its second test kills replica A).
# Both get GATEHOUSE_LB_URL, GATEHOUSE_A_URL, GATEHOUSE_B_URL,
# GATEHOUSE_A_PIDFILE, GATEHOUSE_A_LOG, GATEHOUSE_B_LOG, GATEHOUSE_ADMIN_USER,
# GATEHOUSE_ADMIN_B_USER (the second admin, same password),
# GATEHOUSE_ADMIN_PASSWORD, GATEHOUSE_API_TOKEN, GATEHOUSE_DATABASE_URL,
# GATEHOUSE_PYTHON (tools/.venv's python, else python3) and GATEHOUSE_BIN.
#
# Both runs happen even when the first failed; the script fails if either
# did. Every process it starts is stopped at the end and it checks that none
# survives (scripts/lib.sh); the run's database is dropped; PostgreSQL is
# stopped if (and only if) this script started it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
keep=0
case ${1:-} in
  --keep) keep=1 ;;
  "") ;;
  *)
    echo "usage: bash scripts/multi-replica.sh [--keep]" >&2
    exit 2
    ;;
esac

gatehouse=${GATEHOUSE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/gatehouse}
python=$root/tools/.venv/bin/python
[ -x "$python" ] || python=python3

command -v haproxy >/dev/null || PATH="$PATH:/usr/sbin"
command -v psql >/dev/null || PATH="$PATH:$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1)"
trap 'echo "FAIL: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

start_time=$EPOCHREALTIME
say() { awk -v a="$start_time" -v b="$EPOCHREALTIME" -v m="$*" 'BEGIN { printf "[%5.1fs] %s\n", b - a, m }'; }

# logs: the end of every log of this run (replicas, HAProxy).
logs() {
  local f
  for f in "$work"/*.log; do
    [ -f "$f" ] && { echo "--- $f (last 30 lines)" >&2; tail -30 "$f" >&2; }
  done
}

fail() {
  echo "FAIL: $*" >&2
  logs
  exit 1
}

[ -x "$gatehouse" ] || fail "no Gatehouse binary at $gatehouse (bash scripts/build.sh, or set GATEHOUSE_BIN)"
"$gatehouse" --help | grep -q -- --database-url || fail "$gatehouse has no --database-url (built before PostgreSQL support)"
command -v haproxy >/dev/null || fail "haproxy is not installed (apt-get install haproxy)"
command -v psql >/dev/null || fail "psql is not installed (apt-get install postgresql)"

# ---- PostgreSQL: reuse a running one, else start one (and stop it at the end).
say "== PostgreSQL"
# None running: our own server, under a state file of our own (`own`): another
# script starting the shared one meanwhile cannot race with it, and the stop
# at the end can only ever stop this one.
use_postgres own
admin_url=$pg_url # the maintenance database `gatehouse`
if [ "$pg_started" = 1 ]; then say "  started $admin_url (stopped at the end)"; else say "  reusing the running server: $admin_url"; fi
db_name="mr_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
at_exit "psql '$admin_url' -q -v ON_ERROR_STOP=1 -c 'DROP DATABASE IF EXISTS $db_name WITH (FORCE)' >/dev/null"
psql "$admin_url" -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db_name" >/dev/null || fail "CREATE DATABASE $db_name"
db_url="${admin_url%/*}/$db_name"
say "  database $db_url"

# ---- The admin, an admin API token: the CLI on the same database.
cli() { "$gatehouse" --data-dir "$work/cli" --database-url "$db_url" "$@"; }
admin_user=mr-admin
admin_password="multi-replica $(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
cli migrate >"$work/migrate.out" 2>&1 || { cat "$work/migrate.out" >&2; fail "gatehouse migrate"; }
printf '%s' "$admin_password" | cli user add "$admin_user" --admin --password-stdin >/dev/null \
  || fail "gatehouse user add"
# A second admin, who decides on B in the race (the audit's actor then says
# which replica's decision won).
printf '%s' "$admin_password" | cli user add "$admin_user-b" --admin --password-stdin >/dev/null \
  || fail "gatehouse user add"
api_token=$(cli api-token issue --name multi-replica --json | json_get token) || fail "gatehouse api-token issue"

# ---- Two replicas and the balancer.
lb=$(free_port)
pa=$(free_port)
pb=$(free_port)
lb_url="http://127.0.0.1:$lb"
a_url="http://127.0.0.1:$pa"
b_url="http://127.0.0.1:$pb"
haproxy_cfg "$lb" "$pa" "$pb" "s/inter 2s fall 2 rise 2/inter 300ms fall 2 rise 1/" >"$work/haproxy.cfg" \
  || fail "could not rewrite the ports of haproxy.cfg"
haproxy -c -f "$work/haproxy.cfg" >/dev/null || fail "the rewritten haproxy.cfg is invalid"

# Both replicas name the balancer as their public URL (what deploy/haproxy.cfg
# says a deployment does), so approval links point at it.
say "== replicas A ($a_url) and B ($b_url), balancer $lb_url"
# (With --database-url, this build refuses a data dir that does not exist yet:
# "No such file or directory (os error 2)"; with SQLite it creates it.)
mkdir -p "$work/data_a" "$work/data_b"
# The replicas trust the balancer's X-Forwarded-For (deploy/haproxy.cfg has
# `option forwardfor`), as a deployment must: else every client behind it
# shares one address's bounds (OAuth registration, sign-in throttle).
export GATEHOUSE_TRUSTED_PROXIES=127.0.0.1
# (spawn writes A's pid to $work/a.pid, which the spec reads.)
spawn a "$gatehouse" --listen "127.0.0.1:$pa" --data-dir "$work/data_a" --database-url "$db_url" --public-url "$lb_url" \
  >"$work/gatehouse_a.log" 2>&1
pid_a=$!
spawn b "$gatehouse" --listen "127.0.0.1:$pb" --data-dir "$work/data_b" --database-url "$db_url" --public-url "$lb_url" \
  >"$work/gatehouse_b.log" 2>&1
pid_b=$!
for url in "$a_url" "$b_url"; do
  status=000
  for _ in $(seq 300); do
    status=$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz" || true)
    [ "$status" = 200 ] && break
    sleep 0.1
  done
  [ "$status" = 200 ] || fail "replica $url never ready (/readyz: $status)"
done
spawn haproxy haproxy -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1
for _ in $(seq 50); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$lb_url/readyz" || true)" = 200 ] && break
  sleep 0.1
done
sleep 1
grep -q 'is DOWN' "$work/haproxy.log" && fail "a replica failed HAProxy's health check"

export GATEHOUSE_LB_URL=$lb_url GATEHOUSE_A_URL=$a_url GATEHOUSE_B_URL=$b_url
export GATEHOUSE_A_PIDFILE=$work/a.pid GATEHOUSE_DATABASE_URL=$db_url
export GATEHOUSE_A_LOG=$work/gatehouse_a.log GATEHOUSE_B_LOG=$work/gatehouse_b.log
export GATEHOUSE_ADMIN_USER=$admin_user GATEHOUSE_ADMIN_B_USER=$admin_user-b GATEHOUSE_ADMIN_PASSWORD=$admin_password
export GATEHOUSE_API_TOKEN=$api_token GATEHOUSE_PYTHON=$python GATEHOUSE_BIN=$gatehouse

vars=(GATEHOUSE_LB_URL GATEHOUSE_A_URL GATEHOUSE_B_URL GATEHOUSE_A_PIDFILE GATEHOUSE_A_LOG GATEHOUSE_B_LOG
  GATEHOUSE_ADMIN_USER GATEHOUSE_ADMIN_B_USER GATEHOUSE_ADMIN_PASSWORD GATEHOUSE_API_TOKEN GATEHOUSE_DATABASE_URL
  GATEHOUSE_PYTHON GATEHOUSE_BIN)
if [ "$keep" = 1 ]; then
  for v in "${vars[@]}"; do printf 'export %s=%q\n' "$v" "${!v}"; done >"$work/env"
  say "== up (--keep); logs in $work/*.log; Ctrl-C stops everything. In another shell:"
  echo "  . $work/env   # then e.g.: cd end2end && npx playwright test multi-replica-api.spec.ts"
  echo "  #   (multi-replica.spec.ts kills replica A: run it last, on its own)"
  cat "$work/env"
  while alive "$pid_a" || alive "$pid_b"; do sleep 1; done
  say "both replicas ended"
  exit 0
fi

export PATH="$root/tools/node_modules/.bin:$PATH"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
passed=()
failed=()
# spec NAME: `npx playwright test NAME` in end2end/ (a run of its own);
# records whether it passed; a failure prints the replicas' warnings and
# errors and HAProxy's server state changes and 5xx answers of the run.
spec() {
  if run playwright env -C "$root/end2end" npx playwright test "$1"; then
    passed+=("$1")
  else
    failed+=("$1")
    echo "  -- replica log lines (WARN/ERROR):" >&2
    grep -hE 'WARN|ERROR|panick' "$work/gatehouse_a.log" | sed 's/^/  A: /' | tail -20 >&2 || true
    grep -hE 'WARN|ERROR|panick' "$work/gatehouse_b.log" | sed 's/^/  B: /' | tail -20 >&2 || true
    echo "  -- HAProxy: server state changes and 5xx answers:" >&2
    grep -E ' is (UP|DOWN)| 50[0-9] ' "$work/haproxy.log" | sed 's/^/  haproxy: /' | tail -20 >&2 || true
  fi
}

# The order is the point: the first spec needs both replicas, the second kills
# A. Two runs, not one (where Playwright's file order would decide), and not
# a project dependency (which would skip the second when the first failed).
say "== 1. Playwright: multi-replica-api.spec.ts (API, psql and the Python SDK across A, B and the balancer)"
spec multi-replica-api.spec.ts
say "== 2. Playwright: multi-replica.spec.ts (TypeScript SDK through the balancer, approvals on B, A killed)"
echo "  (its second test kills replica A with SIGKILL: bash then reports A's command as \"Killed\")"
spec multi-replica.spec.ts
# The spec killed replica A: it is no longer this script's to stop.
alive "$pid_a" || say "  replica A (pid $pid_a) is gone, as the spec killed it"

say "== summary"
for name in "${passed[@]}"; do echo "  passed: $name"; done
for name in "${failed[@]}"; do echo "  FAILED: $name"; done
[ "${#failed[@]}" -eq 0 ] || exit 1
say "== all multi-replica checks passed"
