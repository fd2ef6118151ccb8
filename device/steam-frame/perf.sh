#!/usr/bin/env bash
# perf.sh start <session>        — the compositor starts recording frame timing.
# perf.sh dump <session> <dest>  — end the session and write its recording to dest
#                                  (format: device/fps/fps.go, "present_ns,frame_ns").
source "$(dirname "$0")/lib.sh"
case ${1:-} in
start)
	[[ $# -eq 2 ]] || die "usage: perf.sh start <session>"
	check_session "$2"
	frame_ssh "$FRAME_CTL" perf-start "$2" >/dev/null
	echo recording=yes
	;;
dump)
	[[ $# -eq 3 ]] || die "usage: perf.sh dump <session> <dest>"
	check_session "$2"
	check_abs "$3"
	frame_ssh "$FRAME_CTL" perf-dump "$2" >"$3.part"
	mv -f "$3.part" "$3"
	echo "frames=$(grep -c '^[0-9]' "$3" || true)"
	;;
*) die "usage: perf.sh start|dump <session> [dest]" ;;
esac
