//go:build e2e

package bmcvm

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/test/vm"
)

// newMachine returns a QEMU machine booting the prebuilt kernel and
// initramfs; booty.debug=hold keeps the agent, which finds no config,
// holding instead of powering off, so only the BMC ends QEMU.
func newMachine(t *testing.T) *Machine {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, err := New(vm.Config{
		Kernel:     vm.Artifact(t, "BOOTY_KERNEL", "vmlinuz"),
		Initrd:     vm.Artifact(t, "BOOTY_INITRD", "initramfs.img"),
		Append:     "booty.debug=hold",
		Memory:     512,
		Timeout:    10 * time.Minute,
		Console:    prefixed{t: t},
		ConsoleLog: filepath.Join(vm.ArtifactDir(t), "console.log"),
		Logger:     log,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.GracefulTimeout = 5 * time.Second
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

type prefixed struct{ t *testing.T }

func (p prefixed) Write(b []byte) (int, error) {
	p.t.Output().Write(append([]byte("console: "), b...))
	return len(b), nil
}

// qemuProcesses returns the pids and command lines of the processes whose
// arguments hold m's QMP socket: the QEMU of m, seen by the kernel.
func qemuProcesses(t *testing.T, m *Machine) map[int][]string {
	t.Helper()
	want := "unix:" + m.QMPSocket() + ",server=on,wait=off"
	procs := map[int][]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if slices.Contains(args, want) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			procs[pid] = args
		}
	}
	return procs
}

// onlyProcess returns the pid and arguments of m's one QEMU process and
// fails the test unless there is exactly one.
func onlyProcess(t *testing.T, m *Machine) (int, []string) {
	t.Helper()
	procs := qemuProcesses(t, m)
	if len(procs) != 1 {
		t.Fatalf("%d qemu processes for %s, want 1: %v", len(procs), m.QMPSocket(), procs)
	}
	for pid, args := range procs {
		return pid, args
	}
	return 0, nil
}

// waitNoProcess waits (bounded) until m has no QEMU process left.
func waitNoProcess(t *testing.T, m *Machine) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(qemuProcesses(t, m)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("qemu still running a minute after power off: %v", qemuProcesses(t, m))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var linuxBanner = regexp.MustCompile(`Linux version \d`)

// expectBoot waits (bounded) for the kernel's banner on the console of
// m's current VM.
func expectBoot(t *testing.T, m *Machine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if _, err := m.VM().Expect(ctx, linuxBanner); err != nil {
		t.Fatalf("guest did not boot: %v", err)
	}
}

func driverOptions(t *testing.T) bmc.Options {
	return bmc.Options{
		PowerTimeout:   2 * time.Minute,
		SoftOffTimeout: 2 * time.Minute,
		PollInterval:   200 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
}

// TestRedfishPowersQEMU: through the Redfish test BMC, the Redfish driver
// powers a QEMU VM on with a one-time PXE boot (QEMU runs with -boot
// order=n and the guest kernel boots), restarts it (a new QEMU without the
// spent override), and powers it off softly (the agent ignores ACPI, so
// QEMU is killed after the machine's bound) and hard: each time the QEMU
// process is checked in /proc.
func TestRedfishPowersQEMU(t *testing.T) {
	m := newMachine(t)
	rf, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: m, Username: "admin", Password: "redfish-pw", Logger: m.logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rf.Close() })
	o := driverOptions(t)
	o.RootCAs = rf.CertPool()
	d, err := bmc.New(rf.Address(), bmc.Credentials{Username: "admin", Password: "redfish-pw"}, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if len(qemuProcesses(t, m)) != 0 {
		t.Fatal("qemu runs before power on")
	}

	if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DevicePXE}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := d.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	pid1, args := onlyProcess(t, m)
	t.Logf("power on: qemu pid %d after %s", pid1, time.Since(start).Round(time.Millisecond))
	if i := slices.Index(args, "-boot"); i < 0 || i+1 >= len(args) || args[i+1] != "order=n" {
		t.Fatalf("qemu of a pxe boot lacks -boot order=n: %q", args)
	}
	expectBoot(t, m)
	if s, err := d.PowerState(ctx); err != nil || s != bmc.PowerOn {
		t.Fatalf("PowerState = %s, %v; want On", s, err)
	}

	// ForceRestart is off then on: a new QEMU, without the spent
	// one-time override.
	if err := d.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rf.WaitPower(); err != nil {
		t.Fatal(err)
	}
	pid2, args := onlyProcess(t, m)
	if pid2 == pid1 {
		t.Fatalf("restart kept qemu pid %d", pid1)
	}
	if slices.Contains(args, "-boot") {
		t.Fatalf("qemu after the one-time pxe boot still has -boot: %q", args)
	}
	expectBoot(t, m)

	start = time.Now()
	if err := d.PowerOff(ctx, bmc.OffSoft); err != nil {
		t.Fatal(err)
	}
	t.Logf("soft power off took %s (acpi, then kill after %s)", time.Since(start).Round(time.Millisecond), m.GracefulTimeout)
	waitNoProcess(t, m)
	if s, err := d.PowerState(ctx); err != nil || s != bmc.PowerOff {
		t.Fatalf("PowerState = %s, %v; want Off", s, err)
	}

	if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DeviceDisk, Persistent: true}); err != nil {
		t.Fatal(err)
	}
	if err := d.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	_, args = onlyProcess(t, m)
	if i := slices.Index(args, "-boot"); i < 0 || args[i+1] != "order=c" {
		t.Fatalf("qemu of a disk boot lacks -boot order=c: %q", args)
	}
	if err := d.PowerOff(ctx, bmc.OffHard); err != nil {
		t.Fatal(err)
	}
	waitNoProcess(t, m)
	if got := m.Boots(); !slices.Equal(got, []bmc.Device{bmc.DevicePXE, "", bmc.DeviceDisk}) {
		t.Fatalf("boots = %q, want [pxe, firmware order, disk]", got)
	}
}

// TestIPMIToolPowersQEMU: the real ipmitool, through the IPMI test BMC,
// powers a QEMU VM on, resets it through QMP system_reset (the same QEMU
// process boots the kernel again) and powers it off.
func TestIPMIToolPowersQEMU(t *testing.T) {
	bin, err := exec.LookPath("ipmitool")
	if err != nil {
		t.Fatalf("ipmitool not found (install ipmitool, see hack/deps.sh): %v", err)
	}
	m := newMachine(t)
	s, err := bmcsim.NewIPMI(bmcsim.IPMIConfig{Machine: m, Username: "admin", Password: "ipmi-pw", Logger: m.logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ipmitool := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		full := append([]string{"-I", "lanplus", "-H", "127.0.0.1", "-p", strconv.Itoa(s.Port()), "-U", "admin", "-P", "ipmi-pw"}, args...)
		out, err := exec.CommandContext(ctx, bin, full...).CombinedOutput()
		if err != nil {
			t.Fatalf("ipmitool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(bytes.TrimSpace(out))
	}

	ipmitool("chassis", "bootdev", "disk", "options=persistent")
	ipmitool("chassis", "power", "on")
	if err := s.WaitPower(); err != nil {
		t.Fatal(err)
	}
	pid, args := onlyProcess(t, m)
	if i := slices.Index(args, "-boot"); i < 0 || args[i+1] != "order=c" {
		t.Fatalf("qemu lacks -boot order=c: %q", args)
	}
	if got := ipmitool("chassis", "power", "status"); got != "Chassis Power is on" {
		t.Fatalf("power status %q", got)
	}
	expectBoot(t, m)

	ipmitool("chassis", "power", "reset")
	if err := s.WaitPower(); err != nil {
		t.Fatal(err)
	}
	expectBoot(t, m) // a second banner, from the same process
	if pid2, _ := onlyProcess(t, m); pid2 != pid {
		t.Fatalf("reset replaced qemu pid %d by %d; want system_reset in place", pid, pid2)
	}

	ipmitool("chassis", "power", "off")
	if err := s.WaitPower(); err != nil {
		t.Fatal(err)
	}
	waitNoProcess(t, m)
	if got := ipmitool("chassis", "power", "status"); got != "Chassis Power is off" {
		t.Fatalf("power status %q", got)
	}
}
