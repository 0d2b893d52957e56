#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test Gatehouse. Idempotent:
# every step checks first, so later runs on the same machine take seconds.
#   .ci/install.sh           everything the tests need
#   .ci/install.sh --build   only what building and running need (scripts/run.sh):
#                            the wasm target, the wasm-bindgen CLI and wasm-opt
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
WASM_BINDGEN_VERSION=0.2.129
build_only=false
[ "${1:-}" = "--build" ] && build_only=true

log() { printf '\n== %s\n' "$*"; }

# npm_install DIR: the packages of DIR's lock file, unless already there.
npm_install() {
  local dir=$1
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    # `npm install` follows the lock file like `npm ci`, but tolerates an
    # optional dependency the registry lacks (vite's, pulled in by the
    # inspector), which makes `npm ci` refuse the whole lock.
    (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund)
  fi
}

log "rust wasm target"
rustup target list --installed | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

log "wasm-bindgen-cli $WASM_BINDGEN_VERSION"
if ! wasm-bindgen --version 2>/dev/null | grep -q " $WASM_BINDGEN_VERSION\$"; then
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --locked
fi

log "node packages to build (tools/build: binaryen's wasm-opt)"
npm_install "$root/tools/build"

if $build_only; then
  log "install done (build only)"
  exit 0
fi

log "debian packages (chromium, wrk, postgresql, haproxy, buildah, systemd-analyze)"
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v wrk >/dev/null || need+=(wrk)
# A throw-away PostgreSQL for the store tests (scripts/postgres.sh) and HAProxy
# for the multi-replica test (deploy/haproxy.cfg). Checked by path: initdb is
# not on PATH (/usr/lib/postgresql/N/bin), haproxy is in /usr/sbin.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
[ -x /usr/sbin/haproxy ] || need+=(haproxy)
# The deploy checks: the container image (buildah), the systemd unit
# (systemd-analyze), the container's listening socket (ss).
command -v buildah >/dev/null || need+=(buildah)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v ss >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "${need[@]}"
fi

log "node packages to test (tools: node 22, conformance; end2end: Playwright, MCP TS SDK)"
npm_install "$root/tools"
npm_install "$root/end2end"

log "python MCP SDK (virtualenv in tools/.venv)"
if [ ! -x "$root/tools/.venv/bin/python" ]; then
  python3 -m venv "$root/tools/.venv"
fi
"$root/tools/.venv/bin/pip" install -q -r "$root/tools/requirements.txt"
log "install done"
