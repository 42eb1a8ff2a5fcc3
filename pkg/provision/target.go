package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/chroot"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/fstab"
)

// DefaultMountDir is where the installed OS is mounted for configuration.
const DefaultMountDir = "/mnt/root"

// DefaultBinds are the agent's directories bound into the mounted OS so
// that chrooted commands (update-grub, grub-mkconfig, machine commands)
// see devices, processes, sysfs and EFI variables. Those missing on the
// agent (efivars on a BIOS machine) are skipped.
var DefaultBinds = []string{"/dev", "/proc", "/sys", "/sys/firmware/efi/efivars", "/run"}

// rootLabels are filesystem or GPT partition labels that name a root
// filesystem in common cloud images.
var rootLabels = []string{"root", "rootfs", "cloudimg-rootfs", "img-rootfs", "root-a", "ROOT"}

// partitionWait bounds how long Mount waits for the kernel to create the
// partition device nodes after the partition table was re-read.
const partitionWait = 10 * time.Second

// InstalledOS mounts the OS installed on a disk so it can be configured:
// the root filesystem at MountDir, the filesystems its /etc/fstab places
// on the same disk (/boot, /boot/efi, /var, ...), the ESP, and bind
// mounts of the agent's /dev, /proc, /sys (+efivars) and /run for a
// chroot. Every mount is recorded; Unmount undoes them in reverse order.
type InstalledOS struct {
	// Disk is the whole-disk device node, "/dev/vda".
	Disk string
	// MountDir is where the root filesystem goes; empty means DefaultMountDir.
	MountDir string
	// BlockSize is the disk's logical block size; 0 asks the kernel
	// (BLKSSZGET) and falls back to 512.
	BlockSize int64
	// Binds are bound into the root after the filesystems; nil means DefaultBinds.
	Binds []string
	// Log receives one line per mount; nil means slog.Default().
	Log *slog.Logger

	// MountFunc and UnmountFunc are mount(2) and umount2(2); tests replace them.
	MountFunc   func(source, target, fstype string, flags uintptr, data string) error
	UnmountFunc func(target string, flags int) error
	// ReadPartitions lists the disk's partitions with their filesystems
	// (disk.Manager.ReadPartitions); tests replace it.
	ReadPartitions func(ctx context.Context, dev string) ([]disk.Partition, error)

	parts  []disk.Partition
	root   *disk.Partition
	esp    *disk.Partition
	mounts []string // host paths, in mount order
}

// NewInstalledOS returns an InstalledOS for the disk dev with the
// system's mount calls, reading partitions through disks.
func NewInstalledOS(disks *disk.Manager, dev string) *InstalledOS {
	return &InstalledOS{
		Disk:           dev,
		MountDir:       DefaultMountDir,
		MountFunc:      unix.Mount,
		UnmountFunc:    unix.Unmount,
		ReadPartitions: disks.ReadPartitions,
	}
}

func (t *InstalledOS) log() *slog.Logger {
	if t.Log == nil {
		return slog.Default().With("component", "provision")
	}
	return t.Log
}

// Root returns the directory the installed OS is mounted at.
func (t *InstalledOS) Root() string {
	if t.MountDir == "" {
		return DefaultMountDir
	}
	return t.MountDir
}

// Partitions returns the partitions Mount found on the disk.
func (t *InstalledOS) Partitions() []disk.Partition { return slices.Clone(t.parts) }

// RootPartition returns the partition mounted as root; false before Mount.
func (t *InstalledOS) RootPartition() (disk.Partition, bool) {
	if t.root == nil {
		return disk.Partition{}, false
	}
	return *t.root, true
}

// ESP returns the EFI system partition of the disk; false when there is none.
func (t *InstalledOS) ESP() (disk.Partition, bool) {
	if t.esp == nil {
		return disk.Partition{}, false
	}
	return *t.esp, true
}

// Mounted returns the host paths mounted so far, in mount order.
func (t *InstalledOS) Mounted() []string { return slices.Clone(t.mounts) }

// Mount finds the installed OS on Disk and mounts it, in order:
//
//  1. the root filesystem: the partitions typed as a Linux root (x86-64
//     or aarch64), then those whose filesystem or GPT label is a common
//     root label, then the other Linux filesystems, largest first; each is
//     mounted at Root() and kept when it holds /etc/os-release,
//     /usr/lib/os-release or /etc/fstab (a btrfs root in a subvolume "@"
//     or "root" is remounted with subvol=);
//  2. every /etc/fstab entry whose device (UUID=, LABEL=, PARTUUID=,
//     PARTLABEL=, /dev/disk/by-*/ or a device path) is a partition of
//     Disk, shallowest mount point first, except swap, "/" and noauto; an
//     entry for /boot or /boot/efi that names no partition of Disk is an
//     error unless it has nofail;
//  3. the ESP at /boot/efi when fstab did not mount it and the directory
//     exists in the image;
//  4. bind mounts of Binds.
//
// Mount points are resolved inside the root, so symlinks in the image
// cannot redirect a mount outside it. On failure everything mounted so
// far is unmounted and the error says what failed; with no recognisable
// root the error lists the partitions seen.
func (t *InstalledOS) Mount(ctx context.Context) (err error) {
	if t.Disk == "" {
		return errors.New("mount target: no disk")
	}
	if len(t.mounts) > 0 {
		return fmt.Errorf("mount target %s: already mounted at %s", t.Disk, t.Root())
	}
	defer func() {
		if err != nil {
			if uerr := t.Unmount(); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	if t.ReadPartitions == nil {
		return fmt.Errorf("mount target %s: no partition reader", t.Disk)
	}
	parts, err := t.ReadPartitions(ctx, t.Disk)
	if err != nil {
		return fmt.Errorf("mount target %s: %w", t.Disk, err)
	}
	t.parts = parts
	t.root, t.esp = nil, nil
	for i := range parts {
		if parts[i].Type == disk.TypeEFISystem || parts[i].MBRType == 0xef {
			t.esp = &parts[i]
			break
		}
	}
	if err := os.MkdirAll(t.Root(), 0o755); err != nil {
		return fmt.Errorf("mount target %s: %w", t.Disk, err)
	}
	if err := t.mountRoot(); err != nil {
		return err
	}
	if err := t.mountFstab(); err != nil {
		return err
	}
	if err := t.mountBinds(); err != nil {
		return err
	}
	return nil
}

// rootCandidates orders the partitions that may hold the root filesystem.
func rootCandidates(parts []disk.Partition) []*disk.Partition {
	var out []*disk.Partition
	add := func(match func(p *disk.Partition) bool) {
		for i := range parts {
			p := &parts[i]
			if match(p) && !slices.Contains(out, p) && mountableFS(p.FSType) {
				out = append(out, p)
			}
		}
	}
	add(func(p *disk.Partition) bool {
		return p.Type == disk.TypeLinuxRootX86_64 || p.Type == disk.TypeLinuxRootARM64
	})
	add(func(p *disk.Partition) bool {
		return slices.Contains(rootLabels, p.Label) || slices.Contains(rootLabels, p.Name)
	})
	var rest []*disk.Partition
	for i := range parts {
		p := &parts[i]
		if (p.Type == disk.TypeLinuxFilesystem || p.MBRType == 0x83 || (p.Type == "" && p.MBRType == 0)) &&
			!slices.Contains(out, p) && mountableFS(p.FSType) {
			rest = append(rest, p)
		}
	}
	slices.SortStableFunc(rest, func(a, b *disk.Partition) int {
		switch {
		case a.Size > b.Size:
			return -1
		case a.Size < b.Size:
			return 1
		}
		return 0
	})
	return append(out, rest...)
}

func mountableFS(fstype string) bool {
	switch fstype {
	case "ext2", "ext3", "ext4", "xfs", "btrfs":
		return true
	}
	return false
}

func (t *InstalledOS) mountRoot() error {
	dir := t.Root()
	cands := rootCandidates(t.parts)
	for _, p := range cands {
		if err := t.mount(p.Path, dir, p.FSType, 0, ""); err != nil {
			t.log().Warn("root candidate does not mount", "partition", p.Path, "err", err)
			continue
		}
		if p.FSType == "btrfs" && !looksLikeRoot(dir) {
			for _, sub := range []string{"@", "root", "@rootfs"} {
				if looksLikeRoot(filepath.Join(dir, sub)) {
					if err := t.unmountLast(); err != nil {
						return fmt.Errorf("mount target %s: %w", t.Disk, err)
					}
					if err := t.mount(p.Path, dir, p.FSType, 0, "subvol="+sub); err != nil {
						return fmt.Errorf("mount target %s: root subvolume %s: %w", t.Disk, sub, err)
					}
					break
				}
			}
		}
		if looksLikeRoot(dir) {
			t.root = p
			t.log().Info("root filesystem mounted", "partition", p.Path, "fs", p.FSType, "dir", dir)
			return nil
		}
		if err := t.unmountLast(); err != nil {
			return fmt.Errorf("mount target %s: %w", t.Disk, err)
		}
	}
	var seen []string
	for _, p := range t.parts {
		seen = append(seen, p.String())
	}
	if len(seen) == 0 {
		seen = []string{"none"}
	}
	return fmt.Errorf("no root filesystem on %s: partitions seen: %s", t.Disk, strings.Join(seen, "; "))
}

func looksLikeRoot(dir string) bool {
	fsys := targetFS{dir: dir}
	return fsys.exists("etc/os-release") || fsys.exists("usr/lib/os-release") || fsys.exists("etc/fstab")
}

// findPartition returns the partition an fstab device spec names.
func findPartition(parts []disk.Partition, spec string) *disk.Partition {
	key, val, ok := strings.Cut(spec, "=")
	if !ok {
		for _, pre := range []struct{ dir, key string }{
			{"/dev/disk/by-uuid/", "UUID"}, {"/dev/disk/by-label/", "LABEL"},
			{"/dev/disk/by-partuuid/", "PARTUUID"}, {"/dev/disk/by-partlabel/", "PARTLABEL"},
		} {
			if v, found := strings.CutPrefix(spec, pre.dir); found {
				key, val, ok = pre.key, v, true
				break
			}
		}
	}
	val = strings.Trim(val, `"`)
	for i := range parts {
		p := &parts[i]
		switch {
		case !ok && spec != "" && spec == p.Path:
			return p
		case key == "UUID" && val != "" && strings.EqualFold(val, p.UUID):
			return p
		case key == "LABEL" && val != "" && val == p.Label:
			return p
		case key == "PARTUUID" && val != "" && strings.EqualFold(val, p.PartUUID):
			return p
		case key == "PARTLABEL" && val != "" && val == p.Name:
			return p
		}
	}
	return nil
}

func (t *InstalledOS) mountFstab() error {
	root := targetFS{dir: t.Root()}
	data, err := root.readFile("etc/fstab")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mount target %s: read /etc/fstab: %w", t.Disk, err)
	}
	entries := fstab.Parse(data)
	slices.SortStableFunc(entries, func(a, b fstab.Entry) int {
		return strings.Count(a.File, "/") - strings.Count(b.File, "/")
	})
	espMounted := false
	for _, e := range entries {
		mp := e.File
		if !strings.HasPrefix(mp, "/") || mp == "/" || e.Type == "swap" || e.Has("noauto") || e.Has("bind") {
			continue
		}
		p := findPartition(t.parts, e.Spec)
		var data string
		if v, ok := e.Option("subvol"); ok {
			data = "subvol=" + v
		}
		if p == nil || (p == t.root && data == "") {
			if (mp == "/boot" || mp == "/boot/efi" || mp == "/efi") && !e.Has("nofail") && p == nil {
				return fmt.Errorf("mount target %s: /etc/fstab mounts %s from %s, which is no partition of the disk", t.Disk, mp, e.Spec)
			}
			t.log().Debug("fstab entry not on the target disk, not mounted", "spec", e.Spec, "mountpoint", mp)
			continue
		}
		fstype := p.FSType
		if fstype == "" {
			fstype = e.Type
		}
		if err := t.mountInRoot(p.Path, mp, fstype, data); err != nil {
			return err
		}
		if p == t.esp {
			espMounted = true
		}
	}
	if t.esp != nil && !espMounted && root.exists("boot/efi") {
		if err := t.mountInRoot(t.esp.Path, "/boot/efi", t.esp.FSType, ""); err != nil {
			return err
		}
	}
	return nil
}

// mountInRoot mounts source at mp inside the root, resolving mp there and
// creating it when missing.
func (t *InstalledOS) mountInRoot(source, mp, fstype, data string) error {
	rel, err := (targetFS{dir: t.Root()}).mkdirAll(mp, 0o755)
	if err != nil {
		return fmt.Errorf("mount target %s: mount point %s: %w", t.Disk, mp, err)
	}
	if err := t.mount(source, chroot.Join(t.Root(), rel), fstype, 0, data); err != nil {
		return fmt.Errorf("mount target %s: %w", t.Disk, err)
	}
	return nil
}

func (t *InstalledOS) mountBinds() error {
	binds := t.Binds
	if binds == nil {
		binds = DefaultBinds
	}
	for _, src := range binds {
		if st, err := os.Stat(src); err != nil || !st.IsDir() {
			t.log().Debug("bind source missing, skipped", "src", src)
			continue
		}
		rel, err := (targetFS{dir: t.Root()}).mkdirAll(src, 0o755)
		if err != nil {
			return fmt.Errorf("mount target %s: bind %s: %w", t.Disk, src, err)
		}
		if err := t.mount(src, chroot.Join(t.Root(), rel), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount target %s: bind %s: %w", t.Disk, src, err)
		}
	}
	return nil
}

func (t *InstalledOS) mount(source, target, fstype string, flags uintptr, data string) error {
	mnt := t.MountFunc
	if mnt == nil {
		mnt = unix.Mount
	}
	if err := mnt(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", source, target, cmpOr(fstype, "bind"), err)
	}
	t.mounts = append(t.mounts, target)
	t.log().Debug("mounted", "src", source, "dir", target, "fs", fstype, "data", data)
	return nil
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

func (t *InstalledOS) unmountOne(p string) error {
	um := t.UnmountFunc
	if um == nil {
		um = unix.Unmount
	}
	err := um(p, 0)
	if errors.Is(err, unix.EBUSY) {
		t.log().Warn("mount busy, detaching lazily", "dir", p)
		err = um(p, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: not mounted any more
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	return nil
}

func (t *InstalledOS) unmountLast() error {
	if len(t.mounts) == 0 {
		return nil
	}
	last := t.mounts[len(t.mounts)-1]
	if err := t.unmountOne(last); err != nil {
		return err
	}
	t.mounts = t.mounts[:len(t.mounts)-1]
	return nil
}

// Unmount undoes every mount Mount made, last first; a busy mount is
// detached lazily (MNT_DETACH). It goes on after a failure and returns
// all failures joined; the mounts that failed stay recorded so a second
// call retries them.
func (t *InstalledOS) Unmount() error {
	var errs []error
	var kept []string
	for i := len(t.mounts) - 1; i >= 0; i-- {
		if err := t.unmountOne(t.mounts[i]); err != nil {
			errs = append(errs, err)
			kept = append([]string{t.mounts[i]}, kept...)
		}
	}
	t.mounts = kept
	return errors.Join(errs...)
}
