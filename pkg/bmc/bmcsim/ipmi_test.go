package bmcsim

import (
	"context"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// ipmitool runs the real ipmitool over lanplus against s and returns its
// output; the test fails when ipmitool is missing (install ipmitool, see
// hack/deps.sh) or fails.
func ipmitool(t *testing.T, s *IPMI, password string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("ipmitool")
	if err != nil {
		t.Fatalf("ipmitool not found (install ipmitool, see hack/deps.sh): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	full := append([]string{"-I", "lanplus", "-H", "127.0.0.1", "-p", strconv.Itoa(s.Port()), "-U", "admin", "-P", password, "-R", "2", "-N", "2"}, args...)
	out, err := exec.CommandContext(ctx, bin, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("ipmitool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestIPMIToolDrivesMachine drives the IPMI BMC with the real ipmitool:
// power status, on, off, boot device, and checks the machine behind it.
func TestIPMIToolDrivesMachine(t *testing.T) {
	m := &MemMachine{}
	s, err := NewIPMI(IPMIConfig{Machine: m, Username: "admin", Password: "s3cret-pw", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	if got := ipmitool(t, s, "s3cret-pw", "chassis", "power", "status"); got != "Chassis Power is off" {
		t.Fatalf("power status = %q, want off", got)
	}
	ipmitool(t, s, "s3cret-pw", "chassis", "bootdev", "pxe", "options=efiboot")
	if b := s.Boot(); b.Device != bmc.DevicePXE || b.Persistent || b.Mode != bmc.BootUEFI {
		t.Fatalf("boot override after bootdev pxe = %+v, want pxe once UEFI", b)
	}
	ipmitool(t, s, "s3cret-pw", "chassis", "power", "on")
	if err := s.WaitPower(); err != nil {
		t.Fatal(err)
	}
	if m.State() != bmc.PowerOn {
		t.Fatalf("machine is %s after power on, want On", m.State())
	}
	if got := ipmitool(t, s, "s3cret-pw", "chassis", "power", "status"); got != "Chassis Power is on" {
		t.Fatalf("power status = %q, want on", got)
	}
	if boots := m.Boots(); len(boots) != 1 || boots[0] != bmc.DevicePXE {
		t.Fatalf("boots = %q, want [pxe]", boots)
	}
	if b := s.Boot(); b.Device != "" {
		t.Fatalf("one-time override still set after the boot: %+v", b)
	}
	ipmitool(t, s, "s3cret-pw", "chassis", "bootdev", "disk", "options=persistent")
	if b := s.Boot(); b.Device != bmc.DeviceDisk || !b.Persistent || b.Mode != bmc.BootLegacy {
		t.Fatalf("boot override after bootdev disk persistent = %+v, want disk persistent legacy", b)
	}
	if out := ipmitool(t, s, "s3cret-pw", "chassis", "bootparam", "get", "5"); !strings.Contains(out, "Force Boot from default Hard-Drive") {
		t.Fatalf("bootparam get 5 does not show the disk override:\n%s", out)
	}
	ipmitool(t, s, "s3cret-pw", "chassis", "power", "reset")
	ipmitool(t, s, "s3cret-pw", "chassis", "power", "cycle")
	if err := s.WaitPower(); err != nil {
		t.Fatal(err)
	}
	// reset: the reset line, same device; cycle: off then on, from disk.
	if m.Resets() != 1 || m.State() != bmc.PowerOn {
		t.Fatalf("after reset and cycle: %d resets, %s; want 1, On", m.Resets(), m.State())
	}
	if boots := m.Boots(); len(boots) != 3 || boots[2] != bmc.DeviceDisk {
		t.Fatalf("boots = %q, want [pxe pxe disk]", boots)
	}
	ipmitool(t, s, "s3cret-pw", "chassis", "power", "soft")
	if err := s.WaitPower(); err != nil {
		t.Fatal(err)
	}
	if m.State() != bmc.PowerOff {
		t.Fatalf("machine is %s after power soft, want Off", m.State())
	}
	ipmitool(t, s, "s3cret-pw", "chassis", "power", "on")
	ipmitool(t, s, "s3cret-pw", "chassis", "power", "off")
	if err := s.WaitPower(); err != nil {
		t.Fatal(err)
	}
	if m.State() != bmc.PowerOff {
		t.Fatalf("machine is %s after power off, want Off", m.State())
	}
}

// TestIPMIToolWrongPassword: ipmitool with a wrong password is refused and
// the machine is not touched.
func TestIPMIToolWrongPassword(t *testing.T) {
	m := &MemMachine{}
	s, err := NewIPMI(IPMIConfig{Machine: m, Username: "admin", Password: "s3cret-pw", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	out, err := exec.Command("ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", strconv.Itoa(s.Port()), "-U", "admin", "-P", "wrong", "-R", "1", "-N", "1", "chassis", "power", "on").CombinedOutput()
	if err == nil {
		t.Fatalf("ipmitool with a wrong password succeeded:\n%s", out)
	}
	s.WaitPower()
	if m.State() != bmc.PowerOff {
		t.Fatal("machine powered on by a refused session")
	}
}
