package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/server"
)

const usageHead = `bootyd serves booty agents: machine configs by MAC, boot files and OS
images, and iPXE boot scripts; and it records the status, progress and logs
each agent reports, printing them on stdout (bootyd's own logs go to stderr).

Routes:
  GET  /v1/boot.ipxe                 chain script for DHCP's boot filename
  GET  /v1/machines/{mac}/ipxe       iPXE script booting the agent
  GET  /v1/machines/{mac}/config     the machine's config file, as-is
  POST /v1/machines/{mac}/status|progress|logs   agent reports (Bearer token)
  GET  /v1/machines[/{mac}]          recorded machine state (JSON)
  GET  /files/{path}                 files under --files, with Range support

Configs are files in --configs named after the MAC, with colons or dashes in
any case: aa-bb-cc-dd-ee-ff.yaml, AA:BB:CC:DD:EE:FF.json, ... They are read
on every request, so edit them live. Each must set server.token: the agent
sends it as "Authorization: Bearer <token>" with every report.

Example:
  bootyd --configs /etc/booty/machines --files /srv/booty \
      --state-dir /var/lib/bootyd --public-url https://10.0.0.1:8443 \
      --tls-cert /etc/booty/tls.crt --tls-key /etc/booty/tls.key

  bootyd --configs ./machines --files ./files --insecure-http --listen 127.0.0.1:8080

Flags:
`

// config is the parsed command line.
type config struct {
	opts            server.Options
	listen          string
	tlsCert, tlsKey string
	insecureHTTP    bool
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
}

// printUsage writes the full help: what bootyd does, an example, every flag.
func printUsage(w io.Writer) {
	var c config
	fs := newFlagSet(&c)
	fmt.Fprint(w, usageHead)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseFlags parses args; it returns pflag.ErrHelp for -h/--help.
func parseFlags(args []string) (config, error) {
	var c config
	fs := newFlagSet(&c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return c, checkConfig(&c)
}

// newFlagSet declares every flag into c; parsing prints nothing.
func newFlagSet(c *config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("bootyd", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	fs.StringVar(&c.opts.ConfigDir, "configs", "", "directory of machine configs named <mac>.yaml, .yml or .json")
	fs.StringVar(&c.opts.DefaultConfig, "default-config", "", "config file served to MACs that have none in --configs")
	fs.StringVar(&c.opts.FilesDir, "files", "", "directory served under /files/ (kernel, initramfs, OS images)")
	fs.StringVar(&c.opts.StateDir, "state-dir", "", "directory keeping each machine's recorded state as JSON across restarts (default: memory only)")
	fs.StringVar(&c.opts.PublicURL, "public-url", "", "URL machines use to reach bootyd, written into iPXE scripts (default: scheme and Host of each request)")
	fs.StringVar(&c.opts.IPXEKernel, "ipxe-kernel", server.DefaultIPXEKernel, "kernel booted by iPXE, a path under --files")
	fs.StringVar(&c.opts.IPXEInitrd, "ipxe-initrd", server.DefaultIPXEInitrd, "initramfs booted by iPXE, a path under --files")
	fs.StringVar(&c.opts.IPXECmdline, "ipxe-cmdline", server.DefaultIPXECmdline, "kernel arguments added after booty.server=<public-url> in iPXE scripts")
	fs.BoolVar(&c.opts.AllowNoToken, "allow-no-token", false, "accept unauthenticated reports for machines whose config has no server.token")
	fs.StringVar(&c.listen, "listen", "", "address to listen on (default :8443 with TLS, :8080 with --insecure-http)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM certificate (chain) for HTTPS")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.BoolVar(&c.insecureHTTP, "insecure-http", false, "serve plain HTTP; tokens and configs then cross the network in clear")
	fs.StringVar(&c.logLevel, "log-level", "info", "level of bootyd's own logs on stderr: debug (adds every request), info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "format of bootyd's own logs: text or json")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "how long SIGINT/SIGTERM waits for requests in flight")
	fs.IntVar(&c.opts.MaxFileConns, "max-file-conns", server.DefaultMaxFileConns, "most /files/ downloads in progress at once; above it 503 with Retry-After (-1: no limit)")
	fs.DurationVar(&c.opts.FileWriteTimeout, "file-write-timeout", server.DefaultFileWriteTimeout, "each 4 MiB of a /files/ download must be sent within this plus its time at --file-min-rate, else the client is dropped")
	fs.Int64Var(&c.opts.FileMinRate, "file-min-rate", server.DefaultFileMinRate, "slowest /files/ client tolerated, in bytes per second (see --file-write-timeout)")
	fs.DurationVar(&c.opts.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close a keep-alive connection idle this long")
	return fs
}

// checkConfig enforces TLS or --insecure-http, checks the /files/ bounds
// and picks the default --listen.
func checkConfig(c *config) error {
	switch {
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case c.tlsCert != "" && c.insecureHTTP:
		return errors.New("--insecure-http and --tls-cert exclude each other")
	case c.tlsCert == "" && !c.insecureHTTP:
		return errors.New("no TLS certificate: give --tls-cert and --tls-key, or --insecure-http to serve plain HTTP (machine tokens then travel in clear)")
	}
	switch {
	case c.opts.MaxFileConns == 0 || c.opts.MaxFileConns < -1:
		return fmt.Errorf("--max-file-conns %d: want a positive number, or -1 for no limit", c.opts.MaxFileConns)
	case c.opts.FileWriteTimeout <= 0:
		return fmt.Errorf("--file-write-timeout %s: must be positive", c.opts.FileWriteTimeout)
	case c.opts.FileMinRate <= 0:
		return fmt.Errorf("--file-min-rate %d: must be a positive number of bytes per second", c.opts.FileMinRate)
	case c.opts.IdleTimeout <= 0:
		return fmt.Errorf("--idle-timeout %s: must be positive", c.opts.IdleTimeout)
	}
	if c.listen == "" {
		c.listen = ":8443"
		if c.insecureHTTP {
			c.listen = ":8080"
		}
	}
	return nil
}

// newLogger builds the stderr logger from --log-level and --log-format.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// run is bootyd's main: parse flags, build the server, listen, serve until
// SIGINT or SIGTERM. It returns the exit code: 0 after a clean shutdown or
// --help, 2 for bad flags, 1 for any other failure.
func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args)
	if errors.Is(err, pflag.ErrHelp) {
		printUsage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bootyd: %v\nRun 'bootyd --help' for usage.\n", err)
		return 2
	}
	log, err := newLogger(stderr, c.logLevel, c.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "bootyd: %v\n", err)
		return 2
	}
	c.opts.Output = stdout
	c.opts.Logger = log
	c.opts.ShutdownTimeout = c.shutdownTimeout
	scheme := "http"
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			log.Error("load TLS certificate", "cert", c.tlsCert, "key", c.tlsKey, "err", err)
			return 1
		}
		c.opts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		scheme = "https"
	}
	srv, err := server.New(c.opts)
	if err != nil {
		log.Error("start bootyd", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		log.Error("start bootyd", "err", fmt.Errorf("listen on %s: %w", c.listen, err))
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("bootyd listening", "addr", ln.Addr().String(), "scheme", scheme,
		"configs", c.opts.ConfigDir, "files", c.opts.FilesDir, "state_dir", c.opts.StateDir)
	if err := srv.Serve(ctx, ln); err != nil {
		log.Error("bootyd stopped", "err", err)
		return 1
	}
	log.Info("bootyd stopped")
	return 0
}
