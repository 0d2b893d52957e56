#!/usr/bin/env bash
# Load and soak run (issue #16), kept out of the test command: 32 agents with
# mixed allowed, gated-and-approved, declined and expired calls against the
# release binary for MINUTES (default 10). Reports throughput, latency,
# resident memory and open fds of the server at the start, every minute and
# the end, and the approval store's entries (0 at the end, or it fails).
# Usage: scripts/soak.sh [minutes] [agents]
# (SOAK_PREBUILT=1: use the binaries already built instead of running cargo.)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
minutes=${1:-10}
agents=${2:-32}
[ -n "${SOAK_PREBUILT:-}" ] || build_release soak

# gatehouse_status is read-only: allowed. The two gated ones: decided by the
# run's "person" (default TTL), and left to expire (2 s).
cat >"$work/gatehouse.toml" <<'TOML'
max_executions_per_credential = 20

[[policy]]
pattern = "gatehouse_policies_list"
action = "require_approval"

[[policy]]
pattern = "gatehouse_audit_recent"
action = "require_approval"
approval_ttl = "2s"
TOML

password="soak password $RANDOM$RANDOM"
printf %s "$password" | "$bin" --data-dir "$work/data" user add soak --admin --password-stdin >/dev/null
for i in $(seq "$agents"); do
  "$bin" --data-dir "$work/data" token issue --agent "soak-$i" --owner soak --json | json_get token
done >"$work/tokens"

export GATEHOUSE_LOG=warn
start_gatehouse --config "$work/gatehouse.toml"
pid=$(cat "$work/gatehouse.pid")
echo "gatehouse $("$bin" --version 2>/dev/null || true) pid $pid at $(url_of gatehouse); $agents agents for $minutes min; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

status=0
run soak "$rel/examples/soak" "$(url_of gatehouse)" "$pid" "$work/tokens" soak "$password" "$minutes" || status=$?

echo "data dir after the run: $(du -sh "$work/data" | cut -f1)" >&2
# What the server said at warn level and above during the run.
warnings=$(grep -c -E 'WARN|ERROR' "$work/gatehouse.err" || true)
echo "server log: $warnings warning/error lines" >&2
grep -E 'WARN|ERROR' "$work/gatehouse.err" | sed -E 's/^[^ ]+ +//' | sort | uniq -c | sort -rn | head -10 >&2 || true
if grep -q panicked "$work/gatehouse.err"; then
  echo "the server panicked:" >&2
  grep -A3 panicked "$work/gatehouse.err" >&2
  status=1
fi
exit "$status"
