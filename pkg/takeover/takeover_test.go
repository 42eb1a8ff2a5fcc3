package takeover_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/u-root/mkuimage/cpio"
	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/initsys"
	"github.com/booty-dev/booty/pkg/server"
	"github.com/booty-dev/booty/pkg/takeover"
)

// bootyd is a real bootyd over TLS (httptest's certificate, which is its
// own CA) serving a kernel and an initramfs from a temp files directory.
type bootyd struct {
	url      string
	caPEM    []byte
	files    string
	kernel   []byte
	initrd   []byte
	requests atomic.Int32
	// tamper, when set, rewrites every answer of /v1/agent/boot.
	tamper func(*api.AgentBoot)
}

// newBootyd starts it over TLS; public makes its answers absolute URLs.
func newBootyd(t *testing.T, public bool) *bootyd { return startBootyd(t, public, true) }

// startBootyd starts it over TLS or plain http.
func startBootyd(t *testing.T, public, useTLS bool) *bootyd {
	t.Helper()
	b := &bootyd{files: t.TempDir()}
	b.kernel = bytes.Repeat([]byte("KERNEL\x00\x01"), 64<<10) // 512 KiB
	b.initrd = bytes.Repeat([]byte("initramfs"), 111)         // 999 bytes: not a multiple of 4
	for name, data := range map[string][]byte{server.DefaultIPXEKernel: b.kernel, server.DefaultIPXEInitrd: b.initrd} {
		if err := os.WriteFile(filepath.Join(b.files, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var h atomic.Value
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		inner := h.Load().(http.Handler)
		if r.URL.Path != takeover.BootPath || b.tamper == nil {
			inner.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		var ab api.AgentBoot
		if err := json.Unmarshal(rec.Body.Bytes(), &ab); err != nil {
			t.Errorf("bootyd's answer %q: %v", rec.Body.Bytes(), err)
		}
		b.tamper(&ab)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(ab)
	}))
	if useTLS {
		ts.StartTLS()
		b.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	b.url = ts.URL
	db, err := bmdb.Open(context.Background(), filepath.Join(t.TempDir(), "bmdb.db"), bmdb.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	opts := server.Options{DB: db, FilesDir: b.files, IPXECmdline: "console=ttyS0,115200 quiet", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	if public {
		opts.PublicURL = ts.URL
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.Store(srv.Handler())
	t.Cleanup(func() { srv.Close(context.Background()) }) // before the database closes
	return b
}

// machine records what the takeover did to the "machine", in order.
type machine struct {
	mu        sync.Mutex
	events    []string
	kernel    []byte
	initrd    []byte
	cmdline   string
	stdout    bytes.Buffer
	loadErr   error
	detachErr error
}

func (m *machine) add(e string) { m.mu.Lock(); m.events = append(m.events, e); m.mu.Unlock() }

// options are Run's options against b with every system access faked: a
// root euid, a kernel with kexec (a temp /sys and /proc), kexec_file_load
// that reads the memory files it gets, and a reboot that returns.
func (m *machine) options(t *testing.T, b *bootyd) takeover.Options {
	sys, proc := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(sys, "kernel"), 0o755)
	os.WriteFile(filepath.Join(sys, "kernel", "kexec_loaded"), []byte("0\n"), 0o444)
	os.MkdirAll(filepath.Join(proc, "sys", "kernel"), 0o755)
	os.WriteFile(filepath.Join(proc, "sys", "kernel", "kexec_load_disabled"), []byte("0\n"), 0o444)
	readFd := func(fd int) []byte {
		data, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			t.Errorf("read fd %d: %v", fd, err)
		}
		return data
	}
	return takeover.Options{
		Server: b.url, CACert: b.caPEM,
		Stdout: &m.stdout,
		Detach: func() error {
			m.add("detach")
			return m.detachErr
		},
		Grace:        time.Millisecond,
		ParentExited: func() bool { m.add("parent exited?"); return true },
		Log:          slog.New(slog.NewTextHandler(t.Output(), nil)),
		Backoff:      httpfetch.Backoff{Attempts: 2, Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 2},
		Idle:         10 * time.Second,
		ProcRoot:     proc, SysRoot: sys,
		Geteuid: func() int { return 0 },
		Sys: initsys.Syscalls{
			KexecFileLoad: func(kfd, ifd int, cmdline string, flags int) error {
				m.add(fmt.Sprintf("kexec_file_load flags=%d", flags))
				if m.loadErr != nil {
					return m.loadErr
				}
				m.kernel, m.initrd, m.cmdline = readFd(kfd), readFd(ifd), cmdline
				return nil
			},
			Sync:   func() { m.add("sync") },
			Reboot: func(cmd int) error { m.add(fmt.Sprintf("reboot %#x", uint32(cmd))); return nil },
		},
	}
}

// TestRunLoadsTheVerifiedAgent: with absolute and with relative URLs from
// bootyd, Run loads exactly bootyd's kernel, the initramfs with the CA
// archive after it (padded to 4 bytes), the command line booty.server= plus
// bootyd's arguments, prints the OK line and starts the rebooter, in that
// order; when the rebooter cannot start, it syncs and reboots with
// LINUX_REBOOT_CMD_KEXEC itself.
func TestRunLoadsTheVerifiedAgent(t *testing.T) {
	for _, public := range []bool{true, false} {
		t.Run(fmt.Sprintf("public=%v", public), func(t *testing.T) {
			b := newBootyd(t, public)
			m := &machine{}
			if err := takeover.Run(context.Background(), m.options(t, b)); err != nil {
				t.Fatal(err)
			}
			wantEvents := "[kexec_file_load flags=0 detach]"
			if got := fmt.Sprint(m.events); got != wantEvents {
				t.Errorf("events %s, want %s", got, wantEvents)
			}
			if out := m.stdout.String(); !strings.HasPrefix(out, takeover.OKLine+" ") || strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
				t.Errorf("stdout %q, want one line starting %q", out, takeover.OKLine)
			}
			if !bytes.Equal(m.kernel, b.kernel) {
				t.Errorf("loaded kernel of %d bytes differs from bootyd's %d", len(m.kernel), len(b.kernel))
			}
			if want := "booty.server=" + b.url + " console=ttyS0,115200 quiet"; m.cmdline != want {
				t.Errorf("cmdline %q, want %q", m.cmdline, want)
			}
			if !bytes.HasSuffix(m.initrd, b.initrd) {
				t.Fatalf("loaded initrd does not end with bootyd's")
			}
			head := m.initrd[:len(m.initrd)-len(b.initrd)]
			if len(head)%4 != 0 {
				t.Fatalf("CA archive of %d bytes: bootyd's initramfs must start at a multiple of 4", len(head))
			}
			checkCAArchive(t, head, b.caPEM)
		})
	}
}

// TestRunPlainHTTPWithoutCA: with --insecure-http and no CA, the agent is
// told booty.insecure-http=1 and its initramfs is bootyd's, unchanged.
func TestRunPlainHTTPWithoutCA(t *testing.T) {
	b := startBootyd(t, true, false)
	m := &machine{}
	o := m.options(t, b)
	o.CACert, o.InsecureHTTP = nil, true
	if err := takeover.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if want := "booty.server=" + b.url + " booty.insecure-http=1 console=ttyS0,115200 quiet"; m.cmdline != want {
		t.Errorf("cmdline %q, want %q", m.cmdline, want)
	}
	if !bytes.Equal(m.initrd, b.initrd) || !bytes.Equal(m.kernel, b.kernel) {
		t.Errorf("loaded %d/%d bytes, want bootyd's files unchanged", len(m.kernel), len(m.initrd))
	}
}

// checkCAArchive reads a as a newc archive: the directories to the CA and
// the CA file, root-owned, then the trailer.
func checkCAArchive(t *testing.T, a []byte, ca []byte) {
	t.Helper()
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(a)))
	if err != nil {
		t.Fatalf("read the CA archive: %v", err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s %o uid=%d", r.Name, r.Mode, r.UID))
		if r.Name == takeover.CAPath {
			data, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
			if err != nil || !bytes.Equal(data, ca) {
				t.Errorf("%s holds %q (%v), want the CA", r.Name, data, err)
			}
		}
	}
	want := "[etc 40755 uid=0 etc/ssl 40755 uid=0 etc/ssl/certs 40755 uid=0 etc/ssl/certs/booty-takeover-ca.pem 100644 uid=0]"
	if fmt.Sprint(got) != want {
		t.Errorf("archive %v, want %s", got, want)
	}
}

// TestRunRefusesAndChangesNothing: every refusal names its cause, and
// before the kernel is loaded nothing is printed, loaded or rebooted;
// refusals found locally ask bootyd nothing.
func TestRunRefusesAndChangesNothing(t *testing.T) {
	otherCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: newCA(t)})
	for _, tc := range []struct {
		name     string
		adjust   func(*takeover.Options, *bootyd, *machine)
		want     string
		is       error
		noAsking bool
		loaded   bool // kexec_file_load was tried (and failed)
	}{
		{name: "not root", adjust: func(o *takeover.Options, _ *bootyd, _ *machine) { o.Geteuid = func() int { return 1000 } },
			want: "running as uid 1000", is: takeover.ErrNotRoot, noAsking: true},
		{name: "plain http", adjust: func(o *takeover.Options, b *bootyd, _ *machine) { o.Server = "http://127.0.0.1:1" },
			want: "TLS is required", is: httpfetch.ErrInsecureHTTP, noAsking: true},
		{name: "no server", adjust: func(o *takeover.Options, _ *bootyd, _ *machine) { o.Server = "" }, want: "no --server", noAsking: true},
		{name: "blank in server", adjust: func(o *takeover.Options, b *bootyd, _ *machine) { o.Server = b.url + "/a b" }, want: "without blanks", noAsking: true},
		{name: "CA not PEM", adjust: func(o *takeover.Options, _ *bootyd, _ *machine) { o.CACert = []byte("not a certificate") },
			want: "CA certificate: no PEM certificate found", noAsking: true},
		{name: "kexec disabled", adjust: func(o *takeover.Options, _ *bootyd, _ *machine) {
			os.WriteFile(filepath.Join(o.ProcRoot, "sys", "kernel", "kexec_load_disabled"), []byte("1\n"), 0o444)
		}, want: "kernel.kexec_load_disabled=1", is: takeover.ErrNoKexec, noAsking: true},
		{name: "no kexec in kernel", adjust: func(o *takeover.Options, _ *bootyd, _ *machine) {
			os.Remove(filepath.Join(o.SysRoot, "kernel", "kexec_loaded"))
		}, want: "no kexec support", is: takeover.ErrNoKexec, noAsking: true},
		{name: "wrong CA", adjust: func(o *takeover.Options, _ *bootyd, _ *machine) { o.CACert = otherCA },
			want: "certificate signed by unknown authority"},
		{name: "initrd digest", adjust: func(_ *takeover.Options, b *bootyd, _ *machine) {
			b.tamper = func(ab *api.AgentBoot) { ab.Initrd.SHA256 = strings.Repeat("ab", 32) }
		}, want: "initrd", is: takeover.ErrDigest},
		{name: "kernel shorter than announced", adjust: func(_ *takeover.Options, b *bootyd, _ *machine) {
			b.tamper = func(ab *api.AgentBoot) { ab.Kernel.Size++ }
		}, want: "bootyd announced", is: takeover.ErrDigest},
		{name: "kernel longer than announced", adjust: func(_ *takeover.Options, b *bootyd, _ *machine) {
			b.tamper = func(ab *api.AgentBoot) { ab.Kernel.Size-- }
		}, want: "answer larger than", is: httpfetch.ErrTooLarge},
		{name: "digest not hex", adjust: func(_ *takeover.Options, b *bootyd, _ *machine) {
			b.tamper = func(ab *api.AgentBoot) { ab.Kernel.SHA256 = "sha256:xyz" }
		}, want: `kernel sha256 "sha256:xyz" is not 64 lowercase hex digits`, is: takeover.ErrBadAnswer},
		{name: "file over plain http", adjust: func(_ *takeover.Options, b *bootyd, _ *machine) {
			b.tamper = func(ab *api.AgentBoot) { ab.Initrd.URL = "http://127.0.0.1:1/files/initramfs.img" }
		}, want: "initrd: http://127.0.0.1:1/files/initramfs.img: TLS is required", is: httpfetch.ErrInsecureHTTP},
		{name: "kernel missing on bootyd", adjust: func(_ *takeover.Options, b *bootyd, _ *machine) {
			os.Remove(filepath.Join(b.files, server.DefaultIPXEKernel))
		}, want: `404 Not Found: agent kernel "vmlinuz" is not in the files directory`},
		{name: "kexec_file_load refused", adjust: func(_ *takeover.Options, _ *bootyd, m *machine) { m.loadErr = unix.EKEYREJECTED },
			want: "requires a signed kernel image", is: takeover.ErrNoKexec, loaded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBootyd(t, true)
			m := &machine{}
			o := m.options(t, b)
			tc.adjust(&o, b, m)
			err := takeover.Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("Run: %v, want an error with %q (is %v)", err, tc.want, tc.is)
			}
			t.Logf("refused: %v", err)
			wantEvents := "[]"
			if tc.loaded {
				wantEvents = "[kexec_file_load flags=0]"
			}
			if got := fmt.Sprint(m.events); got != wantEvents || m.stdout.Len() != 0 {
				t.Errorf("after the refusal: events %s (want %s), stdout %q", got, wantEvents, m.stdout.String())
			}
			if n := b.requests.Load(); tc.noAsking && n != 0 {
				t.Errorf("bootyd got %d requests, want none", n)
			}
		})
	}
}

// TestPrependCA: the CA archive comes first, zero-padded to a multiple of
// 4, and bootyd's initramfs follows unchanged whatever its length (an lz4
// initramfs would take an archive after it for lz4 data).
func TestPrependCA(t *testing.T) {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: newCA(t)})
	a, err := takeover.CAArchive(ca)
	if err != nil {
		t.Fatal(err)
	}
	at := (len(a) + 3) &^ 3
	for n := 0; n < 8; n++ {
		initrd := bytes.Repeat([]byte{0xee}, 100+n)
		got, err := takeover.PrependCA(initrd, ca)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != at+len(initrd) || !bytes.Equal(got[:len(a)], a) || !bytes.Equal(got[len(a):at], make([]byte, at-len(a))) || !bytes.Equal(got[at:], initrd) {
			t.Errorf("length %d: want the archive, zeros up to offset %d, then the initramfs", 100+n, at)
		}
	}
	checkCAArchive(t, a, ca)
}

// TestRunRebootsItselfWithoutRebooter: when the rebooter cannot start,
// Run syncs and reboots into the loaded kernel after the OK line.
func TestRunRebootsItselfWithoutRebooter(t *testing.T) {
	b := newBootyd(t, true)
	m := &machine{detachErr: errors.New("no fork today")}
	if err := takeover.Run(context.Background(), m.options(t, b)); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[kexec_file_load flags=0 detach sync reboot %#x]", uint32(unix.LINUX_REBOOT_CMD_KEXEC))
	if got := fmt.Sprint(m.events); got != want || !strings.HasPrefix(m.stdout.String(), takeover.OKLine) {
		t.Errorf("events %s, stdout %q; want %s after the OK line", got, m.stdout.String(), want)
	}
}

// TestRebootLoaded: the rebooter waits for its parent, then syncs and
// reboots with LINUX_REBOOT_CMD_KEXEC when a kernel is loaded; with none
// loaded it refuses and reboots nothing.
func TestRebootLoaded(t *testing.T) {
	m := &machine{}
	o := m.options(t, newBootyd(t, true))
	if err := takeover.RebootLoaded(o); err == nil || !strings.Contains(err.Error(), "no kexec kernel is loaded") {
		t.Fatalf("nothing loaded: %v", err)
	}
	if got := fmt.Sprint(m.events); got != "[parent exited?]" {
		t.Errorf("nothing loaded: events %s", got)
	}
	m.events = nil
	os.WriteFile(filepath.Join(o.SysRoot, "kernel", "kexec_loaded"), []byte("1\n"), 0o444)
	if err := takeover.RebootLoaded(o); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[parent exited? sync reboot %#x]", uint32(unix.LINUX_REBOOT_CMD_KEXEC))
	if got := fmt.Sprint(m.events); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

// TestRebootLoadedWaitsForTheParent: with the default check, the rebooter
// syncs only after the parent process is gone (reaped, as sshd reaps
// booty takeover).
func TestRebootLoadedWaitsForTheParent(t *testing.T) {
	m := &machine{}
	o := m.options(t, newBootyd(t, true))
	os.WriteFile(filepath.Join(o.SysRoot, "kernel", "kexec_loaded"), []byte("1\n"), 0o444)
	parent := exec.Command("sleep", "0.5")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var reaped atomic.Int64
	go func() {
		parent.Wait()
		reaped.Store(time.Now().UnixNano())
	}()
	o.Parent, o.ParentExited = parent.Process.Pid, nil
	var synced int64
	o.Sys.Sync = func() { synced = time.Now().UnixNano() }
	if err := takeover.RebootLoaded(o); err != nil {
		t.Fatal(err)
	}
	if r := reaped.Load(); r == 0 || synced < r {
		t.Errorf("synced at %d, parent reaped at %d: the rebooter did not wait", synced, r)
	}
}

func newCA(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "another CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
