package image

import (
	"bytes"
	"compress/bzip2"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"
)

// Format is the container format of a served image, found by DetectFormat
// from its first bytes; file names and Content-Type are never consulted.
type Format string

// Formats that Write understands. Raw is anything without a known magic.
const (
	FormatRaw   Format = "raw"
	FormatGzip  Format = "gzip"
	FormatZstd  Format = "zstd"
	FormatXz    Format = "xz"
	FormatBzip2 Format = "bzip2"
	FormatLz4   Format = "lz4"

	// FormatQcow2 is unpacked by a streaming reader (see qcow2.go).
	FormatQcow2 Format = "qcow2"

	// Disk image containers recognised only to be refused: writing them
	// byte for byte would put a container, not a disk, on the target.
	FormatVMDK Format = "vmdk"
	FormatVHDX Format = "vhdx"
)

// zstdOptions tune the zstd decoder: on a 1 GiB sparse image one
// goroutine decodes faster (4.2 GB/s) than two (3.0 GB/s) on 2 cores, since
// the pipeline keeps the other core busy; see BenchmarkDecoders.
var zstdOptions = []zstd.DOption{zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false), zstd.WithDecoderMaxWindow(128 << 20)}

// zstdDecoderOptions returns zstdOptions, with the frame checksum (the
// xxhash-64 of every decoded byte that a zstd frame may end with) checked
// by the decoder only when frameChecksum is set. Write sets it only when
// no checksum verifies the image; otherwise zero runs bypass the decoder
// (zstdZeroSkip), which then cannot check the checksum, and Write checks
// it over the image as written, in the hash stage: the decoder's goroutine
// is the write's critical path on a sparse image, and the checksum was
// 0.34 s of its 2.4 s on the bench's sparse.img.zst (docs/bench.md,
// "Where the time goes: the sparse image").
func zstdDecoderOptions(frameChecksum bool) []zstd.DOption {
	return append(slices.Clone(zstdOptions), zstd.IgnoreChecksum(!frameChecksum))
}

// ZstdOptions returns the zstd decoder options Write uses for a verified
// image (a checksum given: the decoder leaves the frame checksum to
// Write), so a benchmark of the decoder alone (hack/bench's floor) times
// the same decoder doing the same work.
func ZstdOptions() []zstd.DOption { return zstdDecoderOptions(false) }

// magicLen is how many leading bytes DetectFormat and sizeHintFromHeader
// want to see; fewer are fine for short images.
const magicLen = 32

var magics = []struct {
	format Format
	magic  []byte
}{
	{FormatGzip, []byte{0x1f, 0x8b}},
	{FormatZstd, []byte{0x28, 0xb5, 0x2f, 0xfd}},
	{FormatXz, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}},
	{FormatLz4, []byte{0x04, 0x22, 0x4d, 0x18}}, // frame format
	{FormatLz4, []byte{0x02, 0x21, 0x4c, 0x18}}, // legacy format
	{FormatQcow2, []byte{'Q', 'F', 'I', 0xfb}},
	{FormatVMDK, []byte{'K', 'D', 'M', 'V'}},
	{FormatVHDX, []byte("vhdxfile")},
}

// DetectFormat returns the format whose magic number head starts with, or
// FormatRaw when none matches (including when head is too short for any).
func DetectFormat(head []byte) Format {
	for _, m := range magics {
		if bytes.HasPrefix(head, m.magic) {
			return m.format
		}
	}
	// bzip2: "BZh" and a block size digit '1'..'9'.
	if len(head) >= 4 && head[0] == 'B' && head[1] == 'Z' && head[2] == 'h' && head[3] >= '1' && head[3] <= '9' {
		return FormatBzip2
	}
	return FormatRaw
}

// decompressor wraps r in the decoder for f. The returned closer releases
// decoder resources (zstd goroutines); it does not close r.
// openDecoder is decompressor; tests wrap it to watch the decoder's life.
var openDecoder = decompressor

func decompressor(f Format, r io.Reader, o *Options) (io.Reader, func(), error) {
	nop := func() {}
	switch f {
	case FormatRaw:
		return r, nop, nil
	case FormatGzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("open gzip stream: %w: %w", ErrCorruptSource, err)
		}
		return zr, func() { zr.Close() }, nil
	case FormatZstd:
		zr, err := zstd.NewReader(r, zstdDecoderOptions(o.frameChecksums)...)
		if err != nil {
			return nil, nil, fmt.Errorf("open zstd stream: %w: %w", ErrCorruptSource, err)
		}
		return zr, zr.Close, nil
	case FormatXz:
		zr, err := xz.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("open xz stream: %w: %w", ErrCorruptSource, err)
		}
		return zr, nop, nil
	case FormatBzip2:
		return bzip2.NewReader(r), nop, nil
	case FormatLz4:
		return lz4.NewReader(r), nop, nil
	case FormatQcow2:
		qr, err := newQcow2Reader(r, o.Log)
		if err != nil {
			return nil, nil, err
		}
		return qr, nop, nil // errors from Read wrap ErrCorruptSource or ErrUnsupportedFormat
	default:
		return nil, nil, fmt.Errorf("image format %s: %w", f, ErrUnsupportedFormat)
	}
}

// sizeHintFromHeader returns a lower bound of the decompressed size that the
// first bytes of the stream declare (zstd and lz4 frame content size of the
// first frame), or 0 when they declare none. A lower bound is enough to
// refuse a target that is too small before anything is written.
func sizeHintFromHeader(f Format, head []byte) int64 {
	switch f {
	case FormatZstd:
		var h zstd.Header
		if err := h.Decode(head); err != nil || !h.HasFCS || h.FrameContentSize > 1<<62 {
			return 0
		}
		return int64(h.FrameContentSize)
	case FormatLz4:
		// Frame format only: magic(4) FLG(1) BD(1) [content size(8)] ...
		if len(head) < 14 || !bytes.HasPrefix(head, magics[3].magic) || head[4]&0x08 == 0 {
			return 0
		}
		n := binary.LittleEndian.Uint64(head[6:14])
		if n > 1<<62 {
			return 0
		}
		return int64(n)
	}
	return 0
}

// tailLen is how many bytes at the end of the served file sizeHintFromTail
// wants for f, or 0 when the tail of f declares nothing.
func tailLen(f Format) int64 {
	switch f {
	case FormatGzip:
		return 4
	case FormatXz:
		return 64 << 10 // footer plus an index of a few thousand blocks
	}
	return 0
}

// sizeHintFromTail returns a lower bound of the decompressed size declared
// by the last bytes of the served file: the ISIZE of the last gzip member
// (its size modulo 2^32, never more than the whole) or the sum of the block
// sizes in the index of the last xz stream. It returns 0 when the tail does
// not parse.
func sizeHintFromTail(f Format, tail []byte) int64 {
	switch f {
	case FormatGzip:
		if len(tail) < 4 {
			return 0
		}
		return int64(binary.LittleEndian.Uint32(tail[len(tail)-4:]))
	case FormatXz:
		return xzIndexSize(tail)
	}
	return 0
}

// gzipLowerBound returns the least decompressed size of a gzip file of
// compressed bytes whose last ISIZE is isize: ISIZE is the size modulo
// 2^32, and deflate never grows data by more than 5 bytes per 65535-byte
// stored block, so a stream holds at least (compressed - header - 8) ×
// 65535/65540 bytes. The result is isize plus the fewest 4 GiB wraps that
// reach that; isize when the header cannot be measured from peek.
func gzipLowerBound(isize, compressed int64, peek []byte) int64 {
	hdr := gzipHeaderLen(peek)
	if hdr <= 0 || compressed <= 0 {
		return isize
	}
	least := (compressed - int64(hdr) - 8) / 65540 * 65535
	n := isize
	for n < least {
		n += 1 << 32
	}
	return n
}

// gzipHeaderLen is the length of the gzip member header at the start of b
// (RFC 1952: FEXTRA, FNAME, FCOMMENT, FHCRC), or 0 when it does not end
// within b.
func gzipHeaderLen(b []byte) int {
	if len(b) < 10 || b[0] != 0x1f || b[1] != 0x8b {
		return 0
	}
	flg, n := b[3], 10
	if flg&0x04 != 0 { // FEXTRA
		if len(b) < n+2 {
			return 0
		}
		n += 2 + int(binary.LittleEndian.Uint16(b[n:]))
	}
	for _, bit := range []byte{0x08, 0x10} { // FNAME, FCOMMENT: zero-terminated
		if flg&bit == 0 {
			continue
		}
		if n >= len(b) {
			return 0
		}
		i := bytes.IndexByte(b[n:], 0)
		if i < 0 {
			return 0
		}
		n += i + 1
	}
	if flg&0x02 != 0 { // FHCRC
		n += 2
	}
	if n > len(b) {
		return 0
	}
	return n
}

// xzIndexSize parses the stream footer and index at the end of tail and sums
// the uncompressed sizes of the records. It returns 0 when the tail does not
// end with a footer or the index is not wholly inside tail.
func xzIndexSize(tail []byte) int64 {
	// Stream padding: multiples of four zero bytes after the footer.
	for len(tail) >= 4 && bytes.Equal(tail[len(tail)-4:], []byte{0, 0, 0, 0}) {
		tail = tail[:len(tail)-4]
	}
	if len(tail) < 12 || !bytes.Equal(tail[len(tail)-2:], []byte("YZ")) {
		return 0
	}
	footer := tail[len(tail)-12:]
	indexSize := (int64(binary.LittleEndian.Uint32(footer[4:8])) + 1) * 4
	if indexSize > int64(len(tail)-12) {
		return 0
	}
	idx := tail[int64(len(tail)-12)-indexSize : len(tail)-12]
	if len(idx) == 0 || idx[0] != 0x00 {
		return 0
	}
	p := idx[1:]
	count, ok := xzVarint(&p)
	if !ok {
		return 0
	}
	var total uint64
	for range count {
		if _, ok := xzVarint(&p); !ok { // unpadded size
			return 0
		}
		n, ok := xzVarint(&p)
		if !ok {
			return 0
		}
		total += n
		if total > 1<<62 {
			return 0
		}
	}
	return int64(total)
}

// xzVarint decodes one xz multibyte integer from *p and advances *p.
func xzVarint(p *[]byte) (uint64, bool) {
	var v uint64
	for i := 0; i < 9 && i < len(*p); i++ {
		b := (*p)[i]
		v |= uint64(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			*p = (*p)[i+1:]
			return v, true
		}
	}
	return 0, false
}
