// Command framesim is the Steam Frame headset simulator's stand-in for ssh and adb
// (see package sim). build.sh installs it under both names.
package main

import (
	"os"

	"github.com/aetherium-engine/aetherium/device/steam-frame/sim"
)

func main() {
	os.Exit(sim.Main(os.Args[0], os.Args[1:], os.Stdout, os.Stderr))
}
