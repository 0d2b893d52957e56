#!/usr/bin/env bash
# The whole test suite: build (front end + release server), unit and
# integration tests, the MCP conformance scenarios, the Python SDK client, and
# the deploy definitions (systemd unit, container image, Kubernetes), and
# Playwright (Debian chromium) with the TypeScript SDK client, then two
# replicas on PostgreSQL behind HAProxy (scripts/multi-replica.sh).
# Installs what is missing first (.ci/install.sh is idempotent).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"
export GATEHOUSE_BIN="$rel/gatehouse"
bin=$GATEHOUSE_BIN
# node 22 (from tools/) first on PATH, for the conformance suite and Playwright.
export PATH="$root/tools/node_modules/.bin:$PATH"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

# Each step says how long the suite has run, so a slow step shows in CI's log.
step() { printf '\n==== %s (at %d min %02d s)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "install missing tools"
bash .ci/install.sh

step "build"
bash scripts/build.sh
# The 2026-07-28 "everything-modern" fixture (scripts/conformance-next.sh).
cargo build --release -p gatehouse-fixtures

step "habits: formatting, clippy (warnings are errors), docs on every public item, house rules (tests/tidy.rs)"
cargo fmt --all --check
cargo clippy --release --workspace --all-targets -- -D warnings
# The house rules (store work leaves the runtime in one place, inside
# core; no import cycle between files) are cargo tests: tests/tidy.rs.

step "unit and integration tests (cargo test) on SQLite"
cargo test --release --workspace

step "the same tests on PostgreSQL (a throw-away server; every test in a schema of its own)"
# (the running one if any; else one started here and stopped at exit)
use_postgres
GATEHOUSE_TEST_DATABASE_URL=$pg_url cargo test --release --workspace

step "MCP conformance suite 0.1.16 (every server scenario)"
bash scripts/conformance.sh

step "MCP conformance suite 0.2 (both requirement sets, and through Gatehouse fronting the suite's reference server)"
bash scripts/conformance-next.sh

# Each relaying scenario 50 times through Gatehouse with its default limits
# and no retries (a lost relayed request is a hang), fronting the reference
# where it is at hand, else the fixture asking as the reference did.
step "relayed requests: tools-call-sampling and tools-call-elicitation 50 times each through Gatehouse"
bash scripts/conformance-relays.sh 50

step "Python SDK client (mcp)"
start_gatehouse
token=$(issue_token py-agent)
tools/.venv/bin/python end2end/clients/python_client.py "$(url_of gatehouse)/mcp" "$token" py-agent
stop gatehouse

step "deploy: the systemd unit, the container image (built and started), the Kubernetes example"
bash deploy/systemd/verify.sh
bash deploy/container/smoke.sh
tools/.venv/bin/kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml

step "end to end: Playwright in chromium, TypeScript SDK client"
(cd end2end && npx playwright test)

step "several replicas on PostgreSQL behind HAProxy"
bash scripts/multi-replica.sh

step "all tests passed"
