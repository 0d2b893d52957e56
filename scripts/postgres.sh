#!/usr/bin/env bash
# A throw-away PostgreSQL for tests, from Debian's `postgresql` package (the
# newest version under /usr/lib/postgresql, 15 on bookworm; PG_BIN overrides):
# a temp data dir, loopback only, a free port, trust authentication on
# loopback, a database `gatehouse`.
#
#   bash scripts/postgres.sh start   starts it (if not running) and prints its URL
#   bash scripts/postgres.sh url     prints the URL of the running one
#   bash scripts/postgres.sh stop    stops it and removes its data dir
#   bash scripts/postgres.sh status  says whether it runs (exit 0) or not (exit 1)
#
# The URL is postgres://postgres@127.0.0.1:PORT/gatehouse. The server runs as
# the `postgres` user (initdb refuses root): `runuser -u postgres -- …` when
# this script runs as root, directly otherwise. Its state (data dir, port, URL)
# is in $GATEHOUSE_PG_STATE (default /tmp/gatehouse-postgres.state), so one
# machine runs one such server unless the variable differs. Idempotent: start
# on a running server prints its URL; stop with none running does nothing.
set -euo pipefail

state=${GATEHOUSE_PG_STATE:-/tmp/gatehouse-postgres.state}
pg_user=postgres
db=gatehouse

die() {
  echo "postgres.sh: $*" >&2
  exit 1
}

# pg_bin: the server binaries' directory (newest installed major version).
pg_bin() {
  local dir=${PG_BIN:-}
  [ -n "$dir" ] || dir=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1)
  if [ -z "$dir" ] || [ ! -x "$dir/initdb" ] || [ ! -x "$dir/pg_ctl" ]; then
    die "no PostgreSQL server found under /usr/lib/postgresql (apt-get install postgresql)"
  fi
  echo "$dir"
}

# as_pg COMMAND...: COMMAND as the postgres user.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$pg_user" -- "$@"
  else
    "$@"
  fi
}

# free_port: a TCP port nothing listens on at 127.0.0.1 (the kernel picks it).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# read_state: sets datadir, port and url from the state file; whether it exists.
read_state() {
  [ -f "$state" ] || return 1
  datadir=$(sed -n 's/^datadir=//p' "$state")
  port=$(sed -n 's/^port=//p' "$state")
  url=$(sed -n 's/^url=//p' "$state")
  [ -n "$datadir" ] && [ -n "$port" ] && [ -n "$url" ]
}

# alive PID: whether process PID exists and is not a zombie (a killed
# postmaster lingers as one until init reaps it).
alive() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" | cut -c1)" != Z ]
}

# postmaster: the pid in the data dir's postmaster.pid, if any.
postmaster() { head -1 "$datadir/postmaster.pid" 2>/dev/null || true; }

# running: whether the server in the state file is up and accepts connections.
running() {
  read_state || return 1
  [ -f "$datadir/PG_VERSION" ] || return 1
  alive "$(postmaster)" || return 1
  "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$port" -t 5
}

cmd_start() {
  if running; then
    echo "$url"
    return
  fi
  # A stale state file (crashed run, reboot): stop whatever is left and clean up.
  if [ -f "$state" ]; then cmd_stop >/dev/null 2>&1 || true; fi

  local bin log
  bin=$(pg_bin)
  [ "$(id -u)" -ne 0 ] || id "$pg_user" >/dev/null 2>&1 || die "no '$pg_user' user (is the postgresql package installed?)"
  datadir=$(mktemp -d /tmp/gatehouse-pg.XXXXXX)
  chmod 700 "$datadir"
  [ "$(id -u)" -ne 0 ] || chown "$pg_user:" "$datadir"
  log="$datadir.log"
  : >"$log"
  [ "$(id -u)" -ne 0 ] || chown "$pg_user:" "$log"

  # Record the data dir at once, so `stop` cleans up even if start fails below.
  port=$(free_port)
  url="postgres://$pg_user@127.0.0.1:$port/$db"
  printf 'datadir=%s\nport=%s\nurl=%s\n' "$datadir" "$port" "$url" >"$state"

  if ! as_pg "$bin/initdb" -D "$datadir" -U "$pg_user" --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
    >>"$log" 2>&1; then
    cat "$log" >&2
    cmd_stop >/dev/null 2>&1 || true
    die "initdb failed (log above)"
  fi
  # Loopback TCP only, trust there and nowhere else (the Unix socket lives in
  # the 0700 data dir and hba has no line for it).
  cat >"$datadir/pg_hba.conf" <<'EOF'
# TYPE  DATABASE  USER  ADDRESS       METHOD
host    all       all   127.0.0.1/32  trust
EOF
  [ "$(id -u)" -ne 0 ] || chown "$pg_user:" "$datadir/pg_hba.conf"

  # -w waits until the server accepts connections (60 s at most).
  if ! as_pg "$bin/pg_ctl" -D "$datadir" -l "$log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $datadir -c fsync=off -c full_page_writes=off -c max_connections=2500" \
    start >/dev/null 9>&-; then
    cat "$log" >&2
    cmd_stop >/dev/null 2>&1 || true
    die "pg_ctl start failed on port $port (log above)"
  fi
  if ! as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$pg_user" "$db" >>"$log" 2>&1; then
    cat "$log" >&2
    cmd_stop >/dev/null 2>&1 || true
    die "createdb $db failed (log above)"
  fi
  echo "$url"
}

cmd_url() {
  running || die "not running (bash scripts/postgres.sh start)"
  echo "$url"
}

cmd_stop() {
  read_state || { rm -f "$state"; return 0; }
  local pid
  pid=$(postmaster)
  if [ -f "$datadir/PG_VERSION" ] && alive "$pid"; then
    # fast: disconnect clients and stop; immediate if that does not finish.
    as_pg "$(pg_bin)/pg_ctl" -D "$datadir" -m fast -w -t 30 stop >/dev/null 2>&1 \
      || as_pg "$(pg_bin)/pg_ctl" -D "$datadir" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  if alive "$pid"; then
    die "server (pid $pid) did not stop; data dir $datadir kept"
  fi
  case $datadir in
    /tmp/gatehouse-pg.*) rm -rf "$datadir" "$datadir.log" ;;
    *) die "refusing to remove unexpected data dir '$datadir' (state file $state)" ;;
  esac
  rm -f "$state"
}

# One start or stop at a time (two scripts starting together would each
# make a server and overwrite each other's state file). The server itself is
# started without this descriptor, or it would hold the lock for its life.
exec 9>"$state.lock"
flock 9

case ${1:-} in
  start) cmd_start ;;
  url) cmd_url ;;
  stop) cmd_stop ;;
  status)
    if running; then echo "running: $url"; else
      echo "not running"
      exit 1
    fi
    ;;
  *) die "usage: bash scripts/postgres.sh start|url|stop|status" ;;
esac
