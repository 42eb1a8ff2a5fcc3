package image

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// ZstdOptions hands out Write's decoder options as a copy, and they decode.
func TestZstdOptions(t *testing.T) {
	opts := ZstdOptions()
	if len(opts) != len(zstdOptions) {
		t.Fatalf("%d options, want Write's %d", len(opts), len(zstdOptions))
	}
	if &opts[0] == &zstdOptions[0] {
		t.Fatal("ZstdOptions returned Write's own slice")
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
