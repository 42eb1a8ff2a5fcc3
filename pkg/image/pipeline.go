package image

import (
	"context"
	"hash"
	"io"
	"sync"
	"sync/atomic"

	"github.com/booty-dev/booty/pkg/safego"
)

// The served bytes travel in blocks of srcBlockSize through a chain of
// goroutines: fetch (reads the source) ▸ hash (served digest) ▸ the
// decompressor, which reads them through a blockReader. Each stage works on
// a different block at the same time; srcBlocks bounds the memory. The
// fetch fills each block before passing it on (only the last one is
// short), so a block costs one hand-off per MiB, not one per socket read.
// The first blocks are filled less (firstFill, then twice as much each
// block up to srcBlockSize): the format is known, and the write starts,
// once the first 64 KiB arrived, not the first MiB (0.3 s of a TCG
// guest's boot on QEMU's user network). The blocks are made as the fetch
// needs them, not up front: making six MiB before the first read cost a
// TCG guest 35-80 ms of page faults and garbage collection before its
// first image byte.
const (
	srcBlockSize = 1 << 20
	srcBlocks    = 6
	firstFill    = 64 << 10
)

// srcBlock is one read of the source; err is set on the last one.
type srcBlock struct {
	buf  []byte
	data []byte
	err  error // io.EOF at a clean end, the source's error otherwise
}

// fetchChain starts the fetch and hash goroutines over src and returns the
// reader the decompressor reads from. Stages stop when ctx ends.
type fetchChain struct {
	free   chan []byte
	toHash chan srcBlock
	toDec  chan srcBlock
	n      atomic.Int64 // served bytes hashed so far
	made   atomic.Int32 // blocks made so far, at most srcBlocks
	h      hash.Hash
}

// A panic in either goroutine goes to onPanic before its channel closes.
func startFetch(ctx context.Context, src io.Reader, h hash.Hash, wg interface{ Go(func()) }, onPanic func(error)) *fetchChain {
	fc := &fetchChain{
		free:   make(chan []byte, srcBlocks),
		toHash: make(chan srcBlock, 2),
		toDec:  make(chan srcBlock, srcBlocks),
		h:      h,
	}
	wg.Go(func() {
		defer close(fc.toHash)
		defer safego.Recover("fetch", onPanic)
		fill := firstFill
		for {
			var buf []byte
			select {
			case buf = <-fc.free:
			default:
			}
			if buf == nil && fc.made.Load() < srcBlocks {
				buf = make([]byte, srcBlockSize)
				fc.made.Add(1)
			}
			if buf == nil {
				select {
				case buf = <-fc.free:
				case <-ctx.Done():
					return
				}
			}
			// A block is filled before it moves on: a socket read returns
			// what the kernel holds (often 64 KiB on loopback), and a
			// hand-off per read cost each stage a wake-up per read.
			n, err := readFull(src, buf[:fill])
			fill = min(2*fill, len(buf))
			b := srcBlock{buf: buf, data: buf[:n], err: err}
			select {
			case fc.toHash <- b:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})
	wg.Go(func() {
		defer close(fc.toDec)
		defer safego.Recover("hash the source", onPanic)
		for b := range fc.toHash {
			fc.h.Write(b.data)
			fc.n.Add(int64(len(b.data)))
			select {
			case fc.toDec <- b:
			case <-ctx.Done():
				return
			}
		}
	})
	return fc
}

// blockReader reads the blocks of a fetchChain in order, returning each
// buffer to the pool once consumed. err is the source's error (io.EOF at a
// clean end) once Read returned it.
type blockReader struct {
	fc  *fetchChain
	cur srcBlock
	off int
	mu  sync.Mutex // guards err: decoders may read from their own goroutines
	err error
}

func (r *blockReader) Read(p []byte) (int, error) {
	for r.off == len(r.cur.data) {
		if r.cur.err != nil {
			return 0, r.setErr(r.cur.err)
		}
		if r.cur.buf != nil {
			r.fc.free <- r.cur.buf
			r.cur = srcBlock{}
		}
		b, ok := <-r.fc.toDec
		if !ok {
			return 0, r.setErr(context.Canceled)
		}
		r.cur, r.off = b, 0
	}
	n := copy(p, r.cur.data[r.off:])
	r.off += n
	return n, nil
}

// WriteTo writes the rest of the blocks to w as they come, without copying
// them first, giving each buffer back once w returned (a raw image goes
// straight from the fetched blocks into the chunker). It returns nil at a
// clean end of the source, else the source's error or w's.
func (r *blockReader) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		if r.off < len(r.cur.data) {
			m, err := w.Write(r.cur.data[r.off:])
			r.off += m
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
		if r.cur.err != nil {
			if err := r.setErr(r.cur.err); err != io.EOF {
				return n, err
			}
			return n, nil
		}
		if r.cur.buf != nil {
			r.fc.free <- r.cur.buf
			r.cur = srcBlock{}
		}
		b, ok := <-r.fc.toDec
		if !ok {
			return n, r.setErr(context.Canceled)
		}
		r.cur, r.off = b, 0
	}
}

// srcErr returns the source's failure, or nil while it has none or it
// ended cleanly.
func (r *blockReader) srcErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == io.EOF {
		return nil
	}
	return r.err
}

func (r *blockReader) setErr(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	return err
}
