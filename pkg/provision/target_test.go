package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/internal/testenv"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/fstab"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func sparseFile(t *testing.T, p string, size int64) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// fakeMounts simulates mount(2): mounting a source listed in trees fills
// the target directory with that tree; unmounting empties it again.
type fakeMounts struct {
	t        *testing.T
	trees    map[string]map[string]string
	log      []string
	failOn   string // target whose mount fails
	busyOnce map[string]bool
}

func (f *fakeMounts) mount(source, target, fstype string, flags uintptr, data string) error {
	if target == f.failOn {
		return unix.EPERM
	}
	kind := fstype
	if flags&unix.MS_BIND != 0 {
		kind = "bind"
	}
	entry := fmt.Sprintf("mount %s %s %s", source, target, kind)
	if data != "" {
		entry += " " + data
	}
	f.log = append(f.log, entry)
	if tree, ok := f.trees[source]; ok {
		writeTree(f.t, target, tree)
	}
	return nil
}

func (f *fakeMounts) unmount(target string, flags int) error {
	if f.busyOnce[target] && flags == 0 {
		f.busyOnce[target] = false
		f.log = append(f.log, "umount "+target+" EBUSY")
		return unix.EBUSY
	}
	suffix := ""
	if flags&unix.MNT_DETACH != 0 {
		suffix = " lazy"
	}
	f.log = append(f.log, "umount "+target+suffix)
	ents, _ := os.ReadDir(target)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(target, e.Name()))
	}
	return nil
}

var testParts = []disk.Partition{
	{Path: "/dev/vda1", Number: 1, Type: disk.TypeLinuxFilesystem, FSType: "ext4", UUID: "aaaa0000-0000-4000-8000-000000000001", Label: "data", Size: 100},
	{Path: "/dev/vda14", Number: 14, Type: disk.TypeBIOSBoot},
	{Path: "/dev/vda15", Number: 15, Type: disk.TypeEFISystem, FSType: "vfat", UUID: "1A2B-3C4D", Label: "UEFI", PartUUID: "8d3f1a2b-1111-4222-8333-944455556666"},
	{Path: "/dev/vda16", Number: 16, Type: disk.TypeXBOOTLDR, FSType: "ext4", UUID: "bbbb0000-0000-4000-8000-000000000002", Label: "BOOT"},
	{Path: "/dev/vda2", Number: 2, Type: disk.TypeLinuxFilesystem, FSType: "ext4", UUID: "cccc0000-0000-4000-8000-000000000003", Label: "cloudimg-rootfs", Size: 50},
	{Path: "/dev/vda3", Number: 3, Type: disk.TypeLinuxFilesystem, FSType: "xfs", PartUUID: "dddd0000-0000-4000-8000-000000000004", Size: 10},
}

func newFakeTarget(t *testing.T, parts []disk.Partition, trees map[string]map[string]string) (*InstalledOS, *fakeMounts) {
	fm := &fakeMounts{t: t, trees: trees, busyOnce: map[string]bool{}}
	tg := NewInstalledOS(nil, "/dev/vda")
	tg.MountDir = filepath.Join(t.TempDir(), "root")
	tg.Binds = []string{"/proc", "/no-such-dir-booty"}
	tg.Log = testLogger(t)
	tg.MountFunc, tg.UnmountFunc = fm.mount, fm.unmount
	tg.ReadPartitions = func(context.Context, string) ([]disk.Partition, error) { return slices.Clone(parts), nil }
	return tg, fm
}

func TestTargetMountFstab(t *testing.T) {
	outside := t.TempDir()
	root := map[string]string{
		"etc/os-release": "NAME=Ubuntu\n",
		"etc/fstab": "# comment\n" +
			"LABEL=cloudimg-rootfs / ext4 discard,errors=remount-ro 0 1\n" +
			"LABEL=BOOT /boot ext4 defaults 0 2\n" +
			"LABEL=UEFI /boot/efi vfat umask=0077 0 1\n" +
			"PARTUUID=dddd0000-0000-4000-8000-000000000004 /var xfs defaults 0 2\n" +
			"/swap.img none swap sw 0 0\n" +
			"nfs.example.com:/export /srv/nfs nfs defaults 0 0\n" +
			"tmpfs /tmp tmpfs defaults 0 0\n" +
			"UUID=aaaa0000-0000-4000-8000-000000000001 /data ext4 noauto 0 0\n",
		// The image's /var is a symlink aiming outside: the mount must stay inside.
		"var": "->" + outside,
	}
	tg, fm := newFakeTarget(t, testParts, map[string]map[string]string{
		"/dev/vda2":  root,
		"/dev/vda16": {"grub/grub.cfg": "x"},
		"/dev/vda15": {"EFI/ubuntu/shimx64.efi": "x"},
	})
	if err := tg.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := tg.Root()
	want := []string{
		"mount /dev/vda2 " + r + " ext4",
		"mount /dev/vda16 " + r + "/boot ext4",
		"mount /dev/vda3 " + r + outside + " xfs",
		"mount /dev/vda15 " + r + "/boot/efi vfat",
		"mount /proc " + r + "/proc bind",
	}
	if !slices.Equal(fm.log, want) {
		t.Errorf("mounts:\n%s\nwant\n%s", strings.Join(fm.log, "\n"), strings.Join(want, "\n"))
	}
	if rp, _ := tg.RootPartition(); rp.Path != "/dev/vda2" {
		t.Errorf("root partition = %s", rp.Path)
	}
	if esp, ok := tg.ESP(); !ok || esp.Path != "/dev/vda15" {
		t.Errorf("ESP = %v %v", esp, ok)
	}
	fm.log = nil
	fm.busyOnce[r+"/boot"] = true
	if err := tg.Unmount(); err != nil {
		t.Fatal(err)
	}
	wantU := []string{
		"umount " + r + "/proc", "umount " + r + "/boot/efi", "umount " + r + outside,
		"umount " + r + "/boot EBUSY", "umount " + r + "/boot lazy", "umount " + r,
	}
	if !slices.Equal(fm.log, wantU) {
		t.Errorf("unmounts:\n%s\nwant\n%s", strings.Join(fm.log, "\n"), strings.Join(wantU, "\n"))
	}
	if len(tg.Mounted()) != 0 {
		t.Errorf("still recorded: %v", tg.Mounted())
	}
}

func TestTargetMountRootSearch(t *testing.T) {
	// vda1 (largest Linux fs) holds data, vda2 is the root: the first is
	// tried and unmounted. Without fstab the ESP goes to /boot/efi.
	tg, fm := newFakeTarget(t, testParts, map[string]map[string]string{
		"/dev/vda1": {"lost+found/": ""},
		"/dev/vda2": {"usr/lib/os-release": "NAME=Debian\n", "boot/efi/": ""},
	})
	// Not a root label: only size orders the Linux filesystems.
	tg.ReadPartitions = func(context.Context, string) ([]disk.Partition, error) {
		ps := slices.Clone(testParts)
		ps[4].Label = ""
		return ps, nil
	}
	if err := tg.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := tg.Root()
	want := []string{
		"mount /dev/vda1 " + r + " ext4", "umount " + r,
		"mount /dev/vda2 " + r + " ext4",
		"mount /dev/vda15 " + r + "/boot/efi vfat",
		"mount /proc " + r + "/proc bind",
	}
	if !slices.Equal(fm.log, want) {
		t.Errorf("mounts:\n%s\nwant\n%s", strings.Join(fm.log, "\n"), strings.Join(want, "\n"))
	}
	if err := tg.Unmount(); err != nil {
		t.Fatal(err)
	}
}

func TestTargetMountFailures(t *testing.T) {
	t.Run("no root", func(t *testing.T) {
		tg, fm := newFakeTarget(t, testParts, nil)
		err := tg.Mount(t.Context())
		if err == nil || !strings.Contains(err.Error(), "no root filesystem on /dev/vda: partitions seen: /dev/vda1 type="+disk.TypeLinuxFilesystem+` fs=ext4 label="data"`) {
			t.Fatalf("err = %v", err)
		}
		if len(tg.Mounted()) != 0 {
			t.Errorf("left mounted: %v (log %v)", tg.Mounted(), fm.log)
		}
	})
	t.Run("fstab /boot/efi not on the disk", func(t *testing.T) {
		tg, fm := newFakeTarget(t, testParts, map[string]map[string]string{
			"/dev/vda2": {"etc/fstab": "LABEL=BOOT /boot ext4 defaults 0 2\nUUID=FFFF-0000 /boot/efi vfat defaults 0 1\n"},
		})
		err := tg.Mount(t.Context())
		if err == nil || !strings.Contains(err.Error(), "/boot/efi from UUID=FFFF-0000") {
			t.Fatalf("err = %v", err)
		}
		r := tg.Root()
		want := []string{"mount /dev/vda2 " + r + " ext4", "mount /dev/vda16 " + r + "/boot ext4", "umount " + r + "/boot", "umount " + r}
		if !slices.Equal(fm.log, want) {
			t.Errorf("log:\n%s\nwant\n%s", strings.Join(fm.log, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("bind fails", func(t *testing.T) {
		tg, fm := newFakeTarget(t, testParts, map[string]map[string]string{"/dev/vda2": {"etc/fstab": ""}})
		fm.failOn = filepath.Join(tg.Root(), "proc")
		err := tg.Mount(t.Context())
		if err == nil || !strings.Contains(err.Error(), "bind /proc") {
			t.Fatalf("err = %v", err)
		}
		if len(tg.Mounted()) != 0 || fm.log[len(fm.log)-1] != "umount "+tg.Root() {
			t.Errorf("not rolled back: %v", fm.log)
		}
	})
	t.Run("no partition table", func(t *testing.T) {
		tg, _ := newFakeTarget(t, nil, nil)
		tg.ReadPartitions = func(context.Context, string) ([]disk.Partition, error) { return nil, disk.ErrNoPartitionTable }
		if err := tg.Mount(t.Context()); !errors.Is(err, disk.ErrNoPartitionTable) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestFindPartition(t *testing.T) {
	for spec, want := range map[string]string{
		"UUID=1a2b-3c4d":                                "/dev/vda15",
		"/dev/disk/by-uuid/1A2B-3C4D":                   "/dev/vda15",
		"PARTUUID=8D3F1A2B-1111-4222-8333-944455556666": "/dev/vda15",
		"/dev/disk/by-label/BOOT":                       "/dev/vda16",
		"LABEL=\"UEFI\"":                                "/dev/vda15",
		"/dev/vda3":                                     "/dev/vda3",
		"LABEL=nope":                                    "",
		"/dev/sda1":                                     "",
	} {
		got := ""
		if p := findPartition(testParts, spec); p != nil {
			got = p.Path
		}
		if got != want {
			t.Errorf("findPartition(%q) = %q, want %q", spec, got, want)
		}
	}
}

// TestTargetMountLoopDevice provisions a real GPT disk image on a loop
// device (ESP + ext4 root with an fstab naming the ESP by UUID), mounts
// it with the real mount calls, checks /proc/self/mountinfo and unmounts.
func TestTargetMountLoopDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: loop devices need root")
	}
	testenv.NeedTools(t, "sgdisk", "losetup", "mkfs.vfat", "mkfs.ext4")
	img := filepath.Join(t.TempDir(), "disk.img")
	sparseFile(t, img, 96<<20)
	run(t, "sgdisk", "-n", "1:2048:+32M", "-t", "1:ef00", "-n", "2:0:0", "-t", "2:8300", img)
	loop := strings.TrimSpace(run(t, "losetup", "-f", "--show", "-P", img))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })
	for _, p := range []string{loop + "p1", loop + "p2"} {
		deadline := time.Now().Add(5 * time.Second)
		partx := false
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			if !partx && time.Now().Add(4*time.Second).After(deadline) {
				// Some kernels/containers do not scan loop partitions on
				// losetup -P; partx asks for them explicitly.
				_ = exec.Command("partx", "-a", loop).Run()
				partx = true
			}
			if time.Now().After(deadline) {
				t.Skipf("SKIPPED: %s did not appear (no partition scanning for loop devices here)", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	espUUID := "0BAD-1DEA"
	if fsSupported("vfat") {
		run(t, "mkfs.vfat", "-n", "EFI", "-i", "0BAD1DEA", loop+"p1")
	} else {
		// This kernel cannot mount FAT: an ext4 ESP stand-in still tests
		// the fstab UUID match and the nested mount.
		t.Log("vfat not in /proc/filesystems: the ESP is ext4 in this test")
		espUUID = "0bad1dea-0000-4000-8000-000000000001"
		run(t, "mkfs.ext4", "-q", "-F", "-U", espUUID, loop+"p1")
	}
	run(t, "mkfs.ext4", "-q", "-F", "-L", "rootfs", loop+"p2")
	prep := t.TempDir()
	if err := unix.Mount(loop+"p2", prep, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	writeTree(t, prep, map[string]string{
		"etc/os-release": "NAME=\"Test OS\"\n",
		"etc/fstab":      "LABEL=rootfs / ext4 defaults 0 1\nUUID=" + espUUID + " /boot/efi vfat umask=0077 0 1\n",
		"boot/efi/":      "",
	})
	if err := unix.Unmount(prep, 0); err != nil {
		t.Fatal(err)
	}

	tg := NewInstalledOS(disk.NewManager(), loop)
	tg.MountDir = filepath.Join(t.TempDir(), "root")
	tg.Log = testLogger(t)
	if err := tg.Mount(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tg.Unmount() })
	if rp, _ := tg.RootPartition(); rp.Path != loop+"p2" || rp.Label != "rootfs" {
		t.Errorf("root = %+v", rp)
	}
	mounted := mountPoints(t)
	for _, mp := range []string{tg.Root(), tg.Root() + "/boot/efi", tg.Root() + "/proc", tg.Root() + "/dev", tg.Root() + "/sys"} {
		if !slices.Contains(mounted, mp) {
			t.Errorf("%s not mounted; mounts under the root: %v", mp, under(mounted, tg.Root()))
		}
	}
	if _, err := os.Stat(filepath.Join(tg.Root(), "proc/self/mountinfo")); err != nil {
		t.Errorf("proc not usable in the root: %v", err)
	}
	if err := tg.Unmount(); err != nil {
		t.Fatal(err)
	}
	if left := under(mountPoints(t), tg.Root()); len(left) != 0 {
		t.Errorf("still mounted after Unmount: %v", left)
	}
}

func mountPoints(t *testing.T) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			out = append(out, fstab.Unescape(f[4]))
		}
	}
	return out
}

func under(mps []string, root string) []string {
	var out []string
	for _, m := range mps {
		if m == root || strings.HasPrefix(m, root+"/") {
			out = append(out, m)
		}
	}
	return out
}

func fsSupported(fstype string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[len(f)-1] == fstype {
			return true
		}
	}
	return false
}
