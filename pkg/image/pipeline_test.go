package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// trickle returns at most max bytes per Read, like a socket that holds a
// little at a time, then err (io.EOF for a clean end).
type trickle struct {
	data []byte
	max  int
	err  error
}

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p[:min(len(p), r.max)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// fetchAll runs a fetch chain over src and returns the blocks it passed
// to the decompressor.
func fetchAll(t *testing.T, src io.Reader) ([]srcBlock, []byte) {
	t.Helper()
	var wg sync.WaitGroup
	h := sha256.New()
	fc := startFetch(context.Background(), src, h, &wg, func(err error) { t.Errorf("panic: %v", err) })
	var blocks []srcBlock
	for b := range fc.toDec {
		blocks = append(blocks, srcBlock{data: bytes.Clone(b.data), err: b.err})
		fc.free <- b.buf
	}
	wg.Wait()
	return blocks, h.Sum(nil)
}

// A source that trickles still reaches the decompressor in filled blocks:
// one hand-off per block, not per read. The first blocks are filled less
// (64 KiB, doubling up to a whole block), only the last one is short, and
// the bytes, the digest and the clean end are unchanged.
func TestFetchFillsBlocks(t *testing.T) {
	data := make([]byte, 3*srcBlockSize+12345)
	fillData(rand.New(rand.NewPCG(7, 8)), data)
	blocks, sum := fetchAll(t, &trickle{data: data, max: 5000, err: io.EOF})
	ramp := []int{firstFill, 2 * firstFill, 4 * firstFill, 8 * firstFill, srcBlockSize, srcBlockSize}
	rest := len(data)
	for _, n := range ramp {
		rest -= n
	}
	want := append(ramp, rest)
	if len(blocks) != len(want) {
		t.Fatalf("%d blocks, want %d (%v)", len(blocks), len(want), want)
	}
	var got []byte
	for i, b := range blocks {
		last := i == len(want)-1
		if len(b.data) != want[i] || (b.err != nil) != last {
			t.Errorf("block %d: %d bytes, err %v; want %d bytes (error only on the last)", i, len(b.data), b.err, want[i])
		}
		got = append(got, b.data...)
	}
	if last := blocks[len(blocks)-1]; last.err != io.EOF {
		t.Errorf("last block: err %v, want io.EOF", last.err)
	}
	if !bytes.Equal(got, data) {
		t.Error("blocks do not add up to the source")
	}
	if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
		t.Error("served digest differs from the source's sha256")
	}
}

// held serves its first part, then blocks until release is closed, like a
// slow link: the bytes that arrived must not wait for the rest of a block.
type held struct {
	first, rest []byte
	release     chan struct{}
}

func (r *held) Read(p []byte) (int, error) {
	if len(r.first) > 0 {
		n := copy(p, r.first)
		r.first = r.first[n:]
		return n, nil
	}
	<-r.release
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// The first 64 KiB reach the decompressor while the source still holds
// back the rest of the first MiB: the format is known, and the write
// starts, with the first bytes.
func TestFetchPassesFirstBytesEarly(t *testing.T) {
	data := make([]byte, srcBlockSize)
	fillData(rand.New(rand.NewPCG(5, 6)), data)
	src := &held{first: data[:100<<10], rest: data[100<<10:], release: make(chan struct{})}
	var wg sync.WaitGroup
	fc := startFetch(context.Background(), src, sha256.New(), &wg, func(err error) { t.Errorf("panic: %v", err) })
	select {
	case b := <-fc.toDec:
		if !bytes.Equal(b.data, data[:firstFill]) {
			t.Errorf("first block: %d bytes, want the source's first %d", len(b.data), firstFill)
		}
		// Blocks are made as the fetch needs them: the first, and the
		// one it fills while the source holds back.
		if made := fc.made.Load(); made > 2 {
			t.Errorf("%d blocks made while the source held back after its first 100 KiB, want at most 2", made)
		}
		fc.free <- b.buf
	case <-time.After(30 * time.Second):
		t.Fatal("no block within 30 s while the source held back the rest of its first MiB")
	}
	close(src.release)
	got := []byte(nil)
	for b := range fc.toDec {
		got = append(got, b.data...)
		fc.free <- b.buf
	}
	wg.Wait()
	if !bytes.Equal(got, data[firstFill:]) {
		t.Errorf("the later blocks hold %d bytes, want the %d after the first block", len(got), len(data)-firstFill)
	}
}

// A source error ends the chain with that error on the last block, after
// the bytes read before it; an io.ErrUnexpectedEOF of the source stays one
// (it is not taken for a clean end).
func TestFetchKeepsSourceError(t *testing.T) {
	data := make([]byte, 15*firstFill+100) // the ramp's four blocks, then 100 bytes
	blocks, _ := fetchAll(t, &trickle{data: data, max: 64 << 10, err: io.ErrUnexpectedEOF})
	if len(blocks) != 5 {
		t.Fatalf("%d blocks, want 5", len(blocks))
	}
	if last := blocks[4]; len(last.data) != 100 || !errors.Is(last.err, io.ErrUnexpectedEOF) {
		t.Errorf("last block: %d bytes, err %v; want 100 bytes, io.ErrUnexpectedEOF", len(last.data), last.err)
	}
}

// The chunker copies only chunks with data: an all-zero chunk leaves the
// pool alone and reads as zeros, a chunk whose first non-zero byte comes
// late gets a buffer cleared before it (the pool's buffers hold old data),
// and the chunks add up to the image at their offsets.
func TestChunkerSkipsZeroChunks(t *testing.T) {
	const size = 64 << 10
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	w := &writer{ctx: ctx, name: "test", free: make(chan []byte, 2), zeroChunk: make([]byte, size)}
	for range 2 {
		w.free <- bytes.Repeat([]byte{0xee}, size) // stale data of an earlier chunk
	}
	img := make([]byte, 5*size+100)
	img[2*size+size/2] = 1 // chunk 2: zeros, then data
	fillData(rand.New(rand.NewPCG(1, 2)), img[4*size:4*size+10])
	out := make(chan *chunk, 8)
	k := &chunker{w: w, out: out, size: size}
	for p := img; len(p) > 0; { // the decoder's blocks do not line up with chunks
		n := min(len(p), 5000)
		if _, err := k.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := k.send(true); err != nil {
		t.Fatal(err)
	}
	close(out)
	got := make([]byte, 0, len(img))
	var copied []int64
	var last *chunk
	for c := range out {
		if c.off != int64(len(got)) {
			t.Fatalf("chunk at %d, want %d", c.off, len(got))
		}
		if c.buf != nil {
			copied = append(copied, c.off/size)
		}
		got = append(got, c.data...)
		last = c
		c.put()
	}
	if !bytes.Equal(got, img) {
		t.Fatal("chunks differ from the image")
	}
	if want := []int64{2, 4}; !slices.Equal(copied, want) {
		t.Errorf("chunks with a buffer: %v, want %v (only those holding data)", copied, want)
	}
	if !last.last || len(last.data) != 100 {
		t.Errorf("final chunk: last %v, %d bytes; want last, 100 bytes", last.last, len(last.data))
	}
	if len(w.free) != 2 {
		t.Errorf("%d buffers back in the pool, want 2", len(w.free))
	}
}

// blockReader.WriteTo hands every fetched byte to the writer in order and
// ends like Read would: nil at a clean end, the source's error (kept for
// srcErr) otherwise; every buffer goes back to the pool.
func TestBlockReaderWriteTo(t *testing.T) {
	data := make([]byte, 2*srcBlockSize+777)
	fillData(rand.New(rand.NewPCG(3, 4)), data)
	for _, end := range []error{io.EOF, io.ErrUnexpectedEOF} {
		var wg sync.WaitGroup
		fc := startFetch(context.Background(), &trickle{data: data, max: 100 << 10, err: end}, sha256.New(), &wg, func(err error) { t.Errorf("panic: %v", err) })
		r := &blockReader{fc: fc}
		var got bytes.Buffer
		n, err := r.WriteTo(&got)
		wg.Wait()
		if n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
			t.Errorf("source ending with %v: wrote %d bytes (equal %v), want the %d bytes of the source", end, n, bytes.Equal(got.Bytes(), data), len(data))
		}
		if end == io.EOF && (err != nil || r.srcErr() != nil) {
			t.Errorf("clean end: WriteTo = %v, srcErr = %v; want nil, nil", err, r.srcErr())
		}
		if end != io.EOF && (!errors.Is(err, end) || !errors.Is(r.srcErr(), end)) {
			t.Errorf("source failing with %v: WriteTo = %v, srcErr = %v; want that error", end, err, r.srcErr())
		}
		made := int(fc.made.Load())
		if free := len(fc.free); free != made-1 { // the last block stays current
			t.Errorf("%d buffers back in the pool, want %d (%d made)", free, made-1, made)
		}
		if made < 1 || made > srcBlocks {
			t.Errorf("%d blocks made, want 1 to %d", made, srcBlocks)
		}
	}
}
