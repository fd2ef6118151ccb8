# shellcheck shell=bash
# Shared by every script in this directory; sourced, never run.
#
# Connection settings come from the environment the Go driver (package device) sets
# from devices.steam_frame: FRAME_HOST, FRAME_USER, FRAME_SSH_PORT, FRAME_ADB_PORT,
# FRAME_KEY. Arguments arrive as argv words, already validated by the driver; the
# checks below repeat the grammar so a script run by hand is just as strict.
set -euo pipefail
umask 022

: "${FRAME_HOST:?FRAME_HOST is not set (devices.steam_frame.host)}"
FRAME_USER=${FRAME_USER:-deck}
FRAME_SSH_PORT=${FRAME_SSH_PORT:-22}
FRAME_ADB_PORT=${FRAME_ADB_PORT:-5555}
FRAME_KEY=${FRAME_KEY:-}
# The helper on the headset's SteamOS side (see README.md for its contract).
FRAME_CTL=${FRAME_CTL:-frame-ctl}
# How long container-start.sh waits for the Android container to come up.
FRAME_CONTAINER_WAIT=${FRAME_CONTAINER_WAIT:-90}
SERIAL="$FRAME_HOST:$FRAME_ADB_PORT"

die() {
	echo "$(basename "$0"): $*" >&2
	exit 2
}

check_package() {
	local re='^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$'
	[[ $1 =~ $re && ${#1} -le 255 ]] || die "invalid package name"
}

check_abs() {
	[[ $1 == /* && $1 != *$'\n'* ]] || die "path must be absolute"
}

check_session() {
	[[ $1 =~ ^[a-z0-9-]{1,64}$ ]] || die "invalid session id"
}

# frame_ssh runs a fixed command on the SteamOS side. "--" ends ssh's options so
# nothing after the destination is read as one. Only fixed words and validated ids
# are ever passed: ssh joins them into a remote shell command line.
frame_ssh() {
	local opts=(-p "$FRAME_SSH_PORT" -o BatchMode=yes -o ConnectTimeout=5 -o ServerAliveInterval=5
		-o ServerAliveCountMax=3 -o StrictHostKeyChecking=yes)
	if [[ -n $FRAME_KEY ]]; then
		opts+=(-i "$FRAME_KEY" -o IdentitiesOnly=yes)
	fi
	ssh "${opts[@]}" "$FRAME_USER@$FRAME_HOST" -- "$@"
}

# frame_adb talks to the Android container over TCP. adb shell joins its words into
# a remote shell line too: only validated package names and fixed paths go there.
frame_adb() {
	adb -s "$SERIAL" "$@"
}

# adb_state maps `adb devices` for our serial: connected, unauthorized, offline or
# disconnected. It only reads the local adb server's table.
adb_state() {
	local line state
	line=$(adb devices 2>/dev/null | awk -v s="$SERIAL" '$1 == s { print $2; exit }') || true
	state=${line:-}
	case $state in
	device) echo connected ;;
	unauthorized) echo unauthorized ;;
	offline) echo offline ;;
	*) echo disconnected ;;
	esac
}

# App saves live in the app's external files directory, which adb can read and
# write without root: /sdcard/Android/data/<package>/files/saves.
saves_dir() {
	echo "/sdcard/Android/data/$1/files/saves"
}

# pkginfo prints installed=, version_name=, version_code= and saves= for a package.
pkginfo() {
	local pkg=$1 dump name code dir n
	dump=$(frame_adb shell dumpsys package "$pkg" 2>/dev/null || true)
	if ! grep -q "Package \[$pkg\]" <<<"$dump"; then
		echo installed=no
		return 0
	fi
	name=$(sed -n 's/.*versionName=\([^ ]*\).*/\1/p' <<<"$dump" | head -n1)
	code=$(sed -n 's/.*versionCode=\([0-9]*\).*/\1/p' <<<"$dump" | head -n1)
	echo installed=yes
	echo "version_name=$name"
	echo "version_code=${code:-0}"
	dir=$(saves_dir "$pkg")
	n=$( (frame_adb shell find "$dir" -type f 2>/dev/null || true) | grep -c . || true)
	echo "saves=${n:-0}"
}
