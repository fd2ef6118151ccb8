#!/usr/bin/env bash
# running.sh <package> — running=yes pid=<pid>, or running=no. Exits non-zero only
# when the container cannot be asked.
source "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: running.sh <package>"
check_package "$1"
state=$(frame_adb get-state 2>&1) || {
	echo "adb: $state" >&2
	exit 1
}
pid=$(frame_adb shell pidof "$1" 2>/dev/null || true)
pid=$(tr -d '[:space:]' <<<"$pid")
if [[ -n $pid ]]; then
	echo running=yes
	echo "pid=$pid"
else
	echo running=no
fi
