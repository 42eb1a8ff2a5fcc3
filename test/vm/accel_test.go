package vm

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProbeGuestPrintsUnderTCG boots the probe's boot sector with the real
// QEMU under TCG: the guest the KVM probe relies on does print its line, so
// "no console output" under KVM means KVM, not the probe.
func TestProbeGuestPrintsUnderTCG(t *testing.T) {
	qemu, err := exec.LookPath(DefaultQEMU)
	if err != nil {
		t.Fatalf("%s not found (install qemu-system-x86, see hack/deps.sh): %v", DefaultQEMU, err)
	}
	img := filepath.Join(t.TempDir(), "probe.img")
	if err := os.WriteFile(img, probeBootSector(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(qemu, probeArgs(img, AccelTCG)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), probeMarker) {
				got <- sc.Text()
				return
			}
		}
		got <- ""
	}()
	select {
	case line := <-got:
		if line == "" {
			t.Fatalf("qemu exited without printing %q", probeMarker)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no %q from the probe guest under TCG in 30s", probeMarker)
	}
}

// fakeProbeQEMU puts a fake qemu-system-x86_64 on PATH. Each run appends
// its pid and arguments to the returned log file. Started with the probe's
// disk it runs probeBody; otherwise, as a VM, it prints "vm up" and sleeps.
func fakeProbeQEMU(t *testing.T, probeBody string) (qemu, runlog string) {
	t.Helper()
	dir := t.TempDir()
	runlog = filepath.Join(dir, "runs.log")
	script := `#!/bin/sh
echo "$$ $*" >> '` + runlog + `'
case "$*" in
*probe.img*) ` + probeBody + ` ;;
*) echo "vm up"; exec sleep 600 ;;
esac
`
	qemu = filepath.Join(dir, DefaultQEMU)
	if err := os.WriteFile(qemu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return qemu, runlog
}

// rwDevice returns a file that opens read-write, standing in for /dev/kvm.
func rwDevice(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvm")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runs returns the lines of the fake's run log.
func runs(t *testing.T, runlog string) []string {
	t.Helper()
	b, err := os.ReadFile(runlog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

const (
	fakeMSRAbort = `echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2
echo "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion \` + "`" + `ret == cpu->kvm_msr_buf->nmsrs' failed." >&2
kill -ABRT $$`
	fakeSilent = `exec sleep 600`
	fakeWorks  = `echo booty-kvm-probe-ok; exec sleep 600`
)

func newChooser(env string, timeout time.Duration) *accelChooser {
	return &accelChooser{timeout: timeout, getenv: func(k string) string {
		if k == AccelEnv {
			return env
		}
		return ""
	}}
}

func testLogger(t *testing.T) (*slog.Logger, *syncBuffer) {
	var b syncBuffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

func TestChooseAccelMSRAbort(t *testing.T) {
	qemu, runlog := fakeProbeQEMU(t, fakeMSRAbort)
	dev := rwDevice(t)
	log, logs := testLogger(t)
	accel, err := newChooser("", 20*time.Second).choose(context.Background(), qemu, dev, AccelAuto, log)
	if err != nil || accel != AccelTCG {
		t.Fatalf("choose = %q, %v; want tcg", accel, err)
	}
	if !strings.Contains(logs.String(), "KVM unusable (qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69") ||
		!strings.Contains(logs.String(), "using TCG") {
		t.Errorf("log does not give the probe's reason:\n%s", logs)
	}
	if n := len(runs(t, runlog)); n != 1 {
		t.Errorf("fake qemu ran %d times, want 1 (the probe)", n)
	}

	// Insisting on KVM fails and names the probe's finding.
	_, err = newChooser("kvm", 20*time.Second).choose(context.Background(), qemu, dev, AccelAuto, log)
	if !errors.Is(err, ErrKVMUnusable) || !strings.Contains(err.Error(), "failed to set MSR 0x10a") || !strings.Contains(err.Error(), AccelEnv+"=kvm") {
		t.Errorf("BOOTY_QEMU_ACCEL=kvm: err = %v, want ErrKVMUnusable naming the MSR error", err)
	}
}

func TestChooseAccelSilentGuestIsBounded(t *testing.T) {
	qemu, runlog := fakeProbeQEMU(t, fakeSilent)
	dev := rwDevice(t)
	log, logs := testLogger(t)
	start := time.Now()
	accel, err := newChooser("", time.Second).choose(context.Background(), qemu, dev, AccelAuto, log)
	took := time.Since(start)
	if err != nil || accel != AccelTCG {
		t.Fatalf("choose = %q, %v; want tcg", accel, err)
	}
	if took > 15*time.Second {
		t.Errorf("probe took %s, its bound is 1s", took)
	}
	if !strings.Contains(logs.String(), "KVM unusable (no console output in 1s)") {
		t.Errorf("log lacks the silent-guest reason:\n%s", logs)
	}
	r := runs(t, runlog)
	if len(r) != 1 {
		t.Fatalf("fake ran %d times: %q", len(r), r)
	}
	pid, err := strconv.Atoi(strings.Fields(r[0])[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the silent fake (pid %d) still runs after the probe: kill(0) = %v", pid, err)
	}
}

func TestChooseAccelWorkingKVM(t *testing.T) {
	qemu, runlog := fakeProbeQEMU(t, fakeWorks)
	dev := rwDevice(t)
	log, logs := testLogger(t)
	c := newChooser("", 20*time.Second)
	for i := 0; i < 2; i++ {
		accel, err := c.choose(context.Background(), qemu, dev, AccelAuto, log)
		if err != nil || accel != AccelKVM {
			t.Fatalf("choose #%d = %q, %v; want kvm", i+1, accel, err)
		}
	}
	if !strings.Contains(logs.String(), "vm: KVM works") {
		t.Errorf("log lacks 'vm: KVM works':\n%s", logs)
	}
	r := runs(t, runlog)
	if len(r) != 1 {
		t.Errorf("fake ran %d times for two choices, want one probe: %q", len(r), r)
	}
	if !strings.Contains(r[0], "-enable-kvm -cpu host") {
		t.Errorf("the probe does not use the VMs' KVM arguments: %s", r[0])
	}
	pid, _ := strconv.Atoi(strings.Fields(r[0])[0])
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the probe's qemu (pid %d) still runs: kill(0) = %v", pid, err)
	}
	// The override in the other direction: tcg even where KVM works, and
	// without probing.
	accel, err := newChooser("tcg", 20*time.Second).choose(context.Background(), qemu, dev, AccelAuto, log)
	if err != nil || accel != AccelTCG {
		t.Errorf("BOOTY_QEMU_ACCEL=tcg: %q, %v; want tcg", accel, err)
	}
	accel, err = newChooser("kvm", 20*time.Second).choose(context.Background(), qemu, dev, AccelAuto, log)
	if err != nil || accel != AccelKVM {
		t.Errorf("BOOTY_QEMU_ACCEL=kvm where KVM works: %q, %v; want kvm", accel, err)
	}
	if r := runs(t, runlog); len(r) != 2 {
		t.Errorf("fake ran %d times, want 2 (one probe per chooser that needs one, none for tcg): %q", len(r), r)
	}
}

func TestChooseAccelWithoutDevice(t *testing.T) {
	qemu, runlog := fakeProbeQEMU(t, fakeWorks)
	missing := filepath.Join(t.TempDir(), "kvm")
	log, logs := testLogger(t)
	accel, err := newChooser("", 20*time.Second).choose(context.Background(), qemu, missing, AccelAuto, log)
	if err != nil || accel != AccelTCG {
		t.Fatalf("choose = %q, %v; want tcg", accel, err)
	}
	if r := runs(t, runlog); len(r) != 0 {
		t.Errorf("qemu was started without a KVM device: %q", r)
	}
	if !strings.Contains(logs.String(), "no such file or directory") {
		t.Errorf("log does not say the device is missing:\n%s", logs)
	}
	_, err = newChooser("kvm", 20*time.Second).choose(context.Background(), qemu, missing, AccelAuto, log)
	if !errors.Is(err, ErrKVMUnusable) || !strings.Contains(err.Error(), missing) {
		t.Errorf("kvm without a device: err = %v, want ErrKVMUnusable naming %s", err, missing)
	}
}

func TestChooseAccelBadEnv(t *testing.T) {
	_, err := newChooser("hvf", time.Second).choose(context.Background(), "qemu", "", AccelAuto, slog.Default())
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), `BOOTY_QEMU_ACCEL="hvf"`) {
		t.Errorf("err = %v, want ErrBadConfig naming the value", err)
	}
}

// TestStartUsesTheChosenAccel runs Start end to end with the fake on PATH:
// the VM's command line, the one logged for reproduction, carries the
// accelerator the probe chose, and BOOTY_QEMU_ACCEL=tcg keeps -enable-kvm out.
func TestStartUsesTheChosenAccel(t *testing.T) {
	for _, tt := range []struct {
		env, want, not string
	}{
		{"", "-enable-kvm -cpu host", "-accel tcg"},
		{"tcg", "-accel tcg -cpu max", "-enable-kvm"},
	} {
		t.Run("env="+tt.env, func(t *testing.T) {
			_, runlog := fakeProbeQEMU(t, fakeWorks)
			t.Setenv(AccelEnv, tt.env)
			t.Setenv(KernelEnv, "") // the fake is no kernel (make e2e names the real one)
			log, logs := testLogger(t)
			v, err := Start(context.Background(), Config{KVMDevice: rwDevice(t), Logger: log, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Kill()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := v.ExpectString(ctx, "vm up"); err != nil {
				t.Fatal(err)
			}
			if cl := v.CommandLine(); !strings.Contains(cl, tt.want) || strings.Contains(cl, tt.not) {
				t.Errorf("command line %q: want %q, not %q", cl, tt.want, tt.not)
			}
			r := runs(t, runlog)
			if last := r[len(r)-1]; !strings.Contains(last, tt.want) {
				t.Errorf("qemu ran as %q, want %q", last, tt.want)
			}
			if !strings.Contains(logs.String(), "cmdline=") {
				t.Errorf("start log lacks the command line:\n%s", logs)
			}
		})
	}
}

// A host whose KVM runs the one-sector guest but hangs a Linux kernel
// before its first line (seen here: "KVM works", then every VM silent):
// with the VMs' kernel named, the probe boots it too and picks TCG.
func TestChooseAccelKernelHangsUnderKVM(t *testing.T) {
	dir := t.TempDir()
	runlog := filepath.Join(dir, "runs.log")
	script := `#!/bin/sh
echo "$$ $*" >> '` + runlog + `'
case "$*" in
*probe.img*) echo booty-kvm-probe-ok; exec sleep 600 ;;
*-kernel*) exec sleep 600 ;;
*) echo "vm up"; exec sleep 600 ;;
esac
`
	qemu := filepath.Join(dir, DefaultQEMU)
	if err := os.WriteFile(qemu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(dir, "vmlinuz")
	c := &accelChooser{timeout: time.Second, getenv: func(k string) string {
		if k == KernelEnv {
			return kernel
		}
		return ""
	}}
	log, logs := testLogger(t)
	accel, err := c.choose(context.Background(), qemu, rwDevice(t), AccelAuto, log)
	if err != nil || accel != AccelTCG {
		t.Fatalf("choose = %q, %v; want tcg", accel, err)
	}
	if !strings.Contains(logs.String(), "KVM unusable (kernel "+kernel+": no console output in 1s)") {
		t.Errorf("log does not name the silent kernel:\n%s", logs)
	}
	r := runs(t, runlog)
	if len(r) != 2 || !strings.Contains(r[1], "-kernel "+kernel) || !strings.Contains(r[1], "-machine q35") || !strings.Contains(r[1], "-enable-kvm -cpu host") {
		t.Errorf("want the boot sector, then the kernel under q35 with the VMs' KVM arguments: %q", r)
	}
}

// The kernel stage's command line does boot a kernel to its first line
// under TCG, so its silence under KVM means KVM.
func TestProbeKernelPrintsUnderTCG(t *testing.T) {
	qemu, err := exec.LookPath(DefaultQEMU)
	if err != nil {
		t.Fatalf("%s not found (install qemu-system-x86, see hack/deps.sh): %v", DefaultQEMU, err)
	}
	kernel := os.Getenv(KernelEnv)
	if kernel == "" {
		ks, _ := filepath.Glob("/boot/vmlinuz-*")
		if len(ks) == 0 {
			t.Fatal("no kernel: set BOOTY_KERNEL or install linux-image-amd64 (hack/deps.sh)")
		}
		kernel = ks[len(ks)-1]
	}
	if p := runProbeGuest(context.Background(), qemu, probeKernelArgs(kernel, AccelTCG), kernelMarker, 60*time.Second); !p.Works {
		t.Fatalf("kernel %s under TCG: %s", kernel, p.Reason)
	}
}
