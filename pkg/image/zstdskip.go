package image

import (
	"encoding/binary"
	"fmt"
	"io"
)

// zstdZeroSkip sits between the served bytes and the zstd decoder and
// takes the long zero runs of a sparse image away from the decoder.
//
// zstd stores a run of equal bytes as RLE blocks (a 3-byte header and the
// byte, up to 128 KiB each), and the decoder (klauspost/compress) fills
// every byte of them one at a time: on the bench's sparse.img.zst that
// was 0.94 s of its 2.1 s, all on the decoder's goroutine, the write's
// critical path, for bytes the chunker then checked and found zero.
//
// The reader parses the frames as they pass (RFC 8878): frame headers,
// block headers, checksums, skippable frames. Once a run of RLE blocks of
// zeros has given the decoder a whole window of zeros (the most a later
// block can refer back), the decoder's window reads the same whether or
// not it sees more zeros, and RLE blocks change no other state (entropy
// tables, repeat offsets): further RLE blocks of zeros in the run are not
// passed to it but reported to zeros, which places them in the image.
// zeros runs on the decoder's goroutine while the decoder reads, and the
// decoder (in WriteTo, one goroutine) has written every earlier block
// before it reads the next block header, so the zeros land in image
// order. The frame's last block is always passed on.
//
// What the decoder sees is then no longer the frame it declares: the
// frame content size is removed from the header (zstdZeroSkip checks the
// total itself, see check) and the decoder must not check the frame
// checksum (zstdDecoderOptions(false)). Write checks it over the image
// instead: zstdZeroSkip reports each frame's end, with its checksum, to
// frameEnd when the decoder reads past the frame, by which time the
// decoder has written all of the frame's bytes. Frames with Single_Segment_flag (no window
// descriptor: the window is the content size, small frames) and anything
// that does not parse as zstd frames pass through unchanged, and the
// decoder reports what it finds.
type zstdZeroSkip struct {
	r        io.Reader
	zeros    func(n int64) error
	frameEnd func(sum uint32, hasSum bool)

	pending []byte // bytes for the decoder before more is read from r
	hdr     [18]byte
	state   int
	remain  int64 // bytes of the current block, checksum or skippable frame still to pass
	after   int   // state once remain is 0
	last    bool  // the current block ends its frame
	sum     bool  // the current frame ends with a checksum
	skip    bool  // the current frame may lose RLE blocks of zeros
	window  int64 // the current frame's window size
	inFrame bool  // a zstd frame was started and its end not yet reported
	sumVal  uint32
	run     int64 // zeros the decoder was given in the current run of RLE zero blocks

	declared    int64 // sum of the frame content sizes declared so far
	allDeclared bool  // every frame declared its content size
	frames      int
	skipped     int64 // zero bytes reported to zeros
}

const (
	zsFrame      = iota // at a frame's magic number
	zsBlock             // at a block header
	zsPass              // passing remain bytes, then after
	zsOpaque            // not zstd frames: everything passes unchanged
	zsSum               // at a frame's checksum
	zstdMagic    = 0xFD2FB528
	zstdRLE      = 1
	zstdBlockMax = 128 << 10
)

func newZstdZeroSkip(r io.Reader, zeros func(int64) error, frameEnd func(sum uint32, hasSum bool)) *zstdZeroSkip {
	return &zstdZeroSkip{r: r, zeros: zeros, frameEnd: frameEnd, allDeclared: true}
}

// Read passes the stream to the decoder as described on zstdZeroSkip.
// Block contents go straight from r into p.
func (z *zstdZeroSkip) Read(p []byte) (int, error) {
	for {
		if len(z.pending) > 0 {
			n := copy(p, z.pending)
			z.pending = z.pending[n:]
			return n, nil
		}
		switch z.state {
		case zsOpaque:
			return z.r.Read(p)
		case zsPass:
			if z.remain == 0 {
				z.state = z.after
				continue
			}
			n, err := z.r.Read(p[:min(int64(len(p)), z.remain)])
			z.remain -= int64(n)
			if err == io.EOF && z.remain > 0 {
				err = io.ErrUnexpectedEOF
			}
			if err == io.EOF {
				err = nil
			}
			return n, err
		case zsFrame:
			if err := z.frame(); err != nil {
				return 0, err
			}
		case zsSum:
			b, err := z.readN(0, 4)
			if err != nil {
				return 0, unexpected(err)
			}
			z.sumVal = binary.LittleEndian.Uint32(b)
			z.pending, z.state = b, zsFrame
		case zsBlock:
			if err := z.block(); err != nil {
				return 0, err
			}
		}
	}
}

// readN reads exactly n bytes into z.hdr[off:]; a clean end before the
// first byte is io.EOF.
func (z *zstdZeroSkip) readN(off, n int) ([]byte, error) {
	b := z.hdr[off : off+n]
	if _, err := io.ReadFull(z.r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// frame reads a frame's magic number and header (or a skippable frame's
// length) and queues them for the decoder, without the content size.
func (z *zstdZeroSkip) frame() error {
	if z.inFrame {
		z.inFrame = false
		z.frameEnd(z.sumVal, z.sum)
	}
	m, err := z.readN(0, 4)
	if err != nil {
		return err // io.EOF at a clean end
	}
	magic := binary.LittleEndian.Uint32(m)
	switch {
	case magic&0xFFFFFFF0 == 0x184D2A50: // skippable frame
		b, err := z.readN(4, 4)
		if err != nil {
			return unexpected(err)
		}
		z.pending = z.hdr[:8]
		z.state, z.remain, z.after = zsPass, int64(binary.LittleEndian.Uint32(b)), zsFrame
		return nil
	case magic != zstdMagic:
		z.pending, z.state = z.hdr[:4], zsOpaque
		return nil
	}
	fb, err := z.readN(4, 1)
	if err != nil {
		return unexpected(err)
	}
	fhd := fb[0]
	single := fhd&0x20 != 0
	dictLen := [4]int{0, 1, 2, 4}[fhd&3]
	fcsLen := [4]int{0, 2, 4, 8}[fhd>>6]
	if fcsLen == 0 && single {
		fcsLen = 1
	}
	wdLen := 1
	if single {
		wdLen = 0
	}
	rest, err := z.readN(5, wdLen+dictLen+fcsLen)
	if err != nil {
		return unexpected(err)
	}
	z.frames++
	z.inFrame = true
	z.sum = fhd&0x04 != 0
	z.run = 0
	if fcsLen == 0 {
		z.allDeclared = false
	} else {
		f := rest[wdLen+dictLen:]
		var fcs uint64
		switch fcsLen {
		case 1:
			fcs = uint64(f[0])
		case 2:
			fcs = uint64(binary.LittleEndian.Uint16(f)) + 256
		case 4:
			fcs = uint64(binary.LittleEndian.Uint32(f))
		case 8:
			fcs = binary.LittleEndian.Uint64(f)
		}
		if fcs > 1<<62 {
			z.allDeclared = false
		}
		z.declared += int64(fcs)
	}
	z.skip = !single
	hdrLen := 5 + wdLen + dictLen + fcsLen
	if z.skip {
		wd := rest[0]
		base := int64(1) << (10 + wd>>3)
		z.window = base + base/8*int64(wd&7)
		// The content size goes: the decoder would hold the frame to it.
		z.hdr[4] = fhd &^ 0xC0
		hdrLen -= fcsLen
	}
	z.pending = z.hdr[:hdrLen]
	z.state = zsBlock
	return nil
}

// block reads a block header; an RLE block of zeros that may go is
// reported to zeros and the next header read, anything else is queued
// for the decoder with its contents to pass.
func (z *zstdZeroSkip) block() error {
	for {
		b, err := z.readN(0, 3)
		if err != nil {
			return unexpected(err)
		}
		h := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
		z.last = h&1 != 0
		typ, size := (h>>1)&3, int64(h>>3)
		z.after = zsBlock
		if z.last {
			z.after = zsFrame
		}
		if typ != zstdRLE {
			if typ == 3 { // reserved: the decoder says what is wrong
				z.pending, z.state = z.hdr[:3], zsOpaque
				return nil
			}
			// Raw or compressed: size bytes of contents follow.
			z.run = 0
			z.pending, z.state, z.remain = z.hdr[:3], zsPass, size
			z.passChecksum()
			return nil
		}
		v, err := z.readN(3, 1)
		if err != nil {
			return unexpected(err)
		}
		if v[0] != 0 {
			z.run = 0
		} else if z.skip && !z.last && size <= zstdBlockMax && z.run >= z.window {
			z.skipped += size
			if err := z.zeros(size); err != nil {
				return err
			}
			continue
		} else {
			z.run += size
		}
		z.pending, z.state, z.remain = z.hdr[:4], zsPass, 0
		z.passChecksum()
		return nil
	}
}

// passChecksum makes a frame's last block be followed by its 4-byte
// checksum, when it has one, which is kept for frameEnd.
func (z *zstdZeroSkip) passChecksum() {
	if !z.last || !z.sum {
		return
	}
	z.after = zsSum
}

// check returns an error when the frames declared their content sizes
// and the image is not their sum (what the decoder checked before the
// sizes were removed).
func (z *zstdZeroSkip) check(total int64) error {
	if z.frames == 0 || !z.allDeclared || total == z.declared {
		return nil
	}
	return fmt.Errorf("zstd frames declare %d bytes, the image has %d: %w", z.declared, total, ErrCorruptSource)
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
