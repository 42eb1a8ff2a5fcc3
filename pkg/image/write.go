package image

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Write streams opts.Source onto opts.Target and returns what it wrote.
//
// In order: it parses the checksums (at least one is required unless
// AllowUnverified), opens source and target, detects the format from the
// first bytes, and refuses a target smaller than the image size known in
// advance (served length for raw images; zstd/lz4 frame content size, xz
// index or gzip ISIZE otherwise) before writing anything. It then
// decompresses and hashes as it streams, writing large chunks from a writer
// goroutine, while holding back the first MiB of the image and its final
// chunk (at least the last MiB, where a backup GPT lives). Before the first
// write it invalidates the target: a regular file is truncated (and then
// written sparsely), a device gets its first and last MiB zeroed, so an old
// partition table cannot survive a crash. When the stream ended cleanly and
// every checksum matched, it writes the held-back end, syncs, writes the
// first MiB, and syncs again.
//
// On any failure after writing started (checksum mismatch, truncated or
// corrupt stream, fetch error, write error, too small target, cancelled
// context) it zeroes the first MiB of the target and, if it was written, the
// last MiB of the image, syncs, and returns an error that wraps one of the
// Err* sentinels (or the context's error). Failures found before writing
// started leave the target unchanged.
func Write(ctx context.Context, opts Options) (Result, error) {
	start := time.Now()
	o := opts
	o.setDefaults()
	want, err := parseChecksum(o.Checksum)
	if err != nil {
		return Result{}, err
	}
	wantImg, err := parseChecksum(o.ImageChecksum)
	if err != nil {
		return Result{}, err
	}
	if want.algo == "" && wantImg.algo == "" && !o.AllowUnverified {
		return Result{}, fmt.Errorf("write image %s: %w", o.Source, ErrNoChecksum)
	}
	o.blindResume = want.algo != "" || wantImg.algo != ""
	if o.Target == "" && o.TargetWriter == nil {
		return Result{}, fmt.Errorf("write image: no target given: %w", ErrBadTarget)
	}
	if o.Source == "" {
		return Result{}, fmt.Errorf("write image: no source given: %w", ErrBadSource)
	}

	w := &writer{o: &o, want: want, wantImg: wantImg, srcName: o.Source, name: o.Target}
	if u, err := url.Parse(o.Source); err == nil && strings.HasPrefix(u.Scheme, "http") {
		w.srcName = redactURL(u)
	}
	if w.name == "" {
		w.name = "target"
	}

	src, err := openSource(ctx, &o)
	if err != nil {
		return Result{}, classifyFetch(ctx, err)
	}
	defer src.Close()
	w.src = src

	if o.TargetWriter != nil {
		w.t = o.TargetWriter
	} else {
		ft, err := openTarget(o.Target, o.TargetSize)
		if err != nil {
			return Result{}, err
		}
		defer ft.Close()
		w.t = ft
		if ft.regular {
			w.sparse = ft
		}
	}
	w.limit = w.t.Size()
	if o.TargetSize > 0 && (w.limit < 0 || o.TargetSize < w.limit) {
		w.limit = o.TargetSize
	}

	res, err := w.run(ctx)
	res.Duration = time.Since(start)
	return res, err
}

// classifyFetch wraps err in ErrFetch unless it is a cancellation or
// already says what went wrong.
func classifyFetch(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, ErrBadSource) || errors.Is(err, ErrSourceChanged) || errors.Is(err, ErrFetch) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrFetch, err)
}

// chunk is one piece of the decompressed image on its way to the target.
type chunk struct {
	off  int64
	data []byte
	buf  []byte // the pooled buffer data lies in
}

// writer is the state of one Write.
type writer struct {
	o             *Options
	want, wantImg checksum
	src           source
	srcName, name string
	t             Target
	sparse        interface{ Truncate(int64) error } // set when t is a regular file we truncate
	limit         int64                              // usable target size, or Unlimited

	ctx    context.Context
	cancel context.CancelCauseFunc

	sh, ih  hash.Hash // served file, image (ih nil when it equals sh)
	counter *sourceCounter

	head        []byte // the first HoldBack bytes of the image
	headN       int
	total       int64 // decompressed bytes read
	held        []chunk
	started     bool // the target has been changed
	tailWritten bool

	free      chan []byte
	allocated int
	work      chan chunk
	wdone     chan struct{}
	werr      error // set by the writer goroutine before wdone closes
	written   atomic.Int64
}

// sourceCounter hashes and counts the served bytes and remembers the first
// read error, so a failure of the source is told apart from corrupt data.
type sourceCounter struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	err error
}

func (s *sourceCounter) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

func algoOr(c checksum) string {
	if c.algo == "" {
		return "sha256"
	}
	return c.algo
}

func (w *writer) run(ctx context.Context) (Result, error) {
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	defer w.cancel(nil)
	log := w.o.Log

	w.sh = newHash(algoOr(w.want))
	w.counter = &sourceCounter{r: w.src, h: w.sh}
	br := bufio.NewReaderSize(w.counter, 1<<20)
	peek, err := br.Peek(magicLen)
	if err != nil && !errors.Is(err, io.EOF) {
		return Result{}, classifyFetch(ctx, fmt.Errorf("read %s: %w", w.srcName, err))
	}
	format := DetectFormat(peek)
	if format != FormatRaw || algoOr(w.wantImg) != algoOr(w.want) {
		w.ih = newHash(algoOr(w.wantImg))
	}
	hint, from := w.sizeHint(ctx, format, peek)
	if w.limit >= 0 && hint > w.limit {
		return Result{}, fmt.Errorf("write %s to %s: image needs at least %d bytes (%s), target has %d: %w", w.srcName, w.name, hint, from, w.limit, ErrTargetTooSmall)
	}
	dec, closeDec, err := decompressor(format, br)
	if err != nil {
		if w.counter.err != nil {
			return Result{}, classifyFetch(ctx, w.counter.err)
		}
		return Result{}, fmt.Errorf("write %s: %w", w.srcName, err)
	}
	defer closeDec()
	log.Info("writing image", "source", w.srcName, "target", w.name, "format", format, "size_hint", hint, "target_size", w.limit)

	rep := startReporter(w.o.Progress, w.o.ProgressInterval, hint, &w.written)
	err = w.stream(format, dec, br)
	rep.finish()

	res := Result{ImageSize: w.total, SourceBytes: w.counter.n, Format: format, Resumes: w.src.Resumes()}
	if err != nil {
		if w.started {
			if cerr := w.invalidate(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		log.Error("image write failed", "source", w.srcName, "target", w.name, "err", err, "target_changed", w.started)
		return res, err
	}
	res.SourceDigest, res.ImageDigest = w.digests()
	log.Info("image written", "target", w.name, "size", w.total, "source_bytes", w.counter.n, "image_digest", res.ImageDigest, "resumes", res.Resumes)
	return res, nil
}

// sizeHint returns a lower bound of the image size known before streaming,
// or 0, and where it comes from: the served length of a raw image, else
// what the compressed stream's header or tail declares. A truncated gzip
// file has a random trailer and may thus be refused as too big, before
// anything is written.
func (w *writer) sizeHint(ctx context.Context, f Format, peek []byte) (int64, string) {
	size := w.src.Size()
	if f == FormatRaw {
		return max(size, 0), "served length"
	}
	if h := sizeHintFromHeader(f, peek); h > 0 {
		return h, fmt.Sprintf("declared in the %s frame header", f)
	}
	n := min(tailLen(f), size)
	if n <= 0 {
		return 0, ""
	}
	tail, err := w.src.ReadRange(ctx, size-n, n)
	if err != nil {
		w.o.Log.Debug("no image size hint from the source tail", "source", w.srcName, "err", err)
		return 0, ""
	}
	return sizeHintFromTail(f, tail), fmt.Sprintf("declared in the %s trailer", f)
}

func (w *writer) digests() (src, img string) {
	src = digestString(algoOr(w.want), w.sh)
	if w.ih == nil {
		return src, src
	}
	return src, digestString(algoOr(w.wantImg), w.ih)
}

// stream runs the pipeline to the end: decompress into chunks, write them
// from a goroutine, then verify and write what was held back.
func (w *writer) stream(format Format, dec io.Reader, br *bufio.Reader) error {
	w.head = make([]byte, HoldBack)
	w.free = make(chan []byte, w.o.Buffers)
	w.work = make(chan chunk, w.o.Buffers)
	w.wdone = make(chan struct{})
	go w.writeLoop()
	err := w.read(format, dec, br)
	close(w.work)
	<-w.wdone
	if w.werr != nil {
		return w.werr
	}
	if err != nil {
		return err
	}
	return w.finish()
}

// writeLoop writes the chunks it receives, in order, until the first error,
// which it records and uses to cancel the pipeline.
func (w *writer) writeLoop() {
	defer close(w.wdone)
	for c := range w.work {
		if w.werr == nil {
			if err := w.writeChunk(c.off, c.data, w.sparse != nil); err != nil {
				w.werr = err
				w.cancel(err)
			} else {
				w.written.Add(int64(len(c.data)))
			}
		}
		w.free <- c.buf
	}
}

// getBuf returns a free chunk buffer, allocating up to Options.Buffers.
func (w *writer) getBuf() ([]byte, error) {
	select {
	case b := <-w.free:
		return b, nil
	default:
	}
	if w.allocated < w.o.Buffers {
		w.allocated++
		return make([]byte, w.o.ChunkSize), nil
	}
	select {
	case b := <-w.free:
		return b, nil
	case <-w.ctx.Done():
		return nil, context.Cause(w.ctx)
	}
}

// read fills chunks from dec and hands all but the last one to the writer.
// It returns nil only when dec and the source ended cleanly.
func (w *writer) read(format Format, dec io.Reader, br *bufio.Reader) error {
	for {
		if err := w.ctx.Err(); err != nil {
			return fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
		}
		buf, err := w.getBuf()
		if err != nil {
			return fmt.Errorf("write %s: %w", w.name, err)
		}
		n, rerr := readFull(dec, buf)
		if n > 0 {
			data := buf[:n]
			if w.ih != nil {
				w.ih.Write(data)
			}
			c := chunk{off: w.total, data: data, buf: buf}
			w.total += int64(n)
			if w.limit >= 0 && w.total > w.limit {
				return fmt.Errorf("write %s to %s: image exceeds the target size of %d bytes: %w", w.srcName, w.name, w.limit, ErrTargetTooSmall)
			}
			// Keep the newest chunk back: it may be the last. When it is
			// the last (EOF) keep the one before too, so at least HoldBack
			// bytes of the image end are held.
			if len(w.held) > 0 && rerr != io.EOF {
				if err := w.release(w.held[0]); err != nil {
					return err
				}
				w.held = w.held[:0]
			}
			w.held = append(w.held, c)
		} else {
			w.free <- buf
		}
		switch {
		case rerr == nil:
			continue
		case rerr == io.EOF:
			return w.drain(format, br)
		case w.ctx.Err() != nil:
			return fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
		case w.counter.err != nil:
			return classifyFetch(w.ctx, w.counter.err)
		default:
			return fmt.Errorf("decompress %s stream of %s at image offset %d: %w: %w", format, w.srcName, w.total, ErrCorruptSource, rerr)
		}
	}
}

// drain reads what follows the compressed stream so the source digest
// covers the whole served file, and checks the image is not empty.
func (w *writer) drain(format Format, br *bufio.Reader) error {
	n, err := io.Copy(io.Discard, br)
	if err != nil {
		return classifyFetch(w.ctx, fmt.Errorf("read %s after the %s stream: %w", w.srcName, format, err))
	}
	if n > 0 {
		w.o.Log.Warn("ignoring bytes after the compressed stream", "source", w.srcName, "format", format, "bytes", n)
	}
	if w.total == 0 {
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
// image into w.head and returns the rest.
func (w *writer) stripHead(c chunk) chunk {
	if c.off >= HoldBack {
		return c
	}
	k := min(int64(HoldBack)-c.off, int64(len(c.data)))
	copy(w.head[c.off:], c.data[:k])
	w.headN = max(w.headN, int(c.off+k))
	c.off += k
	c.data = c.data[k:]
	return c
}

// release passes c, minus the held-back head, to the writer goroutine,
// invalidating the target first if nothing was written yet.
func (w *writer) release(c chunk) error {
	c = w.stripHead(c)
	if len(c.data) == 0 {
		w.free <- c.buf
		return nil
	}
	if !w.started {
		if err := w.prepare(); err != nil {
			return err
		}
	}
	select {
	case w.work <- c:
		return nil
	case <-w.ctx.Done():
		return fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
	}
}

// prepare makes the target unbootable before the first write: it
// truncates a regular file to zero length, or zeroes the first and last MiB
// of a device (an old primary or backup GPT), and syncs.
func (w *writer) prepare() error {
	w.started = true
	if w.sparse != nil {
		if err := w.sparse.Truncate(0); err != nil {
			return fmt.Errorf("truncate %s: %w: %w", w.name, ErrWriteTarget, err)
		}
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
		c = w.stripHead(c)
		if err := w.writeChunk(c.off, c.data, w.sparse != nil); err != nil {
			return err
		}
		w.written.Add(int64(len(c.data)))
	}
	if w.sparse != nil {
		if err := w.sparse.Truncate(w.total); err != nil {
			return fmt.Errorf("truncate %s to %d: %w: %w", w.name, w.total, ErrWriteTarget, err)
		}
	}
	if err := w.sync(); err != nil {
		return err
	}
	if err := w.writeChunk(0, w.head[:w.headN], false); err != nil {
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

var zeros = make([]byte, HoldBack)

func (w *writer) zero(off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.t.WriteAt(zeros[:k], off); err != nil {
			return fmt.Errorf("zero %s at offset %d: %w: %w", w.name, off, ErrWriteTarget, err)
		}
		off += k
		n -= k
	}
	return nil
}

func (w *writer) sync() error {
	if err := w.t.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w: %w", w.name, ErrWriteTarget, err)
	}
	return nil
}

// sparseBlock is the granularity at which all-zero data is skipped.
const sparseBlock = 64 << 10

// writeChunk writes data at off. With skipZeros it leaves out all-zero
// blocks, which read back as zeros only on a target truncated beforehand.
func (w *writer) writeChunk(off int64, data []byte, skipZeros bool) error {
	if !skipZeros {
		return w.writeAt(off, data)
	}
	for i := 0; i < len(data); {
		for i < len(data) && isZero(data[i:min(i+sparseBlock, len(data))]) {
			i += sparseBlock
		}
		j := i
		for j < len(data) && !isZero(data[j:min(j+sparseBlock, len(data))]) {
			j += sparseBlock
		}
		j = min(j, len(data))
		if j > i {
			if err := w.writeAt(off+int64(i), data[i:j]); err != nil {
				return err
			}
		}
		i = j
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

func isZero(b []byte) bool {
	for len(b) > 0 {
		k := min(len(b), len(zeros))
		if !bytes.Equal(b[:k], zeros[:k]) {
			return false
		}
		b = b[k:]
	}
	return true
}
