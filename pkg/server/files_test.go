package server

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// image is 4 KiB of distinct bytes.
func image() string {
	var b strings.Builder
	for i := 0; b.Len() < 4096; i++ {
		fmt.Fprintf(&b, "%07d\n", i)
	}
	return b.String()[:4096]
}

func TestFilesRange(t *testing.T) {
	e := newEnv(t, nil)
	img := image()
	if err := os.MkdirAll(filepath.Join(e.files, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(e.files, "images", "os.img")
	writeFile(t, p, img)
	mtime := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}

	code, hdr, body := e.do(t, "GET", "/files/images/os.img", "", nil, nil)
	if code != 200 || body != img {
		t.Fatalf("full GET: %d, %d bytes", code, len(body))
	}
	etag := hdr.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || !strings.Contains(etag, "1000-") {
		t.Errorf("ETag %q is not a strong tag with the size (0x1000)", etag)
	}
	if got := hdr.Get("Last-Modified"); got != mtime.Format(http.TimeFormat) {
		t.Errorf("Last-Modified %q, want %q", got, mtime.Format(http.TimeFormat))
	}
	if hdr.Get("Accept-Ranges") != "bytes" {
		t.Errorf("Accept-Ranges %q", hdr.Get("Accept-Ranges"))
	}

	tests := []struct {
		name      string
		hdr       map[string]string
		wantCode  int
		wantBody  string
		wantRange string
	}{
		{"range", map[string]string{"Range": "bytes=100-199"}, 206, img[100:200], "bytes 100-199/4096"},
		{"open range", map[string]string{"Range": "bytes=4000-"}, 206, img[4000:], "bytes 4000-4095/4096"},
		{"suffix range", map[string]string{"Range": "bytes=-10"}, 206, img[4086:], "bytes 4086-4095/4096"},
		{"if-range matching etag", map[string]string{"Range": "bytes=10-19", "If-Range": etag}, 206, img[10:20], "bytes 10-19/4096"},
		{"if-range stale etag", map[string]string{"Range": "bytes=10-19", "If-Range": `"1000-0"`}, 200, img, ""},
		{"if-range matching date", map[string]string{"Range": "bytes=10-19", "If-Range": mtime.Format(http.TimeFormat)}, 206, img[10:20], "bytes 10-19/4096"},
		{"unsatisfiable", map[string]string{"Range": "bytes=5000-"}, 416, "", "bytes */4096"},
		{"if-none-match", map[string]string{"If-None-Match": etag}, 304, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := e.do(t, "GET", "/files/images/os.img", "", nil, tt.hdr)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d", code, tt.wantCode)
			}
			if tt.wantCode != 416 && body != tt.wantBody {
				t.Errorf("body %d bytes, want %d", len(body), len(tt.wantBody))
			}
			if got := hdr.Get("Content-Range"); got != tt.wantRange {
				t.Errorf("Content-Range %q, want %q", got, tt.wantRange)
			}
		})
	}

	// A changed file gets a new ETag, so a resumed download restarts.
	writeFile(t, p, img+"more")
	_, hdr2, _ := e.do(t, "GET", "/files/images/os.img", "", nil, map[string]string{"Range": "bytes=0-0"})
	if hdr2.Get("ETag") == etag {
		t.Errorf("ETag %q unchanged after the file changed", etag)
	}
}

func TestFilesRefuseTraversal(t *testing.T) {
	e := newEnv(t, nil)
	base := filepath.Dir(e.files)
	const secret = "TOP-SECRET-CONTENT"
	writeFile(t, filepath.Join(base, "secret"), secret)
	writeFile(t, filepath.Join(e.files, "ok.txt"), "fine")
	if err := os.Mkdir(filepath.Join(e.files, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "secret"), filepath.Join(e.files, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret", filepath.Join(e.files, "rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(e.files, "sub", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok.txt", filepath.Join(e.files, "inside-link")); err != nil {
		t.Fatal(err)
	}

	// Raw request lines, so that no client cleans the path first.
	paths := []string{
		"/files/../secret",
		"/files/..%2fsecret",
		"/files/%2e%2e/secret",
		"/files/%2e%2e%2fsecret",
		"/files/sub/../../secret",
		"/files/sub/..%2f..%2fsecret",
		"/files//etc/passwd",
		"/files/%2fetc%2fpasswd",
		"/files/abs-link",
		"/files/rel-link",
		"/files/sub/up/../secret",
		"/files/sub/up/sub/up/secret",
		"/files/",
		"/files/sub",
		"/files/sub/",
		"/files/ok.txt%00.png",
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			code, body := rawGet(t, e.ts.Listener.Addr().String(), p)
			if code == 200 || code == 206 || strings.Contains(body, secret) {
				t.Fatalf("GET %s: status %d, body %q", p, code, body)
			}
		})
	}
	for _, p := range []string{"/files/ok.txt", "/files/inside-link"} {
		if code, body := rawGet(t, e.ts.Listener.Addr().String(), p); code != 200 || !strings.HasSuffix(body, "fine") {
			t.Errorf("GET %s: %d %q, want 200 fine", p, code, body)
		}
	}
}

// rawGet sends a GET with the path exactly as given and returns status and body.
func rawGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
	var buf strings.Builder
	b := make([]byte, 4096)
	for {
		n, err := c.Read(b)
		buf.Write(b[:n])
		if err != nil {
			break
		}
	}
	resp := buf.String()
	var code int
	if _, err := fmt.Sscanf(resp, "HTTP/1.1 %d", &code); err != nil {
		t.Fatalf("GET %s: bad response %q", path, resp)
	}
	return code, resp
}

func TestFilesWithoutDir(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FilesDir = "" })
	if code, _, _ := e.do(t, "GET", "/files/anything", "", nil, nil); code != 404 {
		t.Fatalf("status %d, want 404", code)
	}
}
