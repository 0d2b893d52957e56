#!/usr/bin/env bash
# Builds Gatehouse: the front end first (wasm → wasm-bindgen → wasm-opt, CSS),
# into dist/site, then the release server that embeds it. Nothing is
# downloaded except registry packages (.ci/install.sh installs the tools).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
export PATH="$root/tools/build/node_modules/.bin:$PATH"

# The wasm-bindgen CLI must equal the crate in Cargo.lock, or the bundle breaks.
want=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/,""); print; exit}' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')
if [ "$want" != "$have" ]; then
  echo "wasm-bindgen CLI is ${have:-missing}, Cargo.lock has $want: run .ci/install.sh --build" >&2
  exit 1
fi
command -v wasm-opt >/dev/null || { echo "wasm-opt missing (npm binaryen in tools/build/): run .ci/install.sh --build" >&2; exit 1; }

site="$root/dist/site"
pkg="$site/pkg"
mkdir -p "$pkg"

echo "== front end (wasm)"
cargo build -p gatehouse-app --lib --target wasm32-unknown-unknown --no-default-features --features hydrate --profile wasm-release
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wasm-bindgen --target web --no-typescript --out-dir "$tmp" --out-name gatehouse \
  "$target/wasm32-unknown-unknown/wasm-release/gatehouse_app.wasm"
wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
  -o "$tmp/gatehouse.wasm" "$tmp/gatehouse_bg.wasm"
cp style/main.css "$tmp/gatehouse.css"
# Replace the files only when they changed, so cargo's change tracking stays quiet.
for f in gatehouse.js gatehouse.wasm gatehouse.css; do
  cmp -s "$tmp/$f" "$pkg/$f" || cp "$tmp/$f" "$pkg/$f"
done
cmp -s public/favicon.svg "$site/favicon.svg" || cp public/favicon.svg "$site/favicon.svg"
# Each file beside its brotli (quality 11) and gzip (level 9) forms: the
# server sends the one a browser accepts as it is (src/site.rs). Node's zlib
# does both; node is already here for wasm-opt.
for f in "$pkg/gatehouse.js" "$pkg/gatehouse.wasm" "$pkg/gatehouse.css" "$site/favicon.svg"; do
  if [ "$f" -nt "$f.br" ] || [ "$f" -nt "$f.gz" ] || [ ! -e "$f.br" ] || [ ! -e "$f.gz" ]; then
    node -e '
      const fs = require("fs"), zlib = require("zlib"), f = process.argv[1], data = fs.readFileSync(f);
      fs.writeFileSync(f + ".br", zlib.brotliCompressSync(data, { params: {
        [zlib.constants.BROTLI_PARAM_QUALITY]: 11, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: data.length } }));
      fs.writeFileSync(f + ".gz", zlib.gzipSync(data, { level: 9 }));' "$f"
  fi
done
# What a browser downloads (BENCHMARKS.md, "The front end's size").
for f in gatehouse.wasm gatehouse.js gatehouse.css; do
  echo "front end: $f $(wc -c <"$pkg/$f") bytes, $(wc -c <"$pkg/$f.gz") gzipped, $(wc -c <"$pkg/$f.br") brotli"
done

# GATEHOUSE_PROFILE=dist: the packages' build (fat LTO; Cargo.toml says why).
profile=${GATEHOUSE_PROFILE:-release}
echo "== server ($profile, site embedded)"
cargo build --profile "$profile" --bin gatehouse
echo "built $target/$profile/gatehouse"
