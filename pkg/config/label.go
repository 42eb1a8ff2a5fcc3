package config

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
)

// Filesystem types ReadLabel recognises, as mount(2) names them.
const (
	FSISO9660 = "iso9660"
	FSVFAT    = "vfat"
	FSExt4    = "ext4" // ext2, ext3 and ext4: the ext4 driver mounts all three
)

// ErrUnknownFS is returned by ReadLabel when no known superblock is found.
var ErrUnknownFS = errors.New("no iso9660, vfat or ext2/3/4 filesystem found")

// ReadLabel reads the filesystem type and volume label from the superblock
// of the device or image r. It tries ext2/3/4, then iso9660 (preferring the
// Joliet label, which keeps case), then vfat (preferring the root directory
// label entry over the boot sector copy, as blkid does). It returns
// ErrUnknownFS when none matches and any read error other than a short read.
func ReadLabel(r io.ReaderAt) (fstype, label string, err error) {
	probes := []struct {
		fstype string
		probe  func(io.ReaderAt) (string, bool, error)
	}{{FSExt4, extLabel}, {FSISO9660, isoLabel}, {FSVFAT, fatLabel}}
	for _, p := range probes {
		l, ok, err := p.probe(r)
		if err != nil {
			return "", "", err
		}
		if ok {
			return p.fstype, l, nil
		}
	}
	return "", "", ErrUnknownFS
}

// readAt reads len(buf) bytes at off; a short device gives ok=false, not an error.
func readAt(r io.ReaderAt, buf []byte, off int64) (bool, error) {
	n, err := r.ReadAt(buf, off)
	if n == len(buf) {
		return true, nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false, nil
	}
	return false, fmt.Errorf("read superblock at offset %d: %w", off, err)
}

// extLabel reads the ext2/3/4 superblock at byte 1024: magic 0xEF53 at +56,
// s_volume_name (16 bytes, NUL padded) at +120.
func extLabel(r io.ReaderAt) (string, bool, error) {
	sb := make([]byte, 1024)
	if ok, err := readAt(r, sb, 1024); !ok {
		return "", false, err
	}
	if binary.LittleEndian.Uint16(sb[56:]) != 0xEF53 {
		return "", false, nil
	}
	return cString(sb[120:136]), true, nil
}

// isoLabel walks the iso9660 volume descriptors from sector 16 (2048-byte
// sectors): type 1 is the primary, type 2 with a UCS-2 escape sequence is
// Joliet, 255 ends the set. The volume identifier is 32 bytes at +40.
func isoLabel(r io.ReaderAt) (string, bool, error) {
	var primary, joliet string
	found := false
	buf := make([]byte, 2048)
	for sector := int64(16); sector < 16+64; sector++ {
		ok, err := readAt(r, buf, sector*2048)
		if err != nil {
			return "", false, err
		}
		if !ok || !bytes.Equal(buf[1:6], []byte("CD001")) {
			break
		}
		switch buf[0] {
		case 1:
			primary = strings.TrimRight(string(buf[40:72]), " \x00")
			found = true
		case 2:
			esc := buf[88:91]
			if esc[0] == '%' && esc[1] == '/' && (esc[2] == '@' || esc[2] == 'C' || esc[2] == 'E') {
				joliet = ucs2BE(buf[40:72])
			}
		case 255:
			sector = 1 << 40 // terminator: stop
		}
	}
	if !found {
		return "", false, nil
	}
	if joliet != "" {
		return joliet, true, nil
	}
	return primary, true, nil
}

func ucs2BE(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		u = append(u, binary.BigEndian.Uint16(b[i:]))
	}
	return strings.TrimRight(string(utf16.Decode(u)), " \x00")
}

// fatLabel reads a FAT12/16/32 boot sector: signature 0x55AA at 510, the
// BPB, then the volume label entry (attribute 0x08) in the first sector run
// of the root directory, falling back to the 11-byte label in the extended
// boot record (at 43 for FAT12/16, 71 for FAT32). "NO NAME" means none.
func fatLabel(r io.ReaderAt) (string, bool, error) {
	bs := make([]byte, 512)
	if ok, err := readAt(r, bs, 0); !ok {
		return "", false, err
	}
	if bs[510] != 0x55 || bs[511] != 0xAA {
		return "", false, nil
	}
	bytesPerSector := int64(binary.LittleEndian.Uint16(bs[11:]))
	secPerClus := int64(bs[13])
	reserved := int64(binary.LittleEndian.Uint16(bs[14:]))
	numFATs := int64(bs[16])
	rootEntries := int64(binary.LittleEndian.Uint16(bs[17:]))
	fatSz := int64(binary.LittleEndian.Uint16(bs[22:]))
	fat32 := fatSz == 0
	if fat32 {
		fatSz = int64(binary.LittleEndian.Uint32(bs[36:]))
	}
	validBPS := bytesPerSector == 512 || bytesPerSector == 1024 || bytesPerSector == 2048 || bytesPerSector == 4096
	if !validBPS || secPerClus == 0 || secPerClus&(secPerClus-1) != 0 || reserved == 0 || numFATs == 0 || fatSz == 0 {
		return "", false, nil
	}
	sigOff, labelOff, typeOff := 38, 43, 54
	if fat32 {
		sigOff, labelOff, typeOff = 66, 71, 82
	}
	if !strings.HasPrefix(string(bs[typeOff:typeOff+8]), "FAT") && bs[sigOff] != 0x29 && bs[sigOff] != 0x28 {
		return "", false, nil
	}
	bootLabel := ""
	if bs[sigOff] == 0x29 {
		bootLabel = strings.TrimRight(string(bs[labelOff:labelOff+11]), " \x00")
	}

	var rootOff, rootLen int64
	if fat32 {
		rootClus := int64(binary.LittleEndian.Uint32(bs[44:]))
		dataStart := (reserved + numFATs*fatSz) * bytesPerSector
		rootOff = dataStart + (rootClus-2)*secPerClus*bytesPerSector
		rootLen = secPerClus * bytesPerSector
	} else {
		rootOff = (reserved + numFATs*fatSz) * bytesPerSector
		rootLen = rootEntries * 32
	}
	rootLen = min(rootLen, 64<<10)
	dir := make([]byte, rootLen)
	if ok, err := readAt(r, dir, rootOff); err != nil {
		return "", false, err
	} else if ok {
		for i := 0; i+32 <= len(dir); i += 32 {
			e := dir[i : i+32]
			if e[0] == 0 {
				break // end of directory
			}
			if e[0] == 0xE5 || e[11] == 0x0F || e[11]&0x08 == 0 {
				continue // deleted, long-name part, or not a label
			}
			return strings.TrimRight(string(e[0:11]), " \x00"), true, nil
		}
	}
	if bootLabel == "NO NAME" {
		bootLabel = ""
	}
	return bootLabel, true, nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
