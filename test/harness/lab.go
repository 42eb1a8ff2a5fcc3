// Package harness is what one provisioning scenario needs, shared by the
// e2e tests (test/e2e) and the demo (hack/demo): a Lab runs bootyd
// (pkg/server) in-process on 127.0.0.1 with a configs dir, a files dir and
// a state dir of its own; AddMachine writes a machine's config and creates
// its disk; Machine.Boot starts QEMU (test/vm) with the booty kernel and
// initramfs; Machine.WaitOutcome waits until bootyd recorded the run's
// outcome and QEMU has exited; DiskHoldsImage, CheckGPT and FirstMiBZero
// look at the disk afterwards.
//
// The guest reaches the lab's bootyd at http://10.0.2.2:<port> through QEMU
// user networking, which maps 10.0.2.2 to the loopback of the network
// namespace QEMU runs in. Callers enter a network namespace of their own
// first (vm.EnterNetNS in TestMain or main), so the guest reaches nothing
// but the lab; Boot refuses to start a VM otherwise.
package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/server"
)

// GuestHost is the address at which a guest on QEMU user networking reaches
// the loopback of the namespace QEMU runs in.
const GuestHost = "10.0.2.2"

// Names in the demo image directory made by hack/mkdemoimage.sh.
const (
	DemoImage           = "demo.img"     // the raw GPT image
	DemoImageZst        = "demo.img.zst" // what machines are given by default
	ChecksumsFile       = "SHA256SUMS"   // sha256sum format, names relative to the dir
	DefaultFailureDelay = 5 * time.Second
)

// LabOptions configure NewLab. Every field is optional.
type LabOptions struct {
	// FilesDir is served under /files/: the demo image directory (demo.img,
	// demo.img.zst, SHA256SUMS). Empty answers /files/ with 404.
	FilesDir string
	// Dir holds the lab's configs/, state/ and machines/<mac>/ (disk,
	// console log). Empty means a new temporary directory that Close
	// removes; a given Dir is kept.
	Dir string
	// Output receives bootyd's human account of every machine: step starts
	// and ends, progress, errors, agent log lines. Nil discards it.
	Output io.Writer
	// Console receives every console line of every VM the lab boots (whole
	// lines). Nil sends them nowhere; they are still kept in each
	// machine's console.log.
	Console io.Writer
	// Logger gets bootyd's own logs, the VM harness's and the lab's
	// (including each QEMU command line). Nil discards them.
	Logger *slog.Logger
	// ExitGrace bounds how long WaitOutcome waits for QEMU to exit once the
	// outcome is recorded; default DefaultExitGrace.
	ExitGrace time.Duration
}

// DefaultExitGrace is LabOptions.ExitGrace's default: long enough for a
// failure delay plus a poweroff under TCG.
const DefaultExitGrace = 90 * time.Second

// Lab is one bootyd serving one scenario's machines. Its methods are safe
// for concurrent use.
type Lab struct {
	opts    LabOptions
	log     *slog.Logger
	dir     string
	tempDir bool
	srv     *server.Server
	db      *bmdb.DB
	port    int
	stop    context.CancelFunc
	served  chan error

	mu       sync.Mutex
	machines []*Machine
	closed   bool
}

// NewLab creates the lab's directories, starts bootyd on 127.0.0.1:0 and
// returns once it accepts connections. It does not enter a network
// namespace: call vm.EnterNetNS first when VMs will be booted. It fails,
// leaving nothing running, when a directory cannot be made, FilesDir is
// not a directory, or the listener cannot be opened.
func NewLab(opts LabOptions) (*Lab, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if opts.ExitGrace <= 0 {
		opts.ExitGrace = DefaultExitGrace
	}
	l := &Lab{opts: opts, log: opts.Logger, dir: opts.Dir}
	if l.dir == "" {
		d, err := os.MkdirTemp("", "booty-lab-")
		if err != nil {
			return nil, fmt.Errorf("new lab: create temp dir: %w", err)
		}
		l.dir, l.tempDir = d, true
	}
	fail := func(err error) (*Lab, error) {
		if l.tempDir {
			os.RemoveAll(l.dir)
		}
		return nil, fmt.Errorf("new lab: %w", err)
	}
	for _, d := range []string{l.ConfigDir(), l.StateDir(), filepath.Join(l.dir, "machines")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(fmt.Errorf("create %s: %w", d, err))
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(fmt.Errorf("listen on 127.0.0.1: %w", err))
	}
	l.port = ln.Addr().(*net.TCPAddr).Port
	db, err := bmdb.Open(context.Background(), filepath.Join(l.StateDir(), "bmdb.db"), bmdb.WithLogger(opts.Logger.With("component", "bmdb")))
	if err != nil {
		ln.Close()
		return fail(err)
	}
	l.db = db
	srv, err := server.New(server.Options{
		DB:              db,
		OperatorTokens:  []string{OperatorToken},
		AutoDiscover:    true,
		ConfigDir:       l.ConfigDir(),
		FilesDir:        opts.FilesDir,
		StateDir:        l.StateDir(),
		PublicURL:       l.GuestURL(),
		IPXECmdline:     server.DefaultIPXECmdline + " " + InsecureHTTP,
		Output:          opts.Output,
		Logger:          opts.Logger.With("component", "bootyd"),
		ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		ln.Close()
		db.Close()
		return fail(err)
	}
	l.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	l.served = make(chan error, 1)
	go func() { l.served <- srv.Serve(ctx, ln) }()
	l.log.Info("lab: bootyd listening", "addr", ln.Addr().String(), "guest_url", l.GuestURL(),
		"files", opts.FilesDir, "dir", l.dir)
	return l, nil
}

// NewLabT is NewLab for a test: bootyd's human output and all logs go to
// t.Output() unless opts set them, Dir defaults to t.TempDir(), a failure is
// fatal, and a cleanup closes the lab (killing its VMs).
func NewLabT(t testing.TB, opts LabOptions) *Lab {
	t.Helper()
	if opts.Output == nil {
		opts.Output = t.Output()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	l, err := NewLab(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return l
}

// Close kills every VM the lab booted that still runs, stops bootyd (waiting
// for requests in flight, bounded) and removes the lab's directory when
// NewLab made it. It returns the first error; calling it again does nothing.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	ms := append([]*Machine(nil), l.machines...)
	l.mu.Unlock()

	var errs []error
	for _, m := range ms {
		if g := m.guestVM(); g != nil {
			if err := g.Kill(); err != nil {
				errs = append(errs, fmt.Errorf("close lab: machine %s: %w", m.MAC, err))
			}
		}
	}
	l.stop()
	if err := <-l.served; err != nil {
		errs = append(errs, fmt.Errorf("close lab: %w", err))
	}
	if err := l.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close lab: %w", err))
	}
	if l.tempDir {
		if err := os.RemoveAll(l.dir); err != nil {
			errs = append(errs, fmt.Errorf("close lab: remove %s: %w", l.dir, err))
		}
	}
	return errors.Join(errs...)
}

// OperatorToken is the operator API token of every lab's bootyd (a test
// secret, nothing else).
const OperatorToken = "lab-operator-token-0123456789"

// DB returns the lab's Bare Metal Database.
func (l *Lab) DB() *bmdb.DB { return l.db }

// Server returns the in-process bootyd, for Machine, Machines and WaitFor.
func (l *Lab) Server() *server.Server { return l.srv }

// Dir returns the lab's directory.
func (l *Lab) Dir() string { return l.dir }

// ConfigDir returns the directory bootyd reads machine configs from.
func (l *Lab) ConfigDir() string { return filepath.Join(l.dir, "configs") }

// StateDir returns the directory bootyd persists machine state in.
func (l *Lab) StateDir() string { return filepath.Join(l.dir, "state") }

// Port returns the TCP port bootyd listens on, on 127.0.0.1.
func (l *Lab) Port() int { return l.port }

// HostURL returns bootyd's URL as the host sees it: http://127.0.0.1:<port>.
func (l *Lab) HostURL() string { return "http://127.0.0.1:" + strconv.Itoa(l.port) }

// InsecureHTTP is the kernel parameter that lets the agent talk to the
// lab's plain-HTTP bootyd (it refuses http:// without it); every guest
// command line the lab builds carries it, iPXE's included.
const InsecureHTTP = provider.CmdlineInsecureHTTP + "=1"

// GuestURL returns bootyd's URL as a guest sees it: http://10.0.2.2:<port>.
func (l *Lab) GuestURL() string { return "http://" + GuestHost + ":" + strconv.Itoa(l.port) }

// FileURL returns the guest-side URL of name, a path under FilesDir.
func (l *Lab) FileURL(name string) string {
	return l.GuestURL() + "/files/" + strings.TrimLeft(name, "/")
}

// FilePath returns the host path of name under FilesDir.
func (l *Lab) FilePath(name string) string { return filepath.Join(l.opts.FilesDir, name) }

// Checksum returns "sha256:HEX" for name as listed in FilesDir/SHA256SUMS
// (sha256sum format). It fails when the file cannot be read or does not
// list name.
func (l *Lab) Checksum(name string) (string, error) {
	return checksumFromSums(filepath.Join(l.opts.FilesDir, ChecksumsFile), name)
}

// checksumFromSums looks name up in a sha256sum-format file.
func checksumFromSums(path, name string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read checksums: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		file = strings.TrimPrefix(strings.TrimLeft(file, " "), "*")
		file = strings.TrimPrefix(file, "./")
		if file == name && len(sum) == 64 {
			return "sha256:" + strings.ToLower(sum), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read checksums %s: %w", path, err)
	}
	return "", fmt.Errorf("checksums %s: no sha256 for %s", path, name)
}

// DemoConfig returns the config of the standard scenario: provision
// demo.img.zst from the lab (checksums of the compressed and the raw image
// from SHA256SUMS) onto /dev/vda, power off when done, power off 5s after a
// failure. The server token is left empty: AddMachine makes one. It fails
// when SHA256SUMS does not list both images.
func (l *Lab) DemoConfig() (*config.MachineConfig, error) {
	zsum, err := l.Checksum(DemoImageZst)
	if err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	rawSum, err := l.Checksum(DemoImage)
	if err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	no := false
	return &config.MachineConfig{
		APIVersion: config.APIVersion,
		Mode:       config.ModeProvision,
		Image: config.ImageSpec{
			URL:           l.FileURL(DemoImageZst),
			Checksum:      zsum,
			ImageChecksum: rawSum,
		},
		// The demo image is a GPT with filesystems, not a bootable OS:
		// write it as it is (no growth, no EFI entry) so the disk can be
		// compared with it byte for byte.
		Disk:         config.DiskSpec{Device: "/dev/vda", RootPartitionSize: config.RootPartitionKeep},
		EFIBootEntry: &no,
		Handoff:      config.HandoffPoweroff,
		OnFailure: config.FailureSpec{
			Action: config.FailurePoweroff,
			Delay:  config.Duration{Duration: DefaultFailureDelay},
		},
	}, nil
}
