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
	"golang.org/x/sys/unix"
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

// TestDebianImageUpdateGrubInChroot does to a copy of the image what
// booty's configurator does to a provisioned disk: mount the root
// filesystem, give a chroot /dev, /proc and /sys, run update-grub in it,
// and then boots the result. The root filesystem is a loop device over the
// root partition's bytes (no partition scanning needed); the chroot's /dev
// is a tmpfs holding the device nodes update-grub needs and the
// /dev/disk/by-uuid link that makes 10_linux write root=UUID=, as an
// initramfs without udev has to provide. The loop device's node is named
// vda there (a disk without partitions, as grub-probe sees a loop device;
// on the provisioned machine it is vda2 on vda): 10_linux writes no entry
// at all for a root filesystem on /dev/loopN backed by a file.
func TestDebianImageUpdateGrubInChroot(t *testing.T) {
	dir := osimage.Ensure(t)
	layout, err := osimage.ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	disk := filepath.Join(tmp, "disk.img")
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("cp", "--sparse=always", filepath.Join(dir, osimage.Image), disk)
	loop := strings.TrimSpace(run("losetup", "--find", "--show",
		"--offset", fmt.Sprint(layout.RootStart), "--sizelimit", fmt.Sprint(layout.RootSize), disk))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })

	root := filepath.Join(tmp, "root")
	var mounts []string
	unmountAll := func() {
		for i := len(mounts) - 1; i >= 0; i-- {
			if out, err := exec.Command("umount", mounts[i]).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v\n%s", mounts[i], err, out)
			}
		}
		mounts = nil
	}
	t.Cleanup(unmountAll)
	mount := func(target string, args ...string) {
		t.Helper()
		run("mount", append(args, target)...)
		mounts = append(mounts, target)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(root, "-t", "ext4", loop)
	mount(filepath.Join(root, "dev"), "-t", "tmpfs", "-o", "mode=0755", "chroot-dev")
	mount(filepath.Join(root, "proc"), "-t", "proc", "proc")
	mount(filepath.Join(root, "sys"), "--bind", "/sys")

	// /dev: the usual character devices, the root device (as vda), and
	// its by-uuid link.
	var st syscallStat
	if err := statDev(loop, &st); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(root, "dev")
	for _, n := range []struct {
		name         string
		kind         string
		major, minor uint32
	}{
		{"null", "c", 1, 3}, {"zero", "c", 1, 5}, {"random", "c", 1, 8}, {"urandom", "c", 1, 9},
		{"vda", "b", st.major, st.minor},
	} {
		run("mknod", "-m", "0660", filepath.Join(dev, n.name), n.kind, fmt.Sprint(n.major), fmt.Sprint(n.minor))
	}
	// The mount table names the loop device; grub-probe takes its
	// canonical path, which this link makes /dev/vda.
	if err := os.Symlink("vda", filepath.Join(dev, filepath.Base(loop))); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dev, "disk", "by-uuid"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../vda", filepath.Join(dev, "disk", "by-uuid", layout.RootFSUUID)); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("chroot", root, "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "/usr/sbin/update-grub")
	out, err := cmd.CombinedOutput()
	t.Logf("update-grub:\n%s", out)
	if err != nil {
		t.Fatalf("update-grub in chroot: %v", err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, "boot", "grub", "grub.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"search --no-floppy --fs-uuid --set=root " + layout.RootFSUUID,
		"linux\t/boot/vmlinuz-" + layout.KernelVersion + " root=UUID=" + layout.RootFSUUID + " ro ",
		"console=ttyS0,115200",
		"initrd\t/boot/initrd.img-" + layout.KernelVersion,
	} {
		if !strings.Contains(string(cfg), w) {
			t.Errorf("grub.cfg from update-grub lacks %q:\n%s", w, cfg)
		}
	}
	unmountAll()
	run("losetup", "-d", loop)
	if t.Failed() {
		return
	}

	console := bootDebian(t, vm.Disk{Path: disk})
	cmdline := osimage.ParseProof(console)["cmdline"]
	for _, w := range []string{"root=UUID=" + layout.RootFSUUID, "console=ttyS0,115200"} {
		if !strings.Contains(cmdline, w) {
			t.Errorf("proof cmdline %q lacks %q after update-grub", cmdline, w)
		}
	}
}

type syscallStat struct{ major, minor uint32 }

// statDev returns the device number of the block device at path.
func statDev(path string, st *syscallStat) error {
	var s unix.Stat_t
	if err := unix.Stat(path, &s); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	st.major, st.minor = unix.Major(uint64(s.Rdev)), unix.Minor(uint64(s.Rdev))
	return nil
}
