#!/usr/bin/env bash
# logcat.sh <dest> — dump the log since the last launch (launch.sh clears it).
source "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: logcat.sh <dest>"
dest=$1
check_abs "$dest"
frame_adb logcat -d -v threadtime >"$dest.part"
mv -f "$dest.part" "$dest"
echo "lines=$(wc -l <"$dest")"
