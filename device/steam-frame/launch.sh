#!/usr/bin/env bash
# launch.sh <package> — clear the log and start the app's launcher activity.
source "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: launch.sh <package>"
pkg=$1
check_package "$pkg"
frame_adb logcat -c
out=$(frame_adb shell monkey -p "$pkg" -c android.intent.category.LAUNCHER 1 2>&1) || true
if ! grep -q 'Events injected: 1' <<<"$out"; then
	echo "launch $pkg: $(tail -n 2 <<<"$out")" >&2
	exit 1
fi
echo launched=yes
