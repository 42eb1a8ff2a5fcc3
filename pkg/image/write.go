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
// (O_DIRECT where the target allows it). For a zstd image that a checksum
// verifies, long zero runs bypass the decoder (zstdZeroSkip) and the
// frames' checksums are checked over the image in the hash stage instead
// of by the decoder. All-zero runs are not written as
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
	o.frameChecksums = !o.blindResume

	if o.TargetWriter != nil {
		w.t = o.TargetWriter
	} else {
		ft, err := openTarget(o.Target, o.TargetSize, o.NoDirect)
		if err != nil {
			return Result{}, err
		}
		defer ft.Close()
		w.t = ft
		w.file = ft
		if ft.regular {
			w.sparse = ft
		}
	}
	w.zeroer, _ = w.t.(Zeroer)
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
// Its buffer goes back to the pool when the last holder calls put; an
// all-zero chunk has no buffer (buf nil) and reads from writer.zeroChunk.
type chunk struct {
	off   int64
	data  []byte
	buf   []byte
	refs  atomic.Int32
	free  chan []byte
	last  bool        // the decoder ended right after this chunk
	marks []frameMark // zstd frames that end in this chunk or at its start
}

// frameMark is the end of a zstd frame in the image and the frame's
// checksum (see zstdZeroSkip).
type frameMark struct {
	end    int64
	sum    uint32
	hasSum bool
}

func (c *chunk) put() {
	if c.refs.Add(-1) == 0 && c.buf != nil {
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
	file          *fileTarget                        // set when Write opened the target
	zeroer        Zeroer                             // t's fast zeroing, or nil
	sparse        interface{ Truncate(int64) error } // set when t is a regular file we truncate
	limit         int64                              // usable target size, or Unlimited
	fresh         bool                               // zero ranges already read as zeros
	bmap          *bmap

	ctx    context.Context
	cancel context.CancelCauseFunc
	errMu  sync.Mutex
	err    error // first failure of any stage

	sourceHash hash.Hash // the served file
	imageHash  hash.Hash // the decompressed image; nil when not computed or equal to sourceHash
	fetch      *fetchChain
	blocks     *blockReader
	format     Format

	head        []byte // the first HoldBack bytes of the image
	headN       int
	total       int64 // decompressed bytes dispatched
	held        []*chunk
	started     bool // the target has been changed
	tailWritten bool
	pendingZero job // zero range not yet sent, coalesced
	decErr      error
	decTotal    int64
	chunk       *chunker      // the decoder's chunker, set before the decoder runs
	zskip       *zstdZeroSkip // between source and zstd decoder, or nil
	frameSum    *xxh64        // the zstd frame checksum, computed by hashLoop when zskip is set
	tailMarks   []frameMark   // frame ends after the last chunk sent

	free      chan []byte
	zeroChunk []byte   // ChunkSize bytes of zeros, never written: the data of all-zero chunks
	bufs      []func() // releases of the allocated chunk buffers
	jobs      chan job
	written   atomic.Int64
	stages    sync.WaitGroup
	writers   sync.WaitGroup
	closeDec  func()       // releases the decoder once the stages have ended
	zeroSkip  atomic.Int64 // bytes of zero runs not written as data
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

	w.sourceHash = newHash(algoOr(w.want))
	w.fetch = startFetch(w.ctx, w.src, w.sourceHash, &w.stages, w.fail)
	w.blocks = &blockReader{fc: w.fetch}
	// 64 KiB: it serves the format peek and the byte reads of the
	// decoders; larger reads go past it to the blocks (a MiB made here
	// cost a TCG guest 20 ms before its first image byte).
	br := bufio.NewReaderSize(w.blocks, 64<<10)
	res := func() Result {
		return Result{ImageSize: w.total, SourceBytes: w.fetch.n.Load(), Format: w.format, Resumes: w.src.Resumes()}
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
		w.imageHash = newHash(algoOr(w.wantImg))
	}
	hint, from := w.sizeHint(format, peek)
	if w.bmap != nil && w.bmap.ImageSize > hint {
		hint, from = w.bmap.ImageSize, "declared in the bmap file"
	}
	if w.limit >= 0 && hint > w.limit {
		return res(), fmt.Errorf("write %s to %s: image needs at least %d bytes (%s), target has %d: %w", w.srcName, w.name, hint, from, w.limit, ErrTargetTooSmall)
	}
	in := io.Reader(br)
	if format == FormatZstd {
		// zstd reads whole blocks into its own buffers: after the bytes
		// the peek buffered, it reads the fetched blocks directly instead
		// of through a second copy into br.
		buffered, _ := br.Peek(br.Buffered())
		in = io.MultiReader(bytes.NewReader(buffered), w.blocks)
		if !w.o.frameChecksums {
			// Verified: long zero runs may bypass the decoder.
			w.zskip = newZstdZeroSkip(in, w.skipZeros, w.frameEnd)
			// The frames' checksums, unless every byte written is
			// verified anyway: by the image checksum, or by a bmap
			// that has a checksum for every mapped range (the rest
			// must be zeros).
			if w.imageHash == nil && (w.bmap == nil || !w.bmap.summed()) {
				w.frameSum = newXXH64()
			}
			in = w.zskip
		}
	}
	dec, closeDec, err := openDecoder(format, in, w.o)
	if err != nil {
		if e := w.blocks.srcErr(); e != nil {
			return res(), classifyFetch(w.ctx, e)
		}
		return res(), fmt.Errorf("write %s: %w", w.srcName, err)
	}
	// The decoder is closed only after every stage has ended (the first
	// defer waits for them): closing it under the decode goroutine made zstd
	// dereference its freed state, a kernel panic for PID 1.
	w.closeDec = closeDec
	direct := w.file != nil && w.file.Direct()
	log.Info("writing image", "source", w.srcName, "target", w.name, "format", format, "size_hint", hint,
		"target_size", w.limit, "direct", direct, "fresh_target", w.fresh, "bmap", w.bmap != nil)

	rep := startReporter(w.o.Progress, w.o.ProgressInterval, hint, &w.written, w.fail)
	err = w.stream(dec, in)
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
	r.ZeroBytes, r.Direct = w.zeroSkip.Load(), w.file != nil && w.file.Direct()
	log.Info("image written", "target", w.name, "size", w.total, "source_bytes", r.SourceBytes, "image_digest", r.ImageDigest,
		"resumes", r.Resumes, "zero_bytes_skipped", w.zeroSkip.Load(), "direct", w.file != nil && w.file.Direct())
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
	src = digestString(algoOr(w.want), w.sourceHash)
	if w.imageHash == nil {
		if w.format == FormatRaw {
			return src, src
		}
		return src, "" // not computed: no image checksum was asked for
	}
	return src, digestString(algoOr(w.wantImg), w.imageHash)
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

// zeros is a shared, page-aligned zero buffer for writing zeros and for
// comparing against them.
var zeros = func() []byte { b, _ := allocAligned(HoldBack); return b }()
