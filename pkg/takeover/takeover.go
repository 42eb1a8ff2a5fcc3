// Package takeover is `booty takeover`: run as root on a machine that
// already runs Linux (the Initializer starts it over SSH), it fetches
// booty's agent kernel and initramfs from bootyd, verifies them, loads them
// with kexec_file_load and reboots into them, so that the agent enrolls
// with bootyd as if the machine had network-booted.
//
// In order, Run: checks its options (https server URL unless plain http was
// allowed, a PEM CA), that it runs as root and that the kernel can kexec;
// asks bootyd for GET /v1/agent/boot over TLS verified with the CA;
// downloads the kernel and initramfs into memory and checks their sizes and
// SHA-256 digests; puts before the initramfs a newc cpio archive holding
// the CA as /etc/ssl/certs/booty-takeover-ca.pem (the kernel unpacks
// concatenated archives in order; Go's system pool reads every file of
// /etc/ssl/certs, so the agent trusts bootyd's CA and keeps its bundle);
// loads both from memory files with kexec_file_load and the command line
// "booty.server=URL [booty.insecure-http=1] <bootyd's arguments>". Nothing
// on the machine changes before all of this succeeded: every failure is
// returned with the machine as it was. Then it prints OKLine on its
// output and exits 0, so that sshd sends the exit status and ends the
// session; a process it started detached (`booty takeover
// --kexec-reboot-after PID`, RebootLoaded) waits for that, syncs and
// reboots into the loaded kernel (reboot(LINUX_REBOOT_CMD_KEXEC)). Running
// services are not stopped.
package takeover

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/u-root/mkuimage/cpio"
	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/initsys"
	"github.com/booty-dev/booty/pkg/redact"
)

// OKLine is what Run prints once the agent's kernel is loaded, before it
// reboots into it; the Initializer waits for it (manager.TakeoverOK).
const OKLine = "booty takeover: ok"

// CAPath is where the prepended archive puts bootyd's CA in the agent's
// initramfs (without the leading slash).
const CAPath = "etc/ssl/certs/booty-takeover-ca.pem"

// BootPath is bootyd's route that names the agent's kernel and initramfs.
const BootPath = "/v1/agent/boot"

// Bounds of what bootyd may answer.
const (
	// MaxFileSize bounds the kernel and the initramfs each.
	MaxFileSize = 1 << 30
	// MaxCmdline is the x86 kernel's COMMAND_LINE_SIZE less its NUL.
	MaxCmdline = 2047
)

// Errors callers tell apart with errors.Is.
var (
	// ErrNotRoot: the command needs root (kexec_file_load, reboot).
	ErrNotRoot = errors.New("takeover must run as root")
	// ErrNoKexec: the running kernel cannot kexec.
	ErrNoKexec = errors.New("this machine cannot kexec")
	// ErrDigest: a download does not match what bootyd announced.
	ErrDigest = errors.New("digest mismatch")
	// ErrBadAnswer: bootyd's answer is malformed.
	ErrBadAnswer = errors.New("bad answer from bootyd")
)

// Options configure Run. Server is required; the rest have defaults.
type Options struct {
	// Server is bootyd's URL, https unless InsecureHTTP.
	Server string
	// CACert is bootyd's CA in PEM: it verifies every download and is
	// handed to the agent. Nil uses the system pool and hands nothing.
	CACert []byte
	// InsecureHTTP allows an http:// Server (and passes
	// booty.insecure-http=1 to the agent).
	InsecureHTTP bool

	// Stdout receives OKLine; default os.Stdout.
	Stdout io.Writer
	// Detach starts the process that reboots into the loaded kernel once
	// this one exited (RebootLoaded); default StartRebooter. When it
	// fails, Run reboots itself.
	Detach func() error
	// Grace is how long RebootLoaded waits after its parent exited, for
	// sshd to send the exit status; default 1 s.
	Grace time.Duration
	// Parent is the process RebootLoaded waits for (the `booty takeover`
	// that started it); 0 waits for none.
	Parent int
	// ParentExited reports whether Parent is gone (reaped by sshd);
	// default: kill(Parent, 0) fails with ESRCH.
	ParentExited func() bool
	// Log gets progress; default discards.
	Log *slog.Logger
	// Client sends the requests; nil builds one from CACert.
	Client *http.Client
	// Backoff bounds the retries of each request; zero fields default to
	// 4 attempts from 1 s.
	Backoff httpfetch.Backoff
	// Idle bounds each wait for bytes from bootyd; default 60 s.
	Idle time.Duration

	// ProcRoot and SysRoot are /proc and /sys (tests use a temp tree).
	ProcRoot, SysRoot string
	// Geteuid is os.Geteuid unless a test replaces it.
	Geteuid func() int
	// Sys holds kexec_file_load, sync and reboot; zero means
	// initsys.RealSyscalls().
	Sys initsys.Syscalls
}

func (o *Options) defaults() {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Detach == nil {
		o.Detach = StartRebooter
	}
	if o.ParentExited == nil {
		pid := o.Parent
		o.ParentExited = func() bool { return pid <= 0 || errors.Is(unix.Kill(pid, 0), unix.ESRCH) }
	}
	if o.Grace == 0 {
		o.Grace = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Backoff.Attempts == 0 {
		o.Backoff = httpfetch.Backoff{Attempts: 4, Initial: time.Second, Max: 8 * time.Second, MaxAttempts: 8}
	}
	if o.Idle <= 0 {
		o.Idle = 60 * time.Second
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.SysRoot == "" {
		o.SysRoot = "/sys"
	}
	if o.Geteuid == nil {
		o.Geteuid = os.Geteuid
	}
	if o.Sys.KexecFileLoad == nil {
		o.Sys = initsys.RealSyscalls()
	}
}

// Plan is what Prepare fetched and built: the verified kernel, the
// initramfs with the CA archive before it, and the command line.
type Plan struct {
	Boot    api.AgentBoot
	Kernel  []byte
	Initrd  []byte
	Cmdline string
}

// Run takes the machine over (see the package doc). After the OK line it
// starts the rebooter (Detach) and returns nil, so that this process exits
// 0, sshd sends the exit status and ends the session, and only then the
// rebooter replaces the kernel. When the rebooter cannot start, Run syncs
// and reboots into the kernel itself (the SSH session then drops, which
// the Initializer takes as success after the OK line). Failures before
// the OK line leave the machine as it was.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	p, err := Prepare(ctx, o)
	if err != nil {
		return err
	}
	if err := p.load(o); err != nil {
		return err
	}
	o.Log.Info("agent kernel loaded", "kernel_sha256", p.Boot.Kernel.SHA256, "initrd_sha256", p.Boot.Initrd.SHA256, "cmdline", p.Cmdline)
	if _, err := fmt.Fprintf(o.Stdout, "%s kernel=%s initrd=%s\n", OKLine, short(p.Boot.Kernel.SHA256), short(p.Boot.Initrd.SHA256)); err != nil {
		o.Sys.KexecFileLoad(-1, -1, "", unix.KEXEC_FILE_UNLOAD)
		return fmt.Errorf("takeover: print %q: %w (kexec image unloaded)", OKLine, err)
	}
	err = o.Detach()
	if err == nil {
		o.Log.Info("rebooting into the agent once this process exited")
		return nil
	}
	o.Log.Warn("cannot start the rebooter; rebooting now", "err", err)
	o.Sys.Sync()
	if err := o.Sys.Reboot(unix.LINUX_REBOOT_CMD_KEXEC); err != nil {
		return fmt.Errorf("takeover: reboot(LINUX_REBOOT_CMD_KEXEC): %w", err)
	}
	return nil
}

// RebootFlag is the hidden flag of `booty takeover` that runs RebootLoaded
// once the process of the given PID is gone.
const RebootFlag = "kexec-reboot-after"

// StartRebooter starts this executable as `takeover --kexec-reboot-after
// PID` (this process's) in a session of its own, its standard streams on
// /dev/null, and does not wait for it.
func StartRebooter() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("takeover: find this executable: %w", err)
	}
	cmd := exec.Command(exe, "takeover", "--"+RebootFlag, strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("takeover: start %s takeover --%s: %w", exe, RebootFlag, err)
	}
	return cmd.Process.Release()
}

// RebootLoaded is the rebooter: it waits (at most 30 s) for Parent to be
// gone, then Grace, checks that a kexec kernel is loaded
// (/sys/kernel/kexec_loaded is 1), syncs and reboots into it. It returns
// only on failure, or after a Reboot that returned nil (tests).
func RebootLoaded(o Options) error {
	o.defaults()
	for deadline := time.Now().Add(30 * time.Second); !o.ParentExited() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(o.Grace)
	b, err := os.ReadFile(filepath.Join(o.SysRoot, "kernel", "kexec_loaded"))
	if err != nil {
		return fmt.Errorf("takeover reboot: %w", err)
	}
	if strings.TrimSpace(string(b)) != "1" {
		return errors.New("takeover reboot: no kexec kernel is loaded (/sys/kernel/kexec_loaded is not 1)")
	}
	o.Log.Info("rebooting into the loaded kernel")
	o.Sys.Sync()
	if err := o.Sys.Reboot(unix.LINUX_REBOOT_CMD_KEXEC); err != nil {
		return fmt.Errorf("takeover reboot: reboot(LINUX_REBOOT_CMD_KEXEC): %w", err)
	}
	return nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Prepare does everything Run does before it touches the machine: checks
// the options, root and kexec support, fetches and verifies the agent's
// kernel and initramfs and builds the initramfs and command line. It
// changes nothing.
func Prepare(ctx context.Context, o Options) (*Plan, error) {
	o.defaults()
	srv, err := checkServer(o.Server, o.InsecureHTTP)
	if err != nil {
		return nil, err
	}
	if o.CACert != nil {
		if err := checkCA(o.CACert); err != nil {
			return nil, err
		}
	}
	if uid := o.Geteuid(); uid != 0 {
		return nil, fmt.Errorf("takeover: running as uid %d: %w", uid, ErrNotRoot)
	}
	if err := checkKexec(o.ProcRoot, o.SysRoot); err != nil {
		return nil, err
	}
	c := o.Client
	if c == nil {
		c, err = httpfetch.NewClient(httpfetch.ClientOptions{CACert: o.CACert, AllowHTTP: o.InsecureHTTP})
		if err != nil {
			return nil, fmt.Errorf("takeover: http client: %w", err)
		}
	} else {
		c = httpfetch.Secure(c, o.InsecureHTTP)
	}
	bootURL := srv.JoinPath(BootPath).String()
	resp, err := httpfetch.Fetch(ctx, c, o.Backoff, o.Log, "fetch agent boot files", httpfetch.Request{URL: bootURL, Limit: 64 << 10, Idle: o.Idle}, nil)
	if err != nil {
		var se *httpfetch.StatusError
		var ae api.Error
		if errors.As(err, &se) && json.Unmarshal([]byte(se.Body), &ae) == nil && ae.Error != "" {
			return nil, fmt.Errorf("takeover: ask bootyd %s for the agent: %d %s: %s", redact.URL(bootURL), se.Code, http.StatusText(se.Code), ae.Error)
		}
		return nil, fmt.Errorf("takeover: ask bootyd %s for the agent: %w", redact.URL(bootURL), err)
	}
	var boot api.AgentBoot
	dec := json.NewDecoder(bytes.NewReader(resp.Body))
	if err := dec.Decode(&boot); err != nil {
		return nil, fmt.Errorf("takeover: %s: %w: %v", redact.URL(bootURL), ErrBadAnswer, err)
	}
	p := &Plan{Boot: boot}
	files := []struct {
		name string
		f    *api.BootFile
		dst  *[]byte
	}{{"kernel", &p.Boot.Kernel, &p.Kernel}, {"initrd", &p.Boot.Initrd, &p.Initrd}}
	urls := make([]string, len(files))
	for i, f := range files {
		if urls[i], err = checkFile(srv, f.name, *f.f, o.InsecureHTTP); err != nil {
			return nil, err
		}
	}
	if strings.ContainsAny(boot.Cmdline, "\x00\r\n") {
		return nil, fmt.Errorf("takeover: %w: the kernel arguments hold a NUL or line break", ErrBadAnswer)
	}
	for i, f := range files {
		b, err := download(ctx, c, o, f.name, urls[i], *f.f)
		if err != nil {
			return nil, err
		}
		*f.dst = b
	}
	if o.CACert != nil {
		if p.Initrd, err = PrependCA(p.Initrd, o.CACert); err != nil {
			return nil, err
		}
	}
	p.Cmdline = "booty.server=" + o.Server
	if o.InsecureHTTP {
		p.Cmdline += " booty.insecure-http=1"
	}
	if a := strings.TrimSpace(boot.Cmdline); a != "" {
		p.Cmdline += " " + a
	}
	if len(p.Cmdline) > MaxCmdline {
		return nil, fmt.Errorf("takeover: kernel command line of %d bytes is over the %d the kernel takes", len(p.Cmdline), MaxCmdline)
	}
	return p, nil
}

// checkServer parses the server URL: absolute, https (or http with the
// opt-in), no blanks (it goes on the kernel command line), no query.
func checkServer(s string, insecure bool) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("takeover: no --server given")
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(s, " \t\r\n\"") {
		return nil, fmt.Errorf("takeover: --server %q is not an absolute URL without blanks or query", redact.URL(s))
	}
	if err := httpfetch.CheckURL(s, insecure); err != nil {
		return nil, fmt.Errorf("takeover: --server: %w", err)
	}
	return u, nil
}

// checkCA fails unless pemData holds at least one certificate, and only
// certificates.
func checkCA(pemData []byte) error {
	rest, n := pemData, 0
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return fmt.Errorf("takeover: CA certificate: a PEM %q block, want only CERTIFICATE", blk.Type)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("takeover: CA certificate %d: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("takeover: CA certificate: no PEM certificate found")
	}
	return nil
}

// checkKexec fails with ErrNoKexec when the kernel has no kexec
// (/sys/kernel/kexec_loaded absent) or it was turned off
// (kernel.kexec_load_disabled=1).
func checkKexec(procRoot, sysRoot string) error {
	if _, err := os.Stat(filepath.Join(sysRoot, "kernel", "kexec_loaded")); err != nil {
		return fmt.Errorf("takeover: the kernel has no kexec support (%v): %w", err, ErrNoKexec)
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "sys", "kernel", "kexec_load_disabled"))
	if err == nil && strings.TrimSpace(string(b)) == "1" {
		return fmt.Errorf("takeover: kexec is turned off (kernel.kexec_load_disabled=1, until the next boot): %w", ErrNoKexec)
	}
	return nil
}

// checkFile checks one file of the answer and returns its absolute URL,
// resolved against the server.
func checkFile(srv *url.URL, name string, f api.BootFile, insecure bool) (string, error) {
	if f.URL == "" {
		return "", fmt.Errorf("takeover: %w: no %s URL", ErrBadAnswer, name)
	}
	if f.Size <= 0 || f.Size > MaxFileSize {
		return "", fmt.Errorf("takeover: %w: %s size %d is not in 1..%d", ErrBadAnswer, name, f.Size, MaxFileSize)
	}
	if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size || strings.ToLower(f.SHA256) != f.SHA256 {
		return "", fmt.Errorf("takeover: %w: %s sha256 %q is not 64 lowercase hex digits", ErrBadAnswer, name, f.SHA256)
	}
	ref, err := url.Parse(f.URL)
	if err != nil {
		return "", fmt.Errorf("takeover: %w: %s URL: %v", ErrBadAnswer, name, err)
	}
	abs := srv.ResolveReference(ref).String()
	if err := httpfetch.CheckURL(abs, insecure); err != nil {
		return "", fmt.Errorf("takeover: %s: %w", name, err)
	}
	return abs, nil
}

// download fetches one file into memory and checks its size and digest.
func download(ctx context.Context, c *http.Client, o Options, name, u string, f api.BootFile) ([]byte, error) {
	start := time.Now()
	resp, err := httpfetch.Fetch(ctx, c, o.Backoff, o.Log, "fetch agent "+name, httpfetch.Request{URL: u, Limit: f.Size, Idle: o.Idle}, nil)
	if err != nil {
		return nil, fmt.Errorf("takeover: download %s: %w", name, err)
	}
	b := resp.Body
	if int64(len(b)) != f.Size {
		return nil, fmt.Errorf("takeover: %s %s: %d bytes, bootyd announced %d: %w", name, redact.URL(u), len(b), f.Size, ErrDigest)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
		return nil, fmt.Errorf("takeover: %s %s: sha256 %s, bootyd announced %s: %w", name, redact.URL(u), got, f.SHA256, ErrDigest)
	}
	o.Log.Info("downloaded and verified", "file", name, "bytes", len(b), "sha256", f.SHA256, "duration", time.Since(start).Round(time.Millisecond))
	return b, nil
}

// CAArchive returns a newc cpio archive (with its trailer) holding the
// directories etc, etc/ssl, etc/ssl/certs and the file CAPath with pemData,
// all owned by root.
func CAArchive(pemData []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := cpio.Newc.Writer(&buf)
	recs := []cpio.Record{
		cpio.Directory("etc", 0o755),
		cpio.Directory("etc/ssl", 0o755),
		cpio.Directory("etc/ssl/certs", 0o755),
		cpio.StaticFile(CAPath, string(pemData), 0o644),
	}
	for _, r := range recs {
		if err := w.WriteRecord(cpio.MakeReproducible(r)); err != nil {
			return nil, fmt.Errorf("takeover: write CA archive: %w", err)
		}
	}
	if err := cpio.WriteTrailer(w); err != nil {
		return nil, fmt.Errorf("takeover: write CA archive: %w", err)
	}
	return buf.Bytes(), nil
}

// PrependCA returns CAArchive(pemData), zero-padded to a multiple of 4
// bytes (where the kernel looks for the next archive), with initrd after
// it. The kernel unpacks the archives in order, as it does early microcode;
// appending would not do: bootyd's initramfs may be lz4 (legacy format),
// whose decoder takes every byte after it for lz4 and drops the CA.
func PrependCA(initrd, pemData []byte) ([]byte, error) {
	a, err := CAArchive(pemData)
	if err != nil {
		return nil, err
	}
	pad := (4 - len(a)%4) % 4
	out := make([]byte, 0, len(a)+pad+len(initrd))
	out = append(out, a...)
	out = append(out, make([]byte, pad)...)
	return append(out, initrd...), nil
}

// load puts the kernel and initramfs into memory files and hands them to
// kexec_file_load with the command line.
func (p *Plan) load(o Options) error {
	kfd, err := memFile("booty-kernel", p.Kernel)
	if err != nil {
		return err
	}
	defer unix.Close(kfd)
	ifd, err := memFile("booty-initrd", p.Initrd)
	if err != nil {
		return err
	}
	defer unix.Close(ifd)
	if err := o.Sys.KexecFileLoad(kfd, ifd, p.Cmdline, 0); err != nil {
		hint := ""
		switch {
		case errors.Is(err, unix.EPERM):
			hint = " (kernel lockdown or kexec_load_disabled?)"
		case errors.Is(err, unix.EKEYREJECTED), errors.Is(err, unix.EBADMSG):
			hint = " (the kernel requires a signed kernel image)"
		case errors.Is(err, unix.ENOSYS):
			hint = " (no kexec_file_load in this kernel)"
		}
		return fmt.Errorf("takeover: kexec_file_load of booty's kernel: %w%s: %w", err, hint, ErrNoKexec)
	}
	return nil
}

// memFile returns a memory file (memfd) holding b.
func memFile(name string, b []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("takeover: memfd_create %s: %w", name, err)
	}
	for off := 0; off < len(b); {
		n, err := unix.Write(fd, b[off:])
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("takeover: write %s to memory: %w", name, err)
		}
		off += n
	}
	return fd, nil
}
