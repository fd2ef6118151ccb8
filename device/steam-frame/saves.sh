#!/usr/bin/env bash
# saves.sh pull <package> <dest-dir> — copy the app's saves into dest-dir (replaced).
# saves.sh push <package> <src-dir>  — replace the app's saves with src-dir's files.
source "$(dirname "$0")/lib.sh"
[[ $# -eq 3 ]] || die "usage: saves.sh pull|push <package> <dir>"
op=$1 pkg=$2 dir=$3
check_package "$pkg"
check_abs "$dir"
remote=$(saves_dir "$pkg")
case $op in
pull)
	rm -rf "$dir"
	if frame_adb shell ls "$remote" >/dev/null 2>&1; then
		frame_adb pull "$remote" "$dir" >/dev/null
	else
		mkdir -p "$dir"
	fi
	echo "files=$(find "$dir" -type f | wc -l)"
	;;
push)
	[[ -d $dir ]] || die "no such directory"
	frame_adb shell rm -rf "$remote"
	frame_adb shell mkdir -p "${remote%/*}"
	frame_adb push "$dir" "$remote" >/dev/null
	echo "files=$(find "$dir" -type f | wc -l)"
	;;
*) die "usage: saves.sh pull|push <package> <dir>" ;;
esac
