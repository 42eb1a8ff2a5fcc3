package bmcsim

import (
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
)

// TestPowerChangesApplyInOrder: power changes accepted in a row are applied
// one at a time in that order, and a one-time boot override is spent by
// the first power on while a persistent one stays.
func TestPowerChangesApplyInOrder(t *testing.T) {
	m := &MemMachine{}
	c := newChassis(m, 10*time.Millisecond, testLogger(t))
	c.setBoot(bmc.BootDevice{Device: bmc.DevicePXE})
	for _, a := range []action{actOn, actOffHard, actOn, actOffSoft, actOn} {
		c.apply(a)
	}
	c.wait()
	if m.State() != bmc.PowerOn {
		t.Fatalf("machine is %s after on, off, on, soft off, on; want On", m.State())
	}
	if got := m.Boots(); len(got) != 3 || got[0] != bmc.DevicePXE || got[1] != "" || got[2] != "" {
		t.Fatalf("boots = %q, want [pxe, firmware, firmware]", got)
	}
	c.setBoot(bmc.BootDevice{Device: bmc.DeviceDisk, Persistent: true})
	c.apply(actRestart)
	c.apply(actRestart)
	c.wait()
	if got := m.Boots(); len(got) != 5 || got[3] != bmc.DeviceDisk || got[4] != bmc.DeviceDisk {
		t.Fatalf("boots = %q, want two more from disk", got)
	}
	if err := c.lastError(); err != nil {
		t.Fatal(err)
	}
}

// TestNewRefusesIncompleteConfig: a test BMC without machine or
// credentials, or with IPMI credentials too long for the protocol, does
// not start.
func TestNewRefusesIncompleteConfig(t *testing.T) {
	if _, err := NewRedfish(RedfishConfig{Username: "a", Password: "b"}); err == nil || !strings.Contains(err.Error(), "start redfish bmc: machine, username and password are required") {
		t.Errorf("NewRedfish without a machine: %v", err)
	}
	if _, err := NewIPMI(IPMIConfig{Machine: &MemMachine{}, Username: "a"}); err == nil || !strings.Contains(err.Error(), "start ipmi bmc: machine, username and password are required") {
		t.Errorf("NewIPMI without a password: %v", err)
	}
	if _, err := NewIPMI(IPMIConfig{Machine: &MemMachine{}, Username: "a", Password: strings.Repeat("x", 21)}); err == nil || !strings.Contains(err.Error(), "password longer than 20") {
		t.Errorf("NewIPMI with a 21-byte password: %v", err)
	}
}
