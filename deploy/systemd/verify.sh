#!/usr/bin/env bash
# Checks deploy/systemd/gatehouse.service as systemd reads it: no warning from
# `systemd-analyze verify` (with ExecStart pointed at the built binary, which
# verify requires to exist), and an exposure score from `systemd-analyze
# security` of at most 2.0 ("OK"; lower is safer), so hardening taken out
# fails the test. Needs systemd-analyze; no running systemd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${GATEHOUSE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/gatehouse}
[ -x "$bin" ] || { echo "no $bin: run scripts/build.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|^ExecStart=/usr/local/bin/gatehouse|ExecStart=$bin|" "$here/gatehouse.service" >"$work/gatehouse.service"
grep -q "^ExecStart=$bin " "$work/gatehouse.service" || { echo "FAIL: no ExecStart=/usr/local/bin/gatehouse line" >&2; exit 1; }

said=$(systemd-analyze verify --man=no "$work/gatehouse.service" 2>&1) || true
if [ -n "$said" ]; then
  echo "FAIL: systemd-analyze verify:" >&2
  echo "$said" >&2
  exit 1
fi
echo "ok: systemd-analyze verify says nothing"

score=$(systemd-analyze security --offline=yes "$work/gatehouse.service" 2>/dev/null |
  sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || { echo "FAIL: no exposure score" >&2; exit 1; }
awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' || { echo "FAIL: exposure $score > 2.0" >&2; exit 1; }
echo "ok: exposure $score (at most 2.0)"
