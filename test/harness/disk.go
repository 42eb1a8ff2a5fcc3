package harness

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// SectorSize is the logical sector size the GPT checks assume (QEMU's
// virtio disks and the demo image use 512).
const SectorSize = 512

// compareChunk is how much DiskHoldsImage reads at a time.
const compareChunk = 1 << 20

// MismatchError is returned by DiskHoldsImage when the disk's bytes differ
// from the image's.
type MismatchError struct {
	Disk, Image string
	Offset      int64 // first differing byte
	DiskByte    byte
	ImageByte   byte
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("disk %s differs from image %s at offset %d (0x%x): disk has 0x%02x, image 0x%02x",
		e.Disk, e.Image, e.Offset, e.Offset, e.DiskByte, e.ImageByte)
}

// DiskHoldsImage returns nil when the first len(image) bytes of disk equal
// image. It compares in chunks and returns a *MismatchError naming the
// first differing offset, or an error when either file cannot be read or
// the disk is smaller than the image.
func DiskHoldsImage(disk, image string) error {
	img, err := os.Open(image)
	if err != nil {
		return fmt.Errorf("compare disk with image: %w", err)
	}
	defer img.Close()
	d, err := os.Open(disk)
	if err != nil {
		return fmt.Errorf("compare disk with image: %w", err)
	}
	defer d.Close()
	ist, err := img.Stat()
	if err != nil {
		return fmt.Errorf("compare disk with image: %w", err)
	}
	dsize, err := d.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("compare disk with image: size of %s: %w", disk, err)
	}
	if dsize < ist.Size() {
		return fmt.Errorf("compare disk %s with image %s: disk has %d bytes, image %d", disk, image, dsize, ist.Size())
	}
	a := make([]byte, compareChunk)
	b := make([]byte, compareChunk)
	for off := int64(0); off < ist.Size(); off += compareChunk {
		n := int(min(compareChunk, ist.Size()-off))
		if _, err := img.ReadAt(b[:n], off); err != nil {
			return fmt.Errorf("compare disk with image: read %s at offset %d: %w", image, off, err)
		}
		if _, err := d.ReadAt(a[:n], off); err != nil {
			return fmt.Errorf("compare disk with image: read %s at offset %d: %w", disk, off, err)
		}
		if bytes.Equal(a[:n], b[:n]) {
			continue
		}
		for i := range n {
			if a[i] != b[i] {
				return &MismatchError{Disk: disk, Image: image, Offset: off + int64(i), DiskByte: a[i], ImageByte: b[i]}
			}
		}
	}
	return nil
}

// FirstMiBZero reports whether the disk's first MiB (or all of it, when
// smaller) is zeros: what a wiped disk looks like.
func FirstMiBZero(disk string) (bool, error) {
	f, err := os.Open(disk)
	if err != nil {
		return false, fmt.Errorf("read first MiB: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read first MiB of %s: %w", disk, err)
	}
	for _, c := range buf[:n] {
		if c != 0 {
			return false, nil
		}
	}
	return true, nil
}

// HasValidGPT reports whether disk holds a valid GPT; see CheckGPT.
func HasValidGPT(disk string) bool { return CheckGPT(disk) == nil }

// CheckGPT returns nil when disk starts with a protective MBR (signature
// 0x55AA and a partition of type 0xEE) followed at LBA 1 by a GPT header
// ("EFI PART", MyLBA 1) whose header CRC32 and partition entry array CRC32
// are correct, assuming 512-byte sectors. Otherwise the error says what is
// wrong first.
func CheckGPT(disk string) error {
	f, err := os.Open(disk)
	if err != nil {
		return fmt.Errorf("check gpt: %w", err)
	}
	defer f.Close()
	head := make([]byte, 2*SectorSize)
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("check gpt of %s: read first two sectors: %w", disk, err)
	}
	mbr, hdr := head[:SectorSize], head[SectorSize:]
	if mbr[510] != 0x55 || mbr[511] != 0xAA {
		return fmt.Errorf("check gpt of %s: no MBR signature 0x55AA (found 0x%02x%02x)", disk, mbr[510], mbr[511])
	}
	protective := false
	for i := range 4 {
		if mbr[446+16*i+4] == 0xEE {
			protective = true
		}
	}
	if !protective {
		return fmt.Errorf("check gpt of %s: MBR has no protective partition of type 0xEE", disk)
	}
	if string(hdr[:8]) != "EFI PART" {
		return fmt.Errorf("check gpt of %s: no \"EFI PART\" signature at LBA 1", disk)
	}
	le := binary.LittleEndian
	size := le.Uint32(hdr[12:16])
	if size < 92 || size > SectorSize {
		return fmt.Errorf("check gpt of %s: header size %d out of range 92..%d", disk, size, SectorSize)
	}
	want := le.Uint32(hdr[16:20])
	h := bytes.Clone(hdr[:size])
	clear(h[16:20])
	if got := crc32.ChecksumIEEE(h); got != want {
		return fmt.Errorf("check gpt of %s: header CRC32 is 0x%08x, header says 0x%08x", disk, got, want)
	}
	if my := le.Uint64(hdr[24:32]); my != 1 {
		return fmt.Errorf("check gpt of %s: primary header's own LBA is %d, want 1", disk, my)
	}
	entriesLBA := le.Uint64(hdr[72:80])
	count, entrySize := le.Uint32(hdr[80:84]), le.Uint32(hdr[84:88])
	if entrySize < 128 || entrySize%8 != 0 || uint64(count)*uint64(entrySize) > 4<<20 || entriesLBA < 2 {
		return fmt.Errorf("check gpt of %s: partition entries at LBA %d, %d of %d bytes: out of range", disk, entriesLBA, count, entrySize)
	}
	entries := make([]byte, int(count)*int(entrySize))
	if _, err := f.ReadAt(entries, int64(entriesLBA)*SectorSize); err != nil {
		return fmt.Errorf("check gpt of %s: read partition entries: %w", disk, err)
	}
	if got, want := crc32.ChecksumIEEE(entries), le.Uint32(hdr[88:92]); got != want {
		return fmt.Errorf("check gpt of %s: partition entries CRC32 is 0x%08x, header says 0x%08x", disk, got, want)
	}
	return nil
}
