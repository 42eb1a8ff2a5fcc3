package image

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// benchImage returns a 64 MiB image: dense is data throughout (2:1
// compressible), sparse has data in one block of every sixteen.
func benchImage(dense bool) []byte {
	img := make([]byte, 64*mib)
	rng := rand.New(rand.NewPCG(42, 43))
	if dense {
		fillData(rng, img)
		return img
	}
	for off := 0; off < len(img); off += 16 * sparseBlock {
		fillData(rng, img[off:off+sparseBlock])
	}
	return img
}

func benchCompress(b *testing.B, f Format, img []byte) []byte {
	var buf bytes.Buffer
	switch f {
	case FormatGzip:
		w, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		w.Write(img)
		w.Close()
	case FormatZstd:
		w, _ := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
		w.Write(img)
		w.Close()
	default:
		b.Fatalf("no compressor for %s", f)
	}
	return buf.Bytes()
}

// BenchmarkWrite reports image bytes per second written to a regular file
// from a local compressed file, both digests included:
//
//	go test -run '^$' -bench Write ./pkg/image/
func BenchmarkWrite(b *testing.B) {
	for _, layout := range []struct {
		name  string
		dense bool
	}{{"sparse", false}, {"dense", true}} {
		img := benchImage(layout.dense)
		for _, f := range []Format{FormatZstd, FormatGzip} {
			b.Run(layout.name+"/"+string(f), func(b *testing.B) {
				comp := benchCompress(b, f, img)
				src := writeFile(b, "src", comp)
				dst := filepath.Join(b.TempDir(), "dst")
				opts := Options{Source: src, Checksum: sha(comp), ImageChecksum: sha(img), Target: dst}
				b.SetBytes(int64(len(img)))
				for b.Loop() {
					if _, err := Write(context.Background(), opts); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(comp))/float64(len(img)), "ratio")
			})
		}
	}
}
