#!/usr/bin/env bash
# stop.sh <package> — force-stop the app (no-op when it is not running).
source "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: stop.sh <package>"
check_package "$1"
frame_adb shell am force-stop "$1"
echo stopped=yes
