#!/usr/bin/env bash
# capture.sh <dest.png> — one PNG of what the headset shows, written atomically.
source "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: capture.sh <dest.png>"
dest=$1
check_abs "$dest"
frame_adb exec-out screencap -p >"$dest.part"
mv -f "$dest.part" "$dest"
echo "bytes=$(stat -c %s "$dest")"
