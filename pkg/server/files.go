package server

import (
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"strconv"
	"time"
)

// Defaults of the /files/ options (Options fields left zero).
const (
	DefaultMaxFileConns     = 256
	DefaultFileRetryAfter   = 5 * time.Second
	DefaultFileWriteTimeout = 30 * time.Second
	DefaultFileMinRate      = 1 << 20 // bytes per second
	DefaultIdleTimeout      = 2 * time.Minute
)

// fileWriteStep is the most a /files/ body sends under one write deadline:
// each step gets FileWriteTimeout plus its own size at FileMinRate.
const fileWriteStep = 4 << 20

// fileDefaults fills the zero /files/ options of opts.
func (opts *Options) fileDefaults() {
	if opts.MaxFileConns == 0 {
		opts.MaxFileConns = DefaultMaxFileConns
	}
	if opts.FileRetryAfter <= 0 {
		opts.FileRetryAfter = DefaultFileRetryAfter
	}
	if opts.FileWriteTimeout <= 0 {
		opts.FileWriteTimeout = DefaultFileWriteTimeout
	}
	if opts.FileMinRate <= 0 {
		opts.FileMinRate = DefaultFileMinRate
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
}

// newFileSlots returns the semaphore of /files/ answers in progress, nil
// when they are not limited (MaxFileConns negative).
func newFileSlots(max int) chan struct{} {
	if max < 0 {
		return nil
	}
	return make(chan struct{}, max)
}

// handleFile serves a regular file under FilesDir with Range, If-Range and
// conditional GET support. The path is opened through os.Root, so neither
// ".." nor a symlink can escape FilesDir; directories are not listed. The
// ETag is derived from size and modification time.
//
// At most MaxFileConns answers are in progress at once; above that the
// request gets 503 with Retry-After, which agents retry with backoff.
// The body goes out with sendfile on plain HTTP (ServeContent copies an
// io.LimitedReader over the *os.File into the ResponseWriter, whose
// ReadFrom reaches net.TCPConn's), under a write deadline that grows with
// the bytes being sent (see fileWriter), so a stalled client is dropped
// and frees its slot.
func (s *Server) handleFile(w http.ResponseWriter, r *http.Request) {
	fw := &fileWriter{
		ResponseWriter: w,
		rc:             http.NewResponseController(w),
		timeout:        s.opts.FileWriteTimeout,
		rate:           s.opts.FileMinRate,
	}
	fw.allow(0) // the header, and the whole of 503, 404, HEAD, 304 and 416 answers
	if s.fileSlots != nil {
		select {
		case s.fileSlots <- struct{}{}:
			defer func() { <-s.fileSlots }()
		default:
			secs := int(math.Ceil(s.opts.FileRetryAfter.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			s.log.Warn("refuse file: too many downloads in progress", "path", r.PathValue("path"),
				"limit", s.opts.MaxFileConns, "remote", r.RemoteAddr)
			writeError(w, http.StatusServiceUnavailable, "%d file downloads in progress, the most this server allows; retry after %d s", s.opts.MaxFileConns, secs)
			return
		}
	}
	p := r.PathValue("path")
	if s.opts.FilesDir == "" || !fs.ValidPath(p) || p == "." {
		writeError(w, http.StatusNotFound, "no file %q", p)
		return
	}
	root, err := os.OpenRoot(s.opts.FilesDir)
	if err != nil {
		s.log.Error("open files directory", "dir", s.opts.FilesDir, "err", err)
		writeError(w, http.StatusInternalServerError, "open files directory: %v", err)
		return
	}
	defer root.Close()
	f, err := root.Open(p)
	if err != nil {
		s.log.Debug("refuse file", "path", p, "err", err)
		writeError(w, http.StatusNotFound, "no file %q", p)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		writeError(w, http.StatusNotFound, "no file %q", p)
		return
	}
	w.Header().Set("ETag", fmt.Sprintf(`"%x-%x"`, st.Size(), st.ModTime().UnixNano()))
	http.ServeContent(fw, r, st.Name(), st.ModTime(), f)
}

// fileWriter puts a write deadline on every piece of a /files/ body: a
// piece of n bytes (at most fileWriteStep) must be sent within timeout +
// n/rate. The deadline thus scales with the bytes left to send, step by
// step, and a client that stops reading is dropped within one step's
// allowance instead of holding its connection and slot forever.
//
// ReadFrom keeps the body on the sendfile path: it passes each step to the
// underlying ReadFrom as an io.LimitedReader directly over the source
// (*os.File), the one shape net.TCPConn.ReadFrom turns into sendfile.
type fileWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	rate    int64 // bytes per second
}

// allow sets the write deadline for sending n more bytes from now.
// Writers without deadlines (test recorders) are left as they are.
func (f *fileWriter) allow(n int64) {
	d := f.timeout + time.Duration(float64(n)/float64(f.rate)*float64(time.Second))
	_ = f.rc.SetWriteDeadline(time.Now().Add(d))
}

// Write sends p in steps, each under its own deadline.
func (f *fileWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n := min(len(p)-done, fileWriteStep)
		f.allow(int64(n))
		m, err := f.ResponseWriter.Write(p[done : done+n])
		done += m
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// ReadFrom sends src in steps of at most fileWriteStep, each under its own
// deadline, through the underlying ReadFrom (sendfile for a file on plain
// HTTP). A src of unknown length is sent until it ends.
func (f *fileWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := f.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.CopyBuffer(struct{ io.Writer }{f}, src, make([]byte, 32<<10))
	}
	// Flatten ServeContent's io.LimitReader(file): sendfile looks through
	// one LimitedReader only.
	inner, left := src, int64(-1)
	lr, limited := src.(*io.LimitedReader)
	if limited {
		inner, left = lr.R, lr.N
	}
	var total int64
	for left != 0 {
		step := int64(fileWriteStep)
		if left > 0 {
			step = min(step, left)
		}
		f.allow(step)
		n, err := rf.ReadFrom(&io.LimitedReader{R: inner, N: step})
		total += n
		if limited {
			lr.N -= n
			left = lr.N
		}
		if err != nil || n < step {
			return total, err
		}
	}
	return total, nil
}

// Unwrap lets http.ResponseController reach the connection.
func (f *fileWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
