// Package fsprobe names the filesystem on a device or image from its
// superblock, with its UUID and label as blkid prints them, without blkid
// or udev. It reads only through io.ReaderAt and imports nothing of booty,
// so config, disk and provision can all use it.
package fsprobe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/booty-dev/booty/pkg/utf16text"
)

// Types Probe returns, as blkid and mount(2) spell them.
const (
	Ext2    = "ext2"
	Ext3    = "ext3"
	Ext4    = "ext4"
	XFS     = "xfs"
	Btrfs   = "btrfs"
	VFAT    = "vfat"
	ISO9660 = "iso9660"
	Swap    = "swap"
	LVM2PV  = "LVM2_member"
)

// ErrUnknown is returned by Probe when no known superblock is found.
var ErrUnknown = errors.New("unknown filesystem")

// Info is what Probe found. UUID is lower case for UUID-based filesystems
// and "ABCD-1234" for a vfat serial; it and Label are empty when the
// filesystem has none (iso9660 and LVM2_member report no UUID).
type Info struct {
	Type, UUID, Label string
}

// headSize covers every superblock Probe looks at in the first read: the
// btrfs superblock at 64 KiB (label up to 0x1022b) and the first iso9660
// volume descriptor at 32 KiB.
const headSize = 0x10400

// Probe reads the start of r and tries, in this order: ext2/3/4 (magic
// 0xEF53 at 1080; ext4 when an ext4-only feature is set, ext3 with a
// journal, else ext2), xfs ("XFSB" at 0), btrfs ("_BHRfS_M" at 64 KiB +
// 64), swap ("SWAPSPACE2" or "SWAP-SPACE" at 4086), LVM2 physical volume
// ("LABELONE" with "LVM2 001" in one of the first four 512-byte sectors),
// iso9660 (volume descriptors from sector 16; the Joliet label, which keeps
// case, wins over the primary one) and FAT12/16/32 (a plausible BPB; the
// label entry in the root directory wins over the boot sector copy, as in
// blkid; "NO NAME" is no label). A device shorter than a superblock simply
// does not match. Errors: a failed read, or ErrUnknown.
func Probe(r io.ReaderAt) (Info, error) {
	head, err := readSome(r, 0, headSize)
	if err != nil {
		return Info{}, err
	}
	for _, probe := range []func(io.ReaderAt, []byte) (Info, bool, error){ext, xfs, btrfs, swap, lvm, iso9660, fat} {
		info, ok, err := probe(r, head)
		if err != nil {
			return Info{}, err
		}
		if ok {
			return info, nil
		}
	}
	return Info{}, ErrUnknown
}

// readSome reads up to n bytes at off; a short device gives fewer bytes, not an error.
func readSome(r io.ReaderAt, off int64, n int) ([]byte, error) {
	buf := make([]byte, n)
	got, err := r.ReadAt(buf, off)
	if got < n && err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("probe filesystem: read %d bytes at offset %d: %w", n, off, err)
	}
	return buf[:got], nil
}

// field returns b[off:off+n], or nil when b is too short.
func field(b []byte, off, n int) []byte {
	if off < 0 || off+n > len(b) {
		return nil
	}
	return b[off : off+n]
}

func has(b []byte, off int, magic string) bool { return string(field(b, off, len(magic))) == magic }

// cString is b up to its first NUL, without trailing blanks.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimRight(string(b), " ")
}

// uuid formats 16 bytes in RFC 4122 (big-endian) order; "" for anything else.
func uuid(b []byte) string {
	if len(b) != 16 {
		return ""
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ext reads the superblock at 1024: magic at +0x38, features at +0x5c
// (compat), +0x60 (incompat), +0x64 (ro_compat), UUID at +0x68, volume
// name at +0x78.
func ext(_ io.ReaderAt, head []byte) (Info, bool, error) {
	sb := field(head, 1024, 0x88)
	if sb == nil || binary.LittleEndian.Uint16(sb[0x38:]) != 0xef53 {
		return Info{}, false, nil
	}
	le := binary.LittleEndian
	compat, incompat, roCompat := le.Uint32(sb[0x5c:]), le.Uint32(sb[0x60:]), le.Uint32(sb[0x64:])
	const (
		compatJournal   = 0x4
		incompatExt4    = 0x40 | 0x80 | 0x200 | 0x400 | 0x8000 // extents, 64bit, flex_bg, ea_inode, inline_data
		roCompatExt4    = 0x8 | 0x10 | 0x20 | 0x40 | 0x400     // huge_file, gdt_csum, dir_nlink, extra_isize, metadata_csum
		incompatJournal = 0x4                                  // journal device
	)
	info := Info{Type: Ext2, UUID: uuid(sb[0x68:0x78]), Label: cString(sb[0x78:0x88])}
	switch {
	case incompat&incompatExt4 != 0 || roCompat&roCompatExt4 != 0:
		info.Type = Ext4
	case compat&compatJournal != 0 || incompat&incompatJournal != 0:
		info.Type = Ext3
	}
	return info, true, nil
}

// xfs: "XFSB" at 0, UUID at 32, 12-byte label at 108.
func xfs(_ io.ReaderAt, head []byte) (Info, bool, error) {
	if !has(head, 0, "XFSB") || len(head) < 120 {
		return Info{}, false, nil
	}
	return Info{Type: XFS, UUID: uuid(head[32:48]), Label: cString(head[108:120])}, true, nil
}

// btrfs: superblock at 64 KiB, fsid at +0x20, magic at +0x40, label at +0x12b.
func btrfs(_ io.ReaderAt, head []byte) (Info, bool, error) {
	const sb = 0x10000
	if !has(head, sb+0x40, "_BHRfS_M") || len(head) < sb+0x12b+256 {
		return Info{}, false, nil
	}
	return Info{Type: Btrfs, UUID: uuid(head[sb+0x20 : sb+0x30]), Label: cString(head[sb+0x12b : sb+0x12b+256])}, true, nil
}

// swap: signature in the last 10 bytes of the first 4 KiB page; version 1
// ("SWAPSPACE2") has the UUID at 0x40c and a 16-byte label at 0x41c.
func swap(_ io.ReaderAt, head []byte) (Info, bool, error) {
	switch {
	case has(head, 4086, "SWAPSPACE2"):
		return Info{Type: Swap, UUID: uuid(head[0x40c:0x41c]), Label: cString(head[0x41c:0x42c])}, true, nil
	case has(head, 4086, "SWAP-SPACE"):
		return Info{Type: Swap}, true, nil
	}
	return Info{}, false, nil
}

// lvm: the LVM2 label header in one of the first four sectors.
func lvm(_ io.ReaderAt, head []byte) (Info, bool, error) {
	for s := range 4 {
		if has(head, s*512, "LABELONE") && has(head, s*512+24, "LVM2 001") {
			return Info{Type: LVM2PV}, true, nil
		}
	}
	return Info{}, false, nil
}

// iso9660 walks the volume descriptors from sector 16 (2048-byte sectors):
// type 1 is the primary, type 2 with a UCS-2 escape sequence is Joliet, 255
// ends the set. The volume identifier is 32 bytes at +40.
func iso9660(r io.ReaderAt, head []byte) (Info, bool, error) {
	if !has(head, 16*2048+1, "CD001") {
		return Info{}, false, nil
	}
	var primary, joliet string
	found := false
	for sector := int64(16); sector < 16+64; sector++ {
		buf, err := readSome(r, sector*2048, 2048)
		if err != nil {
			return Info{}, false, err
		}
		if len(buf) < 2048 || !has(buf, 1, "CD001") || buf[0] == 255 {
			break
		}
		switch buf[0] {
		case 1:
			primary = strings.TrimRight(string(buf[40:72]), " \x00")
			found = true
		case 2:
			if esc := buf[88:91]; esc[0] == '%' && esc[1] == '/' && (esc[2] == '@' || esc[2] == 'C' || esc[2] == 'E') {
				joliet = strings.TrimRight(utf16text.Decode(buf[40:72], binary.BigEndian), " ")
			}
		}
	}
	if !found {
		return Info{}, false, nil
	}
	if joliet != "" {
		return Info{Type: ISO9660, Label: joliet}, true, nil
	}
	return Info{Type: ISO9660, Label: primary}, true, nil
}

// fat reads a FAT12/16/32 boot sector: signature 0x55AA at 510, a plausible
// BPB, then the extended boot record (at 38 for FAT12/16, 66 for FAT32:
// signature 0x28/0x29, serial, 11-byte label) and the volume label entry
// (attribute 0x08) in the first run of the root directory.
func fat(r io.ReaderAt, head []byte) (Info, bool, error) {
	bs := field(head, 0, 512)
	if bs == nil || bs[510] != 0x55 || bs[511] != 0xAA {
		return Info{}, false, nil
	}
	le := binary.LittleEndian
	bytesPerSector := int64(le.Uint16(bs[11:]))
	secPerClus := int64(bs[13])
	reserved := int64(le.Uint16(bs[14:]))
	numFATs := int64(bs[16])
	rootEntries := int64(le.Uint16(bs[17:]))
	fatSz := int64(le.Uint16(bs[22:]))
	fat32 := fatSz == 0
	if fat32 {
		fatSz = int64(le.Uint32(bs[36:]))
	}
	validBPS := bytesPerSector == 512 || bytesPerSector == 1024 || bytesPerSector == 2048 || bytesPerSector == 4096
	if !validBPS || secPerClus == 0 || secPerClus&(secPerClus-1) != 0 || reserved == 0 || numFATs == 0 || fatSz == 0 {
		return Info{}, false, nil
	}
	sigOff, typeOff := 38, 54
	if fat32 {
		sigOff, typeOff = 66, 82
	}
	extended := bs[sigOff] == 0x29 || bs[sigOff] == 0x28
	if !strings.HasPrefix(string(bs[typeOff:typeOff+8]), "FAT") && !extended {
		return Info{}, false, nil
	}
	info := Info{Type: VFAT}
	if extended {
		id := le.Uint32(bs[sigOff+1:])
		info.UUID = fmt.Sprintf("%04X-%04X", id>>16, id&0xffff)
	}
	if bs[sigOff] == 0x29 {
		info.Label = strings.TrimRight(string(bs[sigOff+5:sigOff+16]), " \x00")
	}

	var rootOff, rootLen int64
	if fat32 {
		rootClus := int64(le.Uint32(bs[44:]))
		dataStart := (reserved + numFATs*fatSz) * bytesPerSector
		rootOff = dataStart + (rootClus-2)*secPerClus*bytesPerSector
		rootLen = secPerClus * bytesPerSector
	} else {
		rootOff = (reserved + numFATs*fatSz) * bytesPerSector
		rootLen = rootEntries * 32
	}
	var dir []byte
	if rootOff >= 0 && rootLen > 0 {
		var err error
		if dir, err = readSome(r, rootOff, int(min(rootLen, 64<<10))); err != nil {
			return Info{}, false, err
		}
	}
	for i := 0; i+32 <= len(dir); i += 32 {
		e := dir[i : i+32]
		if e[0] == 0 {
			break // end of directory
		}
		if e[0] == 0xE5 || e[11] == 0x0F || e[11]&0x08 == 0 {
			continue // deleted, long-name part, or not a label
		}
		info.Label = strings.TrimRight(string(e[0:11]), " \x00")
		return info, true, nil
	}
	if info.Label == "NO NAME" {
		info.Label = ""
	}
	return info, true, nil
}
