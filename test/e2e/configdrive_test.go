//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// The virtual-media case: the kernel command line names no server; the
// config comes from a second disk holding a FAT filesystem labelled BOOTY
// with booty.yaml, and names bootyd only for reporting.
func TestConfigDrive(t *testing.T) {
	lab := newLab(t)
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	// Both disks are virtio and the config drive is the smaller one, so
	// Ironic's smallest-match rule would pick it: it must be protected as
	// boot medium.
	cfg.Disk.Device = ""
	cfg.Disk.Hints = config.RootDeviceHints{"tran": "virtio"}
	cfg.Server.URL = lab.GuestURL()
	cfg.Server.Token = "config-drive-token"
	drive := makeConfigDrive(t, cfg)
	before, err := os.ReadFile(drive)
	if err != nil {
		t.Fatal(err)
	}
	// bootyd must know the machine (and its token) to accept reports, but
	// the guest is not told where it is: no booty.server= on the cmdline.
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, Token: cfg.Server.Token,
		VMConfig: func(c *vm.Config) {
			c.Disks = append(c.Disks, configDriveDisk(drive))
			c.Append = "console=ttyS0,115200 panic=-1 " + harness.InsecureHTTP
		}})
	if err != nil {
		t.Fatal(err)
	}
	bootToProvisioned(t, lab, m)
	after, err := os.ReadFile(drive)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Fatal("the config drive was written to")
	}
	if !strings.Contains(m.VM().ConsoleText(), `msg="config loaded" provider="config drive`) {
		t.Error("console does not say the config came from the config drive")
	}
}

// makeConfigDrive writes cfg as booty.yaml onto a new 2 MiB FAT image
// labelled BOOTY and returns its path.
func makeConfigDrive(t *testing.T, cfg *config.MachineConfig) string {
	t.Helper()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	yml := filepath.Join(dir, "booty.yaml")
	if err := os.WriteFile(yml, data, 0o600); err != nil {
		t.Fatal(err)
	}
	drive := filepath.Join(dir, "config.img")
	for _, c := range [][]string{
		{"mkfs.vfat", "-C", "-n", "BOOTY", drive, "2048"},
		{"mcopy", "-i", drive, yml, "::booty.yaml"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	return drive
}

// configDriveDisk attaches a config drive image as a virtio disk.
func configDriveDisk(path string) vm.Disk {
	return vm.Disk{Path: path, Format: "raw", Interface: "virtio", Serial: "config-drive"}
}

// bootToProvisioned boots m, waits for its outcome, and fails the test
// unless it is provisioned with the demo image on its disk.
func bootToProvisioned(t *testing.T, lab *harness.Lab, m *harness.Machine) {
	t.Helper()
	a := buildArtifacts(t)
	m.BootT(t, a.kernel, a.initrd)
	st := waitOutcome(t, m)
	if st.State != api.StateProvisioned {
		t.Fatalf("state = %q; steps %v", st.State, stepStates(st))
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatal(err)
	}
}
