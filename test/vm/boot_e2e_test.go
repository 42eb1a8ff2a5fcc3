//go:build e2e

package vm

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/u-root/mkuimage/cpio"
)

// TestMain runs the e2e tests of this package in a network namespace of
// their own, as the booty e2e tests do.
func TestMain(m *testing.M) {
	EnterNetNS()
	os.Exit(m.Run())
}

// hostKernel returns $BOOTY_E2E_KERNEL or the newest /boot/vmlinuz-*.
func hostKernel(t *testing.T) string {
	t.Helper()
	if k := os.Getenv("BOOTY_E2E_KERNEL"); k != "" {
		return k
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		t.Fatal("no kernel: /boot/vmlinuz-* is missing (install linux-image-amd64, see hack/deps.sh) and BOOTY_E2E_KERNEL is unset")
	}
	sort.Strings(ks)
	return ks[len(ks)-1]
}

// testInitramfs compiles testdata/PROG statically and packs it as /init
// into a newc cpio archive, with /dev/console for the kernel to open and,
// when modules are named, those .ko files of kernel's modules directory
// under /modules with their load order in /modules/order.
func testInitramfs(t *testing.T, prog, kernel string, modules []string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "init")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/"+prog)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s init: %v\n%s", prog, err, out)
	}
	initBin, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	recs := []cpio.Record{
		cpio.Directory("dev", 0o755),
		cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.StaticRecord(initBin, cpio.Info{Name: "init", Mode: cpio.S_IFREG | 0o755}),
	}
	if len(modules) > 0 {
		ver := strings.TrimPrefix(filepath.Base(kernel), "vmlinuz-")
		modDir := filepath.Join("/lib/modules", ver)
		var order []string
		for _, m := range modules {
			matches, _ := filepath.Glob(filepath.Join(modDir, "kernel", "*", "*", m+".ko"))
			more, _ := filepath.Glob(filepath.Join(modDir, "kernel", "*", "*", "*", m+".ko"))
			matches = append(matches, more...)
			if len(matches) != 1 {
				t.Fatalf("module %s for kernel %s: found %q in %s (install linux-image-amd64)", m, ver, matches, modDir)
			}
			ko, err := os.ReadFile(matches[0])
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, cpio.StaticRecord(ko, cpio.Info{Name: "modules/" + m + ".ko", Mode: cpio.S_IFREG | 0o644}))
			order = append(order, m+".ko")
		}
		recs = append(recs, cpio.StaticFile("modules/order", strings.Join(order, "\n")+"\n", 0o644))
	}
	var buf bytes.Buffer
	w := cpio.NewDedupWriter(cpio.Newc.Writer(&buf))
	if err := cpio.WriteRecordsAndDirs(w, recs); err != nil {
		t.Fatalf("write initramfs: %v", err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		t.Fatalf("write initramfs trailer: %v", err)
	}
	p := filepath.Join(dir, "initramfs.cpio")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBootHello proves the harness: a real kernel boots a tiny initramfs
// whose /init prints hello and the command line, then powers off.
func TestBootHello(t *testing.T) {
	kernel := hostKernel(t)
	initrd := testInitramfs(t, "hello", kernel, nil)
	// Every disk interface and option, so QEMU itself checks the arguments
	// the builder makes for them.
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.img")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	rw := filepath.Join(dir, "rw.img")
	if err := os.WriteFile(rw, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	qcow, qcow2 := filepath.Join(dir, "disk.qcow2"), filepath.Join(dir, "disk2.qcow2")
	for _, p := range []string{qcow, qcow2} {
		if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "16M").CombinedOutput(); err != nil {
			t.Fatalf("qemu-img create: %v\n%s", err, out)
		}
	}
	conf := filepath.Join(dir, "blkdebug.conf")
	if err := os.WriteFile(conf, []byte("[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	allDisks := []Disk{
		{Path: raw, ReadOnly: true},
		{Path: qcow, Format: "qcow2", Interface: IfaceNVMe},
		{Path: raw, Interface: IfaceSCSI, ReadOnly: true, Serial: "S1"},
		{Path: raw, Interface: IfaceSCSI, CDROM: true},
		{Path: rw, Interface: IfaceIDE, Serial: "IDE0"},
		{Path: raw, CDROM: true},
		{Path: raw, Interface: IfaceUSB, ReadOnly: true},
		{Path: qcow2, Format: "qcow2", BlkDebugConfig: conf},
	}
	tests := []struct {
		name  string
		uefi  bool
		disks []Disk
	}{
		{"bios", false, nil},
		{"uefi", true, nil},
		{"all disk interfaces", false, allDisks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			v := StartT(t, Config{
				Kernel:  kernel,
				Initrd:  initrd,
				Append:  "quiet booty.test=hello",
				UEFI:    tt.uefi,
				Disks:   tt.disks,
				Memory:  512,
				Timeout: 5 * time.Minute,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			if _, err := v.Expect(ctx, regexp.MustCompile(`^hello from booty vm harness`)); err != nil {
				t.Fatal(err)
			}
			hello := time.Since(start)
			line, err := v.Expect(ctx, regexp.MustCompile(`^cmdline: `))
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`console=ttyS0,115200 panic=-1 quiet booty.test=hello`).MatchString(line) {
				t.Errorf("guest cmdline = %q", line)
			}
			if err := v.Wait(ctx); err != nil {
				t.Fatalf("guest did not power off cleanly: %v", err)
			}
			if tt.uefi {
				if fi, err := os.Stat(v.VarsPath()); err != nil || fi.Size() == 0 {
					t.Errorf("uefi vars %s: %v", v.VarsPath(), err)
				}
			}
			t.Logf("%s boot under %s: hello after %s, powered off after %s", tt.name, v.Accel(), hello.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestBootNetAndDisk proves what the booty e2e tests rely on: the guest,
// on user networking inside this test's network namespace, reaches an HTTP
// server of the test on 127.0.0.1 as 10.0.2.2; disks appear in order with
// their serials; a read-only disk is read-only; blkdebug turns reads of a
// disk into I/O errors.
func TestBootNetAndDisk(t *testing.T) {
	if !InNetNS() {
		t.Fatal("TestMain did not enter a network namespace")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello-from-test path=%s from=%s\n", r.URL.Path, strings.Split(r.RemoteAddr, ":")[0])
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	img := filepath.Join(dir, "gpt.img")
	data := make([]byte, 1<<20)
	copy(data[512:], "EFI PART")
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.img")
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "blkdebug.conf")
	if err := os.WriteFile(conf, []byte("[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	kernel := hostKernel(t)
	initrd := testInitramfs(t, "probe", kernel, []string{
		"virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci",
		"failover", "net_failover", "virtio_net", "virtio_blk",
	})
	start := time.Now()
	v := StartT(t, Config{
		Kernel: kernel,
		Initrd: initrd,
		Append: fmt.Sprintf("quiet probe.url=http://10.0.2.2:%d/ping", port),
		Net:    true,
		MAC:    "52:54:00:b0:07:01",
		Disks: []Disk{
			{Path: img, Serial: "GOOD0", ReadOnly: true},
			{Path: bad, Serial: "BAD1", BlkDebugConfig: conf},
		},
		Memory:  512,
		Timeout: 5 * time.Minute,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	expect := func(re string) []string {
		t.Helper()
		m, err := v.ExpectSubmatch(ctx, regexp.MustCompile(re))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	expect(`^probe: mac 52:54:00:b0:07:01$`)
	m := expect(`^http: (\d+) (.*)$`)
	if m[1] != "200" || m[2] != "hello-from-test path=/ping from=127.0.0.1" {
		t.Errorf("guest http answer = %q", m[0])
	}
	expect(`^disk vda serial=GOOD0 ro=1 sector1="EFI PART"$`)
	expect(`^disk vdb serial=BAD1 ro=0 error: .*input/output error$`)
	if err := v.Wait(ctx); err != nil {
		t.Fatalf("guest did not power off cleanly: %v", err)
	}
	if hits.Load() == 0 {
		t.Error("the test's HTTP server saw no request")
	}
	t.Logf("net and disk boot under %s took %s", v.Accel(), time.Since(start).Round(time.Millisecond))
}
