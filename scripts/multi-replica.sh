#!/usr/bin/env bash
# Several replicas on one PostgreSQL behind HAProxy (issue #13, item 4): a
# throw-away PostgreSQL (scripts/postgres.sh; a running one is reused) with a
# fresh database `mr_<random>` for this run (none running: one of its own,
# stopped at the end), two Gatehouse replicas (A and B,
# each its own data dir, both on that database) and HAProxy from
# deploy/haproxy.cfg with its ports replaced by free ones, all on loopback.
#
#   bash scripts/multi-replica.sh          sets up, runs the checks, then
#                                          Playwright's multi-replica.spec.ts
#   bash scripts/multi-replica.sh --keep   sets up only, prints the variables
#                                          below and keeps everything up until
#                                          Ctrl-C (for debugging)
#
# Checks (stdlib Python; the release binary is only run, never built: it is
# GATEHOUSE_BIN, else ~/.cache/gatehouse/target/release/gatehouse):
#   1. the Python SDK client (end2end/clients/python_client.py) through the
#      balancer, session-less (2026-07-28) and with a session (2025-11-25);
#   2. a credential revoked on B (DELETE /api/credentials/{id}, admin API
#      token) is refused with 401 on A's own URL at A's next request;
#   3. a policy rule saved on B (/api/fn/policy_save) is enforced on A at A's
#      next request, and its removal too;
#   4. 20 gated calls paused through A, 100 decisions (5 per execution,
#      accept and decline mixed; one admin on A, another on B) fired at A and
#      B at once: one outcome per execution (the rest 409, or 200 agreeing),
#      one decision row per execution in audit_events, and once the calls are
#      resumed both replicas' gatehouse_approval_store_entries and
#      gatehouse_approvals_pending gauges at 0;
#   5. the Python SDK in native mode (end2end/clients/python_native.py)
#      through the balancer: a gated call on 2026-07-28 whose decision and
#      retries the balancer spreads over both replicas, approved and declined;
#   6. Playwright, below.
# Then `npx playwright test multi-replica.spec.ts` (in end2end/) with
# GATEHOUSE_LB_URL, GATEHOUSE_A_URL, GATEHOUSE_B_URL, GATEHOUSE_A_PIDFILE,
# GATEHOUSE_ADMIN_USER, GATEHOUSE_ADMIN_PASSWORD, GATEHOUSE_API_TOKEN and
# GATEHOUSE_DATABASE_URL exported (the spec kills replica A).
#
# Every check runs even when an earlier one failed; the script fails if any
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

gatehouse=${GATEHOUSE_BIN:-$HOME/.cache/gatehouse/target/release/gatehouse}
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
export GATEHOUSE_ADMIN_USER=$admin_user GATEHOUSE_ADMIN_PASSWORD=$admin_password GATEHOUSE_API_TOKEN=$api_token
export GATEHOUSE_BIN=$gatehouse

if [ "$keep" = 1 ]; then
  {
    for v in GATEHOUSE_LB_URL GATEHOUSE_A_URL GATEHOUSE_B_URL GATEHOUSE_A_PIDFILE GATEHOUSE_DATABASE_URL \
      GATEHOUSE_ADMIN_USER GATEHOUSE_ADMIN_PASSWORD GATEHOUSE_API_TOKEN GATEHOUSE_BIN; do
      printf 'export %s=%q\n' "$v" "${!v}"
    done
  } >"$work/env"
  say "== up (--keep); logs in $work/*.log; Ctrl-C stops everything. In another shell:"
  echo "  . $work/env   # then e.g.: cd end2end && npx playwright test multi-replica.spec.ts"
  cat "$work/env"
  while alive "$pid_a" || alive "$pid_b"; do sleep 1; done
  say "both replicas ended"
  exit 0
fi

# ---- The checks (stdlib Python, one file, one check per run).
cat >"$work/checks.py" <<'PY'
import concurrent.futures
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

LB, A, B = os.environ["GATEHOUSE_LB_URL"], os.environ["GATEHOUSE_A_URL"], os.environ["GATEHOUSE_B_URL"]
NAME = {LB: "LB", A: "A", B: "B"}
API = os.environ["GATEHOUSE_API_TOKEN"]
USER, PASSWORD = os.environ["GATEHOUSE_ADMIN_USER"], os.environ["GATEHOUSE_ADMIN_PASSWORD"]
DB = os.environ["GATEHOUSE_DATABASE_URL"]
PROTOCOL = "2025-11-25"


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def say(msg):
    print("  " + msg, flush=True)


def req(base, method, path, body=None, headers=None, timeout=60):
    """One HTTP request on a new connection: (status, headers, body bytes)."""
    u = urllib.parse.urlsplit(base)
    h = dict(headers or {})
    data = None
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        h.setdefault("content-type", "application/json")
    elif isinstance(body, str):
        data = body.encode()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


def short(body, n=300):
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    return text if len(text) <= n else text[:n] + "…"


def sign_in(base, user=USER):
    """A session cookie of `user` (an admin), signed in on `base`."""
    st, h, body = req(base, "POST", "/api/auth/sign-in", {"username": user, "password": PASSWORD}, {"origin": base})
    check(st == 200, f"sign-in on {NAME[base]}: {st} {short(body)}")
    return "; ".join(c.split(";")[0] for c in h.get_all("set-cookie") or [])


def issue(agent):
    """A new agent credential owned by the admin (admin API, through the balancer)."""
    st, _, body = req(LB, "POST", "/api/credentials", {"agent": agent, "owner": USER}, {"authorization": f"Bearer {API}"})
    check(st == 201, f"POST /api/credentials: {st} {short(body)}")
    return json.loads(body)


def metrics(base):
    st, _, body = req(base, "GET", "/metrics", headers={"authorization": f"Bearer {API}"})
    check(st == 200, f"/metrics on {NAME[base]}: {st} {short(body)}")
    out = {}
    for line in body.decode().splitlines():
        m = re.match(r"^(gatehouse_[a-z_]+)(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def psql(sql):
    r = subprocess.run(["psql", DB, "-X", "-At", "-F", "\t", "-c", sql], capture_output=True, text=True)
    check(r.returncode == 0, f"psql: {r.stderr.strip()}")
    return [line.split("\t") for line in r.stdout.splitlines() if line]


class Session:
    """A bare MCP client: 2025-11-25, no capabilities (so gated calls answer in
    browser mode at once), one JSON-RPC request per HTTP request."""

    def __init__(self, base, token):
        self.base, self.token, self.sid, self.next = base, token, None, 0
        self.lock = threading.Lock()

    def headers(self):
        h = {
            "authorization": f"Bearer {self.token}",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": PROTOCOL,
        }
        if self.sid:
            h["mcp-session-id"] = self.sid
        return h

    def post(self, message, timeout=60):
        return req(self.base, "POST", "/mcp", message, self.headers(), timeout)

    def rpc(self, method, params=None, timeout=60):
        """(HTTP status, the JSON-RPC response or None)."""
        with self.lock:
            self.next += 1
            i = self.next
        st, h, body = self.post({"jsonrpc": "2.0", "id": i, "method": method, "params": params or {}}, timeout)
        if st != 200:
            return st, {"http_body": short(body)}
        if (h.get("content-type") or "").startswith("text/event-stream"):
            for event in body.decode().split("\n\n"):
                data = "\n".join(l[5:].lstrip() for l in event.splitlines() if l.startswith("data:"))
                if data:
                    msg = json.loads(data)
                    if msg.get("id") == i and ("result" in msg or "error" in msg):
                        return st, msg
            raise Fail(f"{method} on {NAME[self.base]}: no response in the stream: {short(body)}")
        return st, json.loads(body)

    def initialize(self):
        st, h, body = self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "multi-replica", "version": "1"}},
            }
        )
        if st != 200:
            return st
        self.sid = h.get("mcp-session-id")
        check(self.sid, f"initialize on {NAME[self.base]}: no mcp-session-id")
        st2, _, body = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        check(st2 == 202, f"notifications/initialized on {NAME[self.base]}: {st2} {short(body)}")
        return st

    def call(self, name, arguments, timeout=60):
        st, msg = self.rpc("tools/call", {"name": name, "arguments": arguments}, timeout)
        check(st == 200, f"tools/call {name} on {NAME[self.base]}: HTTP {st} {msg}")
        check("result" in msg, f"tools/call {name} on {NAME[self.base]}: {msg}")
        return msg["result"]


# ---- 2. revoke on B, refused on A at once
def check_revoke():
    issued = issue("mr-revoke")
    s = Session(A, issued["token"])
    check(s.initialize() == 200, "initialize on A failed")
    st, msg = s.rpc("tools/list")
    check(st == 200 and "result" in msg, f"tools/list on A before the revoke: {st} {msg}")
    st, _, body = req(B, "DELETE", f"/api/credentials/{issued['id']}", headers={"authorization": f"Bearer {API}"})
    check(st == 200, f"DELETE /api/credentials/{issued['id']} on B: {st} {short(body)}")
    revoked_at = time.monotonic()
    st, msg = s.rpc("tools/list")
    took = (time.monotonic() - revoked_at) * 1000
    if st != 401:
        # How long until it is refused (for the report), then fail.
        later = None
        for _ in range(50):
            time.sleep(0.1)
            if s.rpc("tools/list")[0] == 401:
                later = time.monotonic() - revoked_at
                break
        raise Fail(
            f"A's next request after the revoke on B got {st}, not 401 ({msg}); "
            + (f"refused {later:.1f} s after the revoke" if later else "still accepted 5 s after the revoke")
        )
    say(f"revoked on B, A's existing session refused at its next request: 401 ({took:.0f} ms after the revoke)")
    st = Session(A, issued["token"]).initialize()
    check(st == 401, f"a new session on A with the revoked token: {st}, not 401")
    st = Session(LB, issued["token"]).initialize()
    check(st == 401, f"a new session through the balancer with the revoked token: {st}, not 401")
    say("a new session on A and through the balancer: 401")


# ---- 3. a rule saved on B, enforced on A at its next request
def policy_fn(base, cookie, fn, fields):
    st, _, body = req(
        base,
        "POST",
        f"/api/fn/{fn}",
        urllib.parse.urlencode(fields),
        {"content-type": "application/x-www-form-urlencoded", "origin": base, "cookie": cookie, "accept": "application/json"},
    )
    check(st == 200, f"/api/fn/{fn} on {NAME[base]}: {st} {short(body)}")


def blocked(result):
    return bool(result.get("isError")) and "block" in json.dumps(result.get("content", [])).lower()


def check_policy():
    tool = "gatehouse_audit_recent"
    cookie_b = sign_in(B)
    issued = issue("mr-policy")
    s = Session(A, issued["token"])
    check(s.initialize() == 200, "initialize on A failed")
    r = s.call(tool, {})
    check(not r.get("isError"), f"{tool} on A before any rule: {r}")

    policy_fn(B, cookie_b, "policy_save", {"pattern": tool, "action": "block"})
    saved_at = time.monotonic()
    r = s.call(tool, {})
    took = (time.monotonic() - saved_at) * 1000
    if not blocked(r):
        later = None
        for _ in range(50):
            time.sleep(0.1)
            if blocked(s.call(tool, {})):
                later = time.monotonic() - saved_at
                break
        policy_fn(B, cookie_b, "policy_remove", {"pattern": tool})
        raise Fail(
            f"rule `{tool} → block` saved on B: A's next call still ran ({short(json.dumps(r))}); "
            + (f"blocked {later:.1f} s later" if later else "still not blocked 5 s later")
        )
    say(f"rule `{tool} → block` saved on B: A's next call is blocked ({took:.0f} ms after the save)")
    st, msg = s.rpc("tools/list")
    names = [t["name"] for t in msg.get("result", {}).get("tools", [])]
    check(tool not in names, f"A still lists {tool} after the rule saved on B")
    say(f"A no longer lists {tool}")

    policy_fn(B, cookie_b, "policy_remove", {"pattern": tool})
    r = s.call(tool, {})
    check(not r.get("isError"), f"rule removed on B: A's next call of {tool} still refused: {short(json.dumps(r))}")
    say(f"rule removed on B: A's next call runs again")


# ---- 4. 100 decisions racing on 20 executions across A and B
def settle_gauges(label):
    deadline = time.monotonic() + 15
    while True:
        got = {}
        for base in (A, B):
            m = metrics(base)
            got[NAME[base]] = (m.get("gatehouse_approval_store_entries"), m.get("gatehouse_approvals_pending"))
        if all(v == (0, 0) for v in got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def check_race():
    n, per = 20, 5
    run = "%06x" % random.randrange(1 << 24)
    # The admin decides on A, the second admin on B: the audit row's actor
    # names the replica whose decision won.
    cookies = {A: sign_in(A), B: sign_in(B, USER + "-b")}
    # max_executions_per_credential is 20: two agents, ten calls each.
    sessions = []
    for k in range(2):
        s = Session(A, issue(f"mr-race-{k}")["token"])
        check(s.initialize() == 200, "initialize on A failed")
        sessions.append(s)
    executions = []  # (session, execution id)
    for k in range(n):
        s = sessions[k % 2]
        r = s.call("gatehouse_policy_set", {"pattern": f"mr_race_{run}_{k}", "action": "allow"})
        sc = r.get("structuredContent") or {}
        check(sc.get("status") == "user_approval_required", f"gated call {k} on A did not pause: {short(json.dumps(r))}")
        executions.append((s, sc["executionId"]))
    ids = [e for _, e in executions]
    say(f"{n} gated calls paused through A")
    ma, mb = metrics(A), metrics(B)
    say(
        "before the race, gatehouse_approvals_pending: A %s, B %s (B shows A's calls only if it mirrors them)"
        % (ma.get("gatehouse_approvals_pending"), mb.get("gatehouse_approvals_pending"))
    )

    plan = []
    for eid in ids:
        actions = ["accept", "decline", random.choice(["accept", "decline"])] + random.sample(["accept", "decline"], 2)
        bases = [A, B, A, B, random.choice([A, B])]
        random.shuffle(actions)
        random.shuffle(bases)
        plan += [(eid, a, b) for a, b in zip(actions, bases)]
    random.shuffle(plan)
    barrier = threading.Barrier(len(plan))

    def fire(item):
        eid, action, base = item
        barrier.wait()
        t = time.monotonic()
        try:
            st, _, body = req(
                base, "POST", f"/api/executions/{eid}/resume", {"action": action}, {"origin": base, "cookie": cookies[base]}
            )
        except Exception as e:  # noqa: BLE001 - reported below
            st, body = -1, repr(e).encode()
        return eid, action, NAME[base], st, body, time.monotonic() - t

    with concurrent.futures.ThreadPoolExecutor(len(plan)) as pool:
        results = list(pool.map(fire, plan))
    slowest = max(r[5] for r in results)
    tally = {}
    for _, _, _, st, _, _ in results:
        tally[st] = tally.get(st, 0) + 1
    say(f"{len(results)} decisions fired at A and B at once: statuses {dict(sorted(tally.items()))}, slowest {slowest * 1000:.0f} ms")
    answers = {}
    for _, _, where, st, body, _ in results:
        try:
            detail = json.loads(body).get("message") or json.loads(body).get("state")
        except ValueError:
            detail = short(body, 60)
        key = f"{where} {st} {detail}"
        answers[key] = answers.get(key, 0) + 1
    for key, count in sorted(answers.items()):
        say(f"  {count:3d} × {key}")

    problems = []
    outcome = {}
    for eid in ids:
        mine = [r for r in results if r[0] == eid]
        states = set()
        for _, action, where, st, body, _ in mine:
            if st == 200:
                states.add(json.loads(body).get("state"))
        if len(states) != 1:
            problems.append(f"{eid}: {len(states)} outcomes {sorted(map(str, states))}: " + "; ".join(f"{a}@{w}→{st} {short(b, 120)}" for _, a, w, st, b, _ in mine))
            continue
        state = states.pop()
        outcome[eid] = state
        winner = {"approved": "accept", "declined": "decline"}.get(state)
        for _, action, where, st, body, _ in mine:
            want = 200 if action == winner else 409
            if st != want:
                problems.append(f"{eid} ({state}): {action} on {where} got {st}, not {want}: {short(body, 160)}")
            elif st == 409 and json.loads(body).get("error") != "conflict":
                problems.append(f"{eid}: 409 without error=conflict: {short(body, 160)}")
            elif st == 409 and "pending" in (json.loads(body).get("message") or ""):
                # A conflict names the decision that won; "already pending"
                # refuses a decision while none has been taken.
                problems.append(f"{eid} ({state}): {action} on {where} refused while undecided: {short(body, 160)}")
    won = {}
    for s in outcome.values():
        won[s] = won.get(s, 0) + 1
    say(f"outcomes: {won} on {len(outcome)} of {n} executions")

    # The audit log: exactly one decision row per execution, the outcome's.
    rows = psql(
        "SELECT execution_id, state, actor FROM audit_events WHERE state IN ('approved', 'declined') AND execution_id IN (%s) ORDER BY id"
        % ", ".join("'%s'" % e for e in ids)
    )
    by_eid = {}
    for eid, state, actor in rows:
        by_eid.setdefault(eid, []).append((state, actor))
    for eid in ids:
        got = by_eid.get(eid, [])
        if len(got) != 1:
            problems.append(f"{eid}: {len(got)} decision rows in audit_events: {got}")
        elif eid in outcome and got[0][0] != outcome[eid]:
            problems.append(f"{eid}: audit_events says {got[0][0]}, the API said {outcome[eid]}")
    won_on = {"A": 0, "B": 0}
    for eid, state, actor in rows:
        won_on["B" if actor == f"user:{USER}-b" else "A"] += 1
    say(f"audit_events: {len(rows)} decision rows for {n} executions; the winning decision was made on A {won_on['A']}, on B {won_on['B']} times")

    # Both replicas' view of each execution agrees with the outcome.
    for eid in ids:
        views = {}
        for base in (A, B):
            st, _, body = req(base, "GET", f"/api/executions/{eid}", headers={"cookie": cookies[base]})
            views[NAME[base]] = json.loads(body).get("state") if st == 200 else f"HTTP {st}"
        if views["A"] != views["B"] or (eid in outcome and views["A"] != outcome[eid]):
            problems.append(f"{eid}: A shows {views['A']}, B shows {views['B']}, the decision said {outcome.get(eid)}")

    # Settle every call: the agent resumes each (an approved one runs, a
    # declined one answers execution_declined); one still pending (a failed
    # race) is declined on A first so nothing is left behind.
    for s, eid in executions:
        if eid not in outcome:
            st, _, body = req(A, "POST", f"/api/executions/{eid}/resume", {"action": "decline"}, {"origin": A, "cookie": cookies[A]})
            if st not in (200, 409):
                problems.append(f"{eid}: no outcome, and declining it on A afterwards got {st}: {short(body, 160)}")
                continue
        r = s.call("resume", {"executionId": eid}, timeout=90)
        sc = r.get("structuredContent") or {}
        if outcome.get(eid) == "approved" and r.get("isError"):
            problems.append(f"{eid}: approved, but resume on A failed: {short(json.dumps(r), 200)}")
        if outcome.get(eid) == "declined" and sc.get("error") != "execution_declined":
            problems.append(f"{eid}: declined, but resume on A said {short(json.dumps(r), 200)}")
    gauges = settle_gauges("after")
    say("after resuming: (approval_store_entries, approvals_pending) A %s, B %s" % (gauges["A"], gauges["B"]))
    for where, v in gauges.items():
        if v != (0, 0):
            problems.append(f"replica {where} still holds (store entries, pending) = {v} 15 s after every call settled")

    if problems:
        for p in problems[:40]:
            print("  PROBLEM: " + p, flush=True)
        if len(problems) > 40:
            print(f"  … and {len(problems) - 40} more", flush=True)
        raise Fail(f"{len(problems)} problems in the race")
    say("one outcome per execution, one decision row each, no entry left on either replica")


# ---- 4b. a browser that stops reading holds up nobody else
def check_stalled():
    """Eight page streams through the balancer that nobody reads, and one that
    must still get every change while 200 calls come to wait (≈ 20 bursts of
    the admin's 24 KiB inbox: far more than the stalled ones' buffers hold)."""
    cookie = sign_in(LB)
    u = urllib.parse.urlsplit(LB)

    def open_events(rcvbuf=None):
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        c.connect()
        if rcvbuf:
            # A small receive window, so the stall reaches back to the replica soon.
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        c.request("GET", "/api/live/events", headers={"cookie": cookie})
        r = c.getresponse()
        check(r.status == 200, f"/api/live/events through the balancer: {r.status}")
        return c, r

    stalled = [open_events(rcvbuf=4096) for _ in range(8)]
    reader_conn, reader = open_events()
    totals = []

    def read():
        try:
            for line in reader:
                m = re.search(rb'"total":(\d+)', line)
                if m:
                    totals.append(int(m.group(1)))
        except Exception:  # the connection closed under it at the end
            pass

    threading.Thread(target=read, daemon=True).start()
    deadline = time.time() + 15
    while not totals and time.time() < deadline:
        time.sleep(0.05)
    check(totals, "the reading stream never got its first inbox")
    before = totals[-1]

    # Ten agents, twenty waiting calls each (the default per-credential limit).
    started = time.time()
    calls = []
    for agent in range(10):
        s = Session(LB, issue(f"mr-stalled-{agent}")["token"])
        check(s.initialize() == 200, "initialize through the balancer failed")
        for i in range(20):
            r = s.call("gatehouse_policy_set", {"pattern": f"mr_stalled_{agent}_{i}", "action": "allow"})
            eid = (r.get("structuredContent") or {}).get("executionId")
            check(eid, f"call {i} of agent {agent} did not pause: {short(json.dumps(r), 200)}")
            calls.append((s, eid))
            if i % 10 == 9:
                time.sleep(0.15)  # past the streams' 100 ms coalescing window: one more burst
    made = time.time()
    deadline = made + 30
    while totals[-1] < before + 200 and time.time() < deadline:
        time.sleep(0.1)
    seen = totals[-1]
    say(f"200 calls made in {made - started:.1f} s; {time.time() - made:.1f} s later the reader counted {seen - before} of them")
    for c, _ in stalled + [(reader_conn, None)]:
        c.close()
    cookies = {A: sign_in(A)}
    for s, eid in calls:
        st, _, body = req(A, "POST", f"/api/executions/{eid}/resume", {"action": "decline"}, {"origin": A, "cookie": cookies[A]})
        check(st in (200, 409), f"declining {eid} afterwards: {st} {short(body, 160)}")
        # The agent takes its answer, so the replicas hold nothing afterwards.
        s.call("resume", {"executionId": eid}, timeout=90)
    check(
        seen >= before + 200,
        f"with 8 streams stalled, the reading one saw {seen - before} of the 200 new waiting calls "
        f"({len(totals)} inbox events): a stalled reader held up another stream",
    )
    say(f"8 streams stalled; the reading one got {len(totals)} inbox events, the last counting all {seen} waiting")


if __name__ == "__main__":
    try:
        {"revoke": check_revoke, "policy": check_policy, "race": check_race, "stalled": check_stalled}[sys.argv[1]]()
    except Fail as e:
        print(f"  FAIL: {e}", flush=True)
        sys.exit(1)
PY

passed=()
failed=()
# run_check NAME COMMAND...: runs a check, records whether it passed; a
# failure prints the replicas' warnings and errors of this run.
run_check() {
  local name=$1
  shift
  say "== $name"
  local mark_a mark_b
  mark_a=$(wc -l <"$work/gatehouse_a.log")
  mark_b=$(wc -l <"$work/gatehouse_b.log")
  if "$@"; then
    passed+=("$name")
  else
    failed+=("$name")
    echo "  -- replica log lines (WARN/ERROR) during this check:" >&2
    tail -n +"$((mark_a + 1))" "$work/gatehouse_a.log" | grep -E 'WARN|ERROR|panick' | sed 's/^/  A: /' | tail -20 >&2 || true
    tail -n +"$((mark_b + 1))" "$work/gatehouse_b.log" | grep -E 'WARN|ERROR|panick' | sed 's/^/  B: /' | tail -20 >&2 || true
  fi
}

# last_lines COMMAND...: runs it, shows the last 15 lines of its output (an
# SDK's traceback is long; its assertion is at the end); its exit status.
last_lines() {
  local rc=0
  "$@" >"$work/client.out" 2>&1 || rc=$?
  tail -15 "$work/client.out"
  return "$rc"
}

py_token=$(cli token issue --agent py-agent --owner "$admin_user" --json | json_get token)
run_check "1. Python SDK client through the balancer" \
  last_lines "$python" "$root/end2end/clients/python_client.py" "$lb_url/mcp" "$py_token" py-agent
run_check "2. revoked on B, refused on A at once" "$python" "$work/checks.py" revoke
run_check "3. a rule saved on B is enforced on A at its next request" "$python" "$work/checks.py" policy
run_check "4. 100 concurrent decisions on 20 executions across A and B" "$python" "$work/checks.py" race
run_check "4b. eight stalled page streams through the balancer hold up no other" "$python" "$work/checks.py" stalled
# After the race: a call left waiting here would be counted there.
# The admin's browser session, signed in through the balancer (sessions are in
# the shared store, so the cookie works on both replicas).
sign_in_body=$("$python" -c 'import json, sys; print(json.dumps({"username": sys.argv[1], "password": sys.argv[2]}))' \
  "$admin_user" "$admin_password")
admin_cookie=$(curl -s -D - -o /dev/null -X POST "$lb_url/api/auth/sign-in" -H 'content-type: application/json' \
  -H "origin: $lb_url" -d "$sign_in_body" | awk 'tolower($1)=="set-cookie:"{split($2, c, ";"); print c[1]; exit}')
[ -n "$admin_cookie" ] || fail "the admin could not sign in through the balancer"
native_token=$(cli token issue --agent py-native --owner "$admin_user" --json | json_get token)
run_check "5. Python SDK on 2026-07-28, native mode, through the balancer (requests spread over both replicas)" \
  last_lines "$python" "$root/end2end/clients/python_native.py" "$lb_url" "$native_token" "$admin_cookie"

say "== 6. Playwright: multi-replica.spec.ts (TypeScript SDK through the balancer, approvals on B, A killed)"
echo "  (its second test kills replica A with SIGKILL: bash then reports A's command as \"Killed\")"
export PATH="$root/tools/node_modules/.bin:$PATH"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if run playwright env -C "$root/end2end" npx playwright test multi-replica.spec.ts; then
  passed+=("6. Playwright multi-replica.spec.ts")
else
  failed+=("6. Playwright multi-replica.spec.ts")
  echo "  -- replica log lines (WARN/ERROR):" >&2
  grep -hE 'WARN|ERROR|panick' "$work/gatehouse_a.log" | sed 's/^/  A: /' | tail -20 >&2 || true
  grep -hE 'WARN|ERROR|panick' "$work/gatehouse_b.log" | sed 's/^/  B: /' | tail -20 >&2 || true
  echo "  -- HAProxy: server state changes and 5xx answers:" >&2
  grep -E ' is (UP|DOWN)| 50[0-9] ' "$work/haproxy.log" | sed 's/^/  haproxy: /' | tail -20 >&2 || true
fi
# The spec killed replica A: it is no longer this script's to stop.
alive "$pid_a" || say "  replica A (pid $pid_a) is gone, as the spec killed it"

say "== summary"
for name in "${passed[@]}"; do echo "  passed: $name"; done
for name in "${failed[@]}"; do echo "  FAILED: $name"; done
[ "${#failed[@]}" -eq 0 ] || exit 1
say "== all multi-replica checks passed"
