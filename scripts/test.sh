#!/usr/bin/env bash
# The whole test suite: build (front end + release server), unit and
# integration tests, the MCP conformance scenarios, the Python SDK client, and
# Playwright (Debian chromium) with the TypeScript SDK client.
# Installs what is missing first (.ci/install.sh is idempotent).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export GATEHOUSE_BIN="$CARGO_TARGET_DIR/release/gatehouse"
# node 22 (from tools/) first on PATH, for the conformance suite and Playwright.
export PATH="$root/tools/node_modules/.bin:$PATH"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

step() { printf '\n==== %s\n' "$*"; }

step "install missing tools"
bash .ci/install.sh

step "build"
bash scripts/build.sh

step "habits: formatting, clippy (warnings are errors), docs on every public item"
cargo fmt --all --check
cargo clippy --release --workspace --all-targets -- -D warnings

step "unit and integration tests (cargo test)"
cargo test --release --workspace

step "MCP conformance suite"
bash scripts/conformance.sh

step "Python SDK client (mcp)"
work=$(mktemp -d)
"$GATEHOUSE_BIN" --listen 127.0.0.1:0 --data-dir "$work" >"$work/out" 2>"$work/err" &
gh_pid=$!
trap 'kill $gh_pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
url=$(grep -o 'listening on http://[0-9.:]*' "$work/out" | awk '{print $3}')
token=$("$GATEHOUSE_BIN" --data-dir "$work" token issue --agent py-agent --json | tools/.venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["token"])')
tools/.venv/bin/python end2end/clients/python_client.py "$url/mcp" "$token" py-agent
kill $gh_pid 2>/dev/null || true

step "end to end: Playwright in chromium, TypeScript SDK client"
(cd end2end && npx playwright test)

step "all tests passed"
