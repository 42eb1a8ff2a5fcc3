//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// The health checks read QEMU's emulated disks through the real kernel
// interfaces (the NVMe SMART log through NVME_IOCTL_ADMIN_CMD, ATA SMART
// of an AHCI disk through SG_IO), and a failing check (64 CPUs required)
// ends the run in health-check: no disk is selected and the target keeps
// the image it held.
func TestHealthCheckFailureWritesNothing(t *testing.T) {
	lab := newLab(t)
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Health = &config.HealthSpec{MinCPUs: 64}
	extra := func(name string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 64<<20); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nvme, sata := extra("nvme.raw"), extra("sata.raw")
	m, st := provision(t, lab, harness.MachineSpec{
		Config:      cfg,
		InitialDisk: lab.FilePath(harness.DemoImage),
		VMConfig: func(c *vm.Config) {
			c.Disks = append(c.Disks, vm.Disk{Path: nvme, Interface: vm.IfaceNVMe, Serial: "BOOTYNVME1"},
				vm.Disk{Path: sata, Interface: vm.IfaceIDE})
		},
	})

	want := []string{"health-check:started", "health-check:failed", "machine:error"}
	if got := stepStates(st); st.State != api.StateError || !slices.Equal(got, want) {
		t.Fatalf("state %q, steps %v; want %v", st.State, got, want)
	}
	failed := failedStep(st)
	if !strings.Contains(failed.Error, "health checks failed") || !strings.Contains(failed.Error, "cpu: ") ||
		!strings.Contains(failed.Error, "at least 64 required") {
		t.Errorf("error does not name the failed check: %q", failed.Error)
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatalf("disk changed although the health check failed: %v", err)
	}
	// Every check ran and logged its verdict, which bootyd received.
	for _, line := range []string{
		"check=disk:nvme0n1 status=pass message=0% used",
		"check=disk:sda status=pass message=SMART: ",
		"check=disk:vda status=pass",
		"check=cpu status=fail",
		"check=memory status=pass",
		"check=edac status=pass",
	} {
		if !hasLog(st, line) {
			t.Errorf("no shipped log line with %q", line)
		}
	}
	if t.Failed() {
		for _, l := range st.Logs {
			if strings.Contains(l.Message, "health check") {
				t.Log(l.Message)
			}
		}
	}
}
