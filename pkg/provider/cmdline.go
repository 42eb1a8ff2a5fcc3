package provider

import "github.com/booty-dev/booty/pkg/cmdline"

// Kernel command line keys booty reads.
const (
	CmdlineConfig  = cmdline.KeyConfig
	CmdlineServer  = cmdline.KeyServer
	CmdlineDebug   = cmdline.KeyDebug
	CmdlineIP      = cmdline.KeyIP
	CmdlineConsole = cmdline.KeyConsole
	// CmdlineInsecureHTTP=1 is the operator's opt-in to plain http:// URLs.
	CmdlineInsecureHTTP = cmdline.KeyInsecureHTTP
)

// DefaultCmdlinePath is where ReadCmdline reads by default.
const DefaultCmdlinePath = cmdline.DefaultPath

// Cmdline is a parsed kernel command line; see package cmdline.
type Cmdline = cmdline.Cmdline

// Param is one kernel command line parameter.
type Param = cmdline.Param

// ParseCmdline parses a kernel command line; see cmdline.Parse.
func ParseCmdline(s string) Cmdline { return cmdline.Parse(s) }

// ReadCmdline reads and parses the command line at path; see cmdline.Read.
func ReadCmdline(path string) (Cmdline, error) { return cmdline.Read(path) }
