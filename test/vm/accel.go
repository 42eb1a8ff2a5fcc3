package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// AccelEnv names the environment variable that overrides the accelerator
// of every VM whose Config leaves Accel at AccelAuto: "auto" (or empty)
// probes, "kvm" insists on KVM and fails when the probe says it does not
// work, "tcg" uses software emulation without probing.
const AccelEnv = "BOOTY_QEMU_ACCEL"

// KernelEnv names the environment variable holding the kernel the VMs
// boot (set by make e2e and make demo); the KVM probe boots it too.
const KernelEnv = "BOOTY_KERNEL"

// DefaultProbeTimeout bounds the KVM probe: a guest that has not printed
// its line on the serial console by then counts as "KVM does not work".
const DefaultProbeTimeout = 20 * time.Second

// probeMarker is what the probe guest prints on COM1.
const probeMarker = "booty-kvm-probe-ok"

// ErrKVMUnusable is wrapped by the error Start returns when KVM was asked
// for (AccelKVM, or BOOTY_QEMU_ACCEL=kvm) and the probe found it unusable.
var ErrKVMUnusable = errors.New("kvm unusable")

// AccelArgs returns the QEMU arguments that select accel: the same for the
// probe and for every VM, so the probe tests exactly what the VMs will run.
func AccelArgs(accel Accel) ([]string, error) {
	switch accel {
	case AccelKVM:
		return []string{"-enable-kvm", "-cpu", "host"}, nil
	case AccelTCG:
		return []string{"-accel", "tcg", "-cpu", "max"}, nil
	}
	return nil, fmt.Errorf("%w: accelerator %q", ErrBadConfig, accel)
}

// ParseAccel parses an accelerator name as BOOTY_QEMU_ACCEL takes it:
// "", "auto", "kvm" or "tcg" (case-insensitive).
func ParseAccel(s string) (Accel, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return AccelAuto, nil
	case "kvm":
		return AccelKVM, nil
	case "tcg":
		return AccelTCG, nil
	}
	return AccelAuto, fmt.Errorf("%w: %s=%q: want auto, kvm or tcg", ErrBadConfig, AccelEnv, s)
}

// KVMProbe is the outcome of trying KVM on this host.
type KVMProbe struct {
	// Works is true when a guest under KVM printed its serial line in time.
	Works bool
	// Reason says why KVM is unusable ("/dev/kvm: no such file or
	// directory", QEMU's error, "no console output in 20s"); empty when it
	// works.
	Reason string
	// Probed is false when no guest was started (the device does not open).
	Probed bool
	// Took is how long the probe took.
	Took time.Duration
}

// String is the line the VM log shows: "KVM works" or "KVM unusable (...)".
func (p KVMProbe) String() string {
	if p.Works {
		return "KVM works"
	}
	return "KVM unusable (" + p.Reason + ")"
}

// ProbeKVMGuest tries KVM for real, in up to two guests, each under the
// accelerator arguments every VM gets (-enable-kvm -cpu host) and bounded by
// timeout:
//
//  1. when dev opens read-write, a one-sector guest that prints a line on
//     the serial console (it catches QEMU aborting at vCPU setup, such as
//     "failed to set MSR 0x10a");
//  2. when kernel is not empty, that Linux kernel on the VMs' machine type
//     (q35, no initrd), which must print "Linux version" on the console: a
//     host can run the real-mode guest and still hang a kernel before its
//     first line, and only this shows it.
//
// QEMU is killed (its whole process group) when the line arrived, when it
// failed, or when the bound passed. The result says why KVM does not work:
// the device error, QEMU's own error lines, or "no console output in
// <timeout>" (naming the kernel for the second guest).
func ProbeKVMGuest(ctx context.Context, qemu, dev, kernel string, timeout time.Duration) KVMProbe {
	start := time.Now()
	res := func(p KVMProbe) KVMProbe { p.Took = time.Since(start); return p }
	if dev == "" {
		dev = DefaultKVMDevice
	}
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return res(KVMProbe{Reason: err.Error()})
	}
	f.Close()

	dir, err := os.MkdirTemp("", "booty-kvm-probe-")
	if err != nil {
		return res(KVMProbe{Reason: "create probe dir: " + err.Error()})
	}
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "probe.img")
	if err := os.WriteFile(img, probeBootSector(), 0o644); err != nil {
		return res(KVMProbe{Reason: "write probe image: " + err.Error()})
	}
	p := runProbeGuest(ctx, qemu, probeArgs(img, AccelKVM), probeMarker, timeout)
	if p.Works && kernel != "" {
		p = runProbeGuest(ctx, qemu, probeKernelArgs(kernel, AccelKVM), kernelMarker, timeout)
		if !p.Works {
			p.Reason = "kernel " + kernel + ": " + p.Reason
		}
	}
	return res(p)
}

// kernelMarker is the first line a Linux kernel prints on its console.
const kernelMarker = "Linux version"

// probeKernelArgs boots kernel on the VMs' machine type with its console on
// stdout; without an initrd it panics soon after its first lines and, with
// -no-reboot, QEMU exits.
func probeKernelArgs(kernel string, accel Accel) []string {
	aa, _ := AccelArgs(accel)
	args := append([]string{"-machine", "q35", "-m", "256", "-smp", "1"}, aa...)
	return append(args, "-nodefaults", "-display", "none", "-monitor", "none", "-serial", "stdio",
		"-no-reboot", "-kernel", kernel, "-append", "console=ttyS0 panic=-1")
}

// runProbeGuest runs qemu with args until a console line holds marker, QEMU
// exits, or timeout passes; then it kills QEMU's process group.
func runProbeGuest(ctx context.Context, qemu string, args []string, marker string, timeout time.Duration) KVMProbe {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command(qemu, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return KVMProbe{Reason: "probe stdout pipe: " + err.Error()}
	}
	if err := cmd.Start(); err != nil {
		return KVMProbe{Reason: fmt.Sprintf("run %s: %v", qemu, err), Probed: true}
	}
	seen := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), marker) {
				seen <- true
				return
			}
		}
		seen <- false
	}()
	exited := make(chan error, 1)
	var ok bool
	select {
	case ok = <-seen:
		if !ok { // stdout closed: QEMU exited or closed it
			exited <- cmd.Wait()
		}
	case <-ctx.Done():
	}
	killGroup(cmd)
	var werr error
	select {
	case werr = <-exited:
	default:
		werr = cmd.Wait()
	}
	if ok {
		return KVMProbe{Works: true, Probed: true}
	}
	if msg := qemuError(stderr.String()); msg != "" {
		return KVMProbe{Reason: msg, Probed: true}
	}
	if ctx.Err() != nil {
		return KVMProbe{Reason: fmt.Sprintf("no console output in %s", timeout), Probed: true}
	}
	return KVMProbe{Reason: "qemu " + exitString(werr) + " without console output", Probed: true}
}

// probeArgs is the probe guest's QEMU command line (without the binary):
// the boot sector in img as the only disk, COM1 on stdout. It uses the pc
// machine, whose SeaBIOS boots an IDE disk within a fraction of a second
// even under TCG; what it tests is the accelerator and CPU model, which are
// those of every VM.
func probeArgs(img string, accel Accel) []string {
	aa, _ := AccelArgs(accel)
	args := append([]string{"-machine", "pc", "-m", "32", "-smp", "1"}, aa...)
	return append(args, "-nodefaults", "-display", "none", "-monitor", "none", "-serial", "stdio",
		"-no-reboot", "-drive", "file="+escapeOpt(img)+",format=raw,if=ide")
}

// killGroup kills QEMU's process group (the probe started it with Setpgid).
func killGroup(cmd *exec.Cmd) {
	if p := cmd.Process; p != nil {
		syscall.Kill(-p.Pid, syscall.SIGKILL)
		p.Kill()
	}
}

// qemuError returns QEMU's stderr as one line: its first three non-empty
// lines joined by "; ".
func qemuError(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
		if len(lines) == 3 {
			break
		}
	}
	return strings.Join(lines, "; ")
}

// probeBootSector returns a 512-byte MBR boot sector that the BIOS loads at
// 0x7c00 and that writes probeMarker and CR LF to COM1 (0x3f8), then halts:
//
//	cli; cld; xor ax,ax; mov ds,ax; mov dx,0x3f8; mov si,msg
//	loop: lodsb; test al,al; jz done; out dx,al; jmp loop
//	done: hlt; jmp done
//	msg:  db "booty-kvm-probe-ok", 13, 10, 0
func probeBootSector() []byte {
	const msgOff = 23
	code := []byte{
		0xfa, 0xfc, // cli; cld
		0x31, 0xc0, // xor ax,ax
		0x8e, 0xd8, // mov ds,ax
		0xba, 0xf8, 0x03, // mov dx,0x3f8
		0xbe, byte((0x7c00 + msgOff) & 0xff), byte((0x7c00 + msgOff) >> 8), // mov si,msg
		0xac,       // loop: lodsb
		0x84, 0xc0, // test al,al
		0x74, 0x03, // jz done
		0xee,       // out dx,al
		0xeb, 0xf8, // jmp loop
		0xf4,       // done: hlt
		0xeb, 0xfd, // jmp done
	}
	sector := make([]byte, 512)
	copy(sector, code)
	copy(sector[msgOff:], probeMarker+"\r\n\x00")
	sector[510], sector[511] = 0x55, 0xaa
	return sector
}

// accelChooser decides the accelerator and remembers each probe, so a
// process probes a (qemu, device) pair once however many VMs it starts.
type accelChooser struct {
	timeout time.Duration
	getenv  func(string) string

	mu     sync.Mutex
	probes map[[2]string]*probeOnce
}

type probeOnce struct {
	once sync.Once
	res  KVMProbe
}

var defaultChooser = &accelChooser{timeout: DefaultProbeTimeout, getenv: os.Getenv}

// ChooseAccel returns the accelerator for a VM that asks for want
// (AccelAuto: BOOTY_QEMU_ACCEL decides, and "auto" probes) and logs the
// choice with its reason. Under auto it uses KVM only when ProbeKVMGuest
// found it working, TCG otherwise. When KVM is asked for and does not work
// it fails with ErrKVMUnusable and the probe's reason: never a silent
// fallback. The probe runs once per process for each qemu and device.
func ChooseAccel(ctx context.Context, qemu, dev string, want Accel, log *slog.Logger) (Accel, error) {
	return defaultChooser.choose(ctx, qemu, dev, want, log)
}

func (c *accelChooser) probe(ctx context.Context, qemu, dev string, log *slog.Logger) KVMProbe {
	if dev == "" {
		dev = DefaultKVMDevice
	}
	c.mu.Lock()
	if c.probes == nil {
		c.probes = map[[2]string]*probeOnce{}
	}
	key := [2]string{qemu, dev}
	p := c.probes[key]
	if p == nil {
		p = &probeOnce{}
		c.probes[key] = p
	}
	c.mu.Unlock()
	p.once.Do(func() {
		// The kernel the VMs boot, when the environment names it (make e2e
		// and make demo do): the one-sector guest alone passes on hosts
		// whose KVM hangs a Linux guest before its first line.
		kernel := c.getenv(KernelEnv)
		log.Info("vm: probing KVM with a one-sector guest, then the kernel", "device", dev, "kernel", kernel, "bound", c.timeout)
		// The probe's result is shared: one caller's cancelled context must
		// not decide for everyone else.
		p.res = ProbeKVMGuest(context.WithoutCancel(ctx), qemu, dev, kernel, c.timeout)
	})
	return p.res
}

func (c *accelChooser) choose(ctx context.Context, qemu, dev string, want Accel, log *slog.Logger) (Accel, error) {
	source := "config"
	if want == AccelAuto {
		env := c.getenv(AccelEnv)
		a, err := ParseAccel(env)
		if err != nil {
			return "", err
		}
		want = a
		if env != "" {
			source = AccelEnv + "=" + env
		}
	}
	switch want {
	case AccelTCG:
		log.Info("vm: using TCG", "set by", source)
		return AccelTCG, nil
	case AccelAuto:
		p := c.probe(ctx, qemu, dev, log)
		if p.Works {
			log.Info("vm: KVM works", "device", dev, "probe", p.Took.Round(time.Millisecond))
			return AccelKVM, nil
		}
		log.Warn("vm: "+p.String()+", using TCG", "device", dev)
		return AccelTCG, nil
	case AccelKVM:
		p := c.probe(ctx, qemu, dev, log)
		if !p.Works {
			return "", fmt.Errorf("%w: KVM set by %s, but the probe found: %s (unset %s or set it to auto or tcg)", ErrKVMUnusable, source, p.Reason, AccelEnv)
		}
		log.Info("vm: KVM works", "device", dev, "set by", source)
		return AccelKVM, nil
	}
	return "", fmt.Errorf("%w: accelerator %q", ErrBadConfig, want)
}
