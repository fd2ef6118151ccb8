// Command aetherium is the one binary of the fleet: api, worker, scheduler, dev,
// migrate, and the client commands. See `aetherium help`.
package main

import (
	"os"

	"github.com/aetherium-engine/aetherium/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
