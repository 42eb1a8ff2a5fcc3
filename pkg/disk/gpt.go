package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/booty-dev/booty/pkg/guid"
	"github.com/booty-dev/booty/pkg/utf16text"
)

// GPT partition type GUIDs, lowercase, as sgdisk -i prints them.
const (
	TypeLinuxRootX86_64 = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709"
	TypeLinuxRootARM64  = "b921b045-1df0-41c3-af44-4c6f280d3fae"
	TypeLinuxFilesystem = "0fc63daf-8483-4772-8e79-3d69d8477de4"
	TypeLinuxLVM        = "e6d6d379-f507-44c2-a23c-238f2a3df928"
	TypeEFISystem       = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
	TypeXBOOTLDR        = "bc13c2ff-59e6-4262-a352-b275fd6f7172"
	TypeBIOSBoot        = "21686148-6449-6e6f-744e-656564454649"
	TypeLinuxSwap       = "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f"
)

// Sentinels of the partition table functions, checked with errors.Is.
var (
	// ErrNoGPT: LBA 1 holds no "EFI PART" header for 512 or 4096-byte sectors.
	ErrNoGPT = errors.New("no GPT header")
	// ErrNoPartitionTable: neither a GPT nor an MBR signature; wrapped by
	// ReadPartitionTable together with ErrNoGPT.
	ErrNoPartitionTable = errors.New("no partition table")
	// ErrBadGPT: the primary header or its entry array fails validation (CRC, sizes, positions).
	ErrBadGPT = errors.New("invalid GPT")
	// ErrNoRootPartition: GrowGPT found no partition to grow.
	ErrNoRootPartition = errors.New("no root partition")
	// ErrNotLastPartition: the partition to grow is followed by another one.
	ErrNotLastPartition = errors.New("partition is not the last one on the disk")
	// ErrNoSpace: the requested root partition size does not fit on the disk,
	// or the disk is smaller than the image's partition table.
	ErrNoSpace = errors.New("not enough space on disk")
)

// Partition is one partition of a disk: its entry in the partition table
// (ReadPartitionTable fills these, in bytes), and, from
// Manager.ReadPartitions, its device node and the filesystem found in its
// superblock, without udev or blkid. Type is the GPT type GUID, or
// "0x83"-style for an MBR partition. GUIDs are lower case.
type Partition struct {
	Number int    `json:"number"`
	Start  int64  `json:"start"`
	Size   int64  `json:"size"`
	Type   string `json:"type"`
	// SectorSize is the table's logical sector size (Start and Size are
	// multiples of it): 512 or 4096.
	SectorSize int64 `json:"sectorSize,omitempty"`
	// Name is the GPT partition name (PARTLABEL).
	Name string `json:"name,omitempty"`
	// PartUUID is the GPT unique partition GUID; empty on MBR.
	PartUUID string `json:"partUUID,omitempty"`
	// MBRType is the MBR partition type byte (Type without "0x"); 0 on GPT.
	MBRType byte `json:"mbrType,omitempty"`

	// Path is the device node, "/dev/vda2", "/dev/nvme0n1p2".
	Path string `json:"path,omitempty"`
	// FSType is the filesystem fsprobe found in the superblock: ext4, ext3,
	// ext2, xfs, btrfs, vfat, swap, LVM2_member, iso9660, or empty.
	FSType string `json:"fsType,omitempty"`
	// UUID and Label are the filesystem's, as blkid prints them (vfat
	// serials as "ABCD-1234").
	UUID  string `json:"uuid,omitempty"`
	Label string `json:"label,omitempty"`
}

// PartitionTable is what ReadPartitionTable found.
type PartitionTable struct {
	// Kind is "gpt" or "dos".
	Kind       string      `json:"kind"`
	SectorSize int64       `json:"sectorSize"`
	Partitions []Partition `json:"partitions"`
	// BackupHeaderOffset and BackupEntriesOffset locate the GPT backup in bytes (0 for dos).
	BackupHeaderOffset  int64 `json:"backupHeaderOffset,omitempty"`
	BackupEntriesOffset int64 `json:"backupEntriesOffset,omitempty"`
	// FromBackup is true when the primary GPT was missing or damaged and
	// the table was read from the backup at the end of the disk.
	FromBackup bool `json:"fromBackup,omitempty"`
}

// ReadPartitionTable reads the primary GPT (validating its CRCs); when it
// is missing or damaged, the backup GPT in the disk's last sector
// (FromBackup); when there is no GPT at all, the four primary MBR entries (logical partitions are not
// listed). Errors: ErrBadGPT for a GPT that fails validation; ErrNoGPT and
// ErrNoPartitionTable wrapped when neither a GPT nor an MBR signature is present.
func ReadPartitionTable(r io.ReaderAt, diskSize int64) (*PartitionTable, error) {
	mbr := make([]byte, 512)
	if _, err := r.ReadAt(mbr, 0); err != nil {
		return nil, fmt.Errorf("read MBR: %w", err)
	}
	g, err := readGPT(r, diskSize, 0)
	if err != nil && !isDOSTable(mbr) {
		if bg, berr := readBackupGPT(r, diskSize); berr == nil {
			pt := &PartitionTable{Kind: "gpt", SectorSize: bg.ss, FromBackup: true,
				BackupHeaderOffset: int64(bg.myLBA) * bg.ss, BackupEntriesOffset: int64(bg.entriesLBA) * bg.ss}
			for _, p := range bg.parts {
				pt.Partitions = append(pt.Partitions, Partition{Number: p.number, Start: int64(p.first) * bg.ss,
					Size: int64(p.last-p.first+1) * bg.ss, SectorSize: bg.ss, Type: p.typ, Name: p.name, PartUUID: p.guid})
			}
			return pt, nil
		}
	}
	if err == nil {
		pt := &PartitionTable{Kind: "gpt", SectorSize: g.ss,
			BackupHeaderOffset: int64(g.altLBA) * g.ss}
		for _, p := range g.parts {
			pt.Partitions = append(pt.Partitions, Partition{Number: p.number, Start: int64(p.first) * g.ss,
				Size: int64(p.last-p.first+1) * g.ss, SectorSize: g.ss, Type: p.typ, Name: p.name, PartUUID: p.guid})
		}
		// The backup header says where its entries are; trust it only when valid.
		if bh, err := parseHeader(r, int64(g.altLBA), g.ss); err == nil {
			pt.BackupEntriesOffset = int64(bh.entriesLBA) * g.ss
		} else {
			pt.BackupEntriesOffset = (int64(g.altLBA) - g.entrySectors()) * g.ss
		}
		return pt, nil
	}
	if !errors.Is(err, ErrNoGPT) {
		return nil, err
	}
	if mbr[510] != 0x55 || mbr[511] != 0xaa {
		return nil, fmt.Errorf("read partition table: %w: %w and no MBR signature", ErrNoPartitionTable, ErrNoGPT)
	}
	pt := &PartitionTable{Kind: "dos", SectorSize: 512}
	for i := range 4 {
		e := mbr[446+16*i : 446+16*(i+1)]
		typ := e[4]
		start := binary.LittleEndian.Uint32(e[8:])
		n := binary.LittleEndian.Uint32(e[12:])
		if typ == 0 || n == 0 || typ == 0x05 || typ == 0x0f || typ == 0x85 {
			continue // empty or extended container
		}
		pt.Partitions = append(pt.Partitions, Partition{Number: i + 1, Start: int64(start) * 512, Size: int64(n) * 512,
			SectorSize: 512, Type: fmt.Sprintf("0x%02x", typ), MBRType: typ})
	}
	return pt, nil
}

// isDOSTable reports whether sector 0 is an MBR with a partition that is
// not GPT's protective 0xEE entry; then a stale backup GPT is ignored, as
// the kernel ignores a GPT without a protective MBR.
func isDOSTable(mbr []byte) bool {
	if mbr[510] != 0x55 || mbr[511] != 0xaa {
		return false
	}
	for i := range 4 {
		if t := mbr[446+16*i+4]; t != 0 && t != 0xee {
			return true
		}
	}
	return false
}

type gptPart struct {
	index       int // entry index, 0-based
	number      int // index+1, as the kernel numbers it
	typ, guid   string
	name        string
	first, last uint64
}

type gptHeader struct {
	raw                     []byte // the whole sector
	size                    uint32
	myLBA, altLBA           uint64
	firstUsable, lastUsable uint64
	entriesLBA              uint64
	numEntries, entrySize   uint32
	entriesCRC              uint32
}

type gpt struct {
	ss int64
	gptHeader
	entries []byte // numEntries*entrySize bytes
	parts   []gptPart
}

func (g *gpt) entryBytes() int64 { return int64(g.numEntries) * int64(g.entrySize) }

// entrySectors is the number of sectors the entry array occupies.
func (g *gpt) entrySectors() int64 { return (g.entryBytes() + g.ss - 1) / g.ss }

// readGPT reads and validates the primary GPT. ss 0 tries 512 then 4096.
func readGPT(r io.ReaderAt, diskSize int64, ss int64) (*gpt, error) {
	sizes := []int64{512, 4096}
	if ss != 0 {
		sizes = []int64{ss}
	}
	var h *gptHeader
	var err error
	for _, s := range sizes {
		h, err = parseHeader(r, 1, s)
		if err == nil {
			ss = s
			break
		}
		if !errors.Is(err, ErrNoGPT) {
			return nil, err
		}
	}
	if h == nil {
		return nil, err
	}
	g := &gpt{ss: ss, gptHeader: *h}
	total := uint64(diskSize / ss)
	if h.myLBA != 1 {
		return nil, fmt.Errorf("%w: primary header says it is at LBA %d", ErrBadGPT, h.myLBA)
	}
	if h.firstUsable > h.lastUsable || h.entriesLBA < 2 || h.entriesLBA+uint64(g.entrySectors()) > h.firstUsable {
		return nil, fmt.Errorf("%w: usable LBAs %d-%d and entries at LBA %d are inconsistent", ErrBadGPT, h.firstUsable, h.lastUsable, h.entriesLBA)
	}
	if h.altLBA >= total || h.lastUsable >= h.altLBA {
		return nil, fmt.Errorf("%w: the partition table reaches LBA %d, the disk has %d sectors of %d bytes", ErrNoSpace, h.altLBA, total, ss)
	}
	g.entries = make([]byte, g.entryBytes())
	if _, err := r.ReadAt(g.entries, int64(h.entriesLBA)*ss); err != nil {
		return nil, fmt.Errorf("read GPT entries at LBA %d: %w", h.entriesLBA, err)
	}
	if c := crc32.ChecksumIEEE(g.entries); c != h.entriesCRC {
		return nil, fmt.Errorf("%w: entry array CRC %08x, header says %08x", ErrBadGPT, c, h.entriesCRC)
	}
	if err := g.parseEntries(); err != nil {
		return nil, err
	}
	return g, nil
}

// parseEntries fills g.parts from g.entries, checking each range.
func (g *gpt) parseEntries() error {
	h := &g.gptHeader
	for i := range int(h.numEntries) {
		e := g.entries[i*int(h.entrySize):]
		typ := guid.Format(e[0:16])
		if typ == "00000000-0000-0000-0000-000000000000" {
			continue
		}
		p := gptPart{index: i, number: i + 1, typ: typ, guid: guid.Format(e[16:32]),
			first: binary.LittleEndian.Uint64(e[32:]), last: binary.LittleEndian.Uint64(e[40:]), name: utf16text.Decode(e[56:128], binary.LittleEndian)}
		if p.first > p.last || p.first < h.firstUsable || p.last > h.lastUsable {
			return fmt.Errorf("%w: partition %d spans LBA %d-%d outside usable %d-%d", ErrBadGPT, p.number, p.first, p.last, h.firstUsable, h.lastUsable)
		}
		g.parts = append(g.parts, p)
	}
	return nil
}

// readBackupGPT reads the backup header in the disk's last sector (512 or
// 4096-byte sectors) and the entries it points to, validating both CRCs.
func readBackupGPT(r io.ReaderAt, diskSize int64) (*gpt, error) {
	var lastErr error = ErrNoGPT
	for _, ss := range []int64{512, 4096} {
		lba := diskSize/ss - 1
		h, err := parseHeader(r, lba, ss)
		if err != nil {
			lastErr = err
			continue
		}
		g := &gpt{ss: ss, gptHeader: *h}
		if h.myLBA != uint64(lba) || h.entriesLBA+uint64(g.entrySectors()) > uint64(lba) {
			return nil, fmt.Errorf("%w: backup header at LBA %d says it is at %d with entries at %d", ErrBadGPT, lba, h.myLBA, h.entriesLBA)
		}
		g.entries = make([]byte, g.entryBytes())
		if _, err := r.ReadAt(g.entries, int64(h.entriesLBA)*ss); err != nil {
			return nil, fmt.Errorf("read backup GPT entries at LBA %d: %w", h.entriesLBA, err)
		}
		if c := crc32.ChecksumIEEE(g.entries); c != h.entriesCRC {
			return nil, fmt.Errorf("%w: backup entry array CRC %08x, header says %08x", ErrBadGPT, c, h.entriesCRC)
		}
		if err := g.parseEntries(); err != nil {
			return nil, err
		}
		return g, nil
	}
	return nil, lastErr
}

// parseHeader reads and checks the GPT header at lba. It returns ErrNoGPT
// when the signature is missing and ErrBadGPT when the header is damaged.
func parseHeader(r io.ReaderAt, lba, ss int64) (*gptHeader, error) {
	raw := make([]byte, ss)
	if _, err := r.ReadAt(raw, lba*ss); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read GPT header at LBA %d: %w", lba, ErrNoGPT)
		}
		return nil, fmt.Errorf("read GPT header at LBA %d: %w", lba, err)
	}
	if string(raw[:8]) != "EFI PART" {
		return nil, fmt.Errorf("LBA %d with %d-byte sectors: %w", lba, ss, ErrNoGPT)
	}
	h := &gptHeader{raw: raw, size: binary.LittleEndian.Uint32(raw[12:])}
	if h.size < 92 || int64(h.size) > ss {
		return nil, fmt.Errorf("%w: header size %d at LBA %d", ErrBadGPT, h.size, lba)
	}
	if c := headerCRC(raw[:h.size]); c != binary.LittleEndian.Uint32(raw[16:]) {
		return nil, fmt.Errorf("%w: header CRC at LBA %d is %08x, computed %08x", ErrBadGPT, lba, binary.LittleEndian.Uint32(raw[16:]), c)
	}
	le := binary.LittleEndian
	h.myLBA, h.altLBA = le.Uint64(raw[24:]), le.Uint64(raw[32:])
	h.firstUsable, h.lastUsable = le.Uint64(raw[40:]), le.Uint64(raw[48:])
	h.entriesLBA = le.Uint64(raw[72:])
	h.numEntries, h.entrySize, h.entriesCRC = le.Uint32(raw[80:]), le.Uint32(raw[84:]), le.Uint32(raw[88:])
	if h.entrySize < 128 || h.entrySize&(h.entrySize-1) != 0 || h.numEntries == 0 || h.numEntries > 1<<16 {
		return nil, fmt.Errorf("%w: %d entries of %d bytes at LBA %d", ErrBadGPT, h.numEntries, h.entrySize, lba)
	}
	return h, nil
}

// headerCRC is the CRC32 of the header with its CRC field taken as zero.
func headerCRC(hdr []byte) uint32 {
	b := bytes.Clone(hdr)
	clear(b[16:20])
	return crc32.ChecksumIEEE(b)
}

// encodeHeader returns a sector holding h's header bytes with the given
// positions and CRCs filled in.
func (g *gpt) encodeHeader(myLBA, altLBA, entriesLBA, lastUsable uint64, entriesCRC uint32) []byte {
	out := make([]byte, g.ss)
	copy(out, g.raw[:g.size])
	le := binary.LittleEndian
	le.PutUint64(out[24:], myLBA)
	le.PutUint64(out[32:], altLBA)
	le.PutUint64(out[48:], lastUsable)
	le.PutUint64(out[72:], entriesLBA)
	le.PutUint32(out[88:], entriesCRC)
	le.PutUint32(out[16:], headerCRC(out[:g.size]))
	return out
}

// GrowOptions say which partition GrowGPT grows and how far.
type GrowOptions struct {
	// PartitionNumber picks the partition (1-based); 0 picks by type: the
	// Linux root (x86-64 or arm64) partition, else the last partition when it
	// is a Linux filesystem or LVM partition.
	PartitionNumber int
	// Size is the wanted size of that partition in bytes (see ParseSize for
	// config's "20G"); 0 fills the disk. A size below the current one keeps
	// the current one: GrowGPT never shrinks.
	Size int64
	// SectorSize is the logical sector size; 0 finds the header at 512 or 4096.
	SectorSize int64
}

// GrowResult says what GrowGPT found and changed. LBAs are in SectorSize units.
type GrowResult struct {
	SectorSize int64
	Partition  int
	TypeGUID   string
	FirstLBA   uint64
	// OldLastLBA and NewLastLBA are the partition's end before and after.
	OldLastLBA, NewLastLBA uint64
	// OldBackupLBA and NewBackupLBA locate the backup header before and after.
	OldBackupLBA, NewBackupLBA uint64
	LastUsableLBA              uint64
	// Grown is true when the partition got bigger; Changed when anything was written.
	Grown, Changed bool
}

// GrowGPT fixes a GPT written by an image smaller than the disk f. In order it
// reads and validates the primary GPT; computes the backup location at the
// end of the disk (f.Size()) and the new last usable LBA; picks the partition to grow
// (GrowOptions) and its new end (never smaller than now, never past the last
// usable LBA, never overlapping another partition); then writes the backup
// entries, the backup header, zeroes the old backup header, writes the
// primary entries and header (all with fresh CRCs) and sets the protective
// MBR's size. Nothing is written when an error is found before writing, or
// when the table already has this shape (a second call changes nothing).
// Errors: ErrNoGPT/ErrBadGPT for an unreadable table, ErrNoRootPartition,
// ErrNotLastPartition when the chosen partition would have to grow past
// another one, ErrNoSpace when Size does not fit; write errors name the
// location and may leave the backup updated but the primary not.
func GrowGPT(f BlockDevice, opts GrowOptions) (*GrowResult, error) {
	diskSize := f.Size()
	if diskSize <= 0 {
		return nil, fmt.Errorf("grow GPT: the disk has no fixed size (%d)", diskSize)
	}
	g, err := readGPT(f, diskSize, opts.SectorSize)
	if err != nil {
		return nil, fmt.Errorf("grow GPT: %w", err)
	}
	ss := g.ss
	total := uint64(diskSize / ss)
	newAlt := total - 1
	newBackupEntries := newAlt - uint64(g.entrySectors())
	newLastUsable := newBackupEntries - 1
	res := &GrowResult{SectorSize: ss, OldBackupLBA: g.altLBA, NewBackupLBA: newAlt, LastUsableLBA: newLastUsable}

	p, err := g.pickRoot(opts.PartitionNumber)
	if err != nil {
		return nil, fmt.Errorf("grow GPT: %w", err)
	}
	res.Partition, res.TypeGUID, res.FirstLBA, res.OldLastLBA = p.number, p.typ, p.first, p.last

	end := newLastUsable
	if opts.Size > 0 {
		n := uint64(opts.Size / ss)
		if n == 0 {
			return nil, fmt.Errorf("grow GPT: partition size %d bytes is smaller than a sector", opts.Size)
		}
		end = p.first + n - 1
		if end > newLastUsable {
			return nil, fmt.Errorf("grow GPT: partition %d of %s from LBA %d would end at LBA %d, the last usable LBA is %d: %w",
				p.number, HumanSize(opts.Size), p.first, end, newLastUsable, ErrNoSpace)
		}
	}
	if end < p.last {
		end = p.last // never shrink
	}
	if end > p.last {
		for _, q := range g.parts {
			if q.number != p.number && q.last >= p.first && q.first <= end {
				return nil, fmt.Errorf("grow GPT: partition %d (%s) cannot grow to LBA %d, partition %d starts at LBA %d: %w",
					p.number, p.typ, end, q.number, q.first, ErrNotLastPartition)
			}
		}
	}
	res.NewLastLBA = end
	res.Grown = end > p.last

	entries := bytes.Clone(g.entries)
	binary.LittleEndian.PutUint64(entries[p.index*int(g.entrySize)+40:], end)
	crc := crc32.ChecksumIEEE(entries)
	padded := make([]byte, g.entrySectors()*ss)
	copy(padded, entries)

	primary := g.encodeHeader(1, newAlt, g.entriesLBA, newLastUsable, crc)
	backup := g.encodeHeader(newAlt, 1, newBackupEntries, newLastUsable, crc)

	mbr := make([]byte, 512)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		return nil, fmt.Errorf("grow GPT: read protective MBR: %w", err)
	}
	newMBR := bytes.Clone(mbr)
	if mbr[510] == 0x55 && mbr[511] == 0xaa {
		for i := range 4 {
			e := newMBR[446+16*i:]
			if e[4] == 0xee && binary.LittleEndian.Uint32(e[8:]) == 1 {
				binary.LittleEndian.PutUint32(e[12:], uint32(min(total-1, 0xffffffff)))
			}
		}
	}

	type write struct {
		what string
		off  int64
		b    []byte
	}
	writes := []write{
		{"backup GPT entries", int64(newBackupEntries) * int64(ss), padded},
		{"backup GPT header", int64(newAlt) * int64(ss), backup},
	}
	if g.altLBA != newAlt && g.altLBA < newBackupEntries {
		writes = append(writes, write{"old backup GPT header", int64(g.altLBA) * int64(ss), make([]byte, ss)})
	}
	writes = append(writes,
		write{"primary GPT entries", int64(g.entriesLBA) * int64(ss), padded[:len(entries)]},
		write{"primary GPT header", ss, primary},
		write{"protective MBR", 0, newMBR})
	for _, w := range writes {
		cur := make([]byte, len(w.b))
		if _, err := f.ReadAt(cur, w.off); err == nil && bytes.Equal(cur, w.b) {
			continue
		}
		if _, err := f.WriteAt(w.b, w.off); err != nil {
			return res, fmt.Errorf("grow GPT: write %s at offset %d: %w", w.what, w.off, err)
		}
		res.Changed = true
	}
	if res.Changed {
		if err := f.Sync(); err != nil {
			return res, fmt.Errorf("grow GPT: sync: %w", err)
		}
	}
	return res, nil
}

// pickRoot chooses the partition to grow.
func (g *gpt) pickRoot(number int) (gptPart, error) {
	if number > 0 {
		for _, p := range g.parts {
			if p.number == number {
				return p, nil
			}
		}
		return gptPart{}, fmt.Errorf("partition %d does not exist: %w", number, ErrNoRootPartition)
	}
	var roots []gptPart
	for _, p := range g.parts {
		if p.typ == TypeLinuxRootX86_64 || p.typ == TypeLinuxRootARM64 {
			roots = append(roots, p)
		}
	}
	switch len(roots) {
	case 1:
		return roots[0], nil
	case 0:
	default:
		return gptPart{}, fmt.Errorf("%d Linux root partitions (%d and %d), set a partition number: %w",
			len(roots), roots[0].number, roots[1].number, ErrNoRootPartition)
	}
	if len(g.parts) == 0 {
		return gptPart{}, fmt.Errorf("the GPT has no partitions: %w", ErrNoRootPartition)
	}
	parts := append([]gptPart(nil), g.parts...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].first < parts[j].first })
	last := parts[len(parts)-1]
	if last.typ == TypeLinuxFilesystem || last.typ == TypeLinuxLVM {
		return last, nil
	}
	return gptPart{}, fmt.Errorf("no Linux root partition and the last partition %d has type %s: %w", last.number, last.typ, ErrNoRootPartition)
}

// ParseSize parses a size as config's disk.rootPartitionSize spells it:
// a number with an optional unit. K, M, G, T, P and KiB…PiB are powers of
// 1024 ("20G" is 20 GiB, as sgdisk and growpart read it); KB…PB are powers
// of 1000; no unit means bytes. Fractions are allowed ("1.5T") when they
// come to whole bytes. The size is at least one byte and fits an int64:
// "0", "0.4" and "8192P" are errors, never a size that means "the rest of
// the disk". This is the one size grammar of booty: config validation, the
// grow step and the command-line flags all call it.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], t[i:]
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("parse size %q: want a number with an optional unit like 20G", s)
	}
	mult := map[string]float64{"": 1, "B": 1}
	for i, u := range []string{"K", "M", "G", "T", "P"} {
		bin, dec := float64(int64(1)<<(10*(i+1))), 1.0
		for range i + 1 {
			dec *= 1000
		}
		mult[u], mult[u+"iB"], mult[u+"B"] = bin, bin, dec
	}
	m, ok := mult[strings.ToUpper(unit[:min(1, len(unit))])+unit[min(1, len(unit)):]]
	if !ok {
		return 0, fmt.Errorf("parse size %q: unknown unit %q, want K, M, G, T, P, KiB…PiB or KB…PB", s, unit)
	}
	n := v * m
	switch {
	case n >= math.MaxInt64:
		return 0, fmt.Errorf("parse size %q: too large, at most 8191P", s)
	case n < 1:
		return 0, fmt.Errorf("parse size %q: must be at least one byte", s)
	case n != math.Trunc(n):
		return 0, fmt.Errorf("parse size %q: not a whole number of bytes", s)
	}
	return int64(n), nil
}
