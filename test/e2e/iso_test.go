//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// Virtual media, whole: UEFI firmware boots the ISO that hack/mkiso.sh
// builds around our kernel and initramfs from a CD-ROM, and the agent takes
// its config from a second virtual medium labelled BOOTY.
func TestISOBootWithConfigDrive(t *testing.T) {
	a := buildArtifacts(t)
	iso := filepath.Join(t.TempDir(), "booty.iso")
	mkiso := filepath.Join(repoRoot(), "hack", "mkiso.sh")
	if out, err := exec.Command("bash", mkiso, a.kernel, a.initrd, iso, harness.InsecureHTTP).CombinedOutput(); err != nil {
		t.Fatalf("mkiso: %v\n%s", err, out)
	}
	lab := newLab(t)
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.URL = lab.GuestURL()
	cfg.Server.Token = "iso-token"
	drive := makeConfigDrive(t, cfg)
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, Token: cfg.Server.Token, VMConfig: func(c *vm.Config) {
		c.Kernel, c.Initrd, c.Append = "", "", ""
		c.UEFI = true
		c.Disks = append(c.Disks,
			vm.Disk{Path: iso, Format: "raw", Interface: "ide", CDROM: true, BootIndex: 1},
			vm.Disk{Path: drive, Format: "raw", Interface: "virtio", Serial: "config-drive"})
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.BootT(t, "", "")
	st := waitOutcome(t, m)
	if st.State != api.StateProvisioned {
		t.Fatalf("state = %q; steps %v", st.State, stepStates(st))
	}
	if !strings.Contains(m.VM().ConsoleText(), `msg="config loaded" provider="config drive`) {
		t.Error("console does not say the config came from the config drive")
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatal(err)
	}
}
