#!/usr/bin/env bash
# Builds the run_shell sandbox image (default aetherium-sandbox:latest) from scratch
# with Debian's busybox-static, without any registry. Idempotent and fast: when an
# image with the same content hash (Dockerfile + busybox binary) exists, it does
# nothing. Usage: sandbox/build-image.sh [image]   (or AETHERIUM_SANDBOX_IMAGE=...)
set -euo pipefail

image="${1:-${AETHERIUM_SANDBOX_IMAGE:-aetherium-sandbox:latest}}"

# Test binaries run in parallel and may all call this: one build (and one apt-get)
# at a time.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${TMPDIR:-/tmp}/aetherium-sandbox-build.lock"
	flock 9
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
busybox=/bin/busybox

# Debian's busybox (the dynamic one) would need libc in the image: only the static
# build runs on an empty root.
is_static() { [[ -x "$1" ]] && ! grep -q 'ld-linux' "$1"; }
if ! is_static "$busybox"; then
	if [[ $(id -u) -ne 0 ]]; then
		echo "build-image.sh: $busybox (static) missing: run 'apt-get install busybox-static' as root" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq busybox-static >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq busybox-static >/dev/null; }
fi

hash="$(cat "$here/Dockerfile" "$busybox" | sha256sum | cut -c1-16)"
have="$(docker image inspect -f '{{index .Config.Labels "io.aetherium.sandbox.hash"}}' "$image" 2>/dev/null || true)"
if [[ "$have" == "$hash" ]]; then
	exit 0
fi

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$here/Dockerfile" "$ctx/Dockerfile"
cp "$busybox" "$ctx/busybox"
# The legacy builder needs no buildx plugin; engines that dropped it build with
# BuildKit instead.
if ! out="$(DOCKER_BUILDKIT=0 docker build -q --label "io.aetherium.sandbox.hash=$hash" -t "$image" "$ctx" 2>&1)"; then
	if ! out2="$(docker build -q --label "io.aetherium.sandbox.hash=$hash" -t "$image" "$ctx" 2>&1)"; then
		echo "$out" >&2
		echo "$out2" >&2
		exit 1
	fi
fi
echo "built $image ($hash)"
