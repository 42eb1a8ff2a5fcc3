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

// command is one `bootyctl machines VERB`.
type command struct {
	name, args, short, long, example string
	// flags declares the command's own flags.
	flags func(fs *pflag.FlagSet)
	// run runs it with the positional arguments.
	run func(ctx context.Context, e *env, c *client, args []string, fs *pflag.FlagSet) error
	// minArgs and maxArgs bound the positional arguments (maxArgs -1: any).
	minArgs, maxArgs int
}

const topUsage = `bootyctl drives bootyd's fleet of machines: register them, provision and
deprovision them, follow their state, events and logs, and watch provisions
live. It talks to bootyd's operator API with an operator token (one line of
bootyd's --operator-token-file) over HTTPS.

Usage:
  bootyctl machines COMMAND [ARGS] [FLAGS]
  bootyctl machines COMMAND --help     what COMMAND does, with an example
  bootyctl version

Commands:
%s
Global flags (every command; defaults from the environment):
%s
Example:
  export BOOTY_SERVER=https://10.0.0.1:8443 BOOTY_TOKEN_FILE=~/.config/booty/token BOOTY_CA_CERT=/etc/booty/ca.crt
  bootyctl machines register --name node-1 --mac 52:54:00:12:34:56 --bmc ipmi://10.0.1.1:623
  bootyctl machines provision node-1 --image http://10.0.0.1/files/debian.raw.zst --checksum sha256:…
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

func commandList() string {
	var b strings.Builder
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := cmds[n]
		fmt.Fprintf(&b, "  %-36s %s\n", "machines "+c.name+" "+c.args, c.short)
	}
	return b.String()
}

func printTopUsage(w io.Writer) {
	var e env
	fs := pflag.NewFlagSet("bootyctl", pflag.ContinueOnError)
	globalFlags(fs, &e)
	fmt.Fprintf(w, topUsage, commandList(), fs.FlagUsages())
}

func printCommandUsage(w io.Writer, c command, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "bootyctl machines %s %s\n\n%s\n", c.name, c.args, c.long)
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
	switch args[0] {
	case "version":
		fmt.Fprintln(e.stdout, "bootyctl", version)
		return 0
	case "machines", "machine":
	default:
		return fail(2, "unknown command %q: want machines or version", args[0])
	}
	if len(args) < 2 || args[1] == "-h" || args[1] == "--help" {
		printTopUsage(e.stdout)
		return 0
	}
	c, ok := commands()[args[1]]
	if !ok {
		return fail(2, "unknown command %q: want one of %s", "machines "+args[1], strings.Join(commandNames(), ", "))
	}
	help = "bootyctl machines " + c.name + " --help"
	fs := pflag.NewFlagSet("bootyctl machines "+c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	if c.flags != nil {
		c.flags(fs)
	}
	globalFlags(fs, e)
	err := fs.Parse(args[2:])
	if errors.Is(err, pflag.ErrHelp) {
		printCommandUsage(e.stdout, c, fs)
		return 0
	}
	if err != nil {
		return fail(2, "machines %s: %v", c.name, err)
	}
	pos := fs.Args()
	if len(pos) < c.minArgs || (c.maxArgs >= 0 && len(pos) > c.maxArgs) {
		want := c.args
		if want == "" {
			want = "no arguments"
		}
		return fail(2, "machines %s: got %d argument(s) %q, want %s", c.name, len(pos), pos, want)
	}
	if err := checkFormat(e.output); err != nil {
		return fail(2, "machines %s: %v", c.name, err)
	}
	cl, err := newClient(e.conn)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return fail(2, "machines %s: %v", c.name, err)
		}
		return fail(1, "machines %s: %v", c.name, err)
	}
	if err := c.run(ctx, e, cl, pos, fs); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			return fail(2, "machines %s: %v", c.name, err)
		}
		if ctx.Err() != nil && c.name == "watch" {
			return 0
		}
		return fail(1, "machines %s: %v", c.name, err)
	}
	return 0
}

func commandNames() []string {
	var n []string
	for k := range commands() {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
