#!/usr/bin/env bash
# container-start.sh — start the Android container on the SteamOS side and wait
# until it reports running (at most FRAME_CONTAINER_WAIT seconds).
source "$(dirname "$0")/lib.sh"
frame_ssh "$FRAME_CTL" container-start >/dev/null
for ((i = 0; i < FRAME_CONTAINER_WAIT; i++)); do
	state=$(frame_ssh "$FRAME_CTL" container-status | head -n1 | tr -d '[:space:]')
	if [[ $state == running ]]; then
		echo container=running
		exit 0
	fi
	sleep 1
done
echo "the Android container did not come up within ${FRAME_CONTAINER_WAIT}s" >&2
exit 1
