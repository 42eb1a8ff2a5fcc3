package image

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// imgServer serves one file with http.ServeContent (Range, If-Range) and can
// cut or stall a response after some bytes, ignore Range, or change the
// file after the first request.
type imgServer struct {
	mu          sync.Mutex
	data        []byte
	etag        string
	modTime     time.Time
	cutAfter    []int64 // by request number; 0 = whole answer
	stallAfter  int64   // first request stalls after this many bytes (0 = never)
	ignoreRange bool
	status      int    // answer this status to every request (0 = serve)
	next        []byte // replaces data (with nextETag) after the first request
	nextETag    string

	requests atomic.Int32
	streamed atomic.Int64 // body bytes sent on open-ended requests (not tail hints)
	ranges   []string
}

func (s *imgServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := int(s.requests.Add(1)) - 1
	s.mu.Lock()
	s.ranges = append(s.ranges, r.Header.Get("Range")+" if-range="+r.Header.Get("If-Range"))
	data, etag := s.data, s.etag
	if i > 0 && s.next != nil {
		data, etag = s.next, s.nextETag
	}
	var cut int64
	if i < len(s.cutAfter) {
		cut = s.cutAfter[i]
	}
	s.mu.Unlock()
	if s.status != 0 {
		http.Error(w, "test status", s.status)
		return
	}
	rng := r.Header.Get("Range")
	counted := rng == "" || strings.HasSuffix(rng, "-")
	cw := &cutWriter{ResponseWriter: w, cut: cut, ctx: r.Context()}
	if i == 0 {
		cw.stall = s.stallAfter
	}
	if counted {
		cw.count = &s.streamed
	}
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	if s.ignoreRange {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		cw.Write(data)
		return
	}
	http.ServeContent(cw, r, "", s.modTime, bytes.NewReader(data))
}

// cutWriter passes body bytes through until cut (then drops the connection)
// or stall (then waits until the client goes away).
type cutWriter struct {
	http.ResponseWriter
	cut, stall, n int64
	count         *atomic.Int64
	ctx           context.Context
}

func (c *cutWriter) Write(p []byte) (int, error) {
	limit := int64(-1)
	switch {
	case c.cut > 0:
		limit = c.cut
	case c.stall > 0:
		limit = c.stall
	}
	if limit >= 0 && c.n+int64(len(p)) > limit {
		k := limit - c.n
		m, _ := c.ResponseWriter.Write(p[:k])
		c.n += int64(m)
		if c.count != nil {
			c.count.Add(int64(m))
		}
		c.ResponseWriter.(http.Flusher).Flush()
		if c.cut == 0 {
			<-c.ctx.Done()
		}
		panic(http.ErrAbortHandler)
	}
	m, err := c.ResponseWriter.Write(p)
	c.n += int64(m)
	if c.count != nil {
		c.count.Add(int64(m))
	}
	return m, err
}

func httpOpts(t *testing.T, url string) Options {
	return Options{Source: url, Target: filepath.Join(t.TempDir(), "out"), AllowHTTP: true, RetryBackoff: 10 * time.Millisecond, IdleTimeout: 2 * time.Second, HeaderTimeout: 2 * time.Second, Log: testLog(t)}
}

func TestHTTPResume(t *testing.T) {
	img := gptImage(t, testImageSize, true, 20)
	zst := compress(t, FormatZstd, img)
	gz := compress(t, FormatGzip, img)
	tests := []struct {
		name     string
		data     []byte
		etag     string
		modTime  time.Time
		cuts     []int64
		checksum bool // give only the served checksum
	}{
		{"raw, strong ETag, cut twice", img, `"v1"`, time.Time{}, []int64{3*mib + 123, 4 * mib}, true},
		{"zstd, Last-Modified only", zst, "", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), []int64{int64(len(zst)) / 3}, false},
		{"raw, weak ETag and Last-Modified", img, `W/"weak"`, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), []int64{5 * mib}, true},
		{"raw, no validator, checksum guards blind resume", img, "", time.Time{}, []int64{6 * mib}, true},
		{"gzip, size hint from a tail range request", gz, `"gz"`, time.Time{}, []int64{int64(len(gz)) / 2}, false},
		{"cut after the headers", img, `"v1"`, time.Time{}, []int64{1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &imgServer{data: tt.data, etag: tt.etag, modTime: tt.modTime, cutAfter: tt.cuts}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			o := httpOpts(t, ts.URL+"/image?token=secret")
			if tt.checksum {
				o.Checksum = sha(tt.data)
			} else {
				o.ImageChecksum = sha(img)
			}
			res, err := Write(context.Background(), o)
			if err != nil {
				t.Fatalf("Write: %v (requests %v)", err, srv.ranges)
			}
			if !bytes.Equal(readFile(t, o.Target), img) {
				t.Fatal("target differs from image")
			}
			refetched := srv.streamed.Load() - int64(len(tt.data))
			t.Logf("requests %q, resumes %d, bytes fetched twice %d", srv.ranges, res.Resumes, refetched)
			if res.Resumes != len(tt.cuts) {
				t.Errorf("Resumes = %d, want %d", res.Resumes, len(tt.cuts))
			}
			if refetched != 0 {
				t.Errorf("%d bytes fetched twice, want 0", refetched)
			}
			if res.SourceBytes != int64(len(tt.data)) {
				t.Errorf("SourceBytes = %d, want %d", res.SourceBytes, len(tt.data))
			}
		})
	}
}

func TestHTTPIdleTimeoutResumes(t *testing.T) {
	img := gptImage(t, testImageSize, true, 21)
	srv := &imgServer{data: img, etag: `"v1"`, stallAfter: 2 * mib}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	o := httpOpts(t, ts.URL)
	o.Checksum = sha(img)
	o.IdleTimeout = 200 * time.Millisecond
	start := time.Now()
	res, err := Write(context.Background(), o)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if res.Resumes != 1 || !bytes.Equal(readFile(t, o.Target), img) {
		t.Errorf("resumes %d, target equal %v", res.Resumes, bytes.Equal(readFile(t, o.Target), img))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stall took %s to detect", d)
	}
}

func TestHTTPSourceChanged(t *testing.T) {
	img := gptImage(t, testImageSize, true, 22)
	other := gptImage(t, testImageSize, true, 23)
	tests := []struct {
		name string
		srv  *imgServer
		opts func(*Options)
	}{
		{"ETag changed", &imgServer{data: img, etag: `"v1"`, next: other, nextETag: `"v2"`, cutAfter: []int64{9 * mib}}, nil},
		{"Last-Modified changed", &imgServer{data: img, modTime: time.Unix(1e9, 0), next: other, cutAfter: []int64{9 * mib}}, func(o *Options) {}},
		{"server ignores Range", &imgServer{data: img, etag: `"v1"`, ignoreRange: true, cutAfter: []int64{9 * mib}}, nil},
		{"no validator and no checksum", &imgServer{data: img, cutAfter: []int64{9 * mib}}, func(o *Options) { o.Checksum, o.AllowUnverified = "", true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "Last-Modified changed" {
				// ServeContent compares If-Range dates with the current
				// modification time: make it differ after the first request.
				tt.srv.next, tt.srv.nextETag = other, ""
				srv := tt.srv
				ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if srv.requests.Load() > 0 {
						srv.mu.Lock()
						srv.modTime = time.Unix(2e9, 0)
						srv.mu.Unlock()
					}
					srv.ServeHTTP(w, r)
				}))
				defer ts.Close()
				checkChanged(t, ts.URL, img, tt.opts)
				return
			}
			ts := httptest.NewServer(tt.srv)
			defer ts.Close()
			checkChanged(t, ts.URL, img, tt.opts)
			t.Logf("requests %q", tt.srv.ranges)
		})
	}
}

func checkChanged(t *testing.T, url string, img []byte, edit func(*Options)) {
	t.Helper()
	old := gptImage(t, 12*mib, false, 97)
	mem := &memTarget{buf: bytes.Clone(old)}
	o := httpOpts(t, url)
	o.Checksum = sha(img)
	o.Target, o.TargetWriter = "mem", mem
	if edit != nil {
		edit(&o)
	}
	_, err := Write(context.Background(), o)
	if !errors.Is(err, ErrSourceChanged) {
		t.Fatalf("Write = %v, want ErrSourceChanged", err)
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "source changed during download") {
		t.Errorf("error does not say the source changed: %v", err)
	}
	assertInvalidated(t, mem.buf, int64(len(img)))
}

func TestHTTPErrors(t *testing.T) {
	img := gptImage(t, testImageSize, false, 24)
	tests := []struct {
		name         string
		status       int
		wantRequests int32
	}{
		{"404 is not retried", http.StatusNotFound, 1},
		{"503 is retried a bounded number of times", http.StatusServiceUnavailable, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &imgServer{data: img, status: tt.status}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			o := httpOpts(t, ts.URL)
			o.Checksum = sha(img)
			o.Retries = 2
			_, err := Write(context.Background(), o)
			if !errors.Is(err, ErrFetch) {
				t.Fatalf("Write = %v, want ErrFetch", err)
			}
			if got := srv.requests.Load(); got != tt.wantRequests {
				t.Errorf("%d requests, want %d", got, tt.wantRequests)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error leaks the query: %v", err)
			}
		})
	}
}

func TestHTTPSCACert(t *testing.T) {
	img := gptImage(t, testImageSize, false, 25)
	srv := &imgServer{data: img, etag: `"v1"`}
	ts := httptest.NewTLSServer(srv)
	defer ts.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})

	o := httpOpts(t, ts.URL)
	o.Checksum, o.CACert = sha(img), ca
	if _, err := Write(context.Background(), o); err != nil {
		t.Fatalf("Write with the server's CA: %v", err)
	}
	if !bytes.Equal(readFile(t, o.Target), img) {
		t.Fatal("target differs")
	}

	o = httpOpts(t, ts.URL)
	o.Checksum = sha(img)
	start := time.Now()
	if _, err := Write(context.Background(), o); !errors.Is(err, ErrFetch) {
		t.Fatalf("Write without the CA = %v, want ErrFetch", err)
	} else {
		t.Logf("error: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("certificate errors were retried")
	}
	o.CACert = []byte("not pem")
	if _, err := Write(context.Background(), o); !errors.Is(err, ErrBadSource) {
		t.Errorf("Write with a bad CA = %v, want ErrBadSource", err)
	}
}

func TestHTTPCancel(t *testing.T) {
	img := gptImage(t, testImageSize, true, 26)
	srv := &imgServer{data: img, etag: `"v1"`, stallAfter: 9 * mib}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	mem := newMemTarget(16*mib, 0)
	o := httpOpts(t, ts.URL)
	o.Checksum, o.Target, o.TargetWriter = sha(img), "mem", mem
	o.IdleTimeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Write(ctx, o)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %s", d)
	}
	assertInvalidated(t, mem.buf, int64(len(img)))
	if isZero(mem.buf[2*mib : 3*mib]) {
		t.Error("nothing streamed before the stall")
	}
}
