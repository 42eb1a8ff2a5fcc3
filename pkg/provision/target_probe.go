package provision

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
)

// GPT partition type GUIDs booty recognises, lower case as blkid prints them.
const (
	GUIDESP         = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
	GUIDLinuxFS     = "0fc63daf-8483-4772-8e79-3d69d8477de4"
	GUIDRootX86_64  = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709"
	GUIDRootAArch64 = "b921b045-1df0-41c3-af44-4c6f280d3fae"
	GUIDXBootLdr    = "bc13c2ff-59e6-4262-a352-b275fd6f7172"
	GUIDBIOSBoot    = "21686148-6449-6e6f-744e-656564454649"
	GUIDLinuxSwap   = "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f"
	GUIDLinuxLVM    = "e6d6d379-f507-44c2-a23c-238f2a3df928"
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
	// FSType is the filesystem found in the superblock: ext4, ext3, ext2,
	// xfs, btrfs, vfat, swap, or empty.
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

// ErrNoPartitionTable is wrapped when a disk has neither a GPT nor an MBR.
var ErrNoPartitionTable = errors.New("no partition table")

// readPartitionTable reads the GPT (or, without one, the MBR's primary
// partitions) of a disk with the given logical block size. Partition paths
// are not filled in. The backup GPT is not consulted: booty reads a disk
// it has just written.
func readPartitionTable(r io.ReaderAt, blockSize int64) ([]Partition, error) {
	if blockSize <= 0 {
		blockSize = 512
	}
	hdr := make([]byte, 92)
	if _, err := r.ReadAt(hdr, blockSize); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read GPT header: %w", err)
	}
	if string(hdr[:8]) == "EFI PART" {
		return readGPT(r, hdr, blockSize)
	}
	return readMBR(r)
}

func readGPT(r io.ReaderAt, hdr []byte, blockSize int64) ([]Partition, error) {
	le := binary.LittleEndian
	entLBA := le.Uint64(hdr[72:])
	n := le.Uint32(hdr[80:])
	size := le.Uint32(hdr[84:])
	if size < 128 || n > 4096 {
		return nil, fmt.Errorf("read GPT: implausible entry table (%d entries of %d bytes)", n, size)
	}
	buf := make([]byte, int64(n)*int64(size))
	if _, err := r.ReadAt(buf, int64(entLBA)*blockSize); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read GPT entries: %w", err)
	}
	var parts []Partition
	for i := range int(n) {
		e := buf[i*int(size) : (i+1)*int(size)]
		typ := guidString(e[0:16])
		if typ == "00000000-0000-0000-0000-000000000000" {
			continue
		}
		first, last := le.Uint64(e[32:]), le.Uint64(e[40:])
		name := make([]uint16, 0, 36)
		for j := 56; j+1 < 128; j += 2 {
			c := le.Uint16(e[j:])
			if c == 0 {
				break
			}
			name = append(name, c)
		}
		parts = append(parts, Partition{
			Number:    i + 1,
			StartLBA:  first,
			SizeLBA:   last - first + 1,
			TypeGUID:  typ,
			PartUUID:  guidString(e[16:32]),
			PartLabel: string(utf16.Decode(name)),
		})
	}
	return parts, nil
}

func readMBR(r io.ReaderAt) ([]Partition, error) {
	mbr := make([]byte, 512)
	if _, err := r.ReadAt(mbr, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read MBR: %w", err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xaa {
		return nil, ErrNoPartitionTable
	}
	var parts []Partition
	for i := range 4 {
		e := mbr[446+16*i : 446+16*(i+1)]
		typ := e[4]
		if typ == 0 || typ == 0x05 || typ == 0x0f || typ == 0x85 {
			continue // empty or extended
		}
		parts = append(parts, Partition{
			Number:   i + 1,
			StartLBA: uint64(binary.LittleEndian.Uint32(e[8:])),
			SizeLBA:  uint64(binary.LittleEndian.Uint32(e[12:])),
			MBRType:  typ,
		})
	}
	return parts, nil
}

// guidString formats a GPT mixed-endian GUID as blkid does.
func guidString(b []byte) string {
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x",
		binary.LittleEndian.Uint32(b[0:4]), binary.LittleEndian.Uint16(b[4:6]),
		binary.LittleEndian.Uint16(b[6:8]), b[8:10], b[10:16])
}

// probeFS reads the superblock of a filesystem and fills FSType, UUID and
// Label of p. Unknown content leaves them empty; only read errors fail.
func probeFS(r io.ReaderAt, p *Partition) error {
	buf := make([]byte, 128<<10)
	n, err := r.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read superblock of %s: %w", p.Path, err)
	}
	buf = buf[:n]
	at := func(off, l int) []byte {
		if off+l > len(buf) {
			return nil
		}
		return buf[off : off+l]
	}
	cstr := func(b []byte) string { return strings.TrimRight(string(bytes.SplitN(b, []byte{0}, 2)[0]), " ") }
	switch {
	case bytes.Equal(at(0x438, 2), []byte{0x53, 0xef}): // ext2/3/4
		compat := binary.LittleEndian.Uint32(at(0x45c, 4))
		incompat := binary.LittleEndian.Uint32(at(0x460, 4))
		p.FSType = "ext2"
		if compat&0x4 != 0 { // has_journal
			p.FSType = "ext3"
		}
		if incompat&^0x6 != 0 { // anything beyond filetype/recover: extents, 64bit, flex_bg…
			p.FSType = "ext4"
		}
		p.UUID = uuidString(at(0x468, 16))
		p.Label = cstr(at(0x478, 16))
	case string(at(0, 4)) == "XFSB":
		p.FSType = "xfs"
		p.UUID = uuidString(at(32, 16))
		p.Label = cstr(at(108, 12))
	case string(at(0x10040, 8)) == "_BHRfS_M":
		p.FSType = "btrfs"
		p.UUID = uuidString(at(0x10020, 16))
		p.Label = cstr(at(0x1012b, 256))
	case string(at(0xff6, 10)) == "SWAPSPACE2" || string(at(0xff6, 10)) == "SWAP-SPACE":
		p.FSType = "swap"
		p.UUID = uuidString(at(0x40c, 16))
		p.Label = cstr(at(0x41c, 16))
	case len(buf) >= 512 && buf[510] == 0x55 && buf[511] == 0xaa &&
		(string(at(0x52, 5)) == "FAT32" || string(at(0x36, 3)) == "FAT"):
		p.FSType = "vfat"
		idOff, labOff := 0x27, 0x2b
		if string(at(0x52, 5)) == "FAT32" {
			idOff, labOff = 0x43, 0x47
		}
		id := binary.LittleEndian.Uint32(at(idOff, 4))
		p.UUID = fmt.Sprintf("%04X-%04X", id>>16, id&0xffff)
		if l := cstr(at(labOff, 11)); l != "NO NAME" {
			p.Label = l
		}
	}
	return nil
}

func uuidString(b []byte) string {
	if len(b) != 16 {
		return ""
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
