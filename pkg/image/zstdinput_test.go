package image

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

// The zstd decoder reads the fetched blocks directly after the bytes the
// format peek buffered: a stream of several frames, longer than the peek
// buffer and the fetch blocks, and one shorter than a single block, both
// come out whole, and the source digest covers every served byte.
func TestWriteZstdInput(t *testing.T) {
	big := gptImage(t, 24*mib, true, 21)
	small := big[:300<<10]
	twoFrames := append(compress(t, FormatZstd, big[:10*mib]), compress(t, FormatZstd, big[10*mib:])...)
	tests := []struct {
		name string
		img  []byte
		comp []byte
	}{
		{"two frames, 24 MiB", big, twoFrames},
		{"one short frame", small, compress(t, FormatZstd, small)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := writeFile(t, "image.zst", tt.comp)
			dst := filepath.Join(t.TempDir(), "target.img")
			res, err := Write(context.Background(), Options{Source: src, Checksum: sha(tt.comp), ImageChecksum: sha(tt.img), Target: dst, Log: testLog(t)})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if !bytes.Equal(readFile(t, dst), tt.img) {
				t.Fatal("target differs from image")
			}
			if res.SourceBytes != int64(len(tt.comp)) || res.SourceDigest != sha(tt.comp) {
				t.Errorf("source %d bytes %s, want %d bytes %s", res.SourceBytes, res.SourceDigest, len(tt.comp), sha(tt.comp))
			}
		})
	}
}
