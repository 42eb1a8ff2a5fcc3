// Package image writes an OS image onto a disk: it streams the image from a
// URL or a file, decompresses it (format found by magic bytes), hashes the
// served and the decompressed bytes as they pass, and writes it to a block
// device or regular file so that the target is never bootable with an
// unverified image: the first MiB (partition table) and the last MiB of the
// image (backup GPT) are held back and written only after every checksum
// matched; any failure zeroes them again.
package image

import (
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// Errors that callers tell apart with errors.Is.
var (
	// ErrChecksumMismatch: the served file or the decompressed image does
	// not hash to the expected checksum.
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrNoChecksum: neither Checksum nor ImageChecksum was given and
	// AllowUnverified is false.
	ErrNoChecksum = errors.New("no checksum given and unverified images are not allowed")
	// ErrBadChecksum: a checksum option is not "sha256:HEX" or "sha512:HEX".
	ErrBadChecksum = errors.New("malformed checksum")
	// ErrTargetTooSmall: the image does not fit on the target.
	ErrTargetTooSmall = errors.New("target too small for image")
	// ErrUnsupportedFormat: the image is a container Write does not unpack
	// (VMDK, VHDX, or a qcow2 feature the streaming reader lacks).
	ErrUnsupportedFormat = errors.New("unsupported image format")
	// ErrCorruptSource: the compressed stream is corrupt or truncated, or the
	// image is empty.
	ErrCorruptSource = errors.New("corrupt or truncated image stream")
	// ErrSourceChanged: the served file changed while it was downloaded, or
	// the server cannot resume safely.
	ErrSourceChanged = errors.New("source changed during download")
	// ErrFetch: the source could not be read (network, HTTP status, file
	// error) even after the allowed retries.
	ErrFetch = errors.New("fetch image")
	// ErrBadSource: the source option cannot be used (bad URL, scheme, CA).
	ErrBadSource = errors.New("bad image source")
	// ErrBadTarget: the target is neither a block device nor a regular file.
	ErrBadTarget = errors.New("bad target")
	// ErrBadBmap: the bmap file cannot be fetched or parsed, its own
	// checksum does not match, or it does not fit the image.
	ErrBadBmap = errors.New("bad bmap file")
	// ErrWriteTarget: writing or syncing the target failed.
	ErrWriteTarget = errors.New("write target")
)

// Default tuning; see the fields of Options.
const (
	DefaultChunkSize        = 4 << 20
	DefaultBuffers          = 8
	DefaultWriters          = 4
	DefaultConnectTimeout   = 30 * time.Second
	DefaultHeaderTimeout    = 30 * time.Second
	DefaultIdleTimeout      = 60 * time.Second
	DefaultRetries          = 5
	DefaultRetryBackoff     = time.Second
	DefaultProgressInterval = time.Second

	// HoldBack is how much of the image start (partition table, boot code)
	// and of the image end (backup GPT) is written only after verification.
	HoldBack = 1 << 20
)

// Options says what to write where and how to check it.
type Options struct {
	// Source is an http://, https:// or file:// URL, a plain path, or
	// oci://REGISTRY/REPO@sha256:HEX (oci+http:// for a plain-HTTP
	// registry): a single-layer disk image artifact whose layer digest
	// becomes the served-bytes checksum.
	Source string
	// Checksum is "sha256:HEX" or "sha512:HEX" of the file as served
	// (compressed or not). Optional; for an OCI source it must equal the
	// layer digest when given.
	Checksum string
	// ImageChecksum is the same for the decompressed image. Optional.
	ImageChecksum string
	// AllowUnverified lets Write run with neither checksum. Only for an
	// explicit operator choice (booty write-image --insecure-skip-verify).
	AllowUnverified bool

	// Target is a block device or a regular file path. A missing path is
	// created as a regular file; a regular file is truncated before the
	// first write (and then written sparsely).
	Target string
	// TargetSize caps the usable size of the target in bytes; 0 means the
	// size of the block device, or unlimited for a regular file.
	TargetSize int64
	// TargetWriter, when set, is written instead of opening Target (which
	// then only names it in messages). It is written densely and not closed.
	TargetWriter Target

	// CACert is a PEM bundle trusted for https sources; nil means the
	// system pool. Ignored when HTTPClient is set.
	CACert []byte
	// AllowHTTP is the operator's opt-in to plain http:// (and oci+http://)
	// for the source, the bmap and registry tokens (booty.insecure-http=1,
	// write-image --insecure-http). Without it such a URL fails with
	// httpfetch.ErrInsecureHTTP naming it; with it, redirects still never
	// go from https to http.
	AllowHTTP bool
	// HTTPClient replaces the client Write builds (CACert and the connect
	// and header timeouts then do not apply; IdleTimeout still does).
	HTTPClient *http.Client
	// ConnectTimeout bounds TCP connect and TLS handshake (default 30 s).
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for response headers (default 30 s).
	HeaderTimeout time.Duration
	// IdleTimeout is how long a download may stall before the connection
	// is dropped and resumed (default 60 s); it also bounds every read of
	// the bmap, OCI manifest and token fetches.
	IdleTimeout time.Duration
	// Retries bounds consecutive failed attempts (default 5; negative means
	// none). An interrupted download attempt that brought less than 1 MiB
	// or 1% of the file counts as failed; see httpfetch.Backoff.
	Retries int
	// RetryBackoff is the first wait between attempts, doubled each time up
	// to 30 s (default 1 s).
	RetryBackoff time.Duration

	// ChunkSize is the size of one write, a multiple of 4 KiB and at least
	// HoldBack (default 4 MiB).
	ChunkSize int
	// Buffers is how many chunks may be in flight between decompressor and
	// writers, at least 4 (default 8). Chunk memory is Buffers*ChunkSize
	// (page-aligned, outside the Go heap) whatever the image size.
	Buffers int
	// Writers is how many writes may be in flight at once (default 4).
	Writers int
	// NoDirect disables O_DIRECT writes. By default Write opens the target
	// a second time with O_DIRECT and sends aligned writes through it,
	// falling back to buffered writes where the kernel refuses (EINVAL).
	NoDirect bool
	// FreshTarget declares that the target reads as zeros already (freshly
	// wiped or discarded): zero runs of the image are then skipped instead
	// of zeroed. A wrong declaration leaves old data where the image has
	// zeros.
	FreshTarget bool

	// Bmap is the URL or path of a bmaptool bmap file (format 1.x or 2.0)
	// for the image. Write verifies the file's own checksum, refuses a
	// target smaller than its ImageSize, checks each mapped range's
	// checksum as the range passes, requires the image to be zero where
	// the bmap leaves it unmapped (what is on the disk is what the
	// checksums verified), and writes unmapped ranges as zero runs (not at
	// all on a fresh target). Fetched like Source, without resume.
	Bmap string
	// BmapChecksum pins the bmap file itself ("sha256:HEX"): a bmap that
	// differs is refused before anything is written.
	BmapChecksum string

	// OCIUsername and OCIPassword are sent (basic auth) to the token
	// endpoint named by a registry's Bearer challenge for oci:// sources.
	OCIUsername, OCIPassword string
	// OCIToken is a registry bearer token for oci:// sources, used as is;
	// the CLI takes it from BOOTY_OCI_TOKEN.
	OCIToken string

	// Progress is called at most once per ProgressInterval while writing,
	// and once at the end with Done set (also on failure). Calls come from
	// one goroutine at a time. May be nil.
	Progress func(Progress)
	// ProgressInterval defaults to 1 s.
	ProgressInterval time.Duration
	// Log receives what happens; nil discards.
	Log *slog.Logger

	// denseWrites turns zero-run detection off (benchmarks compare).
	denseWrites bool

	// frameChecksums makes the zstd decoder check its frames' checksums;
	// Write sets it when no checksum verifies the image (see
	// zstdDecoderOptions).
	frameChecksums bool

	// blindResume lets an HTTP download resume without a validator because
	// a checksum will catch a changed file.
	blindResume bool
}

// Progress is a snapshot of a running Write.
type Progress struct {
	// BytesDone counts decompressed image bytes written to the target
	// (held-back bytes count once they are written at the end).
	BytesDone int64
	// BytesTotal is the image size when known in advance, else 0.
	BytesTotal int64
	// Rate is the recent write rate in bytes per second.
	Rate float64
	// ETA is the estimated time left, 0 when unknown.
	ETA time.Duration
	// Done is set on the final call.
	Done bool
}

// Result describes a Write; after a failure it holds the counts so far
// and no digests.
type Result struct {
	// ImageSize is the decompressed image size written to the target.
	ImageSize int64
	// SourceBytes is how many bytes of the served file were read.
	SourceBytes int64
	// SourceDigest and ImageDigest are "ALGO:HEX" of the served file and of
	// the image, in the algorithm of the matching checksum (sha256 when
	// none was given).
	SourceDigest, ImageDigest string
	// Format is the detected container format.
	Format Format
	// Resumes counts how often an HTTP download was resumed.
	Resumes int
	// ZeroBytes counts image bytes in zero runs (and bmap-unmapped
	// ranges) that were zeroed or skipped instead of written as data.
	ZeroBytes int64
	// Direct tells whether O_DIRECT writes were in use at the end.
	Direct bool
	// Duration is the wall time of Write.
	Duration time.Duration
}

func (o *Options) setDefaults() {
	if o.ChunkSize <= 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.ChunkSize < HoldBack {
		o.ChunkSize = HoldBack
	}
	o.ChunkSize = (o.ChunkSize + 4095) &^ 4095
	if o.Buffers <= 0 {
		o.Buffers = DefaultBuffers
	}
	if o.Writers <= 0 {
		o.Writers = DefaultWriters
	}
	// Up to two chunks are held back, one is decoded, one written.
	o.Buffers = max(o.Buffers, 4)
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	switch {
	case o.Retries == 0:
		o.Retries = DefaultRetries
	case o.Retries < 0:
		o.Retries = 0
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}
