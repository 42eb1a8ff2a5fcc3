package image

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/booty-dev/booty/internal/testenv"
)

// qcow2Of converts raw with the real qemu-img convert and extra options.
func qcow2Of(t *testing.T, raw []byte, extra ...string) []byte {
	t.Helper()
	testenv.NeedTools(t, "qemu-img")
	in := writeFile(t, "in.raw", raw)
	out := filepath.Join(t.TempDir(), "out.qcow2")
	run(t, "qemu-img", append(append([]string{"convert", "-O", "qcow2"}, extra...), in, out)...)
	return readFile(t, out)
}

func TestWriteQcow2(t *testing.T) {
	img := gptImage(t, 40*mib+7*512, false, 60)
	tests := []struct {
		name  string
		extra []string
		comp  Format
	}{
		{"qemu-img convert", nil, FormatRaw},
		{"small clusters", []string{"-o", "cluster_size=4096"}, FormatRaw},
		{"compat 0.10 (v2)", []string{"-o", "compat=0.10"}, FormatRaw},
		{"zlib-compressed clusters", []string{"-c"}, FormatRaw},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := qcow2Of(t, img, tt.extra...)
			if DetectFormat(q) != FormatQcow2 {
				t.Fatal("not detected as qcow2")
			}
			src := compress(t, tt.comp, q)
			dst := filepath.Join(t.TempDir(), "target.img")
			res, err := Write(context.Background(), Options{Source: writeFile(t, "src", src), ImageChecksum: sha(img), Target: dst, Log: testLog(t)})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if !bytes.Equal(readFile(t, dst), img) {
				t.Fatal("target differs from the virtual disk")
			}
			if res.Format != FormatQcow2 || res.ImageSize != int64(len(img)) {
				t.Errorf("Result %+v", res)
			}
		})
	}
}

func TestWriteQcow2Refused(t *testing.T) {
	testenv.NeedTools(t, "qemu-img")
	testenv.NeedTools(t, "qemu-io")
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", base, "16M")
	overlay := filepath.Join(dir, "overlay.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", "-b", base, "-F", "qcow2", overlay)
	// Written backwards: the data for guest offset 8 MiB comes first in
	// the file, so guest offset 0 needs it buffered.
	backwards := filepath.Join(dir, "backwards.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", backwards, "16M")
	run(t, "qemu-io", "-c", "write -P 0x11 8M 2M", "-c", "write -P 0x22 0 64k", backwards)
	raw := make([]byte, 16*mib)
	copy(raw, bytes.Repeat([]byte{0x22}, 64<<10))
	copy(raw[8*mib:], bytes.Repeat([]byte{0x11}, 2*mib))

	t.Run("backing file", func(t *testing.T) {
		_, err := Write(context.Background(), Options{Source: overlay, AllowUnverified: true, Target: filepath.Join(dir, "t1"), Log: testLog(t)})
		if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "backing file") {
			t.Fatalf("Write = %v, want ErrUnsupportedFormat naming the backing file", err)
		}
	})
	t.Run("out of order within the bound", func(t *testing.T) {
		dst := filepath.Join(dir, "t2")
		if _, err := Write(context.Background(), Options{Source: backwards, ImageChecksum: sha(raw), Target: dst, Log: testLog(t)}); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if !bytes.Equal(readFile(t, dst), raw) {
			t.Fatal("target differs")
		}
	})
	t.Run("out of order beyond the bound", func(t *testing.T) {
		defer func(n int) { maxQcow2Buffer = n }(maxQcow2Buffer)
		maxQcow2Buffer = mib
		mem := newMemTarget(16*mib, 0x55)
		_, err := Write(context.Background(), Options{Source: backwards, ImageChecksum: sha(raw), Target: "mem", TargetWriter: mem, Log: testLog(t)})
		if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "-O raw") {
			t.Fatalf("Write = %v, want ErrUnsupportedFormat suggesting raw", err)
		}
		t.Logf("error: %v", err)
	})
}
