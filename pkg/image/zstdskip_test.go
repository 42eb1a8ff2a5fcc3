package image

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// sparseTestImage is data and zero runs of many lengths (shorter and
// longer than the windows below, at the start and the very end), a run of
// 0xff (RLE blocks that are not zeros) and zeros inside data.
func sparseTestImage(seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var img []byte
	data := func(n int) {
		b := make([]byte, n)
		fillData(rng, b)
		img = append(img, b...)
	}
	zeros := func(n int) { img = append(img, make([]byte, n)...) }
	zeros(3 * mib) // the image starts with a long zero run
	data(300 << 10)
	zeros(100 << 10)
	data(5000)
	zeros(5*mib + 123)
	img = append(img, bytes.Repeat([]byte{0xff}, 2*mib)...)
	zeros(700 << 10)
	for i := range 6 {
		data(rng.IntN(200<<10) + 1)
		zeros(rng.IntN(3*mib) + i)
	}
	data(4096)
	zeros(4*mib + 17) // and ends with one
	return img
}

// zstdSkipDecode decodes comp through a zstdZeroSkip with Write's options
// for a verified image, placing the skipped zeros in order, checks every
// frame's checksum with xxh64 over the frame's bytes where zstdZeroSkip
// says it ended, and returns the image and how many bytes were skipped.
func zstdSkipDecode(t *testing.T, comp []byte) ([]byte, int64, error) {
	t.Helper()
	var out bytes.Buffer
	var ends []int64
	var frameErr error
	start := 0
	z := newZstdZeroSkip(bytes.NewReader(comp), func(n int64) error {
		out.Write(make([]byte, n))
		return nil
	}, func(sum uint32, hasSum bool) {
		ends = append(ends, int64(out.Len()))
		h := newXXH64()
		h.write(out.Bytes()[start:])
		if got := uint32(h.sum64()); hasSum && got != sum && frameErr == nil {
			frameErr = fmt.Errorf("frame %d (bytes %d-%d): xxh64 %08x, the frame says %08x: %w", len(ends), start, out.Len(), got, sum, ErrCorruptSource)
		}
		start = out.Len()
	})
	zr, err := zstd.NewReader(z, ZstdOptions()...)
	if err != nil {
		return nil, 0, err
	}
	defer zr.Close()
	if _, err := zr.WriteTo(&out); err != nil {
		return out.Bytes(), z.skipped, err
	}
	if len(ends) != z.frames || frameErr != nil {
		return out.Bytes(), z.skipped, fmt.Errorf("%d frames, %d ends reported: %w", z.frames, len(ends), frameErr)
	}
	return out.Bytes(), z.skipped, z.check(int64(out.Len()))
}

// xxh64 gives XXH64's published values (seed 0), whole or fed in pieces
// and zero runs, and the checksums the zstd CLI writes into its frames
// (TestZstdZeroSkip).
func TestXXH64(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"abc", 0x44bc2cf5ad770999},
		{"Nobody inspects the spammish repetition", 0xfbcea83c8a378bf1},
	} {
		h := newXXH64()
		h.write([]byte(tt.in))
		if got := h.sum64(); got != tt.want {
			t.Errorf("xxh64(%q) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{0, 1, 31, 32, 33, 100, 4096, 100000} {
		data := make([]byte, n+2000)
		fillData(rng, data[:n])
		whole := newXXH64()
		whole.write(data)
		parts := newXXH64()
		for p := data[:n]; len(p) > 0; {
			k := min(len(p), rng.IntN(70)+1)
			parts.write(p[:k])
			p = p[k:]
		}
		parts.zeros(1000)
		parts.write(data[n+1000 : n+1005])
		parts.zeros(995)
		if got, want := parts.sum64(), whole.sum64(); got != want {
			t.Errorf("%d bytes and 2000 zeros in pieces: %#x, whole %#x", n, got, want)
		}
	}
}

// Zero runs bypass the decoder and land where they belong: frames of
// several window sizes, with and without checksum and content size,
// concatenated frames with a skippable frame between them, and a small
// single-segment frame (passed through whole).
func TestZstdZeroSkip(t *testing.T) {
	img := sparseTestImage(1)
	small := sparseTestImage(2)[3*mib : 3*mib+200<<10]
	skippable := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0x184D2A53), 5)
	skippable = append(skippable, "booty"...)
	tests := []struct {
		name     string
		want     []byte
		comp     func(t *testing.T) []byte
		skipping bool
	}{
		{"zstd -3", img, func(t *testing.T) []byte { return compress(t, FormatZstd, img) }, true},
		{"window 1 KiB", img, func(t *testing.T) []byte { return compress(t, FormatZstd, img, "--zstd=wlog=10") }, true},
		{"window 128 KiB, no checksum", img, func(t *testing.T) []byte {
			return compress(t, FormatZstd, img, "--zstd=wlog=17", "--no-check")
		}, true},
		{"no content size", img, func(t *testing.T) []byte { return compress(t, FormatZstd, img, "--no-content-size") }, true},
		{"single segment", small, func(t *testing.T) []byte { return compress(t, FormatZstd, small) }, false},
		{"frames and a skippable frame", append(bytes.Clone(img), small...), func(t *testing.T) []byte {
			c := compress(t, FormatZstd, img, "--zstd=wlog=12")
			c = append(c, skippable...)
			return append(c, compress(t, FormatZstd, small)...)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			comp := tt.comp(t)
			got, skipped, err := zstdSkipDecode(t, comp)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				i := 0
				for i < min(len(got), len(tt.want)) && got[i] == tt.want[i] {
					i++
				}
				t.Fatalf("decoded %d bytes, want %d; first difference at %d", len(got), len(tt.want), i)
			}
			if tt.skipping && skipped < 4*mib || !tt.skipping && skipped != 0 {
				t.Errorf("%d zero bytes bypassed the decoder, want skipping %v", skipped, tt.skipping)
			}
			t.Logf("%d of %d bytes bypassed the decoder", skipped, len(got))
		})
	}
}

// Write with a served-file checksum takes the zero runs past the decoder
// (Result counts them) and still zeroes them on a target that held other
// data; the decoder is not bypassed when nothing is verified.
func TestWriteZstdZeroSkip(t *testing.T) {
	img := sparseTestImage(3)
	comp := compress(t, FormatZstd, img)
	src := writeFile(t, "sparse.zst", comp)
	for _, verified := range []bool{true, false} {
		mem := newMemTarget(len(img)+mib, 0xaa)
		o := Options{Source: src, Target: "mem", TargetWriter: mem, Log: testLog(t)}
		if verified {
			o.Checksum = sha(comp)
		} else {
			o.AllowUnverified = true
		}
		res, err := Write(context.Background(), o)
		if err != nil {
			t.Fatalf("Write (verified %v): %v", verified, err)
		}
		if !bytes.Equal(mem.buf[:len(img)], img) {
			t.Fatalf("Write (verified %v): target differs from the image", verified)
		}
		if res.ImageSize != int64(len(img)) || res.ZeroBytes < 10*mib {
			t.Errorf("Write (verified %v): Result %+v, want the image size and its zero runs", verified, res)
		}
	}
}

// The frame content size is removed from what the decoder sees, so the
// reader checks it: a frame that declares one byte more than it holds
// fails as ErrCorruptSource, and so does a truncated stream.
func TestZstdZeroSkipChecksSize(t *testing.T) {
	img := sparseTestImage(4)
	comp := compress(t, FormatZstd, img)
	var h zstd.Header
	if err := h.Decode(comp); err != nil || !h.HasFCS || h.SingleSegment {
		t.Fatalf("frame header %+v, %v: want a content size and a window", h, err)
	}
	fhd := comp[4]
	if fhd>>6 != 2 { // 4-byte content size after magic, FHD and window descriptor
		t.Fatalf("frame header byte %#x: want a 4-byte content size", fhd)
	}
	bad := bytes.Clone(comp)
	binary.LittleEndian.PutUint32(bad[6:], uint32(len(img)+1))
	if _, _, err := zstdSkipDecode(t, bad); !errors.Is(err, ErrCorruptSource) {
		t.Errorf("decode of a frame declaring one byte more = %v, want ErrCorruptSource", err)
	}
	mem := newMemTarget(len(img)+mib, 0)
	_, err := Write(context.Background(), Options{Source: writeFile(t, "bad.zst", bad), Checksum: sha(bad), Target: "mem", TargetWriter: mem, Log: testLog(t)})
	if !errors.Is(err, ErrCorruptSource) {
		t.Errorf("Write of a frame declaring one byte more = %v, want ErrCorruptSource", err)
	}
	if _, _, err := zstdSkipDecode(t, comp[:len(comp)-10]); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("decode of a truncated stream = %v, want io.ErrUnexpectedEOF", err)
	}
}
