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
	"sync"
	"sync/atomic"
	"time"

	"github.com/booty-dev/booty/pkg/safego"
)

// Write streams opts.Source onto opts.Target and returns what it wrote.
//
// In order: it parses the checksums (at least one is required unless
// AllowUnverified), fetches and checks the bmap file when one is given,
// opens source and target, detects the format from the first bytes, and
// refuses a target smaller than the image size known in advance (served
// length for raw images; zstd/lz4 frame content size, xz index, gzip ISIZE,
// qcow2 virtual size or bmap image size otherwise) before writing anything.
//
// It then runs a pipeline of goroutines: fetch ▸ hash of the served bytes ▸
// decompress into chunks ▸ hash of the image (and bmap range checks) ▸
// dispatch ▸ a pool of writers that write chunks at their offsets
// (O_DIRECT where the target allows it). All-zero runs are not written as
// data: they are skipped on a truncated regular file or a target declared
// FreshTarget, and zeroed with BLKZEROOUT (block device) otherwise; with a
// bmap, unmapped ranges are treated the same way. The first MiB of the
// image and its final chunk (at least the last MiB, where a backup GPT
// lives) are held back. Before the first write it invalidates the target:
// a regular file is truncated, a device gets its first and last MiB zeroed,
// so an old partition table cannot survive a crash. When the stream ended
// cleanly and every checksum matched, it writes the held-back end, syncs,
// writes the first MiB, and syncs again.
//
// On any failure after writing started (checksum or bmap range mismatch,
// truncated or corrupt stream, fetch error, write error, too small target,
// cancelled context) it zeroes the first MiB of the target and, if it was
// written, the last MiB of the image, syncs, and returns an error that
// wraps one of the Err* sentinels (or the context's error). Failures found
// before writing started leave the target unchanged.
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
	if want.algo == "" && wantImg.algo == "" && !o.AllowUnverified && !isOCI(o.Source) {
		return Result{}, fmt.Errorf("write image %s: %w", o.Source, ErrNoChecksum)
	}
	if o.Target == "" && o.TargetWriter == nil {
		return Result{}, fmt.Errorf("write image: no target given: %w", ErrBadTarget)
	}
	if o.Source == "" {
		return Result{}, fmt.Errorf("write image: no source given: %w", ErrBadSource)
	}

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &writer{o: &o, want: want, wantImg: wantImg, srcName: o.Source, name: o.Target, ctx: rctx, cancel: cancel}
	if u, err := url.Parse(o.Source); err == nil && u.Scheme != "" && u.Scheme != "file" {
		w.srcName = redactURL(u)
	}
	if w.name == "" {
		w.name = "target"
	}

	if o.Bmap != "" {
		bm, err := loadBmap(rctx, &o)
		if err != nil {
			return Result{}, err
		}
		w.bmap = bm
	}

	src, err := openSource(rctx, &o)
	if err != nil {
		return Result{}, classifyFetch(ctx, err)
	}
	defer src.Close()
	w.src = src
	if d := src.Digest(); d.algo != "" {
		// An OCI blob: its digest is the served-bytes checksum.
		if w.want.algo != "" && w.want.String() != d.String() {
			return Result{}, fmt.Errorf("verify %s: checksum %s given, but the registry names the blob %s: %w", w.srcName, w.want, d, ErrChecksumMismatch)
		}
		w.want = d
	}
	o.blindResume = w.want.algo != "" || w.wantImg.algo != ""

	if o.TargetWriter != nil {
		w.t = o.TargetWriter
	} else {
		ft, err := openTarget(o.Target, o.TargetSize, o.NoDirect)
		if err != nil {
			return Result{}, err
		}
		defer ft.Close()
		w.t = ft
		w.ft = ft
		if ft.regular {
			w.sparse = ft
		}
	}
	w.zr, _ = w.t.(Zeroer)
	w.fresh = o.FreshTarget
	w.limit = w.t.Size()
	if o.TargetSize > 0 && (w.limit < 0 || o.TargetSize < w.limit) {
		w.limit = o.TargetSize
	}

	var res Result
	err = safego.Call("write "+w.name, func() (err error) { res, err = w.run(); return err })
	res.Duration = time.Since(start)
	return res, err
}

// classifyFetch wraps err in ErrFetch unless it is a cancellation or
// already says what went wrong.
func classifyFetch(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, ErrBadSource) || errors.Is(err, ErrSourceChanged) || errors.Is(err, ErrFetch) || errors.Is(err, ErrChecksumMismatch) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrFetch, err)
}

// chunk is one piece of the decompressed image on its way to the target.
// Its buffer goes back to the pool when the last holder calls put.
type chunk struct {
	off  int64
	data []byte
	buf  []byte
	refs atomic.Int32
	free chan []byte
	last bool // the decoder ended right after this chunk
}

func (c *chunk) put() {
	if c.refs.Add(-1) == 0 {
		c.free <- c.buf
	}
}

// job is one write (or zeroing) for the writer pool.
type job struct {
	off  int64
	data []byte // nil: zero n bytes
	n    int64
	c    *chunk // released when done, may be nil
}

// writer is the state of one Write.
type writer struct {
	o             *Options
	want, wantImg checksum
	src           source
	srcName, name string
	t             Target
	ft            *fileTarget                        // set when Write opened the target
	zr            Zeroer                             // t's fast zeroing, or nil
	sparse        interface{ Truncate(int64) error } // set when t is a regular file we truncate
	limit         int64                              // usable target size, or Unlimited
	fresh         bool                               // zero ranges already read as zeros
	bmap          *bmap

	ctx    context.Context
	cancel context.CancelCauseFunc
	errMu  sync.Mutex
	err    error // first failure of any stage

	sh, ih hash.Hash // served file, image (ih nil when it equals sh)
	fc     *fetchChain
	brd    *blockReader
	format Format

	head        []byte // the first HoldBack bytes of the image
	headN       int
	total       int64 // decompressed bytes dispatched
	held        []*chunk
	started     bool // the target has been changed
	tailWritten bool
	pz          job // pending zero range, coalesced
	decErr      error
	decTotal    int64

	free     chan []byte
	bufs     []func() // releases of the allocated chunk buffers
	jobs     chan job
	written  atomic.Int64
	stages   sync.WaitGroup
	writers  sync.WaitGroup
	closeDec func()       // releases the decoder once the stages have ended
	zeroSkip atomic.Int64 // bytes of zero runs not written as data
}

// fail records the first failure and stops the pipeline.
func (w *writer) fail(err error) {
	w.errMu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.errMu.Unlock()
	w.cancel(err)
}

// firstErr returns the first recorded failure, else err.
func (w *writer) firstErr(err error) error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.err != nil {
		return w.err
	}
	return err
}

func algoOr(c checksum) string {
	if c.algo == "" {
		return "sha256"
	}
	return c.algo
}

func (w *writer) run() (Result, error) {
	log := w.o.Log
	defer func() {
		w.cancel(nil)
		w.stages.Wait()
		if w.closeDec != nil {
			w.closeDec()
		}
		for _, f := range w.bufs {
			f()
		}
	}()

	w.sh = newHash(algoOr(w.want))
	w.fc = startFetch(w.ctx, w.src, w.sh, &w.stages, w.fail)
	w.brd = &blockReader{fc: w.fc}
	br := bufio.NewReaderSize(w.brd, 1<<20)
	res := func() Result {
		return Result{ImageSize: w.total, SourceBytes: w.fc.n.Load(), Format: w.format, Resumes: w.src.Resumes()}
	}
	peek, err := br.Peek(qcow2HeaderPeek)
	if err != nil && !errors.Is(err, io.EOF) {
		return res(), classifyFetch(w.ctx, fmt.Errorf("read %s: %w", w.srcName, err))
	}
	format := DetectFormat(peek)
	w.format = format
	// The decompressed image is hashed only when its checksum was asked
	// for, or when nothing is verified at all (the digests are then the
	// only record of what was written): hashing every byte of a mostly-zero
	// image costs as much as decoding it. For a raw image with one
	// algorithm the served digest is the image digest.
	hashImage := w.wantImg.algo != "" || w.want.algo == ""
	if hashImage && (format != FormatRaw || algoOr(w.wantImg) != algoOr(w.want)) {
		w.ih = newHash(algoOr(w.wantImg))
	}
	hint, from := w.sizeHint(format, peek)
	if w.bmap != nil && w.bmap.ImageSize > hint {
		hint, from = w.bmap.ImageSize, "declared in the bmap file"
	}
	if w.limit >= 0 && hint > w.limit {
		return res(), fmt.Errorf("write %s to %s: image needs at least %d bytes (%s), target has %d: %w", w.srcName, w.name, hint, from, w.limit, ErrTargetTooSmall)
	}
	dec, closeDec, err := openDecoder(format, br, w.o)
	if err != nil {
		if e := w.brd.srcErr(); e != nil {
			return res(), classifyFetch(w.ctx, e)
		}
		return res(), fmt.Errorf("write %s: %w", w.srcName, err)
	}
	// The decoder is closed only after every stage has ended (the first
	// defer waits for them): closing it under the decode goroutine made zstd
	// dereference its freed state, a kernel panic for PID 1.
	w.closeDec = closeDec
	direct := w.ft != nil && w.ft.Direct()
	log.Info("writing image", "source", w.srcName, "target", w.name, "format", format, "size_hint", hint,
		"target_size", w.limit, "direct", direct, "fresh_target", w.fresh, "bmap", w.bmap != nil)

	rep := startReporter(w.o.Progress, w.o.ProgressInterval, hint, &w.written, w.fail)
	err = w.stream(dec, br)
	rep.finish()

	r := res()
	if err != nil {
		if w.started {
			if cerr := w.invalidate(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		log.Error("image write failed", "source", w.srcName, "target", w.name, "err", err, "target_changed", w.started)
		return r, err
	}
	r.SourceDigest, r.ImageDigest = w.digests()
	r.ZeroBytes, r.Direct = w.zeroSkip.Load(), w.ft != nil && w.ft.Direct()
	log.Info("image written", "target", w.name, "size", w.total, "source_bytes", r.SourceBytes, "image_digest", r.ImageDigest,
		"resumes", r.Resumes, "zero_bytes_skipped", w.zeroSkip.Load(), "direct", w.ft != nil && w.ft.Direct())
	return r, nil
}

// sizeHint returns a lower bound of the image size known before streaming,
// or 0, and where it comes from: the served length of a raw image, else
// what the compressed stream's header or tail declares. A truncated gzip
// file has a random trailer and may thus be refused as too big, before
// anything is written.
func (w *writer) sizeHint(f Format, peek []byte) (int64, string) {
	size := w.src.Size()
	if f == FormatRaw {
		return max(size, 0), "served length"
	}
	if f == FormatQcow2 {
		if h, err := parseQcow2Header(peek); err == nil {
			return int64(h.size), "qcow2 virtual size"
		}
		return 0, ""
	}
	if h := sizeHintFromHeader(f, peek); h > 0 {
		return h, fmt.Sprintf("declared in the %s frame header", f)
	}
	n := min(tailLen(f), size)
	if n <= 0 {
		return 0, ""
	}
	tail, err := w.src.ReadRange(w.ctx, size-n, n)
	if err != nil {
		w.o.Log.Debug("no image size hint from the source tail", "source", w.srcName, "err", err)
		return 0, ""
	}
	h := sizeHintFromTail(f, tail)
	if f == FormatGzip {
		// ISIZE is the size modulo 4 GiB: the compressed length says how
		// many times it wrapped at least.
		if b := gzipLowerBound(h, size, peek); b > h {
			return b, fmt.Sprintf("gzip trailer size %d plus %d × 4 GiB, the least a %d-byte gzip stream holds", h, (b-h)>>32, size)
		}
		w.o.Log.Debug("gzip declares its size modulo 4 GiB only; a bigger image is found while writing", "isize", h)
	}
	return h, fmt.Sprintf("declared in the %s trailer", f)
}

func (w *writer) digests() (src, img string) {
	src = digestString(algoOr(w.want), w.sh)
	if w.ih == nil {
		if w.format == FormatRaw {
			return src, src
		}
		return src, "" // not computed: no image checksum was asked for
	}
	return src, digestString(algoOr(w.wantImg), w.ih)
}

// stream runs the pipeline to the end: decompress into chunks, hash them,
// dispatch them to the writers, then verify and write what was held back.
func (w *writer) stream(dec io.Reader, br *bufio.Reader) error {
	w.head = make([]byte, HoldBack)
	w.free = make(chan []byte, w.o.Buffers)
	for range w.o.Buffers {
		b, release := allocAligned(w.o.ChunkSize)
		w.bufs = append(w.bufs, release)
		w.free <- b
	}
	decOut := make(chan *chunk, 2)
	hashOut := make(chan *chunk, 2)
	w.stages.Go(func() { w.decodeLoop(dec, br, decOut) })
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

// decodeLoop fills chunks from dec and sends them on, then records how
// the stream ended in w.decErr (nil: dec and the source ended cleanly).
func (w *writer) decodeLoop(dec io.Reader, br *bufio.Reader, out chan<- *chunk) {
	defer close(out)
	defer safego.Recover("decode "+w.srcName, w.fail)
	var total int64
	for {
		var buf []byte
		select {
		case buf = <-w.free:
		case <-w.ctx.Done():
			w.decErr = fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
			return
		}
		n, rerr := readFull(dec, buf)
		if n > 0 {
			c := &chunk{off: total, data: buf[:n], buf: buf, free: w.free, last: rerr == io.EOF}
			c.refs.Store(1)
			total += int64(n)
			select {
			case out <- c:
			case <-w.ctx.Done():
				w.decErr = fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
				return
			}
		} else {
			w.free <- buf
		}
		switch {
		case rerr == nil:
			continue
		case rerr == io.EOF:
			w.decErr = w.drain(br, total)
		case w.ctx.Err() != nil:
			w.decErr = fmt.Errorf("write %s: %w", w.name, context.Cause(w.ctx))
		case w.brd.srcErr() != nil:
			w.decErr = classifyFetch(w.ctx, w.brd.srcErr())
		case errors.Is(rerr, ErrUnsupportedFormat) || errors.Is(rerr, ErrCorruptSource):
			w.decErr = fmt.Errorf("decode %s image %s at image offset %d: %w", w.format, w.srcName, total, rerr)
		default:
			w.decErr = fmt.Errorf("decompress %s stream of %s at image offset %d: %w: %w", w.format, w.srcName, total, ErrCorruptSource, rerr)
		}
		return
	}
}

// hashLoop hashes the image bytes in order and checks bmap ranges, then
// passes each chunk on.
func (w *writer) hashLoop(in <-chan *chunk, out chan<- *chunk) {
	defer close(out)
	defer safego.Recover("hash "+w.srcName, w.fail)
	for c := range in {
		if w.ih != nil {
			w.ih.Write(c.data)
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
	if w.bmap != nil && w.decErr == nil {
		if err := w.bmap.done(); err != nil {
			w.fail(fmt.Errorf("verify %s against bmap %s: %w", w.srcName, w.o.Bmap, err))
		}
	}
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

// drain reads what follows the compressed stream so the source digest
// covers the whole served file, and checks the image is not empty.
func (w *writer) drain(br *bufio.Reader, total int64) error {
	n, err := io.Copy(io.Discard, br)
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

// Zero detection: the image is scanned in blocks of sparseBlock; a zero run
// between data inside one chunk is written as data unless it is at least
// minZeroRun long (an extra write costs more than a short copy); zero runs
// touching chunk edges are always coalesced with their neighbours.
const (
	sparseBlock = 64 << 10
	minZeroRun  = 256 << 10
	maxZeroJob  = 1 << 30
)

// segments splits data at off into data and zero runs, passes data runs to
// sink and coalesces zero runs into w.pz, which it flushes to sink when a
// data run follows.
func (w *writer) segments(off int64, data []byte, c *chunk, sink func(job) error) error {
	n := len(data)
	if w.o.denseWrites && n > 0 {
		return sink(job{off: off, data: data, n: int64(n), c: c})
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
	if w.pz.n > 0 && w.pz.off+w.pz.n == off && w.pz.n+n <= maxZeroJob {
		w.pz.n += n
		return nil
	}
	if err := w.flushZeroTo(sink); err != nil {
		return err
	}
	w.pz = job{off: off, n: n}
	return nil
}

func (w *writer) flushZeroTo(sink func(job) error) error {
	if w.pz.n == 0 {
		return nil
	}
	j := w.pz
	w.pz = job{}
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

// zeros is a shared, page-aligned zero buffer for writing zeros and for
// comparing against them.
var zeros = func() []byte { b, _ := allocAligned(HoldBack); return b }()

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
	if w.zr != nil {
		err = w.zr.ZeroRange(off, n)
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
