package image

import (
	"bytes"
	"context"
	"io"
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

// sparseGiB returns a 1 GiB image with 64 KiB of data every MiB (1/16
// dense), like a freshly installed OS image with a large empty file system.
func sparseGiB() []byte {
	img := make([]byte, 1<<30)
	rng := rand.New(rand.NewPCG(44, 45))
	for off := 0; off < len(img); off += mib {
		fillData(rng, img[off:off+sparseBlock])
	}
	return img
}

// BenchmarkWriteSparse1GiB writes a 1 GiB sparse image from a local file
// to a regular file, with zero-run skipping (default) and with every byte
// written as data (dense):
//
//	go test -run '^$' -bench WriteSparse1GiB -benchtime 3x ./pkg/image/
func BenchmarkWriteSparse1GiB(b *testing.B) {
	img := sparseGiB()
	for _, f := range []Format{FormatZstd, FormatGzip} {
		comp := benchCompress(b, f, img)
		for _, dense := range []bool{false, true} {
			name := string(f) + "/zero-skip"
			if dense {
				name = string(f) + "/dense"
			}
			b.Run(name, func(b *testing.B) {
				src := writeFile(b, "src", comp)
				dst := filepath.Join(b.TempDir(), "dst")
				opts := Options{Source: src, Checksum: sha(comp), Target: dst, denseWrites: dense}
				b.SetBytes(int64(len(img)))
				for b.Loop() {
					if _, err := Write(context.Background(), opts); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecoders decodes the compressed 1 GiB sparse image alone, into
// a reused 4 MiB buffer, with decoder settings under consideration.
func BenchmarkDecoders(b *testing.B) {
	img := sparseGiB()
	zst := benchCompress(b, FormatZstd, img)
	gz := benchCompress(b, FormatGzip, img)
	buf := make([]byte, DefaultChunkSize)
	drain := func(b *testing.B, r io.Reader) {
		var n int64
		for {
			k, err := readFull(r, buf)
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if n != int64(len(img)) {
			b.Fatalf("decoded %d bytes", n)
		}
	}
	zstdCases := []struct {
		name string
		opts []zstd.DOption
	}{
		{"zstd/default", nil},
		{"zstd/concurrency1", []zstd.DOption{zstd.WithDecoderConcurrency(1)}},
		{"zstd/concurrency2-lowmem-off", []zstd.DOption{zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(false)}},
		{"zstd/used-unverified", zstdDecoderOptions(true)},
		{"zstd/used", ZstdOptions()},
	}
	for _, c := range zstdCases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(img)))
			for b.Loop() {
				zr, err := zstd.NewReader(bytes.NewReader(zst), c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				drain(b, zr)
				zr.Close()
			}
		})
	}
	b.Run("zstd/DecodeAll", func(b *testing.B) {
		b.SetBytes(int64(len(img)))
		zr, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		defer zr.Close()
		out := make([]byte, 0, len(img))
		for b.Loop() {
			o, err := zr.DecodeAll(zst, out[:0])
			if err != nil || len(o) != len(img) {
				b.Fatal(err, len(o))
			}
		}
	})
	b.Run("gzip", func(b *testing.B) {
		b.SetBytes(int64(len(img)))
		for b.Loop() {
			zr, err := gzip.NewReader(bytes.NewReader(gz))
			if err != nil {
				b.Fatal(err)
			}
			drain(b, zr)
		}
	})
	b.Run("zero-scan", func(b *testing.B) {
		b.SetBytes(int64(len(img)))
		for b.Loop() {
			for off := 0; off < len(img); off += sparseBlock {
				isZero(img[off : off+sparseBlock])
			}
		}
	})
}

// BenchmarkXXH64 times the frame checksum Write computes in its hash
// stage for a zstd image whose zero runs bypass the decoder: over data,
// and over zero runs (from a small zero buffer that stays in the cache).
func BenchmarkXXH64(b *testing.B) {
	data := make([]byte, 4<<20)
	fillData(rand.New(rand.NewPCG(1, 2)), data)
	b.Run("data", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		h := newXXH64()
		for b.Loop() {
			h.write(data)
		}
	})
	b.Run("zeros", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		h := newXXH64()
		for b.Loop() {
			h.zeros(int64(len(data)))
		}
	})
}
