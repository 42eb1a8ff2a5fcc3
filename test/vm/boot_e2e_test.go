//go:build e2e

package vm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
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

// helloInitramfs compiles testdata/hello statically and packs it as /init
// into a newc cpio archive, with /dev/console for the kernel to open.
func helloInitramfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "init")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hello init: %v\n%s", err, out)
	}
	initBin, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := cpio.NewDedupWriter(cpio.Newc.Writer(&buf))
	recs := []cpio.Record{
		cpio.Directory("dev", 0o755),
		cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.StaticRecord(initBin, cpio.Info{Name: "init", Mode: cpio.S_IFREG | 0o755}),
	}
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
	tests := []struct {
		name string
		uefi bool
	}{
		{"bios", false},
		{"uefi", true},
	}
	kernel := hostKernel(t)
	initrd := helloInitramfs(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			v := StartT(t, Config{
				Kernel:  kernel,
				Initrd:  initrd,
				Append:  "quiet booty.test=hello",
				UEFI:    tt.uefi,
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
