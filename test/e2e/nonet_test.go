//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// A UEFI machine without any network does not reboot at the same pace for
// ever: the console names what was tried and why it failed, and the failure
// policy's delay doubles on the next boot, remembered in an EFI variable
// through efivarfs (the VM reboots in place, keeping its variable store).
func TestNoNetworkBacksOffAcrossReboots(t *testing.T) {
	lab := newLab(t)
	m, err := lab.AddMachine(harness.MachineSpec{
		VMTimeout: 8 * time.Minute,
		VMConfig: func(c *vm.Config) {
			c.UEFI = true
			c.Net = false
			c.AllowReboot = true
			c.Append = "console=ttyS0,115200 panic=-1"
		}})
	if err != nil {
		t.Fatal(err)
	}
	a := buildArtifacts(t)
	g := m.BootT(t, a.kernel, a.initrd)
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	for _, re := range []string{
		// First boot: what was tried and why, then the base delay.
		`msg="cannot load the machine config" .*network_error="no usable network links: links \[lo\]"`,
		`msg="failure policy: reboot in 30s" kind=network consecutive_failed_boots=1`,
		// Second boot, after the reboot: twice the delay.
		`msg="booty agent starting"`,
		`msg="failure policy: reboot in 1m0s" kind=network consecutive_failed_boots=2`,
	} {
		if _, err := g.Expect(ctx, regexp.MustCompile(re)); err != nil {
			t.Fatalf("console never matched %s: %v", re, err)
		}
	}
}
