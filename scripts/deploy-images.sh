#!/usr/bin/env bash
# Builds the images docker-compose.yml runs, without any registry:
#   aetherium-deploy-base  a member of the image family: the family's base
#                          (aetherium-base, Debian bookworm by debootstrap) plus
#                          redis-server, postgresql, prometheus, e2fsprogs
#                          (deploy/images/deploy-base.packages), built by
#                          sandbox/images/build.sh through deploy/images/build.sh
#                          (a symlink: the same machinery and hashes as the sandbox family)
#   aetherium-redis, aetherium-postgres, aetherium-prometheus   thin layers over it
#                          (deploy/images/Dockerfile)
#   aetherium-worker       the base + the static binary (root, mkfs.ext4; the scheduler too)
#   aetherium              FROM scratch + the static binary (the api, migrate)
#   aetherium-egress-base  a member of the image family: its base plus iptables
#                          (deploy/images/egress-base.packages)
#   aetherium-egress       aetherium-egress-base + the static binary (the egress
#                          service: the sandboxes' firewall rules and gateway listeners)
# Each image carries a hash of its inputs (io.aetherium.image.hash) and is skipped
# while it matches (the images over aetherium-deploy-base also while it is the same
# image, by id), so a second run costs one cached `go build`. Cold, the family's
# base is one debootstrap (shared with the sandbox images) and the deploy layer
# an apt-get install: the mirror and dpkg, little CPU.
#   AETHERIUM_IMAGE_FORCE=1  rebuild even when the hashes match
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
GO="${GO:-go}"
if ! docker info >/dev/null 2>&1; then
	echo "deploy-images: no Docker engine answers" >&2
	exit 1
fi
start=$SECONDS
# The static binary compiles (the CPU) while the root filesystem builds (the
# mirror and dpkg).
ctx="$(mktemp -d "${TMPDIR:-/tmp}/aetherium-fleet-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' -o "$ctx/aetherium" ./cmd/aetherium &
gobuild=$!
# The two family members side by side (the mirror and dpkg; each returns at once
# while its hash matches).
bash deploy/images/build.sh egress-base &
egressbuild=$!
bash deploy/images/build.sh deploy-base
wait "$egressbuild" || { echo "deploy-images: aetherium-egress-base failed" >&2; exit 1; }
label() { docker image inspect -f '{{index .Config.Labels "io.aetherium.image.hash"}}' "$1" 2>/dev/null || true; }
# The images over it are built FROM it: its id (not only its hash) decides them.
base_hash="$(docker image inspect -f '{{.Id}}' aetherium-deploy-base:latest)"

# build <image> <target> <dockerfile> <context> <hash>: docker build unless current.
build() {
	local image=$1 target=$2 file=$3 ctx=$4 hash=$5
	if [[ "$(label "$image")" == "$hash" && "${AETHERIUM_IMAGE_FORCE:-}" != 1 ]]; then
		return 0
	fi
	local t=$SECONDS
	docker build -q --target "$target" -f "$file" \
		--label io.aetherium.image="$target" --label io.aetherium.image.hash="$hash" \
		-t "$image" "$ctx" 2> >(grep -v -e DEPRECATED -e "legacy builder" -e buildx -e "^ *$" >&2) >/dev/null
	echo "built $image ($hash): $(($(docker image inspect -f '{{.Size}}' "$image") / 1024 / 1024)) MiB in $((SECONDS - t)) s"
}

svc_hash="$(cat deploy/images/Dockerfile deploy/images/*-entrypoint.sh | { echo "$base_hash"; cat; } | sha256sum | cut -c1-16)"
for s in redis postgres prometheus; do
	build "aetherium-$s:latest" "$s" deploy/images/Dockerfile deploy/images "$svc_hash"
done

# The fleet's context: a staging directory, not the repository (no data/, no .git).
wait "$gobuild" || { echo "deploy-images: go build ./cmd/aetherium failed" >&2; exit 1; }
cp -r templates "$ctx/templates"
cp -r knowledge/packs "$ctx/packs"
cp -r config "$ctx/config"
rm -f "$ctx"/templates/*_test.go "$ctx"/templates/*.go "$ctx"/config/*.go
cp deploy/images/Dockerfile.fleet "$ctx/Dockerfile"
fleet_hash="$( (echo "$base_hash"; cd "$ctx" && find . -type f | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -c1-16)"
build aetherium-worker:latest worker "$ctx/Dockerfile" "$ctx" "$fleet_hash"
build aetherium:latest fleet "$ctx/Dockerfile" "$ctx" "$fleet_hash"
# The egress image sits on aetherium-egress-base: its id joins the hash.
egress_hash="$( (docker image inspect -f '{{.Id}}' aetherium-egress-base:latest; echo "$fleet_hash") | sha256sum | cut -c1-16)"
build aetherium-egress:latest egress "$ctx/Dockerfile" "$ctx" "$egress_hash"
echo "deploy-images: aetherium-deploy-base aetherium-egress-base aetherium-redis aetherium-postgres aetherium-prometheus aetherium-worker aetherium aetherium-egress ready in $((SECONDS - start)) s"
