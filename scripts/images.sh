#!/usr/bin/env bash
# Builds every image of the sandbox image family (sandbox/images/<name>.packages)
# and the compose deployment's images (scripts/deploy-images.sh) side by side: each build is bound by the mirror and dpkg rather than the CPU, so
# three cold builds take about as long as the slowest one. Each image's output is
# prefixed with its name; exits non-zero if any build failed. A build whose hash
# matches returns at once (sandbox/images/build.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
if ! docker info >/dev/null 2>&1; then
	echo "images: no Docker engine answers; download_pdf, the quality and audio tools will report they have no sandbox image"
	exit 0
fi
# debootstrap once, before the builds (each would otherwise race for dpkg's lock).
if [[ $(id -u) -eq 0 ]] && ! command -v debootstrap >/dev/null 2>&1; then
	echo "images: installing debootstrap"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; } || exit 1
fi
names=()
pids=()
for p in sandbox/images/*.packages; do
	n=$(basename "$p" .packages)
	names+=("$n")
	{ bash sandbox/images/build.sh "$n" 2>&1 | sed -u "s/^/[$n] /"; exit "${PIPESTATUS[0]}"; } &
	pids+=($!)
done
# The compose deployment's images (scripts/deploy-images.sh: one more debootstrap,
# plus a static `go build` of the binary) build beside them.
names+=(deploy)
{ bash scripts/deploy-images.sh 2>&1 | sed -u "s/^/[deploy] /"; exit "${PIPESTATUS[0]}"; } &
pids+=($!)
failed=()
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if [[ ${#failed[@]} -gt 0 ]]; then
	echo "images: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "images: ${names[*]} ready"
