// Command bootyd is the booty server: it serves machine configs, boot files
// and iPXE scripts, and records what the booty agents report. See
// `bootyd --help`.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
