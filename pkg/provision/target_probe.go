package provision

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/fsprobe"
)

// GPT partition type GUIDs booty recognises, lower case as blkid prints
// them (pkg/disk's constants).
const (
	GUIDESP         = disk.TypeEFISystem
	GUIDLinuxFS     = disk.TypeLinuxFilesystem
	GUIDRootX86_64  = disk.TypeLinuxRootX86_64
	GUIDRootAArch64 = disk.TypeLinuxRootARM64
	GUIDXBootLdr    = disk.TypeXBOOTLDR
	GUIDBIOSBoot    = disk.TypeBIOSBoot
	GUIDLinuxSwap   = disk.TypeLinuxSwap
	GUIDLinuxLVM    = disk.TypeLinuxLVM
)

// Partition is one partition of the target disk as booty reads it from
// the partition table and the filesystem superblock, without udev or blkid.
type Partition struct {
	// Path is the device node, "/dev/vda2", "/dev/nvme0n1p2".
	Path string
	// Number is the 1-based partition number.
	Number int
	// StartLBA and SizeLBA count logical blocks of the disk.
	StartLBA, SizeLBA uint64
	// TypeGUID and PartUUID come from the GPT entry, lower case; empty on MBR.
	TypeGUID, PartUUID string
	// PartLabel is the GPT partition name.
	PartLabel string
	// MBRType is the MBR partition type byte; 0 on GPT.
	MBRType byte
	// FSType is the filesystem fsprobe found in the superblock: ext4, ext3,
	// ext2, xfs, btrfs, vfat, swap, LVM2_member, iso9660, or empty.
	FSType string
	// UUID and Label are the filesystem's, as blkid prints them (vfat
	// serials as "ABCD-1234").
	UUID, Label string
}

func (p Partition) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", p.Path)
	if p.TypeGUID != "" {
		fmt.Fprintf(&b, " type=%s", p.TypeGUID)
	} else if p.MBRType != 0 {
		fmt.Fprintf(&b, " type=0x%02x", p.MBRType)
	}
	if p.PartLabel != "" {
		fmt.Fprintf(&b, " partlabel=%q", p.PartLabel)
	}
	fs := p.FSType
	if fs == "" {
		fs = "unknown"
	}
	fmt.Fprintf(&b, " fs=%s", fs)
	if p.Label != "" {
		fmt.Fprintf(&b, " label=%q", p.Label)
	}
	if p.UUID != "" {
		fmt.Fprintf(&b, " uuid=%s", p.UUID)
	}
	return b.String()
}

// ErrNoPartitionTable is wrapped when a disk has neither a GPT nor an MBR
// (it is disk.ErrNoPartitionTable).
var ErrNoPartitionTable = disk.ErrNoPartitionTable

// readPartitionTable reads the partition table of the disk r with
// disk.ReadPartitionTable: the primary GPT (CRCs checked), else the backup
// GPT, else the MBR's primary partitions. The disk's size comes from r's
// Size method or from seeking to its end. StartLBA and SizeLBA count the
// table's own sectors (the size the GPT header was found at, 512 on MBR),
// so the block size argument is not needed and kept for the callers'
// sake. Partition paths and filesystems are not filled in. Errors wrap
// ErrNoPartitionTable when there is no table, disk.ErrBadGPT for a damaged
// one, or the read error.
func readPartitionTable(r io.ReaderAt, _ int64) ([]Partition, error) {
	size, err := readerSize(r)
	if err != nil {
		return nil, fmt.Errorf("read partition table: %w", err)
	}
	pt, err := disk.ReadPartitionTable(r, size)
	if err != nil {
		return nil, err
	}
	parts := make([]Partition, 0, len(pt.Partitions))
	for _, dp := range pt.Partitions {
		p := Partition{Number: dp.Number, StartLBA: uint64(dp.Start / pt.SectorSize), SizeLBA: uint64(dp.Size / pt.SectorSize),
			PartUUID: dp.PartUUID, PartLabel: dp.Name, MBRType: dp.MBRType}
		if pt.Kind == "gpt" {
			p.TypeGUID = dp.Type
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// readerSize is the size of a device or file: Size() when r has it (as
// bytes.Reader and io.SectionReader do), else the end found by seeking,
// with the offset put back.
func readerSize(r io.ReaderAt) (int64, error) {
	switch v := r.(type) {
	case interface{ Size() int64 }:
		return v.Size(), nil
	case io.Seeker:
		cur, err := v.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, fmt.Errorf("find size: %w", err)
		}
		end, err := v.Seek(0, io.SeekEnd)
		if err != nil {
			return 0, fmt.Errorf("find size: %w", err)
		}
		if _, err := v.Seek(cur, io.SeekStart); err != nil {
			return 0, fmt.Errorf("find size: %w", err)
		}
		return end, nil
	}
	return 0, fmt.Errorf("find size: %T can neither tell its size nor seek", r)
}

// probeFS fills FSType, UUID and Label of p from the filesystem superblock
// (fsprobe.Probe). Unknown content leaves them empty; only read errors fail.
func probeFS(r io.ReaderAt, p *Partition) error {
	info, err := fsprobe.Probe(r)
	if errors.Is(err, fsprobe.ErrUnknown) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read superblock of %s: %w", p.Path, err)
	}
	p.FSType, p.UUID, p.Label = info.Type, info.UUID, info.Label
	return nil
}
