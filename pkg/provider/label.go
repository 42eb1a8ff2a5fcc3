package provider

import (
	"errors"
	"io"

	"github.com/booty-dev/booty/pkg/fsprobe"
)

// Filesystem types ReadLabel recognises, as mount(2) names them.
const (
	FSISO9660 = fsprobe.ISO9660
	FSVFAT    = fsprobe.VFAT
	FSExt4    = fsprobe.Ext4 // ext2, ext3 and ext4: the ext4 driver mounts all three
)

// ErrUnknownFS is returned by ReadLabel when no iso9660, vfat or ext2/3/4
// superblock is found.
var ErrUnknownFS = errors.New("no iso9660, vfat or ext2/3/4 filesystem found")

// ReadLabel reads the filesystem type and volume label of the device or
// image r with fsprobe.Probe (Joliet label preferred on iso9660, the root
// directory label entry on vfat) and returns them for the filesystems a
// config drive may hold: iso9660, vfat, and ext2/3/4 reported as FSExt4,
// the type to mount them with. Other or no filesystems give ErrUnknownFS;
// read errors are returned as they are.
func ReadLabel(r io.ReaderAt) (fstype, label string, err error) {
	info, err := fsprobe.Probe(r)
	if errors.Is(err, fsprobe.ErrUnknown) {
		return "", "", ErrUnknownFS
	}
	if err != nil {
		return "", "", err
	}
	if t, ok := mountType(info.Type); ok {
		return t, info.Label, nil
	}
	return "", "", ErrUnknownFS
}

// mountType is the type a config drive's filesystem is mounted with:
// iso9660 and vfat as they are, ext2/3/4 as FSExt4; false for the
// filesystems a config drive cannot be.
func mountType(fsType string) (string, bool) {
	switch fsType {
	case fsprobe.ISO9660, fsprobe.VFAT:
		return fsType, true
	case fsprobe.Ext2, fsprobe.Ext3, fsprobe.Ext4:
		return FSExt4, true
	}
	return "", false
}
