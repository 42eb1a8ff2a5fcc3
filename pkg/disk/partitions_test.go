package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// devTree makes a fake /dev: files named after the kernel's nodes.
func devTree(t *testing.T, nodes map[string]string) *Manager {
	t.Helper()
	dir := t.TempDir()
	for name, src := range nodes {
		b := []byte{}
		if src != "" {
			var err error
			if b, err = os.ReadFile(src); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &Manager{DevRoot: dir, SysRoot: t.TempDir(), NodeTimeout: 300 * time.Millisecond, PollInterval: 10 * time.Millisecond}
}

// TestReadPartitions reads a GPT disk's table, finds each partition's node
// under DevRoot and probes its filesystem.
func TestReadPartitions(t *testing.T) {
	img := sgdiskImage(t, 64, 64,
		"-n", "1:2048:+16M", "-t", "1:ef00", "-c", "1:EFI System", "-u", "1:8D3F1A2B-1111-4222-8333-944455556666",
		"-n", "2:0:+8M", "-t", "2:8200",
		"-n", "3:0:0", "-t", "3:8304", "-c", "3:root")
	root := mkfsImage(t, 32*mib, "mkfs.ext4", "-q", "-F", "-L", "cloudimg-rootfs", "-U", "5b4c1a7e-9f3d-4c2b-8e6f-0a1b2c3d4e5f")
	m := devTree(t, map[string]string{"vda": img, "vda1": "", "vda2": "", "vda3": root})

	parts, err := m.ReadPartitions(context.Background(), "/dev/vda")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 3 {
		t.Fatalf("partitions = %+v, want 3", parts)
	}
	want := []Partition{
		{Number: 1, Start: mib, Size: 16 * mib, SectorSize: 512, Type: TypeEFISystem, Name: "EFI System",
			PartUUID: "8d3f1a2b-1111-4222-8333-944455556666", Path: filepath.Join(m.DevRoot, "vda1")},
		{Number: 2, Start: 17 * mib, Size: 8 * mib, SectorSize: 512, Type: TypeLinuxSwap, Path: filepath.Join(m.DevRoot, "vda2")},
		{Number: 3, Start: 25 * mib, SectorSize: 512, Type: TypeLinuxRootX86_64, Name: "root", Path: filepath.Join(m.DevRoot, "vda3"),
			FSType: "ext4", Label: "cloudimg-rootfs", UUID: "5b4c1a7e-9f3d-4c2b-8e6f-0a1b2c3d4e5f"},
	}
	for i, w := range want {
		g := parts[i]
		if w.PartUUID == "" {
			g.PartUUID = "" // random, from sgdisk
		}
		if i == 2 {
			g.Size = 0 // up to the backup table
		}
		if g != w {
			t.Errorf("partition %d = %+v,\nwant %+v", i+1, parts[i], w)
		}
	}
	if got := parts[0].StartLBA(); got != 2048 {
		t.Errorf("StartLBA = %d, want 2048", got)
	}
	if got := parts[0].SizeLBA(); got != 32768 {
		t.Errorf("SizeLBA = %d, want 32768", got)
	}

	uuids, err := m.PartUUIDs(Disk{Path: filepath.Join(m.DevRoot, "vda")})
	if err != nil || len(uuids) != 3 || !uuids["8d3f1a2b-1111-4222-8333-944455556666"] {
		t.Errorf("PartUUIDs = %v, %v; want the three partitions' GUIDs", uuids, err)
	}
}

// A partition whose node never appears fails after NodeTimeout, naming it.
func TestReadPartitionsNodeTimeout(t *testing.T) {
	img := sgdiskImage(t, 64, 64, "-n", "1:2048:+16M", "-t", "1:8304")
	m := devTree(t, map[string]string{"vda": img})
	_, err := m.ReadPartitions(context.Background(), "vda")
	if !errors.Is(err, ErrNodesTimeout) || !bytes.Contains([]byte(err.Error()), []byte("vda1")) {
		t.Fatalf("err = %v, want ErrNodesTimeout naming vda1", err)
	}
}

// An MBR disk gives MBR types, the extended container left out; a disk
// without any table wraps ErrNoPartitionTable.
func TestReadPartitionsMBRAndNone(t *testing.T) {
	mbr := make([]byte, mib)
	mbr[510], mbr[511] = 0x55, 0xaa
	for i, e := range []struct {
		typ         byte
		start, size uint32
	}{{0xef, 2048, 4096}, {0x05, 6144, 100}, {0x83, 8192, 1000}} {
		b := mbr[446+16*i:]
		b[4] = e.typ
		binary.LittleEndian.PutUint32(b[8:], e.start)
		binary.LittleEndian.PutUint32(b[12:], e.size)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "mbr")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(src, mbr, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, make([]byte, mib), 0o644); err != nil {
		t.Fatal(err)
	}
	m := devTree(t, map[string]string{"sda": src, "sda1": "", "sda3": "", "sdb": empty})
	parts, err := m.ReadPartitions(context.Background(), "/dev/sda")
	want := []Partition{
		{Number: 1, Start: 2048 * 512, Size: 4096 * 512, SectorSize: 512, Type: "0xef", MBRType: 0xef, Path: filepath.Join(m.DevRoot, "sda1")},
		{Number: 3, Start: 8192 * 512, Size: 1000 * 512, SectorSize: 512, Type: "0x83", MBRType: 0x83, Path: filepath.Join(m.DevRoot, "sda3")},
	}
	if err != nil || !slices.Equal(parts, want) {
		t.Errorf("ReadPartitions = %+v, %v;\nwant %+v", parts, err, want)
	}
	if _, err := m.ReadPartitions(context.Background(), "sdb"); !errors.Is(err, ErrNoPartitionTable) {
		t.Errorf("empty disk: err = %v, want ErrNoPartitionTable", err)
	}
	if u, err := m.PartUUIDs(Disk{Path: filepath.Join(m.DevRoot, "sdb")}); err != nil || len(u) != 0 {
		t.Errorf("PartUUIDs of an empty disk = %v, %v; want none", u, err)
	}
}

// ZeroEnds zeroes the first and last MiB and nothing between.
func TestZeroEnds(t *testing.T) {
	for _, size := range []int64{3 * mib, mib + 4096, 4096} {
		p := filepath.Join(t.TempDir(), "disk")
		if err := os.WriteFile(p, bytes.Repeat([]byte{0xaa}, int(size)), 0o644); err != nil {
			t.Fatal(err)
		}
		m := &Manager{}
		if err := m.ZeroEnds(p); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		for i, c := range b {
			inEnds := int64(i) < EndsSpan || int64(i) >= size-EndsSpan
			if (c == 0) != inEnds {
				t.Fatalf("size %d: byte %d = %#x, want zero only in the first and last MiB", size, i, c)
			}
		}
	}
}
