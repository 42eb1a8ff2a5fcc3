package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/booty-dev/booty/pkg/command"
	"github.com/booty-dev/booty/pkg/fsprobe"
	"github.com/booty-dev/booty/pkg/fstab"
)

// Filesystem and volume names Grow takes and detects (fsprobe.Probe), as
// blkid spells them.
const (
	FSExt2   = fsprobe.Ext2
	FSExt3   = fsprobe.Ext3
	FSExt4   = fsprobe.Ext4
	FSXFS    = fsprobe.XFS
	FSBtrfs  = fsprobe.Btrfs
	FSSwap   = fsprobe.Swap
	FSLVM2PV = fsprobe.LVM2PV
)

// Sentinels of GrowFilesystem.
var (
	// ErrUnknownFS: no known superblock was found (fsprobe.ErrUnknown).
	ErrUnknownFS = fsprobe.ErrUnknown
	// ErrUnsupportedFS: the filesystem is known but booty cannot grow it.
	ErrUnsupportedFS = errors.New("filesystem cannot be grown")
	// ErrNotMounted: the filesystem must be mounted inside the chroot to grow (xfs, btrfs).
	ErrNotMounted = errors.New("filesystem is not mounted")
)

// FSGrower grows the filesystem on the root partition with the installed
// OS's own tools. Fields are seams; empty ones take the defaults named.
type FSGrower struct {
	// Runner runs the installed OS's tools chrooted into it; the caller
	// has mounted it with /dev, /proc, /sys (and /run for LVM) bound inside.
	Runner command.Runner
	// MountsFile lists mounts ("/proc/self/mounts"): xfs and btrfs are grown
	// through their mount point, LVM finds the root LV from the mount at the chroot.
	MountsFile string
	// SysRoot is sysfs ("/sys"), for device-mapper names of /dev/dm-N.
	SysRoot string
	// RootLV is "VG/LV" of the LV to extend after pvresize; empty finds it
	// from the device mounted at the chroot directory.
	RootLV string
	// Open opens partDev for fsprobe.Probe when fsType is empty (os.Open).
	Open func(path string) (io.ReadCloser, error)
	Log  *slog.Logger
}

// GrowFilesystem grows the filesystem on partDev to fill its (already
// grown) partition, running the installed OS's tools chrooted in
// chrootDir; see FSGrower.Grow. partDev is a path valid both on the host
// (for detection) and in the chroot (for the tools).
func GrowFilesystem(ctx context.Context, r command.Runner, chrootDir, partDev, fsType string) error {
	return (&FSGrower{Runner: r}).Grow(ctx, chrootDir, partDev, fsType)
}

// Grow detects the filesystem when fsType is empty (fsprobe.Probe on partDev),
// then runs:
//   - ext2/3/4: resize2fs DEV (online when mounted; an unmounted filesystem
//     that was mounted since its last check makes resize2fs ask for e2fsck,
//     which is an error here: mount it first);
//   - xfs: xfs_growfs MOUNTPOINT, the mount point of partDev inside chrootDir
//     (ErrNotMounted when it is not mounted there);
//   - btrfs: btrfs filesystem resize max MOUNTPOINT;
//   - LVM2 PV: pvresize DEV, then, when the root LV (RootLV, or the LV
//     mounted at chrootDir) is in the PV's volume group and the group has
//     free extents, lvextend -r -l +100%FREE VG/LV (which grows its filesystem).
//
// Other filesystems return ErrUnsupportedFS. A failing command returns its
// error with its stderr, naming the command.
func (g *FSGrower) Grow(ctx context.Context, chrootDir, partDev, fsType string) error {
	log := g.Log
	if log == nil {
		log = slog.Default().With("component", "disk")
	}
	if fsType == "" {
		open := g.Open
		if open == nil {
			open = func(p string) (io.ReadCloser, error) { return os.Open(p) }
		}
		f, err := open(partDev)
		if err != nil {
			return fmt.Errorf("grow filesystem on %s: %w", partDev, err)
		}
		ra, ok := f.(io.ReaderAt)
		if !ok {
			f.Close()
			return fmt.Errorf("grow filesystem on %s: opened device cannot be read at offsets", partDev)
		}
		info, err := fsprobe.Probe(ra)
		f.Close()
		if err != nil {
			return fmt.Errorf("grow filesystem on %s: %w", partDev, err)
		}
		fsType = info.Type
	}
	log.Info("grow filesystem", "device", partDev, "fs", fsType, "root", chrootDir)
	switch strings.ToLower(fsType) {
	case FSExt2, FSExt3, FSExt4:
		_, err := g.run(ctx, chrootDir, "resize2fs", partDev)
		return err
	case FSXFS, FSBtrfs:
		mp, err := g.mountPoint(chrootDir, partDev)
		if err != nil {
			return fmt.Errorf("grow %s on %s: %w", fsType, partDev, err)
		}
		if fsType == FSXFS {
			_, err = g.run(ctx, chrootDir, "xfs_growfs", mp)
		} else {
			_, err = g.run(ctx, chrootDir, "btrfs", "filesystem", "resize", "max", mp)
		}
		return err
	case strings.ToLower(FSLVM2PV), "lvm", "lvm2":
		return g.growLVM(ctx, chrootDir, partDev, log)
	}
	return fmt.Errorf("grow filesystem on %s: %s: %w", partDev, fsType, ErrUnsupportedFS)
}

func (g *FSGrower) growLVM(ctx context.Context, chrootDir, partDev string, log *slog.Logger) error {
	if _, err := g.run(ctx, chrootDir, "pvresize", partDev); err != nil {
		return err
	}
	out, err := g.run(ctx, chrootDir, "pvs", "--noheadings", "-o", "vg_name", partDev)
	if err != nil {
		return err
	}
	vg := strings.TrimSpace(string(out))
	if vg == "" {
		log.Info("physical volume is in no volume group, nothing to extend", "device", partDev)
		return nil
	}
	lv := g.RootLV
	if lv == "" {
		src, err := g.rootSource(chrootDir)
		if err != nil {
			return fmt.Errorf("grow LVM on %s: find the root logical volume: %w", partDev, err)
		}
		lv = g.lvName(src)
		if lv == "" {
			return fmt.Errorf("grow LVM on %s: root %s is mounted from %s, not a logical volume; set the root LV explicitly", partDev, chrootDir, src)
		}
	}
	if !strings.HasPrefix(lv, vg+"/") {
		log.Info("root logical volume is not in the grown volume group, not extending", "lv", lv, "vg", vg)
		return nil
	}
	out, err = g.run(ctx, chrootDir, "vgs", "--noheadings", "-o", "vg_free_count", vg)
	if err != nil {
		return err
	}
	free, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return fmt.Errorf("grow LVM on %s: parse free extents of %s %q: %w", partDev, vg, strings.TrimSpace(string(out)), err)
	}
	if free == 0 {
		log.Info("volume group has no free extents, root LV already fills it", "vg", vg, "lv", lv)
		return nil
	}
	_, err = g.run(ctx, chrootDir, "lvextend", "-r", "-l", "+100%FREE", lv)
	return err
}

func (g *FSGrower) run(ctx context.Context, root, name string, args ...string) ([]byte, error) {
	if g.Runner == nil {
		return nil, fmt.Errorf("run %s: no runner", name)
	}
	stdout, stderr, err := g.Runner.RunChroot(ctx, root, name, args...)
	if err != nil {
		return stdout, fmt.Errorf("run %s %s in %s: %w: %s", name, strings.Join(args, " "), root, err, bytes.TrimSpace(stderr))
	}
	return stdout, nil
}

type mountEntry struct{ source, target string }

func (g *FSGrower) mounts() ([]mountEntry, error) {
	p := g.MountsFile
	if p == "" {
		p = "/proc/self/mounts"
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read mounts %s: %w", p, err)
	}
	var out []mountEntry
	for _, e := range fstab.Parse(data) {
		out = append(out, mountEntry{e.Spec, e.File})
	}
	return out, nil
}

func sameDevice(a, b string) bool {
	if a == b {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// mountPoint returns where partDev is mounted, as a path inside chrootDir.
// The last mount of the device inside chrootDir wins.
func (g *FSGrower) mountPoint(chrootDir, partDev string) (string, error) {
	ms, err := g.mounts()
	if err != nil {
		return "", err
	}
	root := filepath.Clean(chrootDir)
	found, outside := "", ""
	for _, m := range ms {
		if !sameDevice(m.source, partDev) {
			continue
		}
		rel, err := filepath.Rel(root, m.target)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			outside = m.target
			continue
		}
		found = filepath.Join("/", rel)
	}
	if found == "" {
		if outside != "" {
			return "", fmt.Errorf("mounted at %s, outside the chroot %s: %w", outside, chrootDir, ErrNotMounted)
		}
		return "", fmt.Errorf("%s in %s: %w", partDev, chrootDir, ErrNotMounted)
	}
	return found, nil
}

// rootSource returns the device mounted at chrootDir.
func (g *FSGrower) rootSource(chrootDir string) (string, error) {
	ms, err := g.mounts()
	if err != nil {
		return "", err
	}
	root := filepath.Clean(chrootDir)
	src := ""
	for _, m := range ms {
		if filepath.Clean(m.target) == root {
			src = m.source
		}
	}
	if src == "" {
		return "", fmt.Errorf("nothing is mounted at %s: %w", chrootDir, ErrNotMounted)
	}
	return src, nil
}

// lvName turns a mount source into "VG/LV": /dev/mapper/vg-lv (dashes in
// names doubled), /dev/VG/LV, or /dev/dm-N through sysfs dm/name. It
// returns "" for anything else.
func (g *FSGrower) lvName(src string) string {
	if name, ok := strings.CutPrefix(src, "/dev/mapper/"); ok {
		return splitDMName(name)
	}
	if base := filepath.Base(src); strings.HasPrefix(base, "dm-") && filepath.Dir(src) == "/dev" {
		sys := g.SysRoot
		if sys == "" {
			sys = "/sys"
		}
		b, err := os.ReadFile(filepath.Join(sys, "block", base, "dm", "name"))
		if err != nil {
			return ""
		}
		return splitDMName(strings.TrimSpace(string(b)))
	}
	parts := strings.Split(strings.TrimPrefix(src, "/dev/"), "/")
	if strings.HasPrefix(src, "/dev/") && len(parts) == 2 && parts[0] != "disk" && parts[0] != "mapper" {
		return parts[0] + "/" + parts[1]
	}
	return ""
}

// splitDMName splits a device-mapper name "my--vg-root" into "my-vg/root".
func splitDMName(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] != '-' {
			continue
		}
		if i+1 < len(name) && name[i+1] == '-' {
			i++
			continue
		}
		vg, lv := name[:i], name[i+1:]
		if vg == "" || lv == "" {
			return ""
		}
		return strings.ReplaceAll(vg, "--", "-") + "/" + strings.ReplaceAll(lv, "--", "-")
	}
	return ""
}
