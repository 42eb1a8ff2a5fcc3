package fsprobe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	diskfsiso "github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// mkfsImage runs a mkfs tool on a new sparse file of size bytes and returns its path.
func mkfsImage(t *testing.T, size int64, tool string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("SKIPPED: %s not installed", tool)
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, append(args, img)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, out)
	}
	return img
}

func probeFile(t *testing.T, img string) (Info, error) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Probe(f)
}

// TestProbeMkfs checks type, UUID and label of filesystems made by their
// own mkfs, with the UUID or serial fixed on the command line.
func TestProbeMkfs(t *testing.T) {
	const u = "5b4c1a7e-9f3d-4c2b-8e6f-0a1b2c3d4e5f"
	tests := []struct {
		name string
		size int64
		tool string
		args []string
		want Info
	}{
		{"fat12", 1440 << 10, "mkfs.vfat", []string{"-n", "BOOTY", "-i", "DEADBEEF"}, Info{VFAT, "DEAD-BEEF", "BOOTY"}},
		{"fat16", 32 << 20, "mkfs.vfat", []string{"-F", "16", "-n", "CONFIG-2", "-i", "0000ABCD"}, Info{VFAT, "0000-ABCD", "CONFIG-2"}},
		{"fat16-nolabel", 16 << 20, "mkfs.vfat", []string{"-F", "16", "-i", "0000ABCD"}, Info{VFAT, "0000-ABCD", ""}},
		{"fat32", 64 << 20, "mkfs.vfat", []string{"-F", "32", "-n", "UEFI", "-i", "1A2B3C4D"}, Info{VFAT, "1A2B-3C4D", "UEFI"}},
		{"fat12-nolabel", 1440 << 10, "mkfs.vfat", []string{"-i", "12345678"}, Info{VFAT, "1234-5678", ""}},
		{"ext4", 32 << 20, "mkfs.ext4", []string{"-q", "-F", "-L", "cloudimg-rootfs", "-U", u}, Info{Ext4, u, "cloudimg-rootfs"}},
		{"ext4-nolabel", 16 << 20, "mkfs.ext4", []string{"-q", "-F", "-U", u}, Info{Ext4, u, ""}},
		{"ext3", 16 << 20, "mkfs.ext3", []string{"-q", "-F", "-L", "old", "-U", u}, Info{Ext3, u, "old"}},
		{"ext2", 16 << 20, "mkfs.ext2", []string{"-q", "-F", "-L", "BOOTY", "-U", u}, Info{Ext2, u, "BOOTY"}},
		{"xfs", 320 << 20, "mkfs.xfs", []string{"-q", "-f", "-L", "root", "-m", "uuid=11111111-2222-4333-8444-555555555555"},
			Info{XFS, "11111111-2222-4333-8444-555555555555", "root"}},
		{"swap", 8 << 20, "mkswap", []string{"-L", "swap", "-U", "22222222-2222-4333-8444-555555555555"},
			Info{Swap, "22222222-2222-4333-8444-555555555555", "swap"}},
		{"btrfs", 128 << 20, "mkfs.btrfs", []string{"-q", "-f", "-L", "data", "-U", "33333333-2222-4333-8444-555555555555"},
			Info{Btrfs, "33333333-2222-4333-8444-555555555555", "data"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := mkfsImage(t, tt.size, tt.tool, tt.args...)
			got, err := probeFile(t, img)
			if err != nil || got != tt.want {
				t.Errorf("Probe = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestProbeSynthetic builds superblocks by hand: the ext feature flags that
// tell ext2, ext3 and ext4 apart, and the signatures of the other types.
func TestProbeSynthetic(t *testing.T) {
	ext := func(compat, incompat, roCompat uint32) []byte {
		b := make([]byte, 4096)
		binary.LittleEndian.PutUint16(b[1080:], 0xef53)
		binary.LittleEndian.PutUint32(b[1024+0x5c:], compat)
		binary.LittleEndian.PutUint32(b[1024+0x60:], incompat)
		binary.LittleEndian.PutUint32(b[1024+0x64:], roCompat)
		return b
	}
	at := func(size, off int, s string) []byte {
		b := make([]byte, size)
		copy(b[off:], s)
		return b
	}
	lvm := at(4096, 512, "LABELONE")
	copy(lvm[512+24:], "LVM2 001")
	btrfs := at(0x11000, 0x10040, "_BHRfS_M")
	copy(btrfs[0x10020:], "\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef")
	copy(btrfs[0x1012b:], "pool\x00")
	tests := []struct {
		name string
		b    []byte
		want Info
	}{
		{"ext2", ext(0, 0x2, 0x1), Info{Type: Ext2, UUID: "00000000-0000-0000-0000-000000000000"}},
		{"ext3", ext(0x4, 0x2, 0x1), Info{Type: Ext3, UUID: "00000000-0000-0000-0000-000000000000"}},
		{"ext4 by incompat", ext(0x4, 0x2|0x40|0x80|0x200, 0x1), Info{Type: Ext4, UUID: "00000000-0000-0000-0000-000000000000"}},
		{"ext4 by ro_compat", ext(0, 0x2, 0x400), Info{Type: Ext4, UUID: "00000000-0000-0000-0000-000000000000"}},
		{"ext3 journal device", ext(0, 0x4, 0), Info{Type: Ext3, UUID: "00000000-0000-0000-0000-000000000000"}},
		{"xfs", at(512, 0, "XFSB"), Info{Type: XFS, UUID: "00000000-0000-0000-0000-000000000000"}},
		{"btrfs", btrfs, Info{Type: Btrfs, UUID: "01234567-89ab-cdef-0123-456789abcdef", Label: "pool"}},
		{"swap", at(4096, 4086, "SWAPSPACE2"), Info{Type: Swap, UUID: "00000000-0000-0000-0000-000000000000"}},
		{"old swap", at(4096, 4086, "SWAP-SPACE"), Info{Type: Swap}},
		{"lvm pv label in sector 1", lvm, Info{Type: LVM2PV}},
		{"LABELONE without LVM2 type", at(4096, 512, "LABELONE"), Info{}},
		{"MBR without a BPB", at(512, 510, "\x55\xaa"), Info{}},
		{"zeros", make([]byte, 1<<17), Info{}},
		{"tiny", make([]byte, 10), Info{}},
		{"empty", nil, Info{}},
	}
	for _, tt := range tests {
		got, err := Probe(bytes.NewReader(tt.b))
		if got != tt.want || (tt.want.Type == "") != errors.Is(err, ErrUnknown) {
			t.Errorf("%s: Probe = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

type failReader struct{}

func (failReader) ReadAt([]byte, int64) (int, error) { return 0, os.ErrPermission }

func TestProbeReadError(t *testing.T) {
	if _, err := Probe(failReader{}); !errors.Is(err, os.ErrPermission) || errors.Is(err, ErrUnknown) {
		t.Errorf("Probe of a failing reader: %v, want the read error", err)
	}
}

// isoImage builds an ISO 9660 image with go-diskfs holding one file.
func isoImage(t *testing.T, label string, joliet bool) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "cd.iso")
	b, err := file.CreateFromPath(img, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := diskfsiso.Create(b, 0, 0, 2048, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenFile("/booty.yaml", os.O_CREATE|os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := fs.Finalize(diskfsiso.FinalizeOptions{VolumeIdentifier: label, Joliet: joliet}); err != nil {
		t.Fatal(err)
	}
	return img
}

func TestProbeISO(t *testing.T) {
	for _, joliet := range []bool{false, true} {
		img := isoImage(t, "config-2", joliet)
		got, err := probeFile(t, img)
		if err != nil || got.Type != ISO9660 || got.UUID != "" {
			t.Fatalf("joliet=%v: Probe = %+v, %v", joliet, got, err)
		}
		// blkid reports config-2 either way; case may be folded in the primary descriptor.
		if got.Label != "config-2" && got.Label != "CONFIG-2" {
			t.Errorf("joliet=%v: label %q, want config-2", joliet, got.Label)
		}
	}
}

// TestProbeISOJolietPreferred builds descriptors by hand: a primary with an
// upper-case label and a Joliet one with the real case.
func TestProbeISOJolietPreferred(t *testing.T) {
	img := make([]byte, 20*2048)
	pvd := img[16*2048:]
	pvd[0] = 1
	copy(pvd[1:], "CD001")
	copy(pvd[40:72], "CONFIG_2                        ")
	svd := img[17*2048:]
	svd[0] = 2
	copy(svd[1:], "CD001")
	copy(svd[88:], "%/E")
	for i, r := range "config-2" {
		svd[40+2*i] = 0
		svd[41+2*i] = byte(r)
	}
	for i := 40 + 16; i < 72; i += 2 { // pad with UCS-2 spaces
		svd[i], svd[i+1] = 0, ' '
	}
	term := img[18*2048:]
	term[0] = 255
	copy(term[1:], "CD001")
	got, err := Probe(bytes.NewReader(img))
	if err != nil || got != (Info{Type: ISO9660, Label: "config-2"}) {
		t.Errorf("Probe = %+v, %v; want iso9660, config-2", got, err)
	}
	// Without the Joliet descriptor the primary label counts.
	copy(svd[1:], "XXXXX")
	got, err = Probe(bytes.NewReader(img))
	if err != nil || got != (Info{Type: ISO9660, Label: "CONFIG_2"}) {
		t.Errorf("primary only: Probe = %+v, %v; want iso9660, CONFIG_2", got, err)
	}
}

func TestProbeUnknownFiles(t *testing.T) {
	for name, size := range map[string]int{"zeros": 1 << 20, "short": 100, "empty": 0} {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := probeFile(t, path); !errors.Is(err, ErrUnknown) {
			t.Errorf("%s: Probe = %+v, %v; want ErrUnknown", name, got, err)
		}
	}
}

// TestProbeFATRootDirWins overwrites the boot sector copy of the label:
// the root directory entry, which blkid and mlabel use, must still win.
func TestProbeFATRootDirWins(t *testing.T) {
	for _, tt := range []struct {
		name    string
		size    int64
		args    []string
		bootOff int64
	}{
		{"fat12", 1440 << 10, []string{"-n", "BOOTY"}, 43},
		{"fat32", 64 << 20, []string{"-F", "32", "-n", "BOOTY"}, 71},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := mkfsImage(t, tt.size, "mkfs.vfat", tt.args...)
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("STALE      "), tt.bootOff); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if got, err := probeFile(t, img); err != nil || got.Type != VFAT || got.Label != "BOOTY" {
				t.Errorf("Probe = %+v, %v; want vfat BOOTY from the root directory", got, err)
			}
		})
	}
}
