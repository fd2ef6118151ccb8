#!/usr/bin/env bash
# install.sh <apk-path> <package> — install (or update, keeping its data) an APK
# the driver has validated, then print the package info.
source "$(dirname "$0")/lib.sh"
[[ $# -eq 2 ]] || die "usage: install.sh <apk-path> <package>"
apk=$1 pkg=$2
check_abs "$apk"
check_package "$pkg"
[[ -f $apk ]] || die "no such APK"
out=$(frame_adb install -r "$apk" 2>&1) || true
if ! grep -q '^Success' <<<"$out"; then
	echo "adb install: $(tail -n 3 <<<"$out")" >&2
	exit 1
fi
pkginfo "$pkg"
