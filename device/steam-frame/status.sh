#!/usr/bin/env bash
# status.sh [package] — the headset's state as key=value lines; changes nothing
# (it neither starts the container nor connects adb).
#   reachable=yes|no  paired=yes|no|unknown  container=running|stopped|unknown
#   adb=connected|unauthorized|offline|disconnected
#   and, with a package and adb connected: installed=yes|no version_name= version_code= saves=
source "$(dirname "$0")/lib.sh"
pkg=${1:-}
[[ -z $pkg ]] || check_package "$pkg"

err=$(mktemp)
trap 'rm -f "$err"' EXIT
if state=$(frame_ssh "$FRAME_CTL" container-status 2>"$err"); then
	echo reachable=yes
	echo paired=yes
	state=$(head -n1 <<<"$state" | tr -d '[:space:]')
	case $state in
	running | stopped) echo "container=$state" ;;
	*) echo container=unknown ;;
	esac
elif grep -qE 'Permission denied|Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED' "$err"; then
	echo reachable=yes
	echo paired=no
	echo container=unknown
else
	echo reachable=no
	echo paired=unknown
	echo container=unknown
fi
adb=$(adb_state)
echo "adb=$adb"
if [[ -n $pkg && $adb == connected ]]; then
	pkginfo "$pkg"
fi
