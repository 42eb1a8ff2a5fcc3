package harness

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sgdiskImage makes a 32 MiB file with a GPT of two partitions written by
// sgdisk, the tool hack/mkdemoimage.sh uses.
func sgdiskImage(t *testing.T) string {
	t.Helper()
	sgdisk, err := exec.LookPath("sgdisk")
	if err != nil {
		t.Fatal("sgdisk not found: install gdisk (hack/deps.sh)")
	}
	p := filepath.Join(t.TempDir(), "gpt.img")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 32<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sgdisk, "-o", "-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:0", "-t", "2:8304", p).CombinedOutput()
	if err != nil {
		t.Fatalf("sgdisk: %v\n%s", err, out)
	}
	return p
}

// patch writes b at off in a copy of src and returns the copy's path.
func patch(t *testing.T, src string, off int64, b []byte) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	copy(data[off:], b)
	p := filepath.Join(t.TempDir(), "patched.img")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// flip inverts the byte at off in a copy of src: unlike writing a fixed
// value, it always changes the byte, whatever random GUID sgdisk chose.
func flip(t *testing.T, src string, off int64) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	return patch(t, src, off, []byte{^data[off]})
}

func TestCheckGPT(t *testing.T) {
	good := sgdiskImage(t)
	zeros := filepath.Join(t.TempDir(), "zeros.img")
	if err := os.WriteFile(zeros, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short.img")
	if err := os.WriteFile(short, []byte("EFI PART"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		disk    string
		wantErr string // substring; "" means valid
	}{
		{"sgdisk gpt", good, ""},
		{"header byte changed", flip(t, good, 512+56), "header CRC32"},
		{"partition entry changed", flip(t, good, 1024+56), "partition entries CRC32"},
		{"no mbr signature", patch(t, good, 510, []byte{0, 0}), "no MBR signature"},
		{"mbr not protective", patch(t, good, 446+4, []byte{0x83}), "type 0xEE"},
		{"no efi part", patch(t, good, 512, []byte("EFI TRAP")), "EFI PART"},
		{"all zeros", zeros, "no MBR signature"},
		{"too short", short, "read first two sectors"},
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckGPT(tt.disk)
			if tt.wantErr == "" {
				if err != nil || !HasValidGPT(tt.disk) {
					t.Fatalf("CheckGPT = %v, want valid", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckGPT = %v, want error containing %q", err, tt.wantErr)
			}
			if HasValidGPT(tt.disk) {
				t.Fatal("HasValidGPT = true for an invalid GPT")
			}
		})
	}
}

func TestDiskHoldsImage(t *testing.T) {
	dir := t.TempDir()
	img := make([]byte, 3<<20+123) // not a multiple of the chunk
	for i := range img {
		img[i] = byte(i*7 + i>>11)
	}
	imgPath := filepath.Join(dir, "image")
	if err := os.WriteFile(imgPath, img, 0o644); err != nil {
		t.Fatal(err)
	}
	// disk writes a disk of size bytes starting with img, with the byte
	// at each offset in flip inverted.
	disk := func(name string, size int, flip ...int) string {
		d := make([]byte, size)
		copy(d, img)
		for _, o := range flip {
			d[o] ^= 0xff
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, d, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name       string
		disk       string
		wantOffset int64 // -1: equal
		wantErr    string
	}{
		{"same size", disk("same", len(img)), -1, ""},
		{"bigger disk, tail ignored", disk("bigger", 8<<20, 5<<20), -1, ""},
		{"first byte", disk("first", 4<<20, 0), 0, ""},
		{"second chunk", disk("second", 4<<20, 1<<20+5, 2<<20), 1<<20 + 5, ""},
		{"last byte", disk("last", 4<<20, len(img)-1), int64(len(img) - 1), ""},
		{"disk too small", disk("small", 1<<20), -1, "disk has 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := DiskHoldsImage(tt.disk, imgPath)
			var mm *MismatchError
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DiskHoldsImage = %v, want error containing %q", err, tt.wantErr)
				}
			case tt.wantOffset < 0:
				if err != nil {
					t.Fatalf("DiskHoldsImage = %v, want nil", err)
				}
			case !errors.As(err, &mm):
				t.Fatalf("DiskHoldsImage = %v, want a *MismatchError", err)
			case mm.Offset != tt.wantOffset || mm.ImageByte != img[tt.wantOffset] || mm.DiskByte != img[tt.wantOffset]^0xff:
				t.Fatalf("mismatch = %+v, want offset %d", mm, tt.wantOffset)
			}
		})
	}
}

func TestFirstMiBZero(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tail := make([]byte, 2<<20)
	tail[1<<20] = 1 // just past the first MiB
	last := make([]byte, 2<<20)
	last[1<<20-1] = 1
	tests := []struct {
		name string
		disk string
		want bool
	}{
		{"zeros", write("zeros", make([]byte, 2<<20)), true},
		{"nonzero after first MiB", write("tail", tail), true},
		{"last byte of first MiB", write("last", last), false},
		{"small and zero", write("small", make([]byte, 4096)), true},
		{"mbr signature", write("mbr", append(make([]byte, 510), 0x55, 0xaa)), false},
		{"empty", write("empty", nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FirstMiBZero(tt.disk)
			if err != nil || got != tt.want {
				t.Fatalf("FirstMiBZero = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, err := FirstMiBZero(filepath.Join(dir, "missing")); err == nil {
		t.Error("FirstMiBZero of a missing file: no error")
	}
}
