package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// The target side of one Write: placing data and zero runs (coalesced,
// bmap-aware) on the target through the writer goroutines, invalidating the
// target before the first write, and writing the held-back head and tail
// only after every checksum matched.

// place passes data at off to segments, except the parts a bmap marks
// unmapped, which become zero runs whatever they hold.
func (w *writer) place(off int64, data []byte, c *chunk, sink func(job) error) error {
	if w.bmap == nil {
		return w.segments(off, data, c, sink)
	}
	return w.bmap.mapped(off, off+int64(len(data)), func(from, to int64, mapped bool) error {
		if !mapped {
			return w.addZero(from, to-from, sink)
		}
		return w.segments(from, data[from-off:to-off], c, sink)
	})
}

// send queues j for the writer pool.
func (w *writer) send(j job) error {
	if j.c != nil {
		j.c.refs.Add(1)
	}
	select {
	case w.jobs <- j:
		return nil
	case <-w.ctx.Done():
		if j.c != nil {
			j.c.put()
		}
		return fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
	}
}

// writeLoop runs jobs until the queue closes; after the first failure it
// only releases buffers.
func (w *writer) writeLoop() {
	for j := range w.jobs {
		if w.ctx.Err() == nil {
			if err := w.do(j); err != nil {
				w.fail(err)
			}
		}
		if j.c != nil {
			j.c.put()
		}
	}
}

// do performs one job on the target.
func (w *writer) do(j job) error {
	if j.data == nil {
		if err := w.zeroRange(j.off, j.n); err != nil {
			return err
		}
		w.written.Add(j.n)
		return nil
	}
	if err := w.writeAt(j.off, j.data); err != nil {
		return err
	}
	w.written.Add(int64(len(j.data)))
	return nil
}

// segments splits data at off into data and zero runs, passes data runs to
// sink and coalesces zero runs into w.pendingZero, which it flushes to sink when a
// data run follows.
func (w *writer) segments(off int64, data []byte, c *chunk, sink func(job) error) error {
	n := len(data)
	if w.o.denseWrites && n > 0 {
		return sink(job{off: off, data: data, n: int64(n), c: c})
	}
	if c != nil && c.buf == nil && n > 0 {
		return w.addZero(off, int64(n), sink) // the chunker found it all zeros
	}
	dataStart := -1
	emitData := func(from, to int) error {
		if err := w.flushZeroTo(sink); err != nil {
			return err
		}
		return sink(job{off: off + int64(from), data: data[from:to], n: int64(to - from), c: c})
	}
	for i := 0; i < n; {
		e := min(i+sparseBlock, n)
		if !isZero(data[i:e]) {
			if dataStart < 0 {
				dataStart = i
			}
			i = e
			continue
		}
		j := e
		for j < n {
			e2 := min(j+sparseBlock, n)
			if !isZero(data[j:e2]) {
				break
			}
			j = e2
		}
		if dataStart >= 0 && j < n && j-i < minZeroRun {
			i = j
			continue
		}
		if dataStart >= 0 {
			if err := emitData(dataStart, i); err != nil {
				return err
			}
			dataStart = -1
		}
		if err := w.addZero(off+int64(i), int64(j-i), sink); err != nil {
			return err
		}
		i = j
	}
	if dataStart >= 0 {
		return emitData(dataStart, n)
	}
	return nil
}

func (w *writer) addZero(off, n int64, sink func(job) error) error {
	if w.pendingZero.n > 0 && w.pendingZero.off+w.pendingZero.n == off && w.pendingZero.n+n <= maxZeroJob {
		w.pendingZero.n += n
		return nil
	}
	if err := w.flushZeroTo(sink); err != nil {
		return err
	}
	w.pendingZero = job{off: off, n: n}
	return nil
}

func (w *writer) flushZeroTo(sink func(job) error) error {
	if w.pendingZero.n == 0 {
		return nil
	}
	j := w.pendingZero
	w.pendingZero = job{}
	w.zeroSkip.Add(j.n)
	if w.fresh {
		w.written.Add(j.n)
		return nil
	}
	return sink(j)
}

func (w *writer) flushZero() error { return w.flushZeroTo(w.send) }

// prepare makes the target unbootable before the first write: it
// truncates a regular file to zero length (whose zero runs then need no
// writing), or zeroes the first and last MiB of a device (an old primary
// or backup GPT), and syncs.
func (w *writer) prepare() error {
	w.started = true
	if w.sparse != nil {
		if err := w.sparse.Truncate(0); err != nil {
			return fmt.Errorf("truncate %s: %w: %w", w.name, ErrWriteTarget, err)
		}
		w.fresh = true
		return nil
	}
	size := w.t.Size()
	if err := w.zero(0, min(HoldBack, sizeOr(size, HoldBack))); err != nil {
		return err
	}
	if size > 2*HoldBack {
		if err := w.zero(size-HoldBack, HoldBack); err != nil {
			return err
		}
	}
	return w.sync()
}

func sizeOr(size, dflt int64) int64 {
	if size < 0 {
		return dflt
	}
	return size
}

// finish checks the digests and, when they match, writes the held-back end
// of the image, syncs, writes the first MiB, and syncs.
func (w *writer) finish() error {
	src, img := w.digests()
	if w.want.algo != "" && src != w.want.String() {
		return fmt.Errorf("verify %s: served file has %s, want %s: %w", w.srcName, src, w.want, ErrChecksumMismatch)
	}
	if w.wantImg.algo != "" && img != w.wantImg.String() {
		return fmt.Errorf("verify %s: decompressed image has %s, want %s: %w", w.srcName, img, w.wantImg, ErrChecksumMismatch)
	}
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
	}
	if !w.started {
		if err := w.prepare(); err != nil {
			return err
		}
	}
	w.tailWritten = true
	for _, c := range w.held {
		off, data := w.stripHead(c)
		if err := w.place(off, data, nil, w.do); err != nil {
			return err
		}
	}
	if err := w.flushZeroTo(w.do); err != nil {
		return err
	}
	if w.sparse != nil {
		if err := w.sparse.Truncate(w.total); err != nil {
			return fmt.Errorf("truncate %s to %d: %w: %w", w.name, w.total, ErrWriteTarget, err)
		}
	}
	if err := w.sync(); err != nil {
		return err
	}
	if err := w.writeAt(0, w.head[:w.headN]); err != nil {
		return err
	}
	w.written.Add(int64(w.headN))
	return w.sync()
}

// invalidate zeroes the first MiB of the target and, when the end of the
// image was written, its last MiB, then syncs. It runs after a failure and
// ignores the (possibly cancelled) context.
func (w *writer) invalidate() error {
	var errs []error
	errs = append(errs, w.zero(0, min(HoldBack, sizeOr(w.limit, HoldBack))))
	if w.tailWritten && w.total > HoldBack {
		from := max(w.total-HoldBack, HoldBack)
		errs = append(errs, w.zero(from, w.total-from))
	}
	errs = append(errs, w.sync())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalidate %s after failure: %w", w.name, err)
	}
	w.o.Log.Warn("target invalidated after failure", "target", w.name)
	return nil
}

// zero writes zeros over [off, off+n) as data.
func (w *writer) zero(off, n int64) error {
	if err := writeZeros(w.t, off, n); err != nil {
		return fmt.Errorf("zero %s at offset %d: %w: %w", w.name, off, ErrWriteTarget, err)
	}
	return nil
}

// zeroRange makes [off, off+n) read as zeros the fastest way the target
// offers.
func (w *writer) zeroRange(off, n int64) error {
	var err error
	if w.zeroer != nil {
		err = w.zeroer.ZeroRange(off, n)
	} else {
		err = writeZeros(w.t, off, n)
	}
	if err != nil {
		return fmt.Errorf("zero %s at offset %d length %d: %w: %w", w.name, off, n, ErrWriteTarget, err)
	}
	return nil
}

func (w *writer) sync() error {
	if err := w.t.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w: %w", w.name, ErrWriteTarget, err)
	}
	return nil
}

func (w *writer) writeAt(off int64, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if _, err := w.t.WriteAt(data, off); err != nil {
		return fmt.Errorf("write %s at offset %d: %w: %w", w.name, off, ErrWriteTarget, err)
	}
	return nil
}

// isZero reports whether b is all zero bytes; it rejects data by its first
// word before comparing the rest against the shared zero buffer.
func isZero(b []byte) bool {
	if len(b) >= 8 && (b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7]) != 0 {
		return false
	}
	for len(b) > 0 {
		k := min(len(b), len(zeros))
		if !bytes.Equal(b[:k], zeros[:k]) {
			return false
		}
		b = b[k:]
	}
	return true
}
