//go:build e2e

package e2e

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// The network-boot path, whole: the firmware's iPXE (QEMU's virtio-net
// option ROM) gets bootyd's /v1/boot.ipxe from DHCP, chains to the
// machine's own script, loads our kernel and initramfs from /files, and the
// agent provisions the machine from the same bootyd.
func TestPXEBootThroughIPXE(t *testing.T) {
	a := buildArtifacts(t)
	files := t.TempDir()
	for _, c := range [][2]string{
		{a.kernel, "vmlinuz"}, {a.initrd, "initramfs.img"},
		{filepath.Join(a.demo, harness.DemoImage), harness.DemoImage},
		{filepath.Join(a.demo, harness.DemoImageZst), harness.DemoImageZst},
		{filepath.Join(a.demo, harness.ChecksumsFile), harness.ChecksumsFile},
	} {
		copyFile(t, c[0], filepath.Join(files, c[1]))
	}
	lab := harness.NewLabT(t, harness.LabOptions{FilesDir: files})
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, VMConfig: func(c *vm.Config) {
		c.Kernel, c.Initrd, c.Append = "", "", ""
		c.NetOptions = "bootfile=" + lab.GuestURL() + "/v1/boot.ipxe"
		c.ExtraArgs = append(c.ExtraArgs, "-boot", "n")
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.BootT(t, "", "")
	st := waitOutcome(t, m)
	if st.State != api.StateProvisioned {
		t.Fatalf("state = %q; steps %v", st.State, stepStates(st))
	}
	// The firmware prints to VGA only; the kernel's command line proves the
	// chain: only bootyd's per-MAC iPXE script names the initrd "initrd"
	// and adds BOOTIF and booty.server.
	console := m.VM().ConsoleText()
	for _, want := range []string{"Command line: initrd=initrd booty.server=" + lab.GuestURL() + " BOOTIF=01-52-54-00-12-34-56",
		"booty agent starting"} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
