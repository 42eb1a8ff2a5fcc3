package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	diskfsfile "github.com/diskfs/go-diskfs/backend/file"
	diskfsgpt "github.com/diskfs/go-diskfs/partition/gpt"
)

const mib = 1 << 20

// sgdiskCache keeps the first and last MiB (all sgdisk writes) of each
// image built, keyed by size and arguments: sgdisk sleeps a second per run.
var sgdiskCache = struct {
	sync.Mutex
	m map[string][2][]byte
}{m: map[string][2][]byte{}}

// sgdiskImage creates an image file of imageMiB with sgdisk args applied,
// then extends the file to diskMiB as an image write onto a bigger disk leaves it.
func sgdiskImage(t *testing.T, imageMiB, diskMiB int64, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("sgdisk"); err != nil {
		t.Skip("sgdisk not installed (apt-get install gdisk)")
	}
	p := filepath.Join(t.TempDir(), "disk.img")
	key := fmt.Sprint(imageMiB, args)
	sgdiskCache.Lock()
	c, ok := sgdiskCache.m[key]
	sgdiskCache.Unlock()
	if !ok {
		src := filepath.Join(t.TempDir(), "src.img")
		if err := os.WriteFile(src, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(src, imageMiB*mib); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("sgdisk", append(args, src)...).CombinedOutput(); err != nil {
			t.Fatalf("sgdisk %v: %v\n%s", args, err, out)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		c = [2][]byte{b[:mib], b[len(b)-mib:]}
		sgdiskCache.Lock()
		sgdiskCache.m[key] = c
		sgdiskCache.Unlock()
	}
	if err := os.WriteFile(p, c[0], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(c[1], imageMiB*mib-mib); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(diskMiB * mib); err != nil {
		t.Fatal(err)
	}
	return p
}

// sgdiskInfo returns sgdisk -i's first and last sector of partition n.
func sgdiskInfo(t *testing.T, img string, n int) (first, last int64, typ string) {
	t.Helper()
	out, err := exec.Command("sgdisk", "-i", strconv.Itoa(n), img).CombinedOutput()
	if err != nil {
		t.Fatalf("sgdisk -i %d: %v\n%s", n, err, out)
	}
	num := func(re string) int64 {
		m := regexp.MustCompile(re).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("sgdisk -i %d: no %q in\n%s", n, re, out)
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v
	}
	m := regexp.MustCompile(`Partition GUID code: ([0-9A-F-]+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("sgdisk -i %d: no type in\n%s", n, out)
	}
	return num(`First sector: (\d+)`), num(`Last sector: (\d+)`), strings.ToLower(m[1])
}

func sgdiskVerify(img string) (bool, string) {
	out, _ := exec.Command("sgdisk", "-v", img).CombinedOutput()
	return strings.Contains(string(out), "No problems found"), string(out)
}

func TestGrowGPT(t *testing.T) {
	const diskMiB = 100
	totalSectors := int64(diskMiB * mib / 512)
	lastUsable := totalSectors - 34 // 32 entry sectors + backup header + 1
	tests := []struct {
		name     string
		args     []string
		opts     GrowOptions
		wantPart int
		wantLast int64 // 0: lastUsable
		wantErr  error
	}{
		{name: "x86-64 root type, fill", args: []string{"-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8304"}, wantPart: 2},
		{name: "root type not numbered last", args: []string{"-n", "2:2048:+8M", "-t", "2:ef00", "-n", "1:0:+20M", "-t", "1:8304"}, wantPart: 1},
		{name: "last linux filesystem", args: []string{"-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+4M", "-t", "2:8200", "-n", "3:0:+20M", "-t", "3:8300"}, wantPart: 3},
		{name: "last lvm pv", args: []string{"-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8e00"}, wantPart: 2},
		{name: "size from config", args: []string{"-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8304"},
			opts: GrowOptions{Size: 60 * mib}, wantPart: 2, wantLast: 2048 + 8*2048 + 60*2048 - 1},
		{name: "smaller size never shrinks", args: []string{"-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8304"},
			opts: GrowOptions{Size: 10 * mib}, wantPart: 2, wantLast: 2048 + 8*2048 + 20*2048 - 1},
		{name: "partition number", args: []string{"-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8301"},
			opts: GrowOptions{PartitionNumber: 2}, wantPart: 2},
		{name: "root followed by swap", args: []string{"-n", "1:2048:+20M", "-t", "1:8304", "-n", "2:0:+4M", "-t", "2:8200"},
			wantErr: ErrNotLastPartition},
		{name: "size too big", args: []string{"-n", "1:2048:+20M", "-t", "1:8304"}, opts: GrowOptions{Size: 1 << 30}, wantErr: ErrNoSpace},
		{name: "no linux partition", args: []string{"-n", "1:2048:+20M", "-t", "1:ef00"}, wantErr: ErrNoRootPartition},
		{name: "unknown partition number", args: []string{"-n", "1:2048:+20M", "-t", "1:8304"}, opts: GrowOptions{PartitionNumber: 4}, wantErr: ErrNoRootPartition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // sgdisk spends its time in sync(2)
			img := sgdiskImage(t, 48, diskMiB, tt.args...)
			before, _ := os.ReadFile(img)
			if ok, out := sgdiskVerify(img); ok {
				t.Fatalf("sgdisk -v finds no problem before the fix-up:\n%s", out)
			}
			f, err := OpenDevice(img, os.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res, err := GrowGPT(f, tt.opts)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				after, _ := os.ReadFile(img)
				if !bytes.Equal(before, after) {
					t.Fatal("a failed GrowGPT changed the image")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok, out := sgdiskVerify(img); !ok {
				t.Fatalf("sgdisk -v after GrowGPT:\n%s", out)
			}
			wantLast := tt.wantLast
			if wantLast == 0 {
				wantLast = lastUsable
			}
			first, last, _ := sgdiskInfo(t, img, tt.wantPart)
			if res.Partition != tt.wantPart || last != wantLast || int64(res.NewLastLBA) != wantLast || int64(res.FirstLBA) != first {
				t.Fatalf("result %+v, sgdisk says partition %d is %d-%d; want partition %d ending at %d", res, tt.wantPart, first, last, tt.wantPart, wantLast)
			}
			if res.NewBackupLBA != uint64(totalSectors-1) || !res.Changed {
				t.Fatalf("result %+v: want backup at %d and Changed", res, totalSectors-1)
			}
			// The protective MBR covers the whole disk.
			mbr := make([]byte, 512)
			f.ReadAt(mbr, 0)
			if n := binary.LittleEndian.Uint32(mbr[446+12:]); int64(n) != totalSectors-1 {
				t.Fatalf("protective MBR size %d, want %d", n, totalSectors-1)
			}
			// Idempotent: the second run writes nothing.
			mid, _ := os.ReadFile(img)
			res2, err := GrowGPT(f, tt.opts)
			if err != nil || res2.Changed || res2.Grown || res2.NewLastLBA != res.NewLastLBA {
				t.Fatalf("second run: %+v, %v; want unchanged", res2, err)
			}
			after, _ := os.ReadFile(img)
			if !bytes.Equal(mid, after) {
				t.Fatal("second GrowGPT changed the image")
			}
		})
	}
}

func TestGrowGPTRejectsDamagedTable(t *testing.T) {
	img := sgdiskImage(t, 64, 128, "-n", "1:2048:+20M", "-t", "1:8304")
	f, err := OpenDevice(img, os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Flip one byte of the first partition entry: the entry array CRC no longer matches.
	if _, err := f.WriteAt([]byte{0xff}, 2*512+60); err != nil {
		t.Fatal(err)
	}
	if _, err := GrowGPT(f, GrowOptions{}); !errors.Is(err, ErrBadGPT) {
		t.Fatalf("err = %v, want ErrBadGPT", err)
	}
	if _, err := GrowGPT(NewMemDevice(1<<20), GrowOptions{}); err == nil {
		t.Fatal("want an error for a zeroed disk")
	}
}

func TestGrowGPTDiskSmallerThanImage(t *testing.T) {
	img := sgdiskImage(t, 64, 64, "-n", "1:2048:+20M", "-t", "1:8304")
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GrowGPT(NewMemDeviceFrom(b[:32*mib]), GrowOptions{}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("err = %v, want ErrNoSpace", err)
	}
}

func TestReadPartitionTable(t *testing.T) {
	img := sgdiskImage(t, 64, 64, "-n", "1:2048:+8M", "-t", "1:ef00", "-c", "1:EFI system", "-u", "1:8D3F1A2B-1111-4222-8333-944455556666",
		"-n", "3:0:+20M", "-t", "3:8304", "-u", "3:0a1b2c3d-4e5f-4061-8273-8495a6b7c8d9")
	f, _ := os.Open(img)
	defer f.Close()
	pt, err := ReadPartitionTable(f, 64*mib)
	if err != nil {
		t.Fatal(err)
	}
	want := []Partition{
		{Number: 1, Start: 1 * mib, Size: 8 * mib, SectorSize: 512, Type: TypeEFISystem, Name: "EFI system", PartUUID: "8d3f1a2b-1111-4222-8333-944455556666"},
		{Number: 3, Start: 9 * mib, Size: 20 * mib, SectorSize: 512, Type: TypeLinuxRootX86_64, PartUUID: "0a1b2c3d-4e5f-4061-8273-8495a6b7c8d9"},
	}
	if pt.Kind != "gpt" || len(pt.Partitions) != 2 || pt.Partitions[0] != want[0] || pt.Partitions[1] != want[1] {
		t.Fatalf("table %+v, want %+v", pt, want)
	}
	if pt.BackupHeaderOffset != 64*mib-512 || pt.BackupEntriesOffset != 64*mib-33*512 {
		t.Fatalf("backup at %d/%d", pt.BackupHeaderOffset, pt.BackupEntriesOffset)
	}

	// An MBR disk.
	mbr := make([]byte, 1<<20)
	mbr[510], mbr[511] = 0x55, 0xaa
	e := mbr[446:]
	e[4] = 0x83
	binary.LittleEndian.PutUint32(e[8:], 2048)
	binary.LittleEndian.PutUint32(e[12:], 4096)
	pt, err = ReadPartitionTable(bytes.NewReader(mbr), 1<<30)
	if err != nil || pt.Kind != "dos" || len(pt.Partitions) != 1 || pt.Partitions[0] != (Partition{Number: 1, Start: 1 * mib, Size: 2 * mib, SectorSize: 512, Type: "0x83", MBRType: 0x83}) {
		t.Fatalf("dos table %+v, %v", pt, err)
	}
	if _, err := ReadPartitionTable(bytes.NewReader(make([]byte, 1<<20)), 1<<20); !errors.Is(err, ErrNoGPT) || !errors.Is(err, ErrNoPartitionTable) {
		t.Fatalf("empty disk: %v, want ErrNoGPT and ErrNoPartitionTable", err)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "20G", want: 20 << 30}, {in: "512M", want: 512 << 20}, {in: "1T", want: 1 << 40}, {in: "1.5T", want: 3 << 39},
		{in: "20GiB", want: 20 << 30}, {in: "20GB", want: 20e9}, {in: "4096", want: 4096}, {in: "10k", want: 10 << 10},
		{in: "", bad: true}, {in: "G", bad: true}, {in: "20X", bad: true}, {in: "-1G", bad: true},
		// Once silently "fill the disk": an overflow to a negative size and a fraction of a byte.
		{in: "8192P", bad: true}, {in: "0.4", bad: true}, {in: "0", bad: true}, {in: "0G", bad: true}, {in: "1.5", bad: true},
		{in: "8191P", want: 8191 << 50}, {in: "0.5K", want: 512},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, bad=%v", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func TestReadPartitionTableFromBackup(t *testing.T) {
	img := sgdiskImage(t, 64, 64, "-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8304")
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	good, err := ReadPartitionTable(f, 64*mib)
	if err != nil || good.FromBackup {
		t.Fatalf("intact table: %+v, %v", good, err)
	}
	// Destroy the primary header: the backup still describes the partitions.
	f.WriteAt(make([]byte, 512), 512)
	pt, err := ReadPartitionTable(f, 64*mib)
	if err != nil || !pt.FromBackup || len(pt.Partitions) != 2 || pt.Partitions[1] != good.Partitions[1] ||
		pt.BackupHeaderOffset != good.BackupHeaderOffset || pt.BackupEntriesOffset != good.BackupEntriesOffset {
		t.Fatalf("from backup: %+v, %v; want %+v", pt, err, good)
	}
	// GrowGPT works on the primary only.
	if _, err := GrowGPT(&File{File: f, size: 64 * mib}, GrowOptions{}); !errors.Is(err, ErrNoGPT) {
		t.Fatalf("GrowGPT without primary: %v", err)
	}
	// An MBR with a real (non-protective) partition hides a stale backup GPT.
	mbr := make([]byte, 512)
	mbr[510], mbr[511] = 0x55, 0xaa
	mbr[446+4] = 0x83
	binary.LittleEndian.PutUint32(mbr[446+8:], 2048)
	binary.LittleEndian.PutUint32(mbr[446+12:], 2048)
	f.WriteAt(mbr, 0)
	if pt, err := ReadPartitionTable(f, 64*mib); err != nil || pt.Kind != "dos" {
		t.Fatalf("dos over stale GPT: %+v, %v", pt, err)
	}
}

// TestGrowGPT4Kn checks 4096-byte sectors against go-diskfs as an
// independent writer and reader (sgdisk cannot make 4Kn images on files).
func TestGrowGPT4Kn(t *testing.T) {
	p := filepath.Join(t.TempDir(), "4kn.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 * mib); err != nil {
		t.Fatal(err)
	}
	w, err := diskfsfile.New(f, false).Writable()
	if err != nil {
		t.Fatal(err)
	}
	table := &diskfsgpt.Table{LogicalSectorSize: 4096, PhysicalSectorSize: 4096, ProtectiveMBR: true, Partitions: []*diskfsgpt.Partition{
		{Index: 1, Start: 256, End: 256 + 2048 - 1, Type: diskfsgpt.EFISystemPartition, Name: "esp"},
		{Index: 2, Start: 2304, End: 2304 + 5120 - 1, Type: diskfsgpt.LinuxRootX86_64, Name: "root"},
	}}
	if err := table.Write(w, 64*mib); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(128 * mib); err != nil {
		t.Fatal(err)
	}
	res, err := GrowGPT(&File{File: f, size: 128 * mib}, GrowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const total = 128 * mib / 4096
	if res.SectorSize != 4096 || res.Partition != 2 || res.NewBackupLBA != total-1 || res.NewLastLBA != total-1-4-1 {
		t.Fatalf("result %+v", res)
	}
	got, err := diskfsgpt.Read(diskfsfile.New(f, true), 4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if got.RecoveredFromBackup || len(got.Partitions) < 2 || got.Partitions[1].End != total-6 || got.Partitions[0].End != 256+2048-1 {
		t.Fatalf("go-diskfs reads %+v", got)
	}
	// The backup copy is valid on its own: destroy the primary and read it.
	f.WriteAt(make([]byte, 4096), 4096)
	pt, err := ReadPartitionTable(f, 128*mib)
	if err != nil || !pt.FromBackup || pt.SectorSize != 4096 || pt.Partitions[1].Size != int64(total-6-2304+1)*4096 {
		t.Fatalf("backup after grow: %+v, %v", pt, err)
	}
}
