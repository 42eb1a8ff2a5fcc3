package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/takeover"
)

// takeoverTimeout bounds everything before the reboot: the question to
// bootyd and both downloads with their retries.
const takeoverTimeout = 15 * time.Minute

func init() {
	register(command{name: "takeover", summary: "replace this running Linux by booty's agent (kexec), for bootyd", run: func(args []string) int {
		return runTakeover(args, os.Stdout, os.Stderr, nil)
	}})
}

// runTakeover parses the flags and runs takeover.Run. adjust, when set,
// changes the options before the run (tests). It returns 2 on a usage
// error and 1 when the takeover failed, with the machine untouched; on
// success it does not return (the machine kexecs).
func runTakeover(args []string, stdout, stderr io.Writer, adjust func(*takeover.Options)) int {
	fs := pflag.NewFlagSet("takeover", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: booty takeover --server URL [--ca-cert FILE] [--insecure-http]\n\n"+
			"Run as root on a machine that runs Linux (bootyd's Initializer does it over\n"+
			"SSH). Asks bootyd at URL (GET /v1/agent/boot) for booty's agent kernel and\n"+
			"initramfs, downloads both over TLS verified with the CA of --ca-cert (else the\n"+
			"system's CAs), checks their sizes and SHA-256 digests, adds the CA to the\n"+
			"initramfs (/%s) and loads them with kexec_file_load and\n"+
			"the command line booty.server=URL plus bootyd's kernel arguments. Nothing on\n"+
			"the machine changes before all of this succeeded; any failure exits 1 naming\n"+
			"it. Then it prints %q and exits 0; a process it leaves behind\n"+
			"syncs the disks and reboots into the agent a second later (no shutdown of\n"+
			"running services), which enrolls with bootyd.\n\n", takeover.CAPath, takeover.OKLine)
		fs.PrintDefaults()
	}
	server := fs.String("server", "", "bootyd's `URL` the agent enrolls with (https)")
	caFile := fs.String("ca-cert", "", "PEM `FILE` with bootyd's CA; verifies the downloads and is trusted by the agent")
	insecure := fs.Bool("insecure-http", false, "allow a plain http:// --server (and tell the agent so)")
	rebootAfter := fs.Int(takeover.RebootFlag, 0, "internal: reboot into the loaded kernel once process `PID` is gone")
	_ = fs.MarkHidden(takeover.RebootFlag)
	if code := parseFlags(fs, args, stderr, "booty takeover"); code >= 0 {
		return code
	}
	if fs.Changed(takeover.RebootFlag) {
		return runTakeoverReboot(*rebootAfter, adjust)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "booty takeover: unexpected argument %q\nRun 'booty takeover --help' for usage.\n", fs.Arg(0))
		return 2
	}
	if *server == "" {
		fmt.Fprintf(stderr, "booty takeover: --server is required\nRun 'booty takeover --help' for usage.\n")
		return 2
	}
	o := takeover.Options{
		Server: *server, InsecureHTTP: *insecure, Stdout: stdout,
		Log: slog.New(slog.NewTextHandler(stderr, nil)),
	}
	if *caFile != "" {
		b, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintf(stderr, "booty takeover: read --ca-cert: %v\n", err)
			return 1
		}
		o.CACert = b
	}
	if adjust != nil {
		adjust(&o)
	}
	// The session may end while the kernel loads; a hangup must not stop
	// a takeover half way (it changes nothing until the reboot anyway).
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, takeoverTimeout)
	defer cancel()
	if err := takeover.Run(ctx, o); err != nil {
		fmt.Fprintf(stderr, "booty %v\n", err) // "booty takeover: ..."
		return 1
	}
	return 0
}

// runTakeoverReboot is the rebooter `booty takeover` leaves behind. Its
// standard streams are /dev/null; it logs to the kernel log (/dev/kmsg)
// when it can, so a failure shows in dmesg.
func runTakeoverReboot(parent int, adjust func(*takeover.Options)) int {
	var w io.Writer = io.Discard
	if kmsg, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); err == nil {
		defer kmsg.Close()
		w = kmsg
	}
	o := takeover.Options{Parent: parent, Log: slog.New(slog.NewTextHandler(w, nil))}
	if adjust != nil {
		adjust(&o)
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if err := takeover.RebootLoaded(o); err != nil {
		o.Log.Error("booty takeover", "err", err)
		return 1
	}
	return 0
}
