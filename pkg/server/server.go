// Package server is bootyd: it serves machine configs, files and iPXE boot
// scripts, and records the status, progress and logs that booty agents report.
// Routes are those documented in package api, plus GET /v1/boot.ipxe.
//
// Configs are read from disk on every request so that operators can edit
// them while bootyd runs. Machine state lives in memory and, when a state
// directory is set, in one JSON file per machine. A human-readable account
// of every machine's progress goes to Options.Output; bootyd's own logs go to
// Options.Logger. Tokens never appear in either.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// Defaults for Options fields left zero.
const (
	DefaultIPXEKernel      = "vmlinuz"
	DefaultIPXEInitrd      = "initramfs.img"
	DefaultIPXECmdline     = "console=tty0 console=ttyS0,115200n8"
	DefaultMaxBodyBytes    = 1 << 20
	DefaultMaxLogLines     = 500
	DefaultShutdownTimeout = 10 * time.Second
)

// Options configure a Server. Only one of ConfigDir and DefaultConfig is needed.
type Options struct {
	// ConfigDir holds machine configs named <mac>.yaml, .yml or .json, the
	// MAC spelled with colons or dashes in any case.
	ConfigDir string
	// DefaultConfig is a config file served to MACs that have none in ConfigDir.
	DefaultConfig string
	// FilesDir is served under /files/; empty answers every /files/ request with 404.
	FilesDir string
	// StateDir, when set, keeps one <aa-bb-cc-dd-ee-ff>.json per machine,
	// loaded by New and rewritten atomically on every report.
	StateDir string
	// PublicURL is how machines reach bootyd, e.g. "https://10.0.0.1:8443";
	// it goes into iPXE scripts. Empty uses the scheme and Host of each request.
	PublicURL string
	// IPXEKernel and IPXEInitrd are paths under FilesDir booted by the iPXE script.
	IPXEKernel string
	IPXEInitrd string
	// IPXECmdline is appended to the kernel command line after
	// booty.server=<PublicURL> and BOOTIF=01-<mac>.
	IPXECmdline string
	// AllowNoToken accepts reports for machines whose config has no
	// server.token, without authentication. Off by default: such reports get 403.
	AllowNoToken bool
	// MaxBodyBytes bounds report bodies (413 above it).
	MaxBodyBytes int64
	// MaxLogLines bounds the agent log lines kept per machine; older ones are dropped.
	MaxLogLines int
	// Output receives the human-readable account: step starts and ends,
	// progress, errors and agent log lines, each prefixed with the MAC.
	Output io.Writer
	// Logger receives bootyd's own structured logs (requests at debug level).
	Logger *slog.Logger
	// TLSConfig, when set, makes Serve speak TLS; it must hold a certificate.
	TLSConfig *tls.Config
	// ShutdownTimeout bounds the graceful shutdown in Serve.
	ShutdownTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that waited this long for
	// its next request; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxFileConns bounds the /files/ answers in progress at once (each
	// holds one connection); a request above it gets 503 with Retry-After.
	// Zero means DefaultMaxFileConns, negative means no limit.
	MaxFileConns int
	// FileRetryAfter is the Retry-After of that 503, in whole seconds
	// rounded up; default DefaultFileRetryAfter.
	FileRetryAfter time.Duration
	// FileWriteTimeout and FileMinRate bound how long a /files/ body may
	// take: each piece of at most 4 MiB must be sent within
	// FileWriteTimeout plus its size at FileMinRate (bytes per second), or
	// the connection is closed. Defaults DefaultFileWriteTimeout and
	// DefaultFileMinRate.
	FileWriteTimeout time.Duration
	FileMinRate      int64
	// Now is the clock; tests override it.
	Now func() time.Time
	// DB is the Bare Metal Database (required); the caller opens and closes it.
	DB *bmdb.DB
	// OperatorTokens are the tokens the operator API accepts; none turns
	// the operator API off (every request 401).
	OperatorTokens []string
	// HeartbeatInterval is what enrolled agents are told (default 10 s).
	HeartbeatInterval time.Duration
	// HeartbeatFlush is how long heartbeats are buffered before they are
	// written in one batch (default HeartbeatFlushInterval).
	HeartbeatFlush time.Duration
	// AutoDiscover serves iPXE scripts to unknown MACs (their agents then
	// enroll as discovered machines, when the BMDB allows it).
	AutoDiscover bool
	// ReportRate and ReportBurst bound the reports (log lines count one
	// each) per second and machine (429 past them).
	ReportRate, ReportBurst int
	// BMC tunes the BMC drivers of the /bmc/ routes (timeouts, retries,
	// root CAs); zero fields are the drivers' defaults.
	BMC bmc.Options
	// BMCCACert is a PEM file of CA certificates that verify Redfish BMCs,
	// in addition to BMC.RootCAs (default the system's roots).
	BMCCACert string
}

// Server is bootyd's HTTP service and machine state store.
type Server struct {
	opts    Options
	log     *slog.Logger
	handler http.Handler

	fileSlots chan struct{} // /files/ answers in progress; nil: no limit

	mu       sync.Mutex
	machines map[string]*record
	changed  chan struct{} // closed and replaced on every state change

	persistMu sync.Mutex
	outMu     sync.Mutex

	db     *bmdb.DB
	limit  limiter
	beats  heartbeatBuffer
	parked parkedPolls
	bmc    *bmcState
	// readHeaderTimeout bounds reading a request's header (10 s; tests
	// shorten it).
	readHeaderTimeout time.Duration
}

// New checks opts, fills defaults, loads persisted state from StateDir
// (creating it if missing) and returns a Server ready to Serve. It fails when
// a configured directory or file is missing, when PublicURL is not an
// absolute http(s) URL, when an iPXE setting would break the script (newline,
// absolute or ".." path), or when the state directory cannot be read.
func New(opts Options) (*Server, error) {
	if opts.DB == nil {
		return nil, errors.New("new server: no database (Options.DB)")
	}
	for i, t := range opts.OperatorTokens {
		if len(t) < 16 {
			return nil, fmt.Errorf("new server: operator token %d is shorter than 16 characters", i+1)
		}
	}
	if opts.ConfigDir != "" {
		if err := wantDir(opts.ConfigDir); err != nil {
			return nil, fmt.Errorf("new server: config directory: %w", err)
		}
	}
	if opts.DefaultConfig != "" {
		if _, err := readConfigFile(opts.DefaultConfig, true); err != nil {
			return nil, fmt.Errorf("new server: default config: %w", err)
		}
	}
	if opts.FilesDir != "" {
		if err := wantDir(opts.FilesDir); err != nil {
			return nil, fmt.Errorf("new server: files directory: %w", err)
		}
	}
	if opts.PublicURL != "" {
		u, err := url.Parse(opts.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("new server: public URL %q is not an absolute http:// or https:// URL without query", opts.PublicURL)
		}
		opts.PublicURL = strings.TrimRight(opts.PublicURL, "/")
	}
	if opts.IPXEKernel == "" {
		opts.IPXEKernel = DefaultIPXEKernel
	}
	if opts.IPXEInitrd == "" {
		opts.IPXEInitrd = DefaultIPXEInitrd
	}
	if opts.IPXECmdline == "" {
		opts.IPXECmdline = DefaultIPXECmdline
	}
	for name, p := range map[string]string{"kernel": opts.IPXEKernel, "initrd": opts.IPXEInitrd} {
		if !validFilePath(p) {
			return nil, fmt.Errorf("new server: iPXE %s %q is not a relative path inside the files directory", name, p)
		}
	}
	if strings.ContainsAny(opts.IPXECmdline, "\r\n") || strings.ContainsAny(opts.PublicURL, " \t\r\n") {
		return nil, errors.New("new server: iPXE command line and public URL must be one line without blanks in the URL")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxLogLines <= 0 {
		opts.MaxLogLines = DefaultMaxLogLines
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.fileDefaults()
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.HeartbeatFlush <= 0 {
		opts.HeartbeatFlush = HeartbeatFlushInterval
	}
	if opts.ReportRate <= 0 {
		opts.ReportRate = DefaultReportRate
	}
	if opts.ReportBurst <= 0 {
		opts.ReportBurst = DefaultReportBurst
	}
	s := &Server{
		opts:      opts,
		log:       opts.Logger,
		fileSlots: newFileSlots(opts.MaxFileConns),
		machines:  map[string]*record{},
		changed:   make(chan struct{}),
		db:        opts.DB,
		limit:     limiter{rate: float64(opts.ReportRate), burst: float64(opts.ReportBurst)},

		readHeaderTimeout: 10 * time.Second,
	}
	var err error
	if s.bmc, err = newBMCState(opts); err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	if opts.StateDir != "" {
		if err := s.loadState(); err != nil {
			return nil, fmt.Errorf("new server: %w", err)
		}
	}
	s.handler = s.routes()
	return s, nil
}

// wantDir fails unless p is an existing directory.
func wantDir(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", p)
	}
	return nil
}

// validFilePath reports whether p is a clean relative slash path with no ".." element.
func validFilePath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\\\r\n \t") {
		return false
	}
	if path.Clean(p) != p {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." || e == "." || e == "" {
			return false
		}
	}
	return true
}

// Handler returns the HTTP handler with every route; tests mount it in httptest.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers HTTP (or HTTPS when Options.TLSConfig is set) on ln until
// ctx ends, then shuts down gracefully: it stops accepting, waits up to
// ShutdownTimeout for requests in flight, then closes what remains. It
// returns nil after a clean shutdown, and the error otherwise. Header reads
// and idle connections (IdleTimeout) have timeouts; there is no server-wide
// write timeout, since /files/ streams multi-GiB images: /files/ bounds
// each piece it sends (FileWriteTimeout, FileMinRate), other routes set
// their own deadlines.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.readHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// HTTP/1.1 only (no h2 over TLS): parked long polls take their
	// connection over and hand it back through pl (longpoll.go).
	var tlsCfg *tls.Config
	if s.opts.TLSConfig != nil {
		tlsCfg = s.opts.TLSConfig.Clone()
		tlsCfg.NextProtos = []string{"http/1.1"}
	}
	pl := newPollListener(ln, tlsCfg, srv.IdleTimeout)
	s.parked.serving(pl.handBack)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(pl) }()
	select {
	case err := <-errc:
		s.parked.serving(nil)
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	s.parked.close(sctx)
	err := srv.Shutdown(sctx)
	<-errc
	s.Close(sctx)
	if err != nil {
		srv.Close()
		return fmt.Errorf("shut down server on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Close ends what the server runs beside its requests: it answers every
// parked command poll (204, "Connection: close") and waits for those
// answers, then writes the buffered heartbeats; it waits at most until ctx
// ends. Serve calls it at shutdown; a caller that mounts Handler in a
// server of its own calls it after that server stopped and before it closes
// the database. The server answers no poll by parking after Close.
func (s *Server) Close(ctx context.Context) {
	s.parked.close(ctx)
	s.flushHeartbeats(ctx)
}
