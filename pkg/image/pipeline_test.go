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

// A source that trickles still reaches the decompressor in full blocks: one
// hand-off per block, not per read. Only the last block is short, and the
// bytes, the digest and the clean end are unchanged.
func TestFetchFillsBlocks(t *testing.T) {
	data := make([]byte, 3*srcBlockSize+12345)
	fillData(rand.New(rand.NewPCG(7, 8)), data)
	blocks, sum := fetchAll(t, &trickle{data: data, max: 5000, err: io.EOF})
	if len(blocks) != 4 {
		t.Fatalf("%d blocks, want 4 (3 full and a short last one)", len(blocks))
	}
	var got []byte
	for i, b := range blocks {
		if i < 3 && (len(b.data) != srcBlockSize || b.err != nil) {
			t.Errorf("block %d: %d bytes, err %v; want %d bytes, no error", i, len(b.data), b.err, srcBlockSize)
		}
		got = append(got, b.data...)
	}
	if last := blocks[3]; len(last.data) != 12345 || last.err != io.EOF {
		t.Errorf("last block: %d bytes, err %v; want 12345 bytes, io.EOF", len(last.data), last.err)
	}
	if !bytes.Equal(got, data) {
		t.Error("blocks do not add up to the source")
	}
	if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
		t.Error("served digest differs from the source's sha256")
	}
}

// A source error ends the chain with that error on the last block, after
// the bytes read before it; an io.ErrUnexpectedEOF of the source stays one
// (it is not taken for a clean end).
func TestFetchKeepsSourceError(t *testing.T) {
	data := make([]byte, srcBlockSize+100)
	blocks, _ := fetchAll(t, &trickle{data: data, max: 64 << 10, err: io.ErrUnexpectedEOF})
	if len(blocks) != 2 {
		t.Fatalf("%d blocks, want 2", len(blocks))
	}
	if last := blocks[1]; len(last.data) != 100 || !errors.Is(last.err, io.ErrUnexpectedEOF) {
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
		if free := len(fc.free); free != srcBlocks-1 { // the last block stays current
			t.Errorf("%d buffers back in the pool, want %d", free, srcBlocks-1)
		}
	}
}
