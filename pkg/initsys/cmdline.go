package initsys

import "github.com/booty-dev/booty/pkg/cmdline"

// Cmdline is a parsed kernel command line; see package cmdline.
type Cmdline = cmdline.Cmdline

// Param is one kernel command line parameter.
type Param = cmdline.Param

// ParseCmdline parses a kernel command line; see cmdline.Parse.
func ParseCmdline(s string) Cmdline { return cmdline.Parse(s) }
