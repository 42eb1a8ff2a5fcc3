package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/redact"
)

// source is the served file, read once front to back. Size is the served
// length or -1 when unknown. ReadRange fetches a slice of it out of band (for
// size hints in the tail) and may fail; Write then goes on without a hint.
type source interface {
	io.ReadCloser
	Size() int64
	ReadRange(ctx context.Context, off, n int64) ([]byte, error)
	Resumes() int
	// Digest is the digest the source itself names for its bytes (an OCI
	// blob), or the zero checksum.
	Digest() checksum
}

// openSource opens opts.Source: http(s) URLs through an HTTP client with
// timeouts and resume, file:// URLs and plain paths as files. Plain http
// (and oci+http) fails with httpfetch.ErrInsecureHTTP unless o.AllowHTTP.
func openSource(ctx context.Context, o *Options) (source, error) {
	u, err := url.Parse(o.Source)
	if err == nil {
		// The run's policy first (plain http needs the opt-in), then the
		// grammar config validation checked already.
		switch strings.ToLower(u.Scheme) {
		case "http", "https", "oci+http":
			if err := httpfetch.CheckURL(o.Source, o.AllowHTTP); err != nil {
				return nil, fmt.Errorf("open source: %w: %w", ErrBadSource, err)
			}
		}
		if len(u.Scheme) > 1 { // a one-letter scheme ("C:") is a path
			if err := CheckSource(o.Source); err != nil {
				return nil, fmt.Errorf("open source: %w: %w", ErrBadSource, err)
			}
		}
		switch strings.ToLower(u.Scheme) {
		case "http", "https":
			return openHTTP(ctx, o, u)
		case "oci", "oci+http":
			return openOCI(ctx, o, u)
		case "file":
			return openFile(u.Path)
		case "":
		default:
			if len(u.Scheme) > 1 { // "C:" style paths do not exist here; a one-letter scheme is a path
				return nil, fmt.Errorf("open source %s: scheme %q not supported (%s): %w", redactURL(u), u.Scheme, strings.Join(SourceSchemes, ", "), ErrBadSource)
			}
		}
	}
	return openFile(o.Source)
}

// redactURL returns u without user info and query, which may carry
// tokens, through the one URL redaction.
func redactURL(u *url.URL) string { return redact.URL(u.String()) }

// fileSource is a local file or block device.
type fileSource struct {
	*os.File
	size int64
}

func openFile(path string) (*fileSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open source %s: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("size source %s: %w", path, err)
	}
	return &fileSource{File: f, size: size}, nil
}

func (f *fileSource) Size() int64      { return f.size }
func (f *fileSource) Resumes() int     { return 0 }
func (f *fileSource) Digest() checksum { return checksum{} }

func (f *fileSource) ReadRange(_ context.Context, off, n int64) ([]byte, error) {
	b := make([]byte, n)
	m, err := f.ReadAt(b, off)
	if err != nil && !(errors.Is(err, io.EOF) && int64(m) == n) {
		return nil, fmt.Errorf("read %s at offset %d: %w", f.Name(), off, err)
	}
	return b, nil
}

// httpClient returns o.HTTPClient or a client that trusts o.CACert (or the
// system pool), with connect, TLS and header timeouts, and no transparent
// decompression (the source digest is over the bytes as served); either
// way its redirects are policed by httpfetch.CheckRedirect (bounded, never
// https to http, plain http only with o.AllowHTTP, no credentials to
// another host).
func httpClient(o *Options) (*http.Client, error) {
	if o.HTTPClient != nil {
		return httpfetch.Secure(o.HTTPClient, o.AllowHTTP), nil
	}
	c, err := httpfetch.NewClient(httpfetch.ClientOptions{CACert: o.CACert, AllowHTTP: o.AllowHTTP,
		ConnectTimeout: o.ConnectTimeout, HeaderTimeout: o.HeaderTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrBadSource)
	}
	return c, nil
}

// errIdle is the cause set on an attempt's context when no byte arrived for
// Options.IdleTimeout (or no headers for Options.HeaderTimeout).
var errIdle = httpfetch.ErrIdle

// retries is the retry bound of o's fetches: Retries failures after the
// first attempt, waits from RetryBackoff up to 30 s; for a resumable
// download an attempt that moved at least 1 MiB and 1% of the file is
// progress (see httpfetch.Backoff), one that moved less is a failure.
func (o *Options) retries(resumable bool) httpfetch.Backoff {
	b := httpfetch.Backoff{Attempts: o.Retries + 1, Initial: o.RetryBackoff, Max: 30 * time.Second}
	if resumable {
		b.MinProgress, b.MinProgressFraction = minProgress, 0.01
	}
	return b
}

// minProgress is the least an interrupted download attempt must bring to
// count as progress rather than as a failure.
const minProgress = 1 << 20

// httpSource streams one URL. When the connection breaks it reconnects with
// "Range: bytes=OFF-" guarded by "If-Range" (strong ETag, else
// Last-Modified), with bounded retries and exponential backoff. A server
// that answers the resume with the whole file (Range ignored or validator
// changed) or with a different length fails the read with ErrSourceChanged;
// nothing already read is ever mixed with bytes of another version.
type httpSource struct {
	ctx    context.Context
	o      *Options
	client *http.Client
	u      *url.URL
	name   string // redacted URL for logs and errors
	log    *slog.Logger

	body    io.ReadCloser
	cancel  context.CancelCauseFunc
	attempt context.Context
	timer   *time.Timer

	off      int64
	size     int64
	etag     string // strong ETag of the first answer, "" if none or weak
	rawETag  string // ETag of the first answer as sent
	lastMod  string
	answered bool // the first request got its 200
	eof      bool // the whole file was read
	retry    *httpfetch.Retrier
	startOff int64 // s.off when the current attempt started
	resumes  int
	digest   checksum    // set for OCI blobs
	header   http.Header // extra request headers (registry auth)
}

func openHTTP(ctx context.Context, o *Options, u *url.URL) (*httpSource, error) {
	c, err := httpClient(o)
	if err != nil {
		return nil, err
	}
	return startHTTP(&httpSource{ctx: ctx, o: o, client: c, u: u, name: redactURL(u), log: o.Log, size: -1})
}

func (s *httpSource) retrier() *httpfetch.Retrier {
	if s.retry == nil {
		s.retry = &httpfetch.Retrier{Backoff: s.o.retries(true), Log: s.log.With("url", s.name), Op: "download image"}
	}
	return s.retry
}

// startHTTP makes the first request of s, retrying as Read does.
func startHTTP(s *httpSource) (*httpSource, error) {
	for {
		err := s.connect()
		if err == nil {
			return s, nil
		}
		if err := s.backoff(err); err != nil {
			return nil, err
		}
	}
}

// retryable tells whether err is worth another attempt: see
// httpfetch.Retryable; a changed source or a bad source option is not.
func retryable(err error) bool {
	return !errors.Is(err, ErrSourceChanged) && !errors.Is(err, ErrBadSource) && httpfetch.Retryable(err)
}

// statusError is the error of a non-2xx answer to a GET of name.
func statusError(name string, code int) error {
	return &httpfetch.StatusError{Method: http.MethodGet, URL: name, Code: code}
}

// backoff ends the current attempt, which failed with err: an error that is
// not retryable ends the download; otherwise the Retrier counts it (an
// attempt that moved less than the minimum progress is a failure), gives up
// after Options.Retries failures in a row or the overall bound, and waits
// with growing, jittered delays until the context ends.
func (s *httpSource) backoff(err error) error {
	if !retryable(err) {
		return err
	}
	r := s.retrier()
	if err := r.Retry(s.ctx, s.off-s.startOff, s.size, err); err != nil {
		if s.ctx.Err() != nil {
			return fmt.Errorf("fetch %s: %w", s.name, context.Cause(s.ctx))
		}
		return fmt.Errorf("fetch %s at offset %d: %w", s.name, s.off, err)
	}
	return nil
}

// connect starts one attempt at s.off: a plain GET at offset 0, a guarded
// range request after that.
func (s *httpSource) connect() error {
	s.startOff = s.off
	actx, cancel := context.WithCancelCause(s.ctx)
	timer := time.AfterFunc(s.o.HeaderTimeout, func() { cancel(errIdle) })
	req, err := http.NewRequestWithContext(actx, http.MethodGet, s.u.String(), nil)
	if err != nil {
		timer.Stop()
		cancel(nil)
		return fmt.Errorf("fetch %s: %w: %w", s.name, ErrBadSource, err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	for k, v := range s.header {
		req.Header[k] = v
	}
	resuming := s.off > 0
	if resuming {
		validator := s.etag
		if validator == "" {
			validator = s.lastMod
		}
		if validator == "" && !s.o.blindResume {
			timer.Stop()
			cancel(nil)
			return fmt.Errorf("resume %s at offset %d: server sent neither a strong ETag nor Last-Modified, and no checksum guards a blind resume: %w", s.name, s.off, ErrSourceChanged)
		}
		req.Header.Set("Range", "bytes="+strconv.FormatInt(s.off, 10)+"-")
		if validator != "" {
			req.Header.Set("If-Range", validator)
		}
	}
	resp, err := httpfetch.Send(s.client, req)
	if err != nil {
		timer.Stop()
		cause := context.Cause(actx)
		cancel(nil)
		if errors.Is(cause, errIdle) {
			return fmt.Errorf("fetch %s: no response headers within %s: %w", s.name, s.o.HeaderTimeout, errIdle)
		}
		return fmt.Errorf("fetch %s: %w", s.name, err)
	}
	fail := func(err error) error {
		timer.Stop()
		resp.Body.Close()
		cancel(nil)
		return err
	}
	if !resuming {
		if resp.StatusCode != http.StatusOK {
			return fail(statusError(s.name, resp.StatusCode))
		}
		etag := resp.Header.Get("ETag")
		if s.answered {
			// A retry of the first request: it must be the same file, or
			// size hints and progress computed from it would be wrong.
			if etag != s.rawETag || resp.ContentLength != s.size {
				return fail(fmt.Errorf("fetch %s: %w (ETag %q → %q, length %d → %d)", s.name, ErrSourceChanged, s.rawETag, etag, s.size, resp.ContentLength))
			}
		}
		s.answered = true
		s.rawETag = etag
		s.size = resp.ContentLength
		if etag != "" && !strings.HasPrefix(etag, "W/") {
			s.etag = etag
		}
		s.lastMod = resp.Header.Get("Last-Modified")
	} else {
		switch resp.StatusCode {
		case http.StatusPartialContent:
		case http.StatusOK:
			if etag := resp.Header.Get("ETag"); s.etag != "" && etag != s.etag {
				return fail(fmt.Errorf("resume %s at offset %d: %w (ETag %s → %s)", s.name, s.off, ErrSourceChanged, s.etag, etag))
			}
			if lm := resp.Header.Get("Last-Modified"); s.etag == "" && s.lastMod != "" && lm != s.lastMod {
				return fail(fmt.Errorf("resume %s at offset %d: %w (Last-Modified %s → %s)", s.name, s.off, ErrSourceChanged, s.lastMod, lm))
			}
			return fail(fmt.Errorf("resume %s at offset %d: server ignored the range request and sent the whole file: %w", s.name, s.off, ErrSourceChanged))
		default:
			return fail(statusError(s.name, resp.StatusCode))
		}
		start, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || start != s.off || (s.size >= 0 && total >= 0 && total != s.size) {
			return fail(fmt.Errorf("resume %s at offset %d: unexpected Content-Range %q (length %d): %w", s.name, s.off, resp.Header.Get("Content-Range"), s.size, ErrSourceChanged))
		}
		if etag := resp.Header.Get("ETag"); s.etag != "" && etag != "" && etag != s.etag {
			return fail(fmt.Errorf("resume %s at offset %d: %w (ETag %s → %s)", s.name, s.off, ErrSourceChanged, s.etag, etag))
		}
		s.resumes++
		s.log.Info("image download resumed", "url", s.name, "offset", s.off)
	}
	timer.Stop()
	s.body, s.cancel, s.attempt, s.timer = resp.Body, cancel, actx, timer
	return nil
}

// parseContentRange parses "bytes START-END/TOTAL"; TOTAL may be "*" (-1).
func parseContentRange(v string) (start, total int64, err error) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, 0, fmt.Errorf("content-range %q: %w", v, ErrBadSource)
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, fmt.Errorf("content-range %q: %w", v, ErrBadSource)
	}
	first, _, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, fmt.Errorf("content-range %q: %w", v, ErrBadSource)
	}
	if start, err = strconv.ParseInt(first, 10, 64); err != nil {
		return 0, 0, err
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, err
		}
	}
	return start, total, nil
}

func (s *httpSource) closeBody() {
	if s.body == nil {
		return
	}
	s.timer.Stop()
	s.body.Close()
	s.cancel(nil)
	s.body = nil
}

// Read reads the next bytes of the file, reconnecting as described on
// httpSource when the connection breaks or stalls.
func (s *httpSource) Read(p []byte) (int, error) {
	if s.eof {
		return 0, io.EOF
	}
	for {
		if s.body == nil {
			if err := s.connect(); err != nil {
				if err := s.backoff(err); err != nil {
					return 0, err
				}
				continue
			}
		}
		// The idle timer runs only while a read waits, so a slow target
		// that keeps the pipeline from reading does not drop the download.
		s.timer.Reset(s.o.IdleTimeout)
		n, err := s.body.Read(p)
		s.timer.Stop()
		s.off += int64(n)
		if err == nil {
			return n, nil
		}
		if errors.Is(err, io.EOF) && (s.size < 0 || s.off == s.size) {
			s.eof = true
			s.closeBody()
			return n, io.EOF
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if errors.Is(context.Cause(s.attempt), errIdle) {
			err = fmt.Errorf("no data for %s: %w", s.o.IdleTimeout, errIdle)
		}
		s.closeBody()
		if s.ctx.Err() != nil {
			return n, fmt.Errorf("fetch %s: %w", s.name, context.Cause(s.ctx))
		}
		err = fmt.Errorf("read %s at offset %d: %w", s.name, s.off, err)
		// Every broken attempt goes through the Retrier, also one that
		// brought bytes: a server that sends a byte per connection ends.
		if err := s.backoff(err); err != nil {
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (s *httpSource) Close() error {
	s.closeBody()
	return nil
}

func (s *httpSource) Size() int64      { return s.size }
func (s *httpSource) Resumes() int     { return s.resumes }
func (s *httpSource) Digest() checksum { return s.digest }

// ReadRange fetches [off, off+n) with a separate range request guarded by
// If-Range; it fails unless the server answers 206 with exactly that range.
func (s *httpSource) ReadRange(ctx context.Context, off, n int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.HeaderTimeout+s.o.IdleTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	for k, v := range s.header {
		req.Header[k] = v
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	if v := s.etag; v != "" {
		req.Header.Set("If-Range", v)
	} else if s.lastMod != "" {
		req.Header.Set("If-Range", s.lastMod)
	}
	resp, err := httpfetch.Send(s.client, req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s range %d+%d: %w", s.name, off, n, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return nil, fmt.Errorf("fetch %s range %d+%d: server answered %d", s.name, off, n, resp.StatusCode)
	}
	if start, _, err := parseContentRange(resp.Header.Get("Content-Range")); err != nil || start != off {
		return nil, fmt.Errorf("fetch %s range %d+%d: unexpected Content-Range %q", s.name, off, n, resp.Header.Get("Content-Range"))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, n))
	if err != nil {
		return nil, fmt.Errorf("fetch %s range %d+%d: %w", s.name, off, n, err)
	}
	if int64(len(b)) != n {
		return nil, fmt.Errorf("fetch %s range %d+%d: got %d bytes", s.name, off, n, len(b))
	}
	return b, nil
}
