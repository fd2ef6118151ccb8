#!/usr/bin/env bash
# build.sh [out-dir] — build the headset simulator and install it as `ssh` and `adb`
# in out-dir (default: bin/ next to this script). Point devices.steam_frame.sim_bin
# at out-dir and sim_scenario at a scenario file (see scenario.example.yaml) to run
# the device scripts against it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$here/../../.."
go build -o "$out/framesim" ./device/steam-frame/sim/cmd/framesim
ln -sf framesim "$out/ssh"
ln -sf framesim "$out/adb"
echo "$out"
