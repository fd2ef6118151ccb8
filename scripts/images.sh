#!/usr/bin/env bash
# Builds the image family: first its one base (aetherium-base: a debootstrap of
# bookworm, sandbox/images/base.packages), then every member side by side — the
# sandbox images (sandbox/images/<name>.packages) and the compose deployment's
# root filesystems (aetherium-deploy-base and aetherium-egress-base,
# deploy/images/{deploy-base,egress-base}.packages),
# each one `docker build` layer over the base. The members are bound by the
# mirror and dpkg rather than the CPU, so they take about as long as the slowest
# one. Each image's output is prefixed with its name, and the last line says how
# long the base and the members took; exits non-zero if any build failed. A build
# whose hash matches returns at once (sandbox/images/build.sh).
#
# The deployment's own images (its services, and the fleet's from a static build
# of the binary: scripts/deploy-images.sh, `make deploy-images`) are not built
# here: no test of `make test` runs them, and the compose test builds them when it
# starts (a cold static build is minutes of CPU that the tests' compile needs).
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
start=$SECONDS
(bash sandbox/images/build.sh base 2>&1 | sed -u "s/^/[base] /"; exit "${PIPESTATUS[0]}") || {
	echo "images: FAILED: base" >&2
	exit 1
}
based=$((SECONDS - start))
names=()
pids=()
for p in sandbox/images/*.packages; do
	n=$(basename "$p" .packages)
	[[ "$n" == base ]] && continue
	names+=("$n")
	{ bash sandbox/images/build.sh "$n" 2>&1 | sed -u "s/^/[$n] /"; exit "${PIPESTATUS[0]}"; } &
	pids+=($!)
done
for n in deploy-base egress-base; do
	names+=("$n")
	{ bash deploy/images/build.sh "$n" 2>&1 | sed -u "s/^/[$n] /"; exit "${PIPESTATUS[0]}"; } &
	pids+=($!)
done
failed=()
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if [[ ${#failed[@]} -gt 0 ]]; then
	echo "images: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "images: base ready in $based s; ${names[*]} ready in $((SECONDS - start - based)) s more"
