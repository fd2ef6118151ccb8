#!/usr/bin/env bash
# adb-connect.sh — (re)connect adb over TCP to the Android container and wait until
# it is usable. A stale entry (after a container restart) is dropped first.
source "$(dirname "$0")/lib.sh"
adb disconnect "$SERIAL" >/dev/null 2>&1 || true
out=
for ((i = 0; i < 10; i++)); do
	out=$(adb connect "$SERIAL" 2>&1 || true)
	case $(adb_state) in
	connected)
		echo adb=connected
		exit 0
		;;
	unauthorized)
		echo "adb: the headset has not authorized this host; accept the USB debugging prompt in the headset once" >&2
		exit 3
		;;
	esac
	sleep 1
done
echo "adb connect $SERIAL failed: $out" >&2
exit 1
