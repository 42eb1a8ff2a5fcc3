//go:build linux

package image

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/booty-dev/booty/internal/testenv"
)

// loopDevice attaches backing to a free loop device for the test.
func loopDevice(t *testing.T, backing []byte, extra ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: loop devices need root")
	}
	testenv.NeedTools(t, "losetup")
	p := writeFile(t, "backing.img", backing)
	out, err := exec.Command("losetup", append(append([]string{"--find", "--show"}, extra...), p)...).CombinedOutput()
	if err != nil {
		t.Skipf("SKIP: losetup --find --show: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	t.Logf("loop device %s on %s", dev, p)
	return dev
}

func TestWriteLoopDevice(t *testing.T) {
	img := gptImage(t, testImageSize, true, 30)
	zst := compress(t, FormatZstd, img)
	src := writeFile(t, "image.zst", zst)
	old := gptImage(t, 32*mib, true, 31) // a provisioned disk: GPT at both ends

	t.Run("success", func(t *testing.T) {
		dev := loopDevice(t, old)
		res, err := Write(context.Background(), Options{Source: src, Checksum: sha(zst), ImageChecksum: sha(img), Target: dev, Log: testLog(t)})
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		got := readFile(t, dev)
		if len(got) != 32*mib {
			t.Fatalf("read %d bytes from %s", len(got), dev)
		}
		if !bytes.Equal(got[:len(img)], img) {
			t.Error("device does not hold the image")
		}
		if gptAt(got, int64(len(got))-512) || !isZero(got[31*mib:]) {
			t.Error("old backup GPT at the device end survived")
		}
		if res.ImageSize != int64(len(img)) {
			t.Errorf("ImageSize = %d", res.ImageSize)
		}
	})

	t.Run("checksum mismatch", func(t *testing.T) {
		dev := loopDevice(t, old)
		_, err := Write(context.Background(), Options{Source: src, ImageChecksum: sha(old), Target: dev, ChunkSize: mib, Log: testLog(t)})
		if !errors.Is(err, ErrChecksumMismatch) {
			t.Fatalf("Write = %v, want ErrChecksumMismatch", err)
		}
		got := readFile(t, dev)
		assertInvalidated(t, got, int64(len(img)))
		if ok, out := sgdiskFindsTable(t, dev); ok {
			t.Errorf("sgdisk finds a partition table after the failure:\n%s", out)
		}
	})

	t.Run("too small", func(t *testing.T) {
		small := gptImage(t, 9*mib+40*512, false, 32)
		dev := loopDevice(t, small)
		_, err := Write(context.Background(), Options{Source: src, ImageChecksum: sha(img), Target: dev, Log: testLog(t)})
		if !errors.Is(err, ErrTargetTooSmall) {
			t.Fatalf("Write = %v, want ErrTargetTooSmall", err)
		}
		if !bytes.Equal(readFile(t, dev), small) {
			t.Error("device changed although it was refused before writing")
		}
	})
}

// TestWriteLoopDeviceFast writes a sparse image onto a loop device with
// direct I/O that holds old non-zero data: the data goes through O_DIRECT,
// the zero runs are zeroed with BLKZEROOUT instead of written, and the
// device reads back as the image. With FreshTarget the zero runs are left
// alone, which a device that really was wiped reads as zeros too.
func TestWriteLoopDeviceFast(t *testing.T) {
	img := gptImage(t, 48*mib, false, 33)
	zst := compress(t, FormatZstd, img)
	src := writeFile(t, "image.zst", zst)
	for _, tt := range []struct {
		name  string
		fill  byte
		fresh bool
	}{{"old data, BLKZEROOUT", 0xaa, false}, {"fresh target", 0, true}} {
		t.Run(tt.name, func(t *testing.T) {
			dev := loopDevice(t, bytes.Repeat([]byte{tt.fill}, 64*mib), "--direct-io=on")
			res, err := Write(context.Background(), Options{Source: src, Checksum: sha(zst), Target: dev, FreshTarget: tt.fresh, Log: testLog(t)})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			got := readFile(t, dev)
			if !bytes.Equal(got[:len(img)], img) {
				t.Fatal("device does not hold the image")
			}
			if !res.Direct {
				t.Error("O_DIRECT was not used on a block device")
			}
			if res.ZeroBytes < 30*mib {
				t.Errorf("ZeroBytes = %d, want most of the sparse image", res.ZeroBytes)
			}
			t.Logf("result %+v", res)
		})
	}
}
