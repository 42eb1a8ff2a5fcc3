//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/test/osimage"
	"github.com/booty-dev/booty/test/vm"
)

// debianBootTimeout bounds one boot of the Debian image to its proof's
// last line: about 55 s under TCG on an idle machine, several times that
// on a loaded one.
const debianBootTimeout = 8 * time.Minute

// overlay makes a qcow2 file in a temp dir backed by the raw image, so a
// boot does not change the cached image and needs no copy of it.
func overlay(t *testing.T, raw string) string {
	t.Helper()
	abs, err := filepath.Abs(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "disk.qcow2")
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", abs, "-F", "raw", p).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create overlay of %s: %v\n%s", raw, err, out)
	}
	return p
}

// bootDebian boots disk under OVMF with no kernel given, so the firmware
// runs EFI/BOOT/BOOTX64.EFI from the disk, waits for the proof's last line
// and for the guest to power off, and returns the console transcript.
func bootDebian(t *testing.T, disk vm.Disk) string {
	t.Helper()
	start := time.Now()
	v := vm.StartT(t, vm.Config{
		UEFI:    true,
		Memory:  1024,
		Disks:   []vm.Disk{disk},
		Timeout: debianBootTimeout + time.Minute,
	})
	ctx, cancel := context.WithTimeout(context.Background(), debianBootTimeout)
	defer cancel()
	if _, err := v.Expect(ctx, osimage.ProofDoneRE); err != nil {
		t.Fatalf("debian image did not finish its proof: %v", err)
	}
	t.Logf("proof done %s after start (%s)", time.Since(start).Round(time.Second), v.Accel())
	if err := v.Wait(ctx); err != nil {
		t.Fatalf("debian image did not power off after its proof: %v", err)
	}
	return v.ConsoleText()
}

// TestDebianImageBootsUnderOVMF boots the image exactly as built: UEFI
// firmware, no kernel on the QEMU command line, the image's removable-path
// GRUB, its grub.cfg, kernel, initramfs and systemd, up to the proof
// service, which powers the machine off.
func TestDebianImageBootsUnderOVMF(t *testing.T) {
	dir := osimage.Ensure(t)
	layout, err := osimage.ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	console := bootDebian(t, vm.Disk{Path: overlay(t, filepath.Join(dir, osimage.Image)), Format: "qcow2"})

	proof := osimage.ParseProof(console)
	t.Logf("proof: %q", proof)
	want := map[string]string{
		"hostname": layout.Hostname,
		"resolv":   "",
		"kernel":   layout.KernelVersion,
		"rootdev":  "/dev/vda2",
		"kubelet":  "",
	}
	for k, v := range want {
		if got, ok := proof[k]; !ok || got != v {
			t.Errorf("proof %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	cmdline := proof["cmdline"]
	for _, w := range []string{"BOOT_IMAGE=/boot/vmlinuz-" + layout.KernelVersion, "root=UUID=" + layout.RootFSUUID, "console=ttyS0,115200"} {
		if !strings.Contains(cmdline, w) {
			t.Errorf("proof cmdline %q lacks %q (not booted through the image's grub.cfg?)", cmdline, w)
		}
	}
	if !strings.HasPrefix(proof["efi-current"], "Boot") {
		t.Errorf("proof efi-current = %q, want BootXXXX (booted under UEFI)", proof["efi-current"])
	}
	if _, ok := proof["marker"]; ok {
		t.Errorf("proof has a marker on a pristine image: %q", proof["marker"])
	}
	if f := osimage.ProofFiles(console); len(f) != 0 {
		t.Errorf("proof lists files on a pristine image: %v", f)
	}
}

// TestDebianImageProofReportsFiles writes what provisioning would (a list
// of files to hash, a kubelet drop-in, the post-provision marker) into a
// copy of the image's root filesystem with debugfs, boots it, and checks
// that every one of them shows in the proof lines.
func TestDebianImageProofReportsFiles(t *testing.T) {
	dir := osimage.Ensure(t)
	layout, err := osimage.ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	disk := filepath.Join(tmp, "disk.img")
	if out, err := exec.Command("cp", "--sparse=always", filepath.Join(dir, osimage.Image), disk).CombinedOutput(); err != nil {
		t.Fatalf("copy image: %v\n%s", err, out)
	}

	extra := "booty was here\n"
	files := map[string]string{
		"/etc/booty-proof.d/files":                            "/etc/hostname\n# a comment\n\n/etc/booty-extra\n/etc/not-there\n",
		"/etc/booty-extra":                                    extra,
		"/etc/systemd/system/kubelet.service.d/10-booty.conf": "[Service]\nEnvironment=\"KUBELET_EXTRA_ARGS=--node-ip=10.0.0.5\"\n",
		"/var/lib/booty-proof/marker":                         "post-provision ran\n",
	}
	cmds := []string{"mkdir /etc/systemd/system/kubelet.service.d"}
	i := 0
	for path, content := range files {
		src := filepath.Join(tmp, fmt.Sprintf("f%d", i))
		i++
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, "write "+src+" "+path)
	}
	cmdFile := filepath.Join(tmp, "debugfs.cmd")
	if err := os.WriteFile(cmdFile, []byte(strings.Join(cmds, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := fmt.Sprintf("%s?offset=%d", disk, layout.RootStart)
	out, err := exec.Command("debugfs", "-w", "-f", cmdFile, fs).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs write into %s: %v\n%s", fs, err, out)
	}
	t.Logf("debugfs:\n%s", out)

	console := bootDebian(t, vm.Disk{Path: disk})
	proof := osimage.ParseProof(console)
	if got, want := proof["marker"], "post-provision ran"; got != want {
		t.Errorf("proof marker = %q, want %q", got, want)
	}
	if got, want := proof["kubelet"], `[Service]; Environment="KUBELET_EXTRA_ARGS=--node-ip=10.0.0.5"`; got != want {
		t.Errorf("proof kubelet = %q, want %q", got, want)
	}
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	wantFiles := []osimage.ProofFile{
		{Path: "/etc/hostname", SHA256: hash(layout.Hostname + "\n")},
		{Path: "/etc/booty-extra", SHA256: hash(extra)},
		{Path: "/etc/not-there", Missing: true},
	}
	gotFiles := osimage.ProofFiles(console)
	if fmt.Sprint(gotFiles) != fmt.Sprint(wantFiles) {
		t.Errorf("proof files = %v, want %v", gotFiles, wantFiles)
	}
}
