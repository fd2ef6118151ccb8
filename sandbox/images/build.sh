#!/usr/bin/env bash
# Builds one image of the image family from Debian's packages without any
# registry. The family shares one base:
#
#   aetherium-base:latest   `debootstrap --variant=minbase` of bookworm plus the
#                           packages every member needs (sandbox/images/base.packages),
#                           its point-release fixes, the non-root user 10001:10001,
#                           stripped of caches and docs, `docker import`ed. Built once.
#   aetherium-<name>:latest the base plus sandbox/images/<name>.packages (or the list
#                           beside the invoked script: deploy/images/build.sh is a
#                           symlink to this one), one `docker build` layer FROM the
#                           base that runs apt-get against the same mirror.
#
# Each image carries a hash of its inputs (io.aetherium.image.hash): the base's
# is its package list and this script; a member's is the base's hash, its own
# package list, its <name>.extra.sh inputs and this script. A build returns at
# once while the hash matches (and, for a member, while it was built on the
# current base image), so a change to media.packages rebuilds the media image
# alone, and a change to base.packages rebuilds the base and then every member.
#
# Usage: sandbox/images/build.sh <name> [image]
#        sandbox/images/build.sh --hash <name>   prints the hash a build would carry
#                                                and whether the image is current; builds nothing
#   AETHERIUM_DEBIAN_MIRROR    the mirror (default http://deb.debian.org/debian)
#   AETHERIUM_DEBIAN_SECURITY  security updates (default http://deb.debian.org/debian-security)
#   AETHERIUM_IMAGE_FORCE=1    rebuild even when the hash matches (the base too, when
#                              <name> is base; members then rebuild on the new base)
#
# Per-image hook: <name>.extra.sh beside the package list, when present, is
# sourced and defines extra_inputs (prints what else decides the image's content,
# e.g. the host's `go version`; it joins the hash with the hook's own text) and
# extra_install <dir> (fills a directory that is copied over the image's / after
# apt-get). The toolchain image uses it to copy the host's Go.
set -euo pipefail

plan=""
if [[ "${1:-}" == --hash ]]; then
	plan=1
	shift
fi
name="${1:?usage: build.sh [--hash] <name> [image]   (sandbox/images/<name>.packages)}"
image="${2:-aetherium-$name:latest}"
# here: the directory of the invoked path (a member's list and hook); self: this
# script's own directory (the base's list), through the deploy symlink too.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
script="$self/build.sh"
suite=bookworm
mirror="${AETHERIUM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${AETHERIUM_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
base_image=aetherium-base:latest
label=io.aetherium.image.hash

# packages <list>: the list's packages, comma-separated, sorted.
packages() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$1" | grep -v '^$' | sort -u | paste -sd, -; }
base_hash() {
	local list="$self/base.packages"
	[[ -f "$list" ]] || { echo "build.sh: no base package list $list" >&2; return 2; }
	printf 'base\n%s\n%s\n' "$suite" "$(packages "$list")" | cat - "$script" | sha256sum | cut -c1-16
}
inspect() { docker image inspect -f "$1" "$2" 2>/dev/null || true; }

if [[ "$name" == base ]]; then
	image="${2:-$base_image}"
	list="$self/base.packages"
	hash="$(base_hash)"
	pkgs="$(packages "$list")"
else
	list="$here/$name.packages"
	[[ -f "$list" ]] || { echo "build.sh: no package list $list" >&2; exit 2; }
	extra="$here/$name.extra.sh"
	extra_in=""
	if [[ -f "$extra" ]]; then
		# shellcheck source=/dev/null
		source "$extra"
		extra_in="$(cat "$extra"; extra_inputs)" || { echo "build.sh: $extra: extra_inputs failed" >&2; exit 1; }
	fi
	pkgs="$(packages "$list")"
	bhash="$(base_hash)"
	hash="$(printf 'member\n%s\n%s\n%s\n%s\n' "$bhash" "$suite" "$pkgs" "$extra_in" | cat - "$script" | sha256sum | cut -c1-16)"
fi

# current: the image carries this hash and, for a member, sits on the current base.
current() {
	[[ "${AETHERIUM_IMAGE_FORCE:-}" != 1 ]] || return 1
	[[ "$(inspect "{{index .Config.Labels \"$label\"}}" "$image")" == "$hash" ]] || return 1
	[[ "$name" == base ]] && return 0
	local on base_id
	on="$(inspect '{{index .Config.Labels "io.aetherium.image.base.id"}}' "$image")"
	base_id="$(inspect '{{.Id}}' "$base_image")"
	[[ -n "$base_id" && "$on" == "$base_id" && "$(inspect "{{index .Config.Labels \"$label\"}}" "$base_image")" == "$bhash" ]]
}

if [[ -n "$plan" ]]; then
	if command -v docker >/dev/null 2>&1 && current; then
		echo "$name $hash current"
	else
		echo "$name $hash rebuild"
	fi
	exit 0
fi

# Test binaries run in parallel and may all call this: one build of an image at a
# time (the second caller finds the image built when the first is done).
if command -v flock >/dev/null 2>&1; then
	exec 9>"${TMPDIR:-/tmp}/aetherium-image-$name.lock"
	flock 9
fi

if [[ "$name" != base ]]; then
	# The base first (under its own lock: members building side by side wait for
	# one debootstrap, then find it current).
	bash "$script" base
fi
if current; then
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "build.sh: building $image needs root (debootstrap, docker); run 'make images' as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS

# What a read-only container never uses: package caches and lists, docs, man
# pages, other languages' messages, logs. The package manager's state stays, so
# `dpkg -l` still tells what is in the image.
# (Patterns, kept unexpanded here: they expand inside the image's root.)
strip_paths='/var/cache/apt/* /var/lib/apt/lists/* /var/cache/debconf/*-old
	/usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/*
	/usr/share/lintian /var/log/* /tmp/*'
apt='apt-get -o APT::Install-Recommends=false -o Dpkg::Use-Pty=0 -o Dpkg::Options::=--force-unsafe-io'

if [[ "$name" == base ]]; then
	if ! command -v debootstrap >/dev/null 2>&1; then
		echo "build.sh: installing debootstrap"
		apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
	fi
	root="$(mktemp -d "${TMPDIR:-/var/tmp}/aetherium-image-base.XXXXXX")"
	chmod 755 "$root" # the image's / (mktemp makes it 0700)
	trap 'rm -rf "$root"' EXIT
	echo "build.sh: debootstrap $suite into $root, then apt-get install $pkgs (minutes)"
	# Progress goes to stdout line by line (Retrieving…, Unpacking…, Configuring…).
	# debootstrap's own resolver does not handle alternatives and virtual packages:
	# it lays the minbase only, and apt-get in the chroot installs the list.
	debootstrap --variant=minbase "$suite" "$root" "$mirror" || {
		tail -40 "$root/debootstrap/debootstrap.log" >&2 || true
		exit 1
	}
	# The point release plus its updates and security fixes: the family reads
	# hostile documents. (The hash does not see new fixes: AETHERIUM_IMAGE_FORCE=1
	# picks them up.)
	cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES
	# No service starts in the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod +x "$root/usr/sbin/policy-rc.d"
	chroot "$root" apt-get -qq update
	chroot "$root" $apt upgrade -y
	chroot "$root" $apt install -y ${pkgs//,/ }
	rm -f "$root/usr/sbin/policy-rc.d"
	# A non-root user for every member (the sandbox runs as 10001:10001 unless the
	# worker is another non-root uid) with a writable home on the tmpfs.
	echo 'sandbox:x:10001:10001:sandbox:/tmp:/usr/sbin/nologin' >>"$root/etc/passwd"
	echo 'sandbox:x:10001:' >>"$root/etc/group"
	set -f
	for p in $strip_paths; do
		set +f
		rm -rf "$root"$p
		set -f
	done
	set +f
	rm -rf "$root"/debootstrap "$root"/dev/* "$root"/proc/* "$root"/sys/* "$root"/run/*
	# Nothing in the image may gain privileges (no-new-privileges neutralises
	# setuid anyway; this makes the image safe under a runtime that forgets it).
	find "$root" -xdev -type f -perm /6000 -exec chmod ug-s {} +
	tar --numeric-owner -C "$root" -c . | docker import \
		-c "LABEL io.aetherium.image=base" \
		-c "LABEL $label=$hash" \
		-c "LABEL io.aetherium.image.packages=$pkgs" \
		-c 'USER 10001:10001' \
		-c 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8' \
		-c 'WORKDIR /tmp' \
		-c 'CMD ["/bin/sh"]' \
		- "$image" >/dev/null
	echo "built $image ($hash): $(($(inspect '{{.Size}}' "$image") / 1024 / 1024)) MiB in $((SECONDS - start)) s"
	exit 0
fi

# A member: one layer FROM the base (the exact image, by id), apt-get run in the
# build container on the host's network (the mirror the base came from), the
# same cleanup in the same step so nothing removed stays in a lower layer, then
# the hook's files.
base_id="$(inspect '{{.Id}}' "$base_image")"
[[ -n "$base_id" ]] || { echo "build.sh: no $base_image after building it" >&2; exit 1; }
ctx="$(mktemp -d "${TMPDIR:-/var/tmp}/aetherium-image-$name.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir -m 755 "$ctx/extra"
if [[ -n "${extra:-}" && -f "$extra" ]]; then
	echo "build.sh: $name.extra.sh extra_install"
	extra_install "$ctx/extra"
fi
# COPY makes the hook's tree root's; its directories are 0755 like the base's own
# (/usr, /usr/local), which the copy would otherwise re-mode.
find "$ctx/extra" -type d -exec chmod 755 {} +
strip="$(set -f; echo $strip_paths)"
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base_id
USER root
RUN set -e; export DEBIAN_FRONTEND=noninteractive; \\
	printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; \\
	apt-get -qq update; $apt upgrade -y; $apt install -y ${pkgs//,/ }; \\
	rm -f /usr/sbin/policy-rc.d; rm -rf $strip; \\
	find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
COPY extra/ /
USER 10001:10001
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8
WORKDIR /tmp
CMD ["/bin/sh"]
LABEL io.aetherium.image=$name $label=$hash io.aetherium.image.packages=$pkgs io.aetherium.image.base=$base_image io.aetherium.image.base.id=$base_id
DOCKERFILE
echo "build.sh: $image = $base_image + apt-get install $pkgs (minutes)"
# The legacy builder prints each step's output (apt's Get:/Unpacking/Setting up
# lines) as it goes; its deprecation notice is noise.
docker build --network host --force-rm -t "$image" "$ctx" 2> >(grep -v -e DEPRECATED -e "legacy builder" -e buildx -e "^ *$" >&2)
echo "built $image ($hash): $(($(inspect '{{.Size}}' "$image") / 1024 / 1024)) MiB in $((SECONDS - start)) s"
