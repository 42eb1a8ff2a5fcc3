package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bigFile writes size bytes of a repeating, position-dependent pattern to
// name under dir and returns its sha256.
func bigFile(t *testing.T, dir, name string, size int) [32]byte {
	t.Helper()
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i * 7)
	}
	var data bytes.Buffer
	for i := 0; data.Len() < size; i++ {
		block[0] = byte(i) // every MiB differs
		data.Write(block[:min(len(block), size-data.Len())])
	}
	if err := os.WriteFile(filepath.Join(dir, name), data.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data.Bytes())
}

// requestLogged waits (bounded) until the server logged the end of a
// request for path and returns that log line.
func (e *testEnv) requestLogged(t *testing.T, path string, bound time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, "msg=request") && strings.Contains(l, "path="+path+" ") {
				return l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no request log for %s within %s; logs:\n%s", path, bound, e.logs.String())
	return ""
}

// startStalledGet sends a GET for path on a raw connection, reads the
// status line and then stops reading; the path must name a file larger
// than loopback's socket buffers (about 10 MiB) for the server to block.
func startStalledGet(t *testing.T, addr, path string) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := bufio.NewReaderSize(c, 64).ReadString('\n')
	if err != nil {
		t.Fatalf("GET %s: read status line: %v", path, err)
	}
	return c, strings.TrimSpace(status)
}

// TestFilesWriteDeadline: a client that stops reading is dropped within
// the allowance of one step; a client slower than FileWriteTimeout in total
// but steady gets the whole file, because the deadline follows the bytes
// sent rather than bounding the whole answer.
func TestFilesWriteDeadline(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.FileWriteTimeout = time.Second
		o.FileMinRate = 16 << 20 // one 4 MiB step: 1.25 s
	})
	const size = 32 << 20
	sum := bigFile(t, e.files, "big.img", size)
	addr := e.ts.Listener.Addr().String()

	t.Run("stalled client dropped", func(t *testing.T) {
		c, status := startStalledGet(t, addr, "/files/big.img")
		if !strings.Contains(status, " 200 ") {
			t.Fatalf("status line %q, want 200", status)
		}
		// The handler ends once a write misses its deadline; the request
		// log then shows fewer bytes than the file has.
		line := e.requestLogged(t, "/files/big.img", 20*time.Second)
		if strings.Contains(line, fmt.Sprintf("bytes=%d ", size)) {
			t.Fatalf("the stalled client was sent the whole file: %s", line)
		}
		// The connection is closed: reading drains what was buffered, then ends.
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := io.Copy(io.Discard, c)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Fatalf("connection still open after the write deadline (read %d bytes)", n)
		}
		if n >= size {
			t.Fatalf("read %d bytes from the stalled connection, the whole file", n)
		}
	})

	t.Run("slow steady client served", func(t *testing.T) {
		resp, err := http.Get(e.ts.URL + "/files/big.img")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		h := sha256.New()
		start := time.Now()
		buf := make([]byte, 1<<20)
		for {
			// About 10 MiB/s: 3.2 s in all, well over FileWriteTimeout,
			// but each 4 MiB step within its 1.25 s allowance.
			n, err := io.ReadFull(resp.Body, buf)
			h.Write(buf[:n])
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err != nil {
				t.Fatalf("read after %s: %v", time.Since(start), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got := [32]byte(h.Sum(nil)); got != sum {
			t.Fatalf("slow client got a different file after %s", time.Since(start))
		}
		t.Logf("slow client read %d MiB in %s", size>>20, time.Since(start).Round(time.Millisecond))
	})
}

// TestFilesConnLimit: above MaxFileConns answers in progress a request
// gets 503 with Retry-After; once a slot frees, requests are served again.
// Other routes are not limited.
func TestFilesConnLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.MaxFileConns = 2
		o.FileRetryAfter = 2500 * time.Millisecond
		o.FileWriteTimeout = time.Minute // the held downloads must not time out
	})
	bigFile(t, e.files, "big.img", 64<<20)
	writeFile(t, filepath.Join(e.files, "small.txt"), "small")
	addr := e.ts.Listener.Addr().String()

	var held []net.Conn
	for range 2 {
		c, status := startStalledGet(t, addr, "/files/big.img")
		if !strings.Contains(status, " 200 ") {
			t.Fatalf("held download: status line %q, want 200", status)
		}
		held = append(held, c)
	}
	code, hdr, body := e.do(t, "GET", "/files/small.txt", "", nil, nil)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("third download: status %d, want 503", code)
	}
	if got := hdr.Get("Retry-After"); got != "3" {
		t.Errorf("Retry-After %q, want 3 (2.5 s rounded up)", got)
	}
	if msg := apiError(t, body); !strings.Contains(msg, "2 file downloads in progress") {
		t.Errorf("503 body %q does not say why", msg)
	}
	if code, _, _ := e.do(t, "GET", "/v1/machines", testOperatorToken, nil, nil); code != http.StatusOK {
		t.Errorf("GET /v1/machines during the limit: %d, want 200", code)
	}

	for _, c := range held {
		c.Close()
	}
	// The handlers of the closed connections end at their next write.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, body = e.do(t, "GET", "/files/small.txt", "", nil, nil)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d after the held downloads were closed", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if body != "small" {
		t.Errorf("body %q", body)
	}
}

func TestFilesNoLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxFileConns = -1 })
	if e.srv.fileSlots != nil {
		t.Fatal("MaxFileConns -1 still limits downloads")
	}
	writeFile(t, filepath.Join(e.files, "a"), "a")
	if code, _, _ := e.do(t, "GET", "/files/a", "", nil, nil); code != 200 {
		t.Fatalf("status %d", code)
	}
	e2 := newEnv(t, nil)
	if cap(e2.srv.fileSlots) != DefaultMaxFileConns {
		t.Errorf("default limit %d, want %d", cap(e2.srv.fileSlots), DefaultMaxFileConns)
	}
}

// TestIdleTimeout: Serve closes a keep-alive connection that sent no new
// request within IdleTimeout.
func TestIdleTimeout(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "ok.txt"), "fine")
	srv, err := New(Options{DefaultConfig: writeTemp(t, base, "default.yaml", "hostname: x\n"), FilesDir: base,
		IdleTimeout: 300 * time.Millisecond, DB: testDB(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET /files/ok.txt HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "fine" || resp.Close {
		t.Fatalf("first answer: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	// Idle now: the server must hang up well before our 10 s bound.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err = br.ReadByte()
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("idle connection still open after %s", time.Since(start))
	}
	if err == nil {
		t.Fatal("the server sent bytes on an idle connection")
	}
	t.Logf("idle connection closed after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

func writeTemp(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	writeFile(t, p, content)
	return p
}

// readFromRecorder is a ResponseWriter with ReadFrom, like net/http's,
// that records what each ReadFrom was given.
type readFromRecorder struct {
	hdr    http.Header
	code   int
	body   bytes.Buffer
	shapes []string
}

func (r *readFromRecorder) Header() http.Header         { return r.hdr }
func (r *readFromRecorder) WriteHeader(code int)        { r.code = code }
func (r *readFromRecorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	shape := fmt.Sprintf("%T", src)
	if lr, ok := src.(*io.LimitedReader); ok {
		shape += fmt.Sprintf("{%T}", lr.R)
	}
	r.shapes = append(r.shapes, shape)
	return io.Copy(&r.body, src)
}

// TestFilesSendfilePath: every byte of a /files/ body, full or range,
// reaches the connection's ReadFrom as an io.LimitedReader directly over
// the *os.File (what net.TCPConn.ReadFrom turns into sendfile), in steps
// of at most 4 MiB; none goes through Write but the sniffed head that
// net/http itself copies (not done here: the recorder has no sniffing).
func TestFilesSendfilePath(t *testing.T) {
	e := newEnv(t, nil)
	const size = 9<<20 + 123
	bigFile(t, e.files, "big.img", size)
	data, err := os.ReadFile(filepath.Join(e.files, "big.img"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		rng       string
		want      []byte
		wantSteps int
	}{
		{"full", "", data, 3},
		{"range", "bytes=1000-8389607", data[1000:8389608], 2},
		{"open range", "bytes=8388608-", data[8388608:], 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "/files/big.img", nil)
			if tt.rng != "" {
				req.Header.Set("Range", tt.rng)
			}
			rec := &readFromRecorder{hdr: http.Header{}}
			e.srv.Handler().ServeHTTP(rec, req)
			if rec.code != 200 && rec.code != 206 {
				t.Fatalf("status %d", rec.code)
			}
			if !bytes.Equal(rec.body.Bytes(), tt.want) {
				t.Fatalf("body %d bytes, want %d (or different bytes)", rec.body.Len(), len(tt.want))
			}
			if len(rec.shapes) != tt.wantSteps {
				t.Errorf("%d ReadFrom calls %v, want %d steps of at most 4 MiB", len(rec.shapes), rec.shapes, tt.wantSteps)
			}
			for _, s := range rec.shapes {
				if s != "*io.LimitedReader{*os.File}" {
					t.Errorf("ReadFrom got %s, want *io.LimitedReader{*os.File} (the sendfile shape)", s)
				}
			}
		})
	}
}
