#!/usr/bin/env bash
# Smoke test of deploy/haproxy.cfg's routing, with two stand-in replicas (a
# few lines of Python that behave like Gatehouse's /mcp as far as a balancer
# sees: initialize answers a new `mcp-session-id` naming the replica, a request
# for a session the replica does not hold gets 404, GET /readyz is 200 only with
# a loopback Host). The config's ports (8080, 8081, 8082) are replaced by free
# ones so the test runs beside anything else on the machine.
#
# Checks: the config is valid; session-less requests alternate between the
# replicas; every request carrying a session id reaches the replica that
# created it; an SSE stream passes through unbuffered; with a replica gone, its
# sessions get 404 from the other one (the client re-initialises) and new
# sessions all go to the survivor. Then, if the release binary exists
# (GATEHOUSE_BIN, else $CARGO_TARGET_DIR/release/gatehouse; it is only
# run, never built), the same with two real Gatehouse replicas: health checks
# pass, MCP sessions spread and stick. Every process it starts is stopped at
# the end, and it checks that none survives.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()

cleanup() {
  local rc=$? pid
  if [ "${#pids[@]}" -gt 0 ]; then kill "${pids[@]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" | cut -c1)" != Z ]; then
      echo "FAIL: process $pid survived" >&2
      rc=1
    fi
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "FAIL: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
  done
  exit 1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start_time=$EPOCHREALTIME
say() { awk -v a="$start_time" -v b="$EPOCHREALTIME" -v m="$*" 'BEGIN { printf "[%5.1fs] %s\n", b - a, m }'; }

command -v haproxy >/dev/null || PATH="$PATH:/usr/sbin"
command -v haproxy >/dev/null || fail "haproxy is not installed (apt-get install haproxy)"

cat >"$work/replica.py" <<'PY'
import http.server, json, sys, time, uuid

name, port = sys.argv[1], int(sys.argv[2])
sessions = set()
LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (name, fmt % args))

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def host_ok(self):
        host = (self.headers.get("host") or "").rsplit(":", 1)[0] if "]" not in (self.headers.get("host") or "") else self.headers.get("host").split("]")[0] + "]"
        return host.lower() in LOOPBACK

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def do_GET(self):
        if not self.host_ok():
            return self.reply(403, {"error": "host"})
        if self.path == "/readyz":
            return self.reply(200, {"status": "ready"})
        sid = self.headers.get("mcp-session-id")
        if self.path == "/mcp" and sid:
            if sid not in sessions:
                return self.reply(404, {"backend": name, "error": "unknown session"})
            # An SSE stream: three events 0.4 s apart, then the end.
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            for i in range(3):
                self.wfile.write(("data: %s %d %.3f\n\n" % (name, i, time.time())).encode())
                self.wfile.flush()
                time.sleep(0.4)
            self.close_connection = True
            return
        self.reply(404, {"backend": name})

    def do_POST(self):
        self.body()
        if not self.host_ok():
            return self.reply(403, {"error": "host"})
        sid = self.headers.get("mcp-session-id")
        if sid is None:
            new = "%s-%s" % (name, uuid.uuid4())
            sessions.add(new)
            return self.reply(200, {"backend": name}, [("mcp-session-id", new)])
        if sid not in sessions:
            return self.reply(404, {"backend": name, "error": "unknown session"})
        self.reply(200, {"backend": name, "session": sid})

http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
PY

lb=$(free_port)
pa=$(free_port)
pb=$(free_port)
sed -e "s/127\.0\.0\.1:8080/127.0.0.1:$lb/" -e "s/127\.0\.0\.1:8081/127.0.0.1:$pa/" \
  -e "s/127\.0\.0\.1:8082/127.0.0.1:$pb/" -e "s/inter 2s fall 2 rise 2/inter 300ms fall 2 rise 1/" \
  "$here/haproxy.cfg" >"$work/haproxy.cfg"
for port in "$lb" "$pa" "$pb"; do
  grep -q "127.0.0.1:$port" "$work/haproxy.cfg" || fail "could not rewrite the ports of haproxy.cfg"
done

say "== haproxy -c"
haproxy -c -f "$here/haproxy.cfg" >/dev/null || fail "deploy/haproxy.cfg is invalid"
haproxy -c -f "$work/haproxy.cfg" >/dev/null || fail "the rewritten config is invalid"

python3 "$work/replica.py" replica_a "$pa" 2>"$work/replica_a.log" &
pids+=($!)
pid_a=$!
python3 "$work/replica.py" replica_b "$pb" 2>"$work/replica_b.log" &
pids+=($!)
haproxy -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1 &
pids+=($!)

base="http://127.0.0.1:$lb"
# post ARGS...: POST /mcp through the balancer (curl ARGS added); prints the
# status; the headers land in $work/h, the body in $work/b.
post() {
  curl -s -D "$work/h" -o "$work/b" -w '%{http_code}' -X POST "$base/mcp" \
    -H 'content-type: application/json' -d '{}' "$@" || true
}
backend() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("backend",""))' "$work/b" 2>/dev/null; }
sid_of() { awk 'tolower($1)=="mcp-session-id:"{print $2}' "$work/h" | tr -d '\r'; }

say "== both replicas up (health check GET /readyz with Host 127.0.0.1)"
seen=""
for _ in $(seq 100); do
  [ "$(post)" = 200 ] && seen="$seen $(backend)"
  case $seen in *replica_a*replica_b* | *replica_b*replica_a*) break ;; esac
  sleep 0.1
done
case $seen in *replica_a*replica_b* | *replica_b*replica_a*) ;; *) fail "both replicas never answered: $seen" ;; esac
# The health checks themselves must have passed: the stand-ins logged them.
grep -q '"GET /readyz HTTP/1.1" 200' "$work/replica_a.log" || fail "no successful health check on replica_a"
sleep 1

say "== session-less requests alternate"
prev="" order=""
for _ in $(seq 10); do
  [ "$(post)" = 200 ] || fail "session-less POST failed"
  b=$(backend)
  [ "$b" != "$prev" ] || fail "two session-less requests in a row went to $b: $order $b"
  prev=$b order="$order $b"
done
echo "  $order"

say "== every request of a session reaches the replica that created it"
sids=()
for _ in $(seq 6); do
  [ "$(post)" = 200 ] || fail "initialize failed"
  sid=$(sid_of)
  [ -n "$sid" ] || fail "no mcp-session-id in the response"
  sids+=("$sid")
done
for sid in "${sids[@]}"; do
  owner=${sid%%-*}
  for _ in $(seq 8); do
    status=$(post -H "mcp-session-id: $sid")
    if [ "$status" != 200 ] || [ "$(backend)" != "$owner" ]; then
      fail "request for $sid got $status from $(backend), not $owner"
    fi
  done
done
echo "  ${#sids[@]} sessions x 8 requests, each on its creator"

say "== an SSE stream passes through unbuffered"
sid=${sids[0]}
curl -sN "$base/mcp" -H "mcp-session-id: $sid" -H 'accept: text/event-stream' \
  | python3 -c '
import sys, time
arrivals = []
for line in sys.stdin:
    if line.startswith("data: "):
        arrivals.append((time.time(), line.split()))
assert len(arrivals) == 3, arrivals
owner = sys.argv[1]
assert all(parts[1] == owner for _, parts in arrivals), arrivals
# Sent 0.4 s apart, they arrive about 0.4 s apart, not together at the end.
gaps = [b[0] - a[0] for a, b in zip(arrivals, arrivals[1:])]
assert max(gaps) > 0.25, "events were buffered: gaps %s" % gaps
print("  3 events from %s, gaps %s s" % (owner, ", ".join("%.2f" % g for g in gaps)))
' "${sid%%-*}" || fail "SSE stream"

say "== replica_a gone: its sessions get 404 from replica_b, new sessions go to replica_b"
kill "$pid_a"
wait "$pid_a" 2>/dev/null || true
sid_a=""
for sid in "${sids[@]}"; do case $sid in replica_a-*) sid_a=$sid ;; esac; done
[ -n "$sid_a" ] || fail "no session on replica_a"
status=$(post -H "mcp-session-id: $sid_a")
if [ "$status" != 404 ] || [ "$(backend)" != replica_b ]; then
  fail "replica_a's session got $status from '$(backend)', not 404 from replica_b"
fi
for _ in $(seq 30); do
  grep -q 'replica_a is DOWN' "$work/haproxy.log" && break
  sleep 0.1
done
grep -q 'replica_a is DOWN' "$work/haproxy.log" || fail "haproxy never marked replica_a down"
for _ in $(seq 6); do
  if [ "$(post)" != 200 ] || [ "$(backend)" != replica_b ]; then fail "a new session did not go to replica_b"; fi
done
for sid in "${sids[@]}"; do
  case $sid in replica_b-*)
    if [ "$(post -H "mcp-session-id: $sid")" != 200 ] || [ "$(backend)" != replica_b ]; then
      fail "replica_b's session $sid lost"
    fi
    ;;
  esac
done
echo "  ok"

# ---- Part 2: the real Gatehouse binary as both replicas, if there is one.
# Each replica has its own SQLite data dir (one shared PostgreSQL is the next
# step of issue #13); B's is a copy of A's made after issuing the agent token,
# so one token works on both. This checks what the stand-ins cannot: that
# Gatehouse passes the health check and that its sessions stick.
gatehouse=${GATEHOUSE_BIN:-${CARGO_TARGET_DIR:-$here/../target}/release/gatehouse}
if [ ! -x "$gatehouse" ]; then
  say "== all smoke checks passed (no Gatehouse binary at $gatehouse: real replicas skipped)"
  exit 0
fi
say "== real replicas: $gatehouse"
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
lb=$(free_port)
pa=$(free_port)
pb=$(free_port)
sed -e "s/127\.0\.0\.1:8080/127.0.0.1:$lb/" -e "s/127\.0\.0\.1:8081/127.0.0.1:$pa/" \
  -e "s/127\.0\.0\.1:8082/127.0.0.1:$pb/" -e "s/inter 2s fall 2 rise 2/inter 300ms fall 2 rise 1/" \
  "$here/haproxy.cfg" >"$work/haproxy.cfg"
base="http://127.0.0.1:$lb"
token=$("$gatehouse" --data-dir "$work/data_a" token issue --agent smoke --json \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
cp -a "$work/data_a" "$work/data_b"
"$gatehouse" --listen "127.0.0.1:$pa" --data-dir "$work/data_a" >"$work/gatehouse_a.log" 2>&1 &
pids+=($!)
"$gatehouse" --listen "127.0.0.1:$pb" --data-dir "$work/data_b" >"$work/gatehouse_b.log" 2>&1 &
pids+=($!)
# A binary built before /readyz existed (9362cb9) answers it 404: check
# /healthz instead, and say so.
ready=/readyz
for port in "$pa" "$pb"; do
  for _ in $(seq 150); do
    status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port$ready" || true)
    [ "$status" = 200 ] && break
    if [ "$status" = 404 ] && [ "$ready" = /readyz ]; then
      ready=/healthz
      say "  this binary has no /readyz (built before 9362cb9): the health check uses /healthz"
      sed -i "s|uri /readyz|uri /healthz|" "$work/haproxy.cfg"
      continue
    fi
    sleep 0.1
  done
  [ "$status" = 200 ] || fail "replica on $port never ready ($ready: $status)"
done
: >"$work/haproxy.log"
haproxy -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1 &
pids+=($!)
sleep 1
grep -q 'is DOWN' "$work/haproxy.log" && fail "a Gatehouse replica failed the health check"

mcp() { # mcp URL SID BODY: POST URL/mcp as the agent; prints the status.
  local header=()
  [ -z "$2" ] || header=(-H "mcp-session-id: $2")
  curl -s -D "$work/h" -o "$work/b" -w '%{http_code}' -X POST "$1/mcp" -H "authorization: Bearer $token" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H 'mcp-protocol-version: 2025-11-25' "${header[@]}" -d "$3" || true
}
init='{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"smoke","version":"1"}}}'
initialized='{"jsonrpc":"2.0","method":"notifications/initialized"}'
list='{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
on_a=0 on_b=0
for _ in $(seq 4); do
  [ "$(mcp "$base" "" "$init")" = 200 ] || fail "initialize through the balancer: $(cat "$work/b")"
  sid=$(sid_of)
  [ -n "$sid" ] || fail "Gatehouse sent no mcp-session-id"
  [ "$(mcp "$base" "$sid" "$initialized")" = 202 ] || fail "notifications/initialized: $(cat "$work/b")"
  # Which replica holds it: asked directly, the other answers 404.
  a=$(mcp "http://127.0.0.1:$pa" "$sid" "$list")
  b=$(mcp "http://127.0.0.1:$pb" "$sid" "$list")
  case "$a $b" in
    "200 404") on_a=$((on_a + 1)) ;;
    "404 200") on_b=$((on_b + 1)) ;;
    *) fail "session $sid: replica A says $a, B says $b (expected one 200, one 404)" ;;
  esac
  for _ in $(seq 6); do
    status=$(mcp "$base" "$sid" "$list")
    [ "$status" = 200 ] || fail "tools/list for $sid through the balancer: $status (routed to the wrong replica?)"
  done
done
if [ "$on_a" -eq 0 ] || [ "$on_b" -eq 0 ]; then fail "sessions were not spread: $on_a on A, $on_b on B"; fi
say "  4 sessions ($on_a on A, $on_b on B), 6 tools/list each through the balancer, all on their replica"

say "== all smoke checks passed"
