package image

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// ZstdOptions hands out Write's decoder options for a verified image as a
// fresh copy each time, and they decode.
func TestZstdOptions(t *testing.T) {
	opts := ZstdOptions()
	if len(opts) != len(zstdOptions)+1 {
		t.Fatalf("%d options, want Write's %d and the frame checksum's", len(opts), len(zstdOptions))
	}
	if &opts[0] == &zstdOptions[0] || &opts[0] == &ZstdOptions()[0] {
		t.Fatal("ZstdOptions returned a shared slice")
	}
	img := bytes.Repeat([]byte("zstd options "), 10000)
	zw, _ := zstd.NewWriter(nil)
	comp := zw.EncodeAll(img, nil)
	zr, err := zstd.NewReader(bytes.NewReader(comp), ZstdOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(zr); err != nil || !bytes.Equal(out.Bytes(), img) {
		t.Fatalf("decode with ZstdOptions: err %v, %d bytes, want the image", err, out.Len())
	}
}

// The zstd frame checksum is checked only when no checksum verifies the
// image: a served file whose frame checksum is wrong fails an unverified
// write (ErrCorruptSource, the target invalidated), and is written when
// the operator's sha256 of that very file, or of the image, vouches for
// it.
func TestWriteZstdFrameChecksum(t *testing.T) {
	img := gptImage(t, testImageSize, false, 21)
	comp := compress(t, FormatZstd, img) // zstd -3 writes a frame checksum
	var h zstd.Header
	if err := h.Decode(comp); err != nil || !h.HasCheckSum {
		t.Fatalf("zstd frame header: %+v, %v: want a frame checksum", h, err)
	}
	comp[len(comp)-1] ^= 0xff // the checksum's last byte
	src := writeFile(t, "image.zst", comp)

	dst := filepath.Join(t.TempDir(), "unverified.img")
	_, err := Write(context.Background(), Options{Source: src, Target: dst, AllowUnverified: true, Log: testLog(t)})
	if !errors.Is(err, ErrCorruptSource) {
		t.Fatalf("unverified Write of a stream with a wrong frame checksum = %v, want ErrCorruptSource", err)
	}
	assertInvalidated(t, readFile(t, dst), int64(len(img)))

	for _, o := range []Options{{Checksum: sha(comp)}, {ImageChecksum: sha(img)}} {
		o.Source, o.Target, o.Log = src, filepath.Join(t.TempDir(), "verified.img"), testLog(t)
		res, err := Write(context.Background(), o)
		if err != nil {
			t.Fatalf("Write verified by checksum %q, image checksum %q: %v", o.Checksum, o.ImageChecksum, err)
		}
		if !bytes.Equal(readFile(t, o.Target), img) || res.ImageSize != int64(len(img)) {
			t.Fatalf("Write verified by checksum %q, image checksum %q: target differs from the image", o.Checksum, o.ImageChecksum)
		}
	}
}
