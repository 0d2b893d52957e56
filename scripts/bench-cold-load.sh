#!/usr/bin/env bash
# What a phone downloads and waits for on a cold load of the approvals page
# and of a call's page (Fast 3G, 4× CPU slowdown, empty cache), then a warm one:
# end2end/bench/cold-load.spec.ts against the release binary, and against
# BASELINE_BIN too when it is set. Usage: [BASELINE_BIN=old] scripts/bench-cold-load.sh [runs]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
[ -x "$bin" ] || { echo "no $bin: run scripts/build.sh" >&2; exit 1; }
runs=${1:-3}
out="$work/loads.jsonl"
for ((i = 1; i <= runs; i++)); do
  for b in ${BASELINE_BIN:+"$BASELINE_BIN"} "$bin"; do
    (cd end2end && GATEHOUSE_BIN="$b" npx playwright test -c bench.config.ts --reporter=line) \
      | grep '^{"bench":"cold-load"' >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| binary | page | load | transferred (KB) | first content (ms) | interactive (ms) | runs |")
print("|---|---|---|---|---|---|---|")
for binary in dict.fromkeys(r["binary"] for r in rows):
    for page in dict.fromkeys(r.get("page", "approvals") for r in rows):
        for load in ("cold", "warm"):
            rs = [r for r in rows if r["binary"] == binary and r.get("page", "approvals") == page and r["load"] == load]
            if not rs:
                continue
            med = lambda k: statistics.median(r[k] for r in rs)
            print(f"| {binary} | {page} | {load} | {med('total_bytes') / 1000:.1f} | {med('first_content_ms'):.0f} | {med('interactive_ms'):.0f} | {len(rs)} |")
last = [r for r in rows if r["load"] == "cold"][-1]
print("\nfiles of the last cold load (bytes on the wire):")
for name, n in sorted(last["files"].items(), key=lambda kv: -kv[1]):
    print(f"  {n:>9}  {name}")
PY
