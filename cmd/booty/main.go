// Command booty is the provisioning agent. Started as /init (PID 1) it brings
// the machine up and provisions it; started any other way it is a CLI.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/booty-dev/booty/pkg/initsys"
)

// command is one CLI subcommand. Each lives in its own cmd_*.go file and
// registers itself in init().
type command struct {
	name    string
	summary string
	run     func(args []string) int
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	if filepath.Base(os.Args[0]) == "modprobe" {
		// The kernel's on-demand module helper (initsys.ModprobePath).
		kmsg, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
		if err != nil {
			kmsg = os.Stderr
		}
		os.Exit(initsys.Modprobe(os.Args[1:], kmsg))
	}
	if os.Getpid() == 1 || filepath.Base(os.Args[0]) == "init" {
		os.Exit(runAgent(os.Args[1:]))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage()
		os.Exit(0)
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "booty: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}

func usage() {
	fmt.Fprintf(os.Stderr, "booty provisions bare-metal machines. As /init (PID 1) it runs the agent;\notherwise it is a CLI:\n\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  booty %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'booty COMMAND --help' for a command's flags.\n")
}
