#!/usr/bin/env bash
# Builds deploy/container/Containerfile with buildah and starts the image:
# the definition a host would build, checked as far as this machine can.
#
# Container registries are out of reach here (only package registries are),
# so the two images the definition starts from are replaced, and only those:
# - the build stage by the release binary already built (buildah's
#   `--build-context build=DIR`: the stage is skipped, `COPY --from=build`
#   reads DIR);
# - the runtime base (distroless "cc", Debian 12) by a stand-in made here from
#   the same Debian 12 files: the loader and the C libraries the binary links,
#   CA certificates, and the `nonroot` user (65532), no shell.
# Everything after those lines of the definition runs as written.
#
# Checks: the image runs as 65532 with no shell, its entrypoint serves
# (/readyz, /healthz, the console's sign-in page and its wasm), an agent with
# a token minted inside the container initializes an MCP session, and SIGTERM
# stops it cleanly. Needs buildah (.ci/install.sh installs it) and runs as
# root, as CI does; the binary: GATEHOUSE_BIN, else the release build.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/../../scripts/lib.sh"
cd "$root"
command -v buildah >/dev/null || { echo "buildah missing: run .ci/install.sh" >&2; exit 1; }
[ -x "$bin" ] || { echo "no $bin: run scripts/build.sh" >&2; exit 1; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Images and containers live in a store of this run's own, removed at exit.
store=(--root "$work/store" --runroot "$work/run" --storage-driver vfs)
bah() { buildah "${store[@]}" "$@"; }
export BUILDAH_ISOLATION=chroot
at_exit 'buildah "${store[@]}" rm --all >/dev/null 2>&1; buildah "${store[@]}" rmi --all --force >/dev/null 2>&1; rm -rf "$work/store" 2>/dev/null || true'

echo "== the runtime base's stand-in (Debian 12's C runtime, user nonroot, no shell)"
base="$work/base"
mkdir -p "$base/rootfs/etc/ssl/certs" "$base/rootfs/tmp"
chmod 1777 "$base/rootfs/tmp"
for lib in $(ldd "$bin" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }'); do
  cp --parents -L "$lib" "$base/rootfs/"
done
cp /etc/ssl/certs/ca-certificates.crt "$base/rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$base/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$base/rootfs/etc/group"
printf 'FROM scratch\nCOPY rootfs/ /\n' >"$base/Containerfile"
bah bud --quiet -t localhost/gatehouse-test-cc "$base" >/dev/null

echo "== build deploy/container/Containerfile"
built="$work/built"
# As the build stage leaves it: /out/gatehouse and an empty /out/data.
mkdir -p "$built/out/data"
chmod 700 "$built/out/data"
cp "$bin" "$built/out/gatehouse"
bah bud --quiet --layers=false -f deploy/container/Containerfile \
  --build-arg RUNTIME_IMAGE=localhost/gatehouse-test-cc \
  --build-context build="$built" -t localhost/gatehouse-smoke . >/dev/null
user=$(bah inspect --type image --format '{{.OCIv1.Config.User}}' localhost/gatehouse-smoke)
[ "$user" = "65532:65532" ] || fail "the image runs as '$user', not 65532:65532"
entry=$(bah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' localhost/gatehouse-smoke)
[ "$entry" = "[/usr/local/bin/gatehouse]" ] || fail "entrypoint: $entry"
cmd=$(bah inspect --type image --format '{{.OCIv1.Config.Cmd}}' localhost/gatehouse-smoke)
[ "$cmd" = "[serve]" ] || fail "command: $cmd"
echo "ok: runs as $user, runs /usr/local/bin/gatehouse serve"

echo "== start it"
ctr=$(bah from --quiet localhost/gatehouse-smoke)
if bah run "$ctr" -- /bin/sh -c true >/dev/null 2>&1; then fail "the image has a shell"; fi
port=$(free_port)
url="http://127.0.0.1:$port"
# The image's entrypoint and command (checked above: `gatehouse serve`),
# on a free port of the host's network.
spawn container buildah "${store[@]}" run --env GATEHOUSE_LISTEN="127.0.0.1:$port" "$ctr" -- /usr/local/bin/gatehouse serve \
  >"$work/container.out" 2>&1
pid=$!
for _ in $(seq 100); do
  curl -fsS "$url/readyz" >/dev/null 2>&1 && break
  alive "$pid" || { cat "$work/container.out" >&2; fail "the container exited"; }
  sleep 0.2
done
curl -fsS "$url/readyz" | grep -q '"ready"' || { cat "$work/container.out" >&2; fail "/readyz"; }
curl -fsS "$url/healthz" | grep -q '"ok"' || fail "/healthz"
echo "ok: /readyz and /healthz answer"

# Served as the user it was built to run as (the server's process, found by
# its port, not by name).
server=$(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
[ -n "$server" ] || fail "no process listens on $port"
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$server/status")
[ "$uid" = 65532 ] || fail "the server runs as uid $uid"
echo "ok: the server runs as uid $uid"

page=$(curl -fsS "$url/sign-in")
grep -q 'Sign in' <<<"$page" || fail "the sign-in page"
wasm=$(grep -o '/pkg/gatehouse\.[0-9a-f]*\.wasm' <<<"$page" | head -1)
[ -n "$wasm" ] || fail "the sign-in page names no wasm"
[ "$(curl -fsS -o /dev/null -w '%{http_code}' "$url$wasm")" = 200 ] || fail "the console's wasm ($wasm)"
echo "ok: the console's page and its wasm"

# A credential minted inside the container, in its own data directory.
token=$(bah run "$ctr" -- /usr/local/bin/gatehouse token issue --agent smoke --json | json_get token)
session=$(mcp_initialize "$url" "$token")
[ -n "$session" ] || fail "an agent could not initialize"
echo "ok: an agent initializes (session $session)"

echo "== stop it (SIGTERM)"
# To the server itself, as a container engine's stop does (buildah run would
# kill its child on a signal of its own).
kill -TERM "$server"
for _ in $(seq 100); do alive "$server" || break; sleep 0.1; done
alive "$server" && fail "the server outlived SIGTERM by 10 s"
stop container
grep -q "shutting down" "$work/container.out" || { cat "$work/container.out" >&2; fail "no graceful shutdown"; }
echo "ok: stopped cleanly"
echo "container smoke test passed"
