package provider

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/booty-dev/booty/internal/testenv"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// mkfsImage runs a mkfs tool on a new sparse file of size bytes and returns its path.
func mkfsImage(t *testing.T, size int64, tool string, args ...string) string {
	t.Helper()
	testenv.NeedTools(t, tool)
	path, _ := exec.LookPath(tool)
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

// isoImage builds an ISO 9660 image with go-diskfs holding the given files.
func isoImage(t *testing.T, label string, joliet bool, files map[string]string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "cd.iso")
	b, err := file.CreateFromPath(img, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := iso9660.Create(b, 0, 0, 2048, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if dir := filepath.Dir(name); dir != "." {
			if err := fs.Mkdir("/" + dir); err != nil {
				t.Fatal(err)
			}
		}
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := fs.Finalize(iso9660.FinalizeOptions{VolumeIdentifier: label, Joliet: joliet}); err != nil {
		t.Fatal(err)
	}
	return img
}

func readLabelOf(t *testing.T, img string) (string, string, error) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return ReadLabel(f)
}

func TestReadLabelMkfs(t *testing.T) {
	tests := []struct {
		name      string
		size      int64
		tool      string
		args      []string
		wantType  string
		wantLabel string
	}{
		{"fat12", 1440 << 10, "mkfs.vfat", []string{"-n", "BOOTY"}, FSVFAT, "BOOTY"},
		{"fat16", 32 << 20, "mkfs.vfat", []string{"-F", "16", "-n", "CONFIG-2"}, FSVFAT, "CONFIG-2"},
		{"fat32", 64 << 20, "mkfs.vfat", []string{"-F", "32", "-n", "BOOTY"}, FSVFAT, "BOOTY"},
		{"fat-nolabel", 1440 << 10, "mkfs.vfat", nil, FSVFAT, ""},
		{"ext4", 8 << 20, "mkfs.ext4", []string{"-q", "-F", "-L", "config-2"}, FSExt4, "config-2"},
		{"ext2", 8 << 20, "mkfs.ext2", []string{"-q", "-F", "-L", "BOOTY"}, FSExt4, "BOOTY"},
		{"ext4-nolabel", 8 << 20, "mkfs.ext4", []string{"-q", "-F"}, FSExt4, ""},
		{"ext3", 8 << 20, "mkfs.ext3", []string{"-q", "-F", "-L", "BOOTY"}, FSExt4, "BOOTY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := mkfsImage(t, tt.size, tt.tool, tt.args...)
			typ, label, err := readLabelOf(t, img)
			if err != nil || typ != tt.wantType || label != tt.wantLabel {
				t.Errorf("ReadLabel = %q, %q, %v; want %q, %q", typ, label, err, tt.wantType, tt.wantLabel)
			}
		})
	}
}

func TestReadLabelISO(t *testing.T) {
	for _, joliet := range []bool{false, true} {
		img := isoImage(t, "config-2", joliet, map[string]string{"booty.yaml": "x"})
		typ, label, err := readLabelOf(t, img)
		if err != nil || typ != FSISO9660 {
			t.Fatalf("joliet=%v: ReadLabel = %q, %q, %v", joliet, typ, label, err)
		}
		// blkid reports config-2 either way; case may be folded in the primary descriptor.
		if label != "config-2" && label != "CONFIG-2" {
			t.Errorf("joliet=%v: label %q, want config-2", joliet, label)
		}
	}
}

func TestReadLabelUnknown(t *testing.T) {
	for name, size := range map[string]int{"zeros": 1 << 20, "short": 100, "empty": 0} {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readLabelOf(t, path); !errors.Is(err, ErrUnknownFS) {
			t.Errorf("%s: err = %v, want ErrUnknownFS", name, err)
		}
	}
}

// TestReadLabelOtherFS: filesystems fsprobe knows but a config drive cannot
// be are unknown to ReadLabel, even with a matching label.
func TestReadLabelOtherFS(t *testing.T) {
	for _, tt := range []struct {
		tool string
		size int64
		args []string
	}{
		{"mkswap", 8 << 20, []string{"-L", "BOOTY"}},
		{"mkfs.xfs", 320 << 20, []string{"-q", "-f", "-L", "BOOTY"}},
	} {
		img := mkfsImage(t, tt.size, tt.tool, tt.args...)
		if typ, label, err := readLabelOf(t, img); !errors.Is(err, ErrUnknownFS) {
			t.Errorf("%s: ReadLabel = %q, %q, %v; want ErrUnknownFS", tt.tool, typ, label, err)
		}
	}
}
