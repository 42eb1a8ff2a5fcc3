package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/booty-dev/booty/pkg/fsprobe"
)

// Labeled is a block device (disk or partition) whose filesystem carries
// one of the labels FindLabeled looked for.
type Labeled struct {
	// Name is the kernel name ("sr0", "vdb1"); Device its node under DevRoot.
	Name, Device string
	// FSType is what fsprobe found: iso9660, vfat, ext4, ...
	FSType string
	Label  string
}

// FindLabeled lists, in name order, the block devices under
// SysRoot/class/block (disks and partitions) whose filesystem label is one
// of labels, compared case-insensitively: the config drive of a
// virtual-media boot. RAM disks and devices of size 0 (an empty CD drive)
// are skipped; a device that cannot be opened or read is skipped and logged
// at debug level. A missing SysRoot/class/block wraps fs.ErrNotExist.
func (m *Manager) FindLabeled(labels []string) ([]Labeled, error) {
	classDir := filepath.Join(m.SysRoot, "class", "block")
	entries, err := os.ReadDir(classDir)
	if err != nil {
		return nil, fmt.Errorf("list block devices in %s: %w", classDir, err)
	}
	var out []Labeled
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "zram") {
			continue
		}
		if size, err := os.ReadFile(filepath.Join(classDir, name, "size")); err == nil && strings.TrimSpace(string(size)) == "0" {
			continue
		}
		dev := filepath.Join(m.devRoot(), name)
		info, err := m.probeDevice(dev)
		if err != nil {
			if !errors.Is(err, fsprobe.ErrUnknown) {
				m.log().Debug("skip block device", "device", dev, "err", err)
			}
			continue
		}
		if slices.ContainsFunc(labels, func(l string) bool { return strings.EqualFold(l, info.Label) }) {
			out = append(out, Labeled{Name: name, Device: dev, FSType: info.Type, Label: info.Label})
		}
	}
	return out, nil
}

// probeDevice reads the filesystem superblock of the device at path.
func (m *Manager) probeDevice(path string) (fsprobe.Info, error) {
	f, err := m.open(path, os.O_RDONLY)
	if err != nil {
		return fsprobe.Info{}, err
	}
	defer f.Close()
	return fsprobe.Probe(f)
}
