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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/server"
)

const usageHead = `bootyd keeps a fleet of bare-metal machines in its Bare Metal Database
(SQLite by default, PostgreSQL for several replicas): operators register,
inspect, provision and deprovision machines; the booty agent on each machine
enrolls, heartbeats and waits for those commands. bootyd also serves boot
files, OS images and iPXE scripts, and prints each machine's progress on
stdout (its own logs go to stderr; neither ever holds a token or user data).

Routes (see pkg/api/fleet.go):
  /v1/machines[/{machine}[/inspect|provision|deprovision|reboot|poweroff|events|logs]]
                                     the operator API (Bearer operator token)
  GET|POST /v1/machines/{machine}/bmc/power, POST …/bmc/bootdev
                                     the machine's BMC, with the credentials
                                     bootyd keeps (Bearer operator token)
  POST /v1/enroll, /v1/machines/{mac}/heartbeat|command|status|progress|logs|health
                                     the agent protocol (Bearer machine token)
  GET  /v1/boot.ipxe, /v1/machines/{mac}/ipxe   iPXE scripts (need --public-url)
  GET  /files/{path}                 files under --files, with Range support

Configs in --configs (named after the MAC: aa-bb-cc-dd-ee-ff.yaml, ...) become
registered machines; each boot of such a machine's agent runs its file, read
anew. An agent with a config of its own (config drive, /deploy) may report
with the file's server.token.

Example:
  bootyd --state-dir /var/lib/bootyd --operator-token-file /etc/booty/operator-tokens \
      --files /srv/booty --public-url https://10.0.0.1:8443 \
      --tls-cert /etc/booty/tls.crt --tls-key /etc/booty/tls.key

  bootyd --db postgres://bootyd@db/bootyd --operator-token-file ./tokens --insecure-http

Flags:
`

// config is the parsed command line.
type config struct {
	opts            server.Options
	db              string
	tokenFile       string
	autoDiscover    bool
	maxDiscovered   int
	listen          string
	tlsCert, tlsKey string
	insecureHTTP    bool
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	pprofListen     string
	loops           loopsConfig
}

// printUsage writes the full help: what bootyd does, an example, every flag.
func printUsage(w io.Writer) {
	var c config
	fs := newFlagSet(&c)
	fmt.Fprint(w, strings.TrimSuffix(usageHead, "\nFlags:\n")+"\n"+usageLoops+"\nFlags:\n")
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
	fs.StringVar(&c.opts.StateDir, "state-dir", "", "directory of bootyd's state: the SQLite database (default --db) and each machine's last run as JSON")
	fs.StringVar(&c.db, "db", "", "the Bare Metal Database: a SQLite file path, or postgres://… shared by several bootyd replicas (default <state-dir>/bmdb.db)")
	fs.StringVar(&c.tokenFile, "operator-token-file", "", "file of operator API tokens, one a line (at least 16 characters each); without it the operator API answers 401")
	fs.BoolVar(&c.autoDiscover, "auto-discover", true, "enroll agents of unknown machines as discovered (and serve them iPXE scripts)")
	fs.IntVar(&c.maxDiscovered, "max-discovered", 1000, "bound on the discovered machines; enrollments beyond it get 429")
	fs.StringVar(&c.opts.PublicURL, "public-url", "", "URL machines use to reach bootyd, written into iPXE scripts and rendered configs (iPXE scripts are refused without it)")
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
	fs.StringVar(&c.opts.BMCCACert, "bmc-ca-cert", "", "PEM CA certificates that verify Redfish BMCs' TLS certificates, in addition to the system's roots")
	fs.DurationVar(&c.opts.BMC.PowerTimeout, "bmc-power-timeout", bmc.DefaultPowerTimeout, "how long a BMC has to show a power on, hard off or reset before the call fails as not applied")
	fs.StringVar(&c.pprofListen, "debug-pprof-listen", "", "serve Go's pprof profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060 (default off)")
	addLoopFlags(fs, &c.loops)
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
	case c.opts.BMC.PowerTimeout <= 0:
		return fmt.Errorf("--bmc-power-timeout %s: must be positive", c.opts.BMC.PowerTimeout)
	case c.opts.IdleTimeout <= 0:
		return fmt.Errorf("--idle-timeout %s: must be positive", c.opts.IdleTimeout)
	}
	if c.db == "" {
		if c.opts.StateDir == "" {
			return errors.New("no database: give --state-dir (the database goes to <state-dir>/bmdb.db) or --db")
		}
		c.db = filepath.Join(c.opts.StateDir, "bmdb.db")
	}
	if err := checkPprofListen(c.pprofListen); err != nil {
		return err
	}
	if c.maxDiscovered < 1 {
		return fmt.Errorf("--max-discovered %d: want at least 1", c.maxDiscovered)
	}
	if err := c.loops.check(c.opts.PublicURL, c.opts.StateDir); err != nil {
		return err
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
	if c.tokenFile != "" {
		toks, err := readTokens(c.tokenFile)
		if err != nil {
			log.Error("start bootyd", "err", err)
			return 1
		}
		c.opts.OperatorTokens = toks
	} else {
		log.Warn("no --operator-token-file: the operator API refuses every request")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.opts.StateDir != "" {
		if err := os.MkdirAll(c.opts.StateDir, 0o700); err != nil {
			log.Error("start bootyd", "err", fmt.Errorf("create state directory: %w", err))
			return 1
		}
	}
	dbOpts := []bmdb.Option{bmdb.WithLogger(log.With("component", "bmdb")), bmdb.WithMaxDiscovered(c.maxDiscovered)}
	if !c.autoDiscover {
		dbOpts = append(dbOpts, bmdb.WithoutAutoDiscovery())
	}
	db, err := bmdb.Open(ctx, c.db, dbOpts...)
	if err != nil {
		log.Error("start bootyd", "err", err)
		return 1
	}
	defer db.Close()
	c.opts.DB = db
	c.opts.AutoDiscover = c.autoDiscover
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
	if c.pprofListen != "" {
		addr, err := servePprof(ctx, c.pprofListen, log)
		if err != nil {
			log.Error("start bootyd", "err", err)
			return 1
		}
		log.Info("pprof profiles served", "addr", addr)
	}
	srv.RegisterConfigs(ctx)
	// The loops drive the same BMCs as the BMC routes: with --bmc-ca-cert's
	// roots and --bmc-power-timeout.
	c.loops.bmc.RootCAs = srv.BMCOptions().RootCAs
	c.loops.bmc.PowerTimeout = srv.BMCOptions().PowerTimeout
	stopLoops, err := startLoops(ctx, c.loops, db, log)
	if err != nil {
		log.Error("start bootyd", "err", err)
		return 1
	}
	defer stopLoops()
	log.Info("bootyd listening", "addr", ln.Addr().String(), "scheme", scheme,
		"configs", c.opts.ConfigDir, "files", c.opts.FilesDir, "state_dir", c.opts.StateDir, "db", db.Engine(),
		"operator_tokens", len(c.opts.OperatorTokens), "auto_discover", c.autoDiscover)
	if err := srv.Serve(ctx, ln); err != nil {
		log.Error("bootyd stopped", "err", err)
		return 1
	}
	log.Info("bootyd stopped")
	return 0
}

// readTokens reads the operator tokens: one a line, blank lines and lines
// starting with # skipped. It fails naming the file when there is none, or
// one is shorter than 16 characters (the token itself is never named).
func readTokens(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read operator tokens: %w", err)
	}
	var toks []string
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if len(l) < 16 {
			return nil, fmt.Errorf("read operator tokens: %s line %d: token shorter than 16 characters", path, i+1)
		}
		toks = append(toks, l)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("read operator tokens: %s holds no token", path)
	}
	return toks, nil
}
