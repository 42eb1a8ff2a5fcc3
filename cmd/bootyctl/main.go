// Command bootyctl is the operator's CLI for bootyd's fleet: it registers
// machines, provisions and deprovisions them, shows their state, events and
// logs, and watches a provision live. See `bootyctl --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a bad command line: it names the flag (or argument) and
// what it accepts.
type usageError struct {
	flag, msg string
}

func (e usageError) Error() string { return e.flag + " " + e.msg }

// env is what a command runs with.
type env struct {
	// stdin is what apply -f - reads; nil means os.Stdin.
	stdin          io.Reader
	stdout, stderr io.Writer
	conn           connOptions
	output         string
	// now is the clock (tests override it).
	now func() time.Time
	// isTerminal says whether stdout is a terminal; termSize is its
	// columns and rows (0, 0 when unknown).
	isTerminal func(io.Writer) bool
	termSize   func(io.Writer) (int, int)
}

// command is one `bootyctl GROUP VERB` (group machines or bmc) or, with
// no group, `bootyctl VERB` (apply).
type command struct {
	group                            string
	name, args, short, long, example string
	// flags declares the command's own flags.
	flags func(fs *pflag.FlagSet)
	// run runs it with the positional arguments.
	run func(ctx context.Context, e *env, c *client, args []string, fs *pflag.FlagSet) error
	// minArgs and maxArgs bound the positional arguments (maxArgs -1: any).
	minArgs, maxArgs int
}

const topUsage = `bootyctl drives bootyd's fleet of machines: register them (or apply
BareMetalHost-shaped YAML), provision and deprovision them, power them and
pick their boot device through their BMC, follow their state, events and
logs, and watch provisions live. It talks to bootyd's operator API with an
operator token (one line of bootyd's --operator-token-file) over HTTPS.

Usage:
  bootyctl machines COMMAND [ARGS] [FLAGS]
  bootyctl bmc COMMAND [ARGS] [FLAGS]
  bootyctl apply -f FILE [FLAGS]
  bootyctl COMMAND --help              what COMMAND does, with an example
  bootyctl version

Commands:
%s
Global flags (every command; defaults from the environment):
%s
Example:
  export BOOTY_SERVER=https://10.0.0.1:8443 BOOTY_TOKEN_FILE=~/.config/booty/token BOOTY_CA_CERT=/etc/booty/ca.crt
  bootyctl machines register --name node-1 --mac 52:54:00:12:34:56 --bmc ipmi://10.0.1.1:623
  bootyctl machines provision node-1 --image http://10.0.0.1/files/debian.raw.zst --checksum sha256:…
  bootyctl apply -f hosts.yaml
  bootyctl bmc power on node-1
  bootyctl machines watch
`

// globalFlags declares the flags every command takes.
func globalFlags(fs *pflag.FlagSet, e *env) {
	fs.StringVar(&e.conn.server, "server", os.Getenv("BOOTY_SERVER"), "bootyd's URL, https://HOST:PORT ($BOOTY_SERVER)")
	fs.StringVar(&e.conn.tokenFile, "token-file", os.Getenv("BOOTY_TOKEN_FILE"), "file whose first line is an operator token ($BOOTY_TOKEN_FILE); the token is never printed")
	fs.StringVar(&e.conn.caCert, "ca-cert", os.Getenv("BOOTY_CA_CERT"), "PEM CA certificate to verify bootyd's TLS certificate ($BOOTY_CA_CERT; default: the system's roots)")
	fs.BoolVar(&e.conn.insecureHTTP, "insecure-http", false, "allow an http:// --server: the token then crosses the network in clear")
	fs.DurationVar(&e.conn.timeout, "timeout", 30*time.Second, "bound of each request to bootyd")
	fs.StringVarP(&e.output, "output", "o", formatTable, "output format: table, json or yaml (json and yaml are what bootyd serves)")
}

// fullName is what follows "bootyctl" to name the command.
func (c command) fullName() string {
	if c.group == "" {
		return c.name
	}
	return c.group + " " + c.name
}

func commandList() string {
	var b strings.Builder
	list := func(cmds map[string]command) {
		for _, n := range sortedNames(cmds) {
			c := cmds[n]
			use := c.fullName() + " " + c.args
			if len(use) > 36 {
				use += "\n" + strings.Repeat(" ", 38)
			}
			fmt.Fprintf(&b, "  %-36s %s\n", use, c.short)
		}
	}
	a := applyCommand()
	list(map[string]command{a.name: a})
	list(bmcCommands())
	list(commands())
	return b.String()
}

func printTopUsage(w io.Writer) {
	var e env
	fs := pflag.NewFlagSet("bootyctl", pflag.ContinueOnError)
	globalFlags(fs, &e)
	fmt.Fprintf(w, topUsage, commandList(), fs.FlagUsages())
}

func printCommandUsage(w io.Writer, c command, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "bootyctl %s %s\n\n%s\n", c.fullName(), c.args, c.long)
	if c.example != "" {
		fmt.Fprintf(w, "\nExample:\n%s\n", c.example)
	}
	fmt.Fprintf(w, "\nFlags:\n%s", fs.FlagUsages())
}

// run is bootyctl's main. It returns the exit code: 0 on success or
// --help, 2 for a bad command line, 1 for any other failure.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, now: time.Now, isTerminal: isTerminal, termSize: termSize}
	return runEnv(ctx, e, args)
}

func runEnv(ctx context.Context, e *env, args []string) int {
	if e.termSize == nil {
		e.termSize = termSize
	}
	help := "bootyctl --help"
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(e.stderr, "bootyctl: "+format+"\n", a...)
		if code == 2 {
			fmt.Fprintf(e.stderr, "Run '%s' for usage.\n", help)
		}
		return code
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printTopUsage(e.stdout)
		return 0
	}
	var (
		c    command
		rest []string
	)
	switch args[0] {
	case "version":
		fmt.Fprintln(e.stdout, "bootyctl", version)
		return 0
	case "apply":
		c, rest = applyCommand(), args[1:]
	case "machines", "machine", "bmc":
		group, cmds := "machines", commands()
		if args[0] == "bmc" {
			group, cmds = "bmc", bmcCommands()
		}
		if len(args) < 2 || args[1] == "-h" || args[1] == "--help" {
			printTopUsage(e.stdout)
			return 0
		}
		var ok bool
		if c, ok = cmds[args[1]]; !ok {
			return fail(2, "unknown command %q: want one of %s", group+" "+args[1], strings.Join(sortedNames(cmds), ", "))
		}
		rest = args[2:]
	default:
		return fail(2, "unknown command %q: want machines, bmc, apply or version", args[0])
	}
	full := c.fullName()
	help = "bootyctl " + full + " --help"
	fs := pflag.NewFlagSet("bootyctl "+full, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	if c.flags != nil {
		c.flags(fs)
	}
	globalFlags(fs, e)
	err := fs.Parse(rest)
	if errors.Is(err, pflag.ErrHelp) {
		printCommandUsage(e.stdout, c, fs)
		return 0
	}
	if err != nil {
		return fail(2, "%s: %v", full, err)
	}
	pos := fs.Args()
	if len(pos) < c.minArgs || (c.maxArgs >= 0 && len(pos) > c.maxArgs) {
		want := c.args
		if want == "" {
			want = "no arguments"
		}
		return fail(2, "%s: got %d argument(s) %q, want %s", full, len(pos), pos, want)
	}
	if err := checkFormat(e.output); err != nil {
		return fail(2, "%s: %v", full, err)
	}
	cl, err := newClient(e.conn)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return fail(2, "%s: %v", full, err)
		}
		return fail(1, "%s: %v", full, err)
	}
	if err := c.run(ctx, e, cl, pos, fs); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return fail(2, "%s: %v", full, err)
		}
		if ctx.Err() != nil && c.name == "watch" {
			return 0
		}
		return fail(1, "%s: %v", full, err)
	}
	return 0
}

// sortedNames returns the names of cmds, sorted.
func sortedNames(cmds map[string]command) []string {
	var n []string
	for k := range cmds {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// stdinReader returns e.stdin, or os.Stdin when unset.
func (e *env) stdinReader() io.Reader {
	if e.stdin == nil {
		return os.Stdin
	}
	return e.stdin
}

func commandNames() []string { return sortedNames(commands()) }
