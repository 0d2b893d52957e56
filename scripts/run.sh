#!/usr/bin/env bash
# Builds Gatehouse (installing what building needs first, nothing the tests
# need) and runs it. Arguments go to the binary, e.g.
# `scripts/run.sh --listen 0.0.0.0:8080`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
bash "$root/.ci/install.sh" --build >/dev/null
bash "$root/scripts/build.sh"
exec "$CARGO_TARGET_DIR/release/gatehouse" "$@"
