#!/usr/bin/env bash
# Builds one image of the sandbox image family, aetherium-<name>:latest, from
# Debian's packages without any registry: `debootstrap --variant=minbase` of
# bookworm with the packages listed in sandbox/images/<name>.packages into a
# directory, stripped of caches and docs, then `docker import`ed with a non-root
# user (10001:10001). Idempotent: the image carries a hash of its package list,
# this script and the suite, and the script returns at once when an image with
# that hash exists.
#
# Usage: sandbox/images/build.sh <name> [image]
#   AETHERIUM_DEBIAN_MIRROR    the mirror (default http://deb.debian.org/debian)
#   AETHERIUM_DEBIAN_SECURITY  security updates (default http://deb.debian.org/debian-security)
#   AETHERIUM_IMAGE_FORCE=1  rebuild even when the hash matches
#
# Per-image hook: sandbox/images/<name>.extra.sh, when present, is sourced and
# defines extra_inputs (prints what else decides the image's content, e.g. the
# host's `go version`; it joins the hash with the hook's own text) and
# extra_install <root> (runs after apt-get, before the cleanup). The toolchain
# image uses it to copy the host's Go.
set -euo pipefail

name="${1:?usage: build.sh <name> [image]   (sandbox/images/<name>.packages)}"
image="${2:-aetherium-$name:latest}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
list="$here/$name.packages"
suite=bookworm
mirror="${AETHERIUM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${AETHERIUM_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
[[ -f "$list" ]] || { echo "build.sh: no package list $list" >&2; exit 2; }

# Test binaries run in parallel and may all call this: one build of an image at a
# time (the second caller finds the image built when the first is done).
if command -v flock >/dev/null 2>&1; then
	exec 9>"${TMPDIR:-/tmp}/aetherium-image-$name.lock"
	flock 9
fi

extra="$here/$name.extra.sh"
extra_in=""
if [[ -f "$extra" ]]; then
	# shellcheck source=/dev/null
	source "$extra"
	extra_in="$(cat "$extra"; extra_inputs)" || { echo "build.sh: $extra: extra_inputs failed" >&2; exit 1; }
fi

packages="$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list" | grep -v '^$' | sort -u | paste -sd, -)"
hash="$(printf '%s\n%s\n%s\n' "$suite" "$packages" "$extra_in" | cat - "$here/build.sh" | sha256sum | cut -c1-16)"
have="$(docker image inspect -f '{{index .Config.Labels "io.aetherium.image.hash"}}' "$image" 2>/dev/null || true)"
if [[ "$have" == "$hash" && "${AETHERIUM_IMAGE_FORCE:-}" != 1 ]]; then
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	echo "build.sh: building $image needs root (debootstrap); run 'make images' as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v debootstrap >/dev/null 2>&1; then
	echo "build.sh: installing debootstrap"
	apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
fi

start=$SECONDS
root="$(mktemp -d "${TMPDIR:-/var/tmp}/aetherium-image-$name.XXXXXX")"
chmod 755 "$root" # the image's / (mktemp makes it 0700)
trap 'rm -rf "$root"' EXIT
echo "build.sh: debootstrap $suite into $root, then apt-get install $packages (minutes)"
# Progress goes to stdout line by line (Retrieving…, Unpacking…, Configuring…).
# debootstrap's own resolver does not handle alternatives and virtual packages
# (chromium's dbus session bus): it lays the base only, and apt-get in the chroot
# installs the list.
debootstrap --variant=minbase "$suite" "$root" "$mirror" || {
	tail -40 "$root/debootstrap/debootstrap.log" >&2 || true
	exit 1
}
# No service starts in the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
# The point release plus its updates and security fixes: this image reads hostile
# documents. (The hash does not see new fixes: AETHERIUM_IMAGE_FORCE=1 picks them up.)
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES
apt=(apt-get -o APT::Install-Recommends=false -o Dpkg::Use-Pty=0 -o Dpkg::Options::=--force-unsafe-io)
chroot "$root" apt-get -qq update
# The base's own packages get their fixes too, then the list.
chroot "$root" "${apt[@]}" upgrade -y
chroot "$root" "${apt[@]}" install -y ${packages//,/ }
rm -f "$root/usr/sbin/policy-rc.d"
if [[ -f "$extra" ]]; then
	echo "build.sh: $name.extra.sh extra_install"
	extra_install "$root"
fi

# A non-root user for the image (the sandbox runs as 10001:10001 unless the worker
# is another non-root uid) with a writable home on the tmpfs.
echo 'sandbox:x:10001:10001:sandbox:/tmp:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'sandbox:x:10001:' >>"$root/etc/group"
# What a read-only container never uses: package caches and lists, docs, man
# pages, other languages' messages, logs. The package manager's state stays, so
# `dpkg -l` still tells what is in the image.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/cache/debconf/*-old \
	"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
	"$root"/usr/share/locale/* "$root"/usr/share/lintian "$root"/var/log/* "$root"/debootstrap \
	"$root"/dev/* "$root"/proc/* "$root"/sys/* "$root"/tmp/* "$root"/run/*
# Nothing in the image may gain privileges (no-new-privileges neutralises setuid
# anyway; this makes the image safe under a runtime that forgets it).
find "$root" -xdev -type f -perm /6000 -exec chmod ug-s {} +

tar --numeric-owner -C "$root" -c . | docker import \
	-c "LABEL io.aetherium.image=$name" \
	-c "LABEL io.aetherium.image.hash=$hash" \
	-c "LABEL io.aetherium.image.packages=$packages" \
	-c 'USER 10001:10001' \
	-c 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8' \
	-c 'WORKDIR /tmp' \
	-c 'CMD ["/bin/sh"]' \
	- "$image" >/dev/null
size="$(docker image inspect -f '{{.Size}}' "$image")"
echo "built $image ($hash): $((size / 1024 / 1024)) MiB in $((SECONDS - start)) s"
