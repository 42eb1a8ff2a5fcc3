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

// A wrong zstd frame checksum fails a write (ErrCorruptSource, the target
// invalidated) unless an image checksum or a bmap with a checksum for
// every range verifies every byte written:
// checked by the decoder when nothing else verifies the image, and by
// Write over the image as written when the served file's checksum does
// (the decoder is then told not to, see zstdDecoderOptions).
func TestWriteZstdFrameChecksum(t *testing.T) {
	img := gptImage(t, testImageSize, false, 21)
	comp := compress(t, FormatZstd, img) // zstd -3 writes a frame checksum
	var h zstd.Header
	if err := h.Decode(comp); err != nil || !h.HasCheckSum {
		t.Fatalf("zstd frame header: %+v, %v: want a frame checksum", h, err)
	}
	comp[len(comp)-1] ^= 0xff // the checksum's last byte
	src := writeFile(t, "image.zst", comp)
	bmap := writeFile(t, "image.bmap", []byte(bmapFor(t, img)))
	for _, o := range []Options{{AllowUnverified: true}, {Checksum: sha(comp)}, {ImageChecksum: sha(img)}, {Checksum: sha(comp), Bmap: bmap}} {
		o.Source, o.Target, o.Log = src, filepath.Join(t.TempDir(), "target.img"), testLog(t)
		_, err := Write(context.Background(), o)
		if o.ImageChecksum != "" || o.Bmap != "" {
			if err != nil || !bytes.Equal(readFile(t, o.Target), img) {
				t.Fatalf("Write verified by image checksum %q, bmap %q: %v; want the image written", o.ImageChecksum, o.Bmap, err)
			}
			continue
		}
		if !errors.Is(err, ErrCorruptSource) {
			t.Fatalf("Write (checksum %q) of a stream with a wrong frame checksum = %v, want ErrCorruptSource", o.Checksum, err)
		}
		assertInvalidated(t, readFile(t, o.Target), int64(len(img)))
	}
}
