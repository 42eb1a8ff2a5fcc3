package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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

// Target mounts the OS installed on a disk so it can be configured:
// the root filesystem at MountDir, the filesystems its /etc/fstab places
// on the same disk (/boot, /boot/efi, /var, ...), the ESP, and bind
// mounts of the agent's /dev, /proc, /sys (+efivars) and /run for a
// chroot. Every mount is recorded; Unmount undoes them in reverse order.
type Target struct {
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
	// ReadPartitions lists the disk's partitions with their filesystems;
	// the default reads the partition table and superblocks of Disk,
	// waiting for the kernel's partition device nodes.
	ReadPartitions func(ctx context.Context, disk string, blockSize int64) ([]Partition, error)

	parts  []Partition
	root   *Partition
	esp    *Partition
	mounts []string // host paths, in mount order
}

// NewTarget returns a Target for disk with the system's mount calls.
func NewTarget(disk string) *Target {
	return &Target{
		Disk:           disk,
		MountDir:       DefaultMountDir,
		MountFunc:      unix.Mount,
		UnmountFunc:    unix.Unmount,
		ReadPartitions: readDiskPartitions,
	}
}

func (t *Target) log() *slog.Logger {
	if t.Log == nil {
		return slog.Default().With("component", "provision")
	}
	return t.Log
}

// Root returns the directory the installed OS is mounted at.
func (t *Target) Root() string {
	if t.MountDir == "" {
		return DefaultMountDir
	}
	return t.MountDir
}

// Partitions returns the partitions Mount found on the disk.
func (t *Target) Partitions() []Partition { return slices.Clone(t.parts) }

// RootPartition returns the partition mounted as root; false before Mount.
func (t *Target) RootPartition() (Partition, bool) {
	if t.root == nil {
		return Partition{}, false
	}
	return *t.root, true
}

// ESP returns the EFI system partition of the disk; false when there is none.
func (t *Target) ESP() (Partition, bool) {
	if t.esp == nil {
		return Partition{}, false
	}
	return *t.esp, true
}

// Mounted returns the host paths mounted so far, in mount order.
func (t *Target) Mounted() []string { return slices.Clone(t.mounts) }

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
func (t *Target) Mount(ctx context.Context) (err error) {
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
	read := t.ReadPartitions
	if read == nil {
		read = readDiskPartitions
	}
	parts, err := read(ctx, t.Disk, t.BlockSize)
	if err != nil {
		return fmt.Errorf("mount target %s: %w", t.Disk, err)
	}
	t.parts = parts
	t.root, t.esp = nil, nil
	for i := range parts {
		if parts[i].TypeGUID == GUIDESP || parts[i].MBRType == 0xef {
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
func rootCandidates(parts []Partition) []*Partition {
	var out []*Partition
	add := func(match func(p *Partition) bool) {
		for i := range parts {
			p := &parts[i]
			if match(p) && !slices.Contains(out, p) && mountableFS(p.FSType) {
				out = append(out, p)
			}
		}
	}
	add(func(p *Partition) bool { return p.TypeGUID == GUIDRootX86_64 || p.TypeGUID == GUIDRootAArch64 })
	add(func(p *Partition) bool {
		return slices.Contains(rootLabels, p.Label) || slices.Contains(rootLabels, p.PartLabel)
	})
	var rest []*Partition
	for i := range parts {
		p := &parts[i]
		if (p.TypeGUID == GUIDLinuxFS || p.MBRType == 0x83 || (p.TypeGUID == "" && p.MBRType == 0)) &&
			!slices.Contains(out, p) && mountableFS(p.FSType) {
			rest = append(rest, p)
		}
	}
	slices.SortStableFunc(rest, func(a, b *Partition) int {
		switch {
		case a.SizeLBA > b.SizeLBA:
			return -1
		case a.SizeLBA < b.SizeLBA:
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

func (t *Target) mountRoot() error {
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

// fstabLine is one entry of /etc/fstab.
type fstabLine struct {
	spec, file, vfstype string
	opts                []string
}

func parseFstab(data []byte) []fstabLine {
	var out []fstabLine
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		e := fstabLine{spec: unescapeOctal(f[0]), file: unescapeOctal(f[1])}
		if len(f) > 2 {
			e.vfstype = f[2]
		}
		if len(f) > 3 {
			e.opts = strings.Split(f[3], ",")
		}
		out = append(out, e)
	}
	return out
}

// unescapeOctal undoes fstab's \040-style escapes.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// findPartition returns the partition an fstab device spec names.
func findPartition(parts []Partition, spec string) *Partition {
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
		case key == "PARTLABEL" && val != "" && val == p.PartLabel:
			return p
		}
	}
	return nil
}

func (t *Target) mountFstab() error {
	root := targetFS{dir: t.Root()}
	data, err := root.readFile("etc/fstab")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mount target %s: read /etc/fstab: %w", t.Disk, err)
	}
	entries := parseFstab(data)
	slices.SortStableFunc(entries, func(a, b fstabLine) int {
		return strings.Count(path.Clean(a.file), "/") - strings.Count(path.Clean(b.file), "/")
	})
	espMounted := false
	for _, e := range entries {
		mp := path.Clean(e.file)
		if !strings.HasPrefix(mp, "/") || mp == "/" || e.vfstype == "swap" || mp == "none" ||
			slices.Contains(e.opts, "noauto") || slices.Contains(e.opts, "bind") {
			continue
		}
		p := findPartition(t.parts, e.spec)
		var data string
		for _, o := range e.opts {
			if strings.HasPrefix(o, "subvol=") {
				data = o
			}
		}
		if p == nil || (p == t.root && data == "") {
			if (mp == "/boot" || mp == "/boot/efi" || mp == "/efi") && !slices.Contains(e.opts, "nofail") && p == nil {
				return fmt.Errorf("mount target %s: /etc/fstab mounts %s from %s, which is no partition of the disk", t.Disk, mp, e.spec)
			}
			t.log().Debug("fstab entry not on the target disk, not mounted", "spec", e.spec, "mountpoint", mp)
			continue
		}
		fstype := p.FSType
		if fstype == "" {
			fstype = e.vfstype
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
func (t *Target) mountInRoot(source, mp, fstype, data string) error {
	rel, err := (targetFS{dir: t.Root()}).mkdirAll(mp, 0o755)
	if err != nil {
		return fmt.Errorf("mount target %s: mount point %s: %w", t.Disk, mp, err)
	}
	if err := t.mount(source, joinRoot(t.Root(), rel), fstype, 0, data); err != nil {
		return fmt.Errorf("mount target %s: %w", t.Disk, err)
	}
	return nil
}

func (t *Target) mountBinds() error {
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
		if err := t.mount(src, joinRoot(t.Root(), rel), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount target %s: bind %s: %w", t.Disk, src, err)
		}
	}
	return nil
}

func (t *Target) mount(source, target, fstype string, flags uintptr, data string) error {
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

func (t *Target) unmountOne(p string) error {
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

func (t *Target) unmountLast() error {
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
func (t *Target) Unmount() error {
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

// partitionPath names partition n of disk the way the kernel does:
// "/dev/vda2", "/dev/nvme0n1p2", "/dev/loop0p2", "/dev/mmcblk0p2".
func partitionPath(disk string, n int) string {
	if disk != "" && disk[len(disk)-1] >= '0' && disk[len(disk)-1] <= '9' {
		return fmt.Sprintf("%sp%d", disk, n)
	}
	return fmt.Sprintf("%s%d", disk, n)
}

// readDiskPartitions reads disk's partition table, waits (bounded by
// partitionWait and ctx) for every partition's device node, and probes
// each partition's filesystem.
func readDiskPartitions(ctx context.Context, disk string, blockSize int64) ([]Partition, error) {
	dev, err := filepath.EvalSymlinks(disk)
	if err != nil {
		return nil, fmt.Errorf("read partitions of %s: %w", disk, err)
	}
	f, err := os.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("read partitions of %s: %w", disk, err)
	}
	if blockSize <= 0 {
		if n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET); err == nil && n > 0 {
			blockSize = int64(n)
		} else {
			blockSize = 512
		}
	}
	parts, err := readPartitionTable(f, blockSize)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read partitions of %s: %w", disk, err)
	}
	deadline := time.Now().Add(partitionWait)
	for i := range parts {
		p := &parts[i]
		p.Path = partitionPath(dev, p.Number)
		for {
			st, err := os.Stat(p.Path)
			if err == nil && st.Mode()&fs.ModeDevice != 0 {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("read partitions of %s: device node %s did not appear within %s", disk, p.Path, partitionWait)
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("read partitions of %s: waiting for %s: %w", disk, p.Path, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		pf, err := os.Open(p.Path)
		if err != nil {
			return nil, fmt.Errorf("read partitions of %s: %w", disk, err)
		}
		err = probeFS(pf, p)
		pf.Close()
		if err != nil {
			return nil, fmt.Errorf("read partitions of %s: %w", disk, err)
		}
	}
	return parts, nil
}
