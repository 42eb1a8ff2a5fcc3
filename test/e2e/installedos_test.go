//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/osimage"
	"github.com/booty-dev/booty/test/vm"
)

// These tests provision the real Debian image that hack/mkdebianimage.sh
// builds (cached outside the clone) and prove from inside the installed OS,
// through its booty-proof.service lines on the serial console, that it came
// up with what the config asked for.

const (
	osDiskSize     = 3 << 30
	machineFile    = "/etc/booty-machine-file"
	machineContent = "written by booty from /deploy/machine-files\n"
	osTimeout      = 15 * time.Minute
)

// debianLab serves the Debian image directory.
func debianLab(t *testing.T) *harness.Lab {
	dir := osimage.Ensure(t)
	return harness.NewLabT(t, harness.LabOptions{FilesDir: dir, ExitGrace: 6 * time.Minute})
}

// debianConfig provisions the Debian image with everything issue 4 asks
// the installed OS to show: hostname, DNS, kubelet labels, kernel
// parameters, a post-provision command (and the machine file, which comes
// from the initramfs's /deploy).
func debianConfig(t *testing.T, lab *harness.Lab, handoff string) *config.MachineConfig {
	t.Helper()
	sum, err := lab.Checksum(osimage.Compressed)
	if err != nil {
		t.Fatal(err)
	}
	rawSum, err := lab.Checksum(osimage.Image)
	if err != nil {
		t.Fatal(err)
	}
	return &config.MachineConfig{
		APIVersion:   config.APIVersion,
		Mode:         config.ModeProvision,
		Hostname:     "booty-node-7",
		Image:        config.ImageSpec{URL: lab.FileURL(osimage.Compressed), Checksum: sum, ImageChecksum: rawSum},
		Disk:         config.DiskSpec{Device: "/dev/vda"},
		DNS:          config.DNSSpec{Nameservers: []string{"10.0.2.3", "192.0.2.53"}, Search: []string{"booty.test"}},
		KernelParams: []string{"booty.proof=" + handoff},
		Kubelet: config.KubeletSpec{ProviderID: "metal://rack4/booty-node-7",
			NodeLabels: map[string]string{"topology.kubernetes.io/zone": "rack4", "booty.dev/e2e": "true"}},
		PostProvisionCommands: []string{
			"mkdir -p /var/lib/booty-proof && echo post-provision-ran > /var/lib/booty-proof/marker",
			"mkdir -p /etc/booty-proof.d && echo " + machineFile + " > /etc/booty-proof.d/files",
		},
		Handoff:   handoff,
		OnFailure: config.FailureSpec{Action: config.FailurePoweroff, Delay: config.Duration{Duration: 5 * time.Second}},
	}
}

// deployInitramfs builds an initramfs whose /deploy/machine-files holds the
// machine file, from the booty binary next to the given initramfs.
func deployInitramfs(t *testing.T, a artifacts) string {
	t.Helper()
	deploy := filepath.Join(t.TempDir(), "deploy")
	f := filepath.Join(deploy, "machine-files", machineFile)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(machineContent), 0o644); err != nil {
		t.Fatal(err)
	}
	booty := os.Getenv("BOOTY_BIN")
	if booty == "" {
		booty = filepath.Join(filepath.Dir(a.initrd), "booty")
	}
	out := filepath.Join(t.TempDir(), "initramfs-deploy.img")
	cmd := exec.Command("go", "run", "./initramfs", "--booty", booty, "--deploy", deploy, "--out", out)
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build initramfs with /deploy: %v\n%s", err, b)
	}
	return out
}

// checkProof asserts what the installed OS printed about itself.
func checkProof(t *testing.T, console, handoff string) {
	t.Helper()
	layout, err := osimage.ReadLayout(osimage.Ensure(t))
	if err != nil {
		t.Fatal(err)
	}
	p := osimage.ParseProof(console)
	if _, ok := p["done"]; !ok {
		t.Fatalf("the installed OS did not finish its proof; proof lines: %v", p)
	}
	checks := []struct{ key, want string }{
		{"hostname", "booty-node-7"},
		{"resolv", "10.0.2.3,192.0.2.53"},
		{"cmdline", "booty.proof=" + handoff},
		{"cmdline", "console=ttyS0"},
		// update-grub ran in the chroot with udev's by-uuid links present.
		{"cmdline", "root=UUID=" + layout.RootFSUUID},
		{"kubelet", "--provider-id=metal://rack4/booty-node-7"},
		{"kubelet", "booty.dev/e2e=true"},
		{"kubelet", "topology.kubernetes.io/zone=rack4"},
		{"marker", "post-provision-ran"},
	}
	for _, c := range checks {
		if !strings.Contains(p[c.key], c.want) {
			t.Errorf("proof %s = %q, want it to contain %q", c.key, p[c.key], c.want)
		}
	}
	sum := sha256.Sum256([]byte(machineContent))
	found := false
	for _, f := range osimage.ProofFiles(console) {
		if f.Path == machineFile {
			found = true
			if f.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("machine file %s has sha256 %s, want %x", machineFile, f.SHA256, sum)
			}
		}
	}
	if !found {
		t.Errorf("no proof line for the machine file %s", machineFile)
	}
}

// checkGrown asserts the root partition was grown to the end of the disk
// and the backup GPT moved there.
func checkGrown(t *testing.T, diskPath string) {
	t.Helper()
	f, err := os.Open(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pt, err := disk.ReadPartitionTable(f, osDiskSize)
	if err != nil {
		t.Fatalf("partition table after provisioning: %v", err)
	}
	last := pt.Partitions[len(pt.Partitions)-1]
	if end := last.Start + last.Size; end < osDiskSize-2<<20 {
		t.Errorf("last partition ends at %d, want it grown to the disk's end (%d)", end, int64(osDiskSize))
	}
	if pt.BackupHeaderOffset != osDiskSize-512 {
		t.Errorf("backup GPT header at %d, want at the disk's last sector", pt.BackupHeaderOffset)
	}
}

func stepDetail(st api.MachineState, step, key string) string {
	for _, r := range st.Steps {
		if r.Step == step && r.State == api.StateSucceeded {
			return r.Detail[key]
		}
	}
	return ""
}

// rewriteConfig replaces the config bootyd serves to m (bootyd reads the
// file on every request).
func rewriteConfig(t *testing.T, m *harness.Machine, cfg *config.MachineConfig) {
	t.Helper()
	cfg.Server = config.ServerSpec{URL: cfg.Server.URL, Token: m.Token}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.ConfigPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// (a) Provision the Debian image with everything configured, kexec into it,
// and read the proof from the installed OS. Then (d, soft) deprovision it
// softly and check its grub.cfg is gone.
func TestDebianKexecThenSoftDeprovision(t *testing.T) {
	a := buildArtifacts(t)
	lab := debianLab(t)
	initrd := deployInitramfs(t, a)
	cfg := debianConfig(t, lab, config.HandoffKexec)
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, DiskSize: osDiskSize, VMTimeout: osTimeout,
		VMConfig: func(c *vm.Config) { c.UEFI = true }})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v := m.BootT(t, a.kernel, initrd)
	st := waitOutcome(t, m)
	if st.State != api.StateProvisioned {
		t.Fatalf("state = %q; steps %v", st.State, stepStates(st))
	}
	t.Logf("provisioned, kexec'd and proved in %s; steps %v", time.Since(start).Round(time.Second), stepStates(st))
	console := v.ConsoleText()
	if !strings.Contains(console, "action=kexec") {
		t.Error("the agent did not hand off by kexec")
	}
	checkProof(t, console, config.HandoffKexec)
	checkGrown(t, m.Disk)

	// Soft deprovision: the OS stays, but GRUB has no configuration.
	soft := &config.MachineConfig{APIVersion: config.APIVersion, Mode: config.ModeSoftDeprovision,
		Disk: cfg.Disk, Handoff: config.HandoffPoweroff, Server: cfg.Server,
		OnFailure: config.FailureSpec{Action: config.FailurePoweroff, Delay: config.Duration{Duration: 5 * time.Second}}}
	soft.Server.URL = lab.GuestURL()
	rewriteConfig(t, m, soft)
	m.BootT(t, a.kernel, a.initrd)
	st = waitOutcome(t, m)
	if st.State != api.StateDeprovisioned {
		t.Fatalf("soft deprovision: state = %q; steps %v", st.State, stepStates(st))
	}
	if got := stepDetail(st, "disable-boot", "disabled"); !strings.Contains(got, "/boot/grub/grub.cfg") {
		t.Fatalf("disable-boot renamed %q, want /boot/grub/grub.cfg among them", got)
	}
	if ok, err := rootHasFile(m.Disk, "/boot/grub/grub.cfg"); err != nil || ok {
		t.Fatalf("grub.cfg still on the root filesystem after a soft deprovision (err %v)", err)
	}
	if ok, err := rootHasFile(m.Disk, "/boot/grub/grub.cfg.booty-disabled"); err != nil || !ok {
		t.Fatalf("renamed grub.cfg not found (err %v)", err)
	}
}

// (b) Provision with handoff reboot: the firmware boots the installed OS
// through the EFI boot entry booty created. Then (d, hard) deprovision:
// no partition table and no EFI entry left.
func TestDebianRebootThroughEFIEntryThenHardDeprovision(t *testing.T) {
	a := buildArtifacts(t)
	lab := debianLab(t)
	initrd := deployInitramfs(t, a)
	cfg := debianConfig(t, lab, config.HandoffReboot)
	vars := filepath.Join(t.TempDir(), "OVMF_VARS.fd")
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, DiskSize: osDiskSize, VMTimeout: osTimeout,
		VMConfig: func(c *vm.Config) { c.UEFI = true; c.OVMFVars = vars }})
	if err != nil {
		t.Fatal(err)
	}
	m.BootT(t, a.kernel, initrd)
	st := waitOutcome(t, m)
	if st.State != api.StateProvisioned {
		t.Fatalf("state = %q; steps %v", st.State, stepStates(st))
	}
	entry := stepDetail(st, "efi-boot-entry", "efiBootEntry")
	if entry == "" {
		t.Fatalf("efi-boot-entry reported no entry; steps %v", stepStates(st))
	}

	// Second boot: no kernel from QEMU, only the firmware and its variables.
	c := m.VMConfig("", "")
	c.Kernel, c.Initrd, c.Append = "", "", ""
	start := time.Now()
	v := vm.StartT(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), osTimeout)
	defer cancel()
	if _, err := v.Expect(ctx, osimage.ProofDoneRE); err != nil {
		t.Fatalf("the installed OS did not boot from the disk: %v", err)
	}
	if err := v.Wait(ctx); err != nil {
		t.Logf("second boot ended: %v", err)
	}
	t.Logf("firmware booted the installed OS in %s", time.Since(start).Round(time.Second))
	console := v.ConsoleText()
	checkProof(t, console, config.HandoffReboot)
	if got := osimage.ParseProof(console)["efi-current"]; got != entry {
		t.Errorf("firmware booted %q, want booty's entry %q", got, entry)
	}

	// Hard deprovision.
	hard := &config.MachineConfig{APIVersion: config.APIVersion, Mode: config.ModeDeprovision,
		Disk: cfg.Disk, Handoff: config.HandoffPoweroff, Server: config.ServerSpec{URL: lab.GuestURL()},
		OnFailure: config.FailureSpec{Action: config.FailurePoweroff, Delay: config.Duration{Duration: 5 * time.Second}}}
	rewriteConfig(t, m, hard)
	m.BootT(t, a.kernel, a.initrd)
	st = waitOutcome(t, m)
	if st.State != api.StateDeprovisioned {
		t.Fatalf("hard deprovision: state = %q; steps %v", st.State, stepStates(st))
	}
	removed := stepDetail(st, "remove-efi-entries", "efiEntriesRemoved")
	left := stepDetail(st, "remove-efi-entries", "efiEntriesLeft")
	if !strings.Contains(removed, entry) || strings.Contains(left, entry) {
		t.Errorf("EFI entries removed %q, left %q; want %s removed", removed, left, entry)
	}
	if harness.HasValidGPT(m.Disk) {
		t.Error("a valid GPT survived the hard deprovision")
	}
	if zero, err := harness.FirstMiBZero(m.Disk); err != nil || !zero {
		t.Errorf("first MiB not zero after the hard deprovision (err %v)", err)
	}
	if got := stepDetail(st, "wipe-disk", "wiped"); got != "/dev/vda" {
		t.Errorf("wipe-disk reported %q", got)
	}
}

// rootHasFile looks into the root filesystem (partition 2 of the Debian
// image) of a disk file with debugfs, at the partition's offset.
func rootHasFile(diskPath, path string) (bool, error) {
	f, err := os.Open(diskPath)
	if err != nil {
		return false, err
	}
	pt, err := disk.ReadPartitionTable(f, osDiskSize)
	f.Close()
	if err != nil {
		return false, err
	}
	var root *disk.Partition
	for i := range pt.Partitions {
		if pt.Partitions[i].Number == 2 {
			root = &pt.Partitions[i]
		}
	}
	if root == nil {
		return false, os.ErrNotExist
	}
	out, err := exec.Command("debugfs", "-R", "stat "+path, diskPath+"?offset="+strconv.FormatInt(root.Start, 10)).CombinedOutput()
	if err != nil {
		return false, err
	}
	return !strings.Contains(string(out), "File not found"), nil
}
