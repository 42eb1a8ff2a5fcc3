package image

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/booty-dev/booty/pkg/safego"
)

// The stages of one Write, in the order an image byte passes them: decode
// (decompress into chunks) ▸ hash (image digest, bmap ranges) ▸ dispatch
// (image order, the first MiB and the end held back) ▸ the writers
// (write_target.go). The fetch and served-digest stages before decode are
// in pipeline.go.

// stream runs the pipeline to the end: decompress into chunks, hash them,
// dispatch them to the writers, then verify and write what was held back.
// dec is the decoder, in its input (what follows the stream is drained
// from it).
func (w *writer) stream(dec, in io.Reader) error {
	w.head = make([]byte, HoldBack)
	w.free = make(chan []byte, w.o.Buffers)
	for range w.o.Buffers {
		b, release := allocAligned(w.o.ChunkSize)
		w.bufs = append(w.bufs, release)
		w.free <- b
	}
	zc, release := allocAligned(w.o.ChunkSize)
	w.bufs = append(w.bufs, release)
	w.zeroChunk = zc
	decOut := make(chan *chunk, 2)
	hashOut := make(chan *chunk, 2)
	w.chunk = &chunker{w: w, out: decOut, size: w.o.ChunkSize}
	w.stages.Go(func() { w.decodeLoop(dec, in) })
	w.stages.Go(func() { w.hashLoop(decOut, hashOut) })
	w.jobs = make(chan job, w.o.Writers)
	for range w.o.Writers {
		safego.Go(&w.writers, "write "+w.name, w.fail, w.writeLoop)
	}
	// A panic while dispatching is the write's error: the writers still
	// end, and the target is invalidated like on any other failure.
	err := safego.Call("dispatch to "+w.name, func() error {
		if err := w.dispatch(hashOut); err != nil {
			return err
		}
		return w.flushZero()
	})
	close(w.jobs)
	w.writers.Wait()
	if err != nil {
		w.fail(err)
		return w.firstErr(err)
	}
	if err := w.firstErr(nil); err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
	}
	return w.finish()
}

// decodeLoop runs the decoder into a chunker, then records how the stream
// ended in w.decErr (nil: dec and the source ended cleanly). Decoders that
// hand out their own buffers (zstd, gzip, and a raw image through the
// blockReader) write into the chunker without an extra copy; others are
// read through a small buffer.
func (w *writer) decodeLoop(dec, in io.Reader) {
	k := w.chunk
	defer close(k.out)
	defer safego.Recover("decode "+w.srcName, w.fail)
	var buf []byte // io.CopyBuffer reads through it only when dec has no WriteTo
	if _, ok := dec.(io.WriterTo); !ok {
		buf = make([]byte, 256<<10)
	}
	_, rerr := io.CopyBuffer(k, dec, buf)
	total := k.off + int64(k.n)
	if rerr == nil && w.zskip != nil {
		rerr = w.zskip.check(total)
	}
	defer func() { w.tailMarks = k.marks }() // for hashLoop, once out is closed
	switch {
	case w.ctx.Err() != nil:
		w.decErr = fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
		return
	case rerr == nil:
		w.decErr = k.send(true)
		if w.decErr == nil {
			w.decErr = w.drain(in, total)
		}
		return
	}
	if err := k.send(false); err != nil {
		w.decErr = err
		return
	}
	switch {
	case w.blocks.srcErr() != nil:
		w.decErr = classifyFetch(w.ctx, w.blocks.srcErr())
	case errors.Is(rerr, ErrUnsupportedFormat) || errors.Is(rerr, ErrCorruptSource):
		w.decErr = fmt.Errorf("decode %s image %s at image offset %d: %w", w.format, w.srcName, total, rerr)
	default:
		w.decErr = fmt.Errorf("decompress %s stream of %s at image offset %d: %w: %w", w.format, w.srcName, total, ErrCorruptSource, rerr)
	}
}

// chunker cuts the decoded image into chunks of size bytes at offsets that
// are multiples of size and sends each one when it is full. A chunk takes
// a buffer from the pool only at its first non-zero byte: until then its
// bytes are only checked, not copied, and a chunk that stays all zeros is
// sent without a buffer, its data pointing at w.zeroChunk (never written,
// so it costs no memory). On a sparse image most of the zeros are thus
// scanned once at memory speed and never copied.
type chunker struct {
	w     *writer
	out   chan<- *chunk
	size  int
	off   int64       // image offset of the chunk being filled
	n     int         // its bytes so far
	buf   []byte      // its buffer, nil while it is all zeros
	marks []frameMark // frame ends to send with it
}

// Write adds p to the image; it fails only when the write was cancelled.
func (k *chunker) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		m := min(k.size-k.n, len(p))
		if k.buf == nil && isZero(p[:m]) {
			k.n += m
		} else {
			if k.buf == nil {
				select {
				case k.buf = <-k.w.free:
				case <-k.w.ctx.Done():
					return total - len(p), context.Cause(k.w.ctx)
				}
				clear(k.buf[:k.n])
			}
			copy(k.buf[k.n:], p[:m])
			k.n += m
		}
		p = p[m:]
		if k.n == k.size {
			if err := k.send(false); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

// skipZeros adds n zero bytes to the image without scanning or copying
// them: the rest of a chunk with a buffer is cleared, whole chunks go
// without one. It fails only when the write was cancelled.
func (k *chunker) skipZeros(n int64) error {
	for n > 0 {
		m := int(min(int64(k.size-k.n), n))
		if k.buf != nil {
			clear(k.buf[k.n : k.n+m])
		}
		k.n += m
		n -= int64(m)
		if k.n == k.size {
			if err := k.send(false); err != nil {
				return err
			}
		}
	}
	return nil
}

// frameEnd is zstdZeroSkip's report of a frame's end: it marks the
// frame's end at the image offset the chunker has reached.
func (w *writer) frameEnd(sum uint32, hasSum bool) {
	k := w.chunk
	k.marks = append(k.marks, frameMark{end: k.off + int64(k.n), sum: sum, hasSum: hasSum})
}

// skipZeros is zstdZeroSkip's way into the decoder's chunker.
func (w *writer) skipZeros(n int64) error {
	if w.chunk == nil {
		return fmt.Errorf("write %s: zero run before the decoder started", w.name)
	}
	return w.chunk.skipZeros(n)
}

// send sends the chunk being filled, if it has bytes, marked as the end of
// the image or not, and starts the next one.
func (k *chunker) send(last bool) error {
	if k.n == 0 {
		return nil
	}
	c := &chunk{off: k.off, buf: k.buf, free: k.w.free, last: last, marks: k.marks}
	k.marks = nil
	if k.buf != nil {
		c.data = k.buf[:k.n]
	} else {
		c.data = k.w.zeroChunk[:k.n]
	}
	c.refs.Store(1)
	k.off += int64(k.n)
	k.n, k.buf = 0, nil
	select {
	case k.out <- c:
		return nil
	case <-k.w.ctx.Done():
		c.put()
		return fmt.Errorf("write %s: %w", k.w.name, context.Cause(k.w.ctx))
	}
}

// hashLoop hashes the image bytes in order and checks bmap ranges, then
// passes each chunk on.
func (w *writer) hashLoop(in <-chan *chunk, out chan<- *chunk) {
	defer close(out)
	defer safego.Recover("hash "+w.srcName, w.fail)
	for c := range in {
		if w.imageHash != nil {
			w.imageHash.Write(c.data)
		}
		if w.frameSum != nil {
			if err := w.checkFrames(c); err != nil {
				c.put()
				w.fail(err)
				return
			}
		}
		if w.bmap != nil {
			if err := w.bmap.check(c.off, c.data); err != nil {
				c.put()
				w.fail(fmt.Errorf("verify %s against bmap %s: %w", w.srcName, w.o.Bmap, err))
				return
			}
		}
		select {
		case out <- c:
		case <-w.ctx.Done():
			c.put()
			return
		}
	}
	if w.frameSum != nil && w.decErr == nil {
		if err := w.checkFrames(&chunk{off: w.chunk.off, marks: w.tailMarks}); err != nil {
			w.fail(err)
			return
		}
	}
	if w.bmap != nil && w.decErr == nil {
		if err := w.bmap.done(); err != nil {
			w.fail(fmt.Errorf("verify %s against bmap %s: %w", w.srcName, w.o.Bmap, err))
		}
	}
}

// checkFrames adds c to the zstd frame checksum (an all-zero chunk from
// the small zero buffer, not its 4 MiB of data) and checks the checksum of every frame that ends in
// c against what the frame says.
func (w *writer) checkFrames(c *chunk) error {
	add := func(from, to int64) {
		if c.buf == nil {
			w.frameSum.zeros(to - from)
		} else {
			w.frameSum.write(c.data[from-c.off : to-c.off])
		}
	}
	pos := c.off
	for _, m := range c.marks {
		add(pos, m.end)
		pos = m.end
		got := uint32(w.frameSum.sum64())
		w.frameSum.reset()
		if m.hasSum && got != m.sum {
			return fmt.Errorf("verify %s: the zstd frame ending at image offset %d decoded to checksum %08x, the frame says %08x: %w", w.srcName, m.end, got, m.sum, ErrCorruptSource)
		}
	}
	add(pos, c.off+int64(len(c.data)))
	return nil
}

// dispatch takes chunks in image order, holds back the first MiB and the
// last chunk(s), and hands the rest to the writers. It returns nil only
// when the stream ended cleanly.
func (w *writer) dispatch(in <-chan *chunk) error {
	for c := range in {
		w.total = c.off + int64(len(c.data))
		if w.limit >= 0 && w.total > w.limit {
			c.put()
			return fmt.Errorf("write %s to %s: image exceeds the target size of %d bytes: %w", w.srcName, w.name, w.limit, ErrTargetTooSmall)
		}
		// Keep the newest chunk back: it may be the last. When it is the
		// last and shorter than HoldBack, keep the one before too, so at
		// least the last MiB of the image (a backup GPT) is held.
		if len(w.held) > 0 && (!c.last || len(c.data) >= HoldBack) {
			for _, h := range w.held {
				if err := w.release(h); err != nil {
					return err
				}
			}
			w.held = w.held[:0]
		}
		w.held = append(w.held, c)
	}
	if err := w.firstErr(nil); err != nil {
		return err
	}
	if w.decErr != nil {
		return w.decErr
	}
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
	}
	return nil
}

// drain reads what follows the compressed stream in in, the decoder's
// input, so the source digest covers the whole served file, and checks the
// image is not empty.
func (w *writer) drain(in io.Reader, total int64) error {
	n, err := io.Copy(io.Discard, in)
	if err != nil {
		return classifyFetch(w.ctx, fmt.Errorf("read %s after the %s stream: %w", w.srcName, w.format, err))
	}
	if n > 0 {
		w.o.Log.Warn("ignoring bytes after the compressed stream", "source", w.srcName, "format", w.format, "bytes", n)
	}
	if total == 0 {
		return fmt.Errorf("write %s: image is empty: %w", w.srcName, ErrCorruptSource)
	}
	return nil
}

// readFull reads until buf is full (nil error), the reader ends (io.EOF,
// possibly with n > 0), or it fails. Unlike io.ReadFull it keeps a
// reader's own io.ErrUnexpectedEOF apart from a clean short end.
func readFull(r io.Reader, buf []byte) (int, error) {
	n, empty := 0, 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			if empty++; empty > 100 {
				return n, io.ErrNoProgress
			}
		}
	}
	return n, nil
}

// stripHead copies the part of c inside the first HoldBack bytes of the
// image into w.head and returns the rest as offset and data.
func (w *writer) stripHead(c *chunk) (int64, []byte) {
	off, data := c.off, c.data
	if off >= HoldBack {
		return off, data
	}
	k := min(int64(HoldBack)-off, int64(len(data)))
	copy(w.head[off:], data[:k])
	w.headN = max(w.headN, int(off+k))
	return off + k, data[k:]
}

// release passes c, minus the held-back head, to the writers, invalidating
// the target first if nothing was written yet.
func (w *writer) release(c *chunk) error {
	off, data := w.stripHead(c)
	if len(data) > 0 && !w.started {
		if err := w.prepare(); err != nil {
			c.put()
			return err
		}
	}
	err := w.place(off, data, c, w.send)
	c.put()
	return err
}
