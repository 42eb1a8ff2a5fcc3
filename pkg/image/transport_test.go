package image

import (
	"context"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/httpfetch"
)

// A server that sends one byte per connection (then drops it) ends the
// download after the bounded attempts, each logged with a growing number.
func TestHTTPOneBytePerConnectionEnds(t *testing.T) {
	data := make([]byte, 4*mib)
	rand.Read(data)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		off := int64(0)
		if rng := r.Header.Get("Range"); rng != "" {
			off, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(rng, "bytes="), "-"), 10, 64)
		}
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.FormatInt(int64(len(data))-off, 10))
		if off > 0 {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, len(data)-1, len(data)))
			w.WriteHeader(http.StatusPartialContent)
		}
		w.Write(data[off : off+1])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer srv.Close()
	var logs strings.Builder // written through one slog handler, which serializes writes; read after Write returned
	o := httpOpts(t, srv.URL+"/img")
	o.Checksum = sha(data)
	o.Retries = 4
	o.Log = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound, not an assert
	defer cancel()
	_, err := Write(ctx, o)
	if !errors.Is(err, ErrFetch) || !errors.Is(err, httpfetch.ErrGaveUp) || ctx.Err() != nil {
		t.Fatalf("Write = %v, want ErrFetch after the bounded attempts", err)
	}
	if n := hits.Load(); n != 5 {
		t.Errorf("%d connections, want 5 (Retries 4 + 1)", n)
	}
	var attempts []int
	for _, m := range regexp.MustCompile(`msg=retrying .*?attempt=(\d+)`).FindAllStringSubmatch(logs.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		attempts = append(attempts, n)
	}
	if len(attempts) != 4 {
		t.Fatalf("retry log lines carry attempts %v, want 4", attempts)
	}
	for i, n := range attempts {
		if n != i+2 {
			t.Errorf("retry %d logged attempt=%d, want %d (attempts %v)", i+1, n, i+2, attempts)
		}
	}
}

func pemCert(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// stallServer answers every path with its handler from routes; a route
// "stall" sends headers and then nothing until the client gives up.
func stall(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "1000")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// The bmap, OCI manifest and OCI token fetches fail within the idle bound
// when the server sends headers and then stalls.
func TestSmallFetchesStallFailWithinIdleBound(t *testing.T) {
	img := gptImage(t, testImageSize, false, 60)
	srcFile := writeFile(t, "img", img)
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	tests := []struct {
		name   string
		source func(base string) string
		bmap   func(base string) string
		mux    func(host string) *http.ServeMux
	}{
		{"bmap", func(string) string { return srcFile }, func(base string) string { return base + "/img.bmap" },
			func(string) *http.ServeMux {
				m := http.NewServeMux()
				m.HandleFunc("/img.bmap", stall)
				return m
			}},
		{"OCI manifest", func(base string) string { return "oci+" + base + "/repo@" + digest }, nil,
			func(string) *http.ServeMux {
				m := http.NewServeMux()
				m.HandleFunc("/v2/repo/manifests/", stall)
				return m
			}},
		{"OCI token", func(base string) string { return "oci+" + base + "/repo@" + digest }, nil,
			func(host string) *http.ServeMux {
				m := http.NewServeMux()
				m.HandleFunc("/v2/repo/manifests/", func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="s"`)
					http.Error(w, "unauthorized", http.StatusUnauthorized)
				})
				m.HandleFunc("/token", stall)
				return m
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			var mux *http.ServeMux
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				mux.ServeHTTP(w, r)
			}))
			defer srv.Close()
			mux = tt.mux(srv.Listener.Addr().String())
			o := httpOpts(t, tt.source(srv.URL))
			o.ImageChecksum = sha(img)
			if tt.bmap != nil {
				o.Bmap = tt.bmap(srv.URL)
			}
			o.IdleTimeout = 300 * time.Millisecond
			o.Retries = 1
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not an assert
			defer cancel()
			_, err := Write(ctx, o)
			if !errors.Is(err, httpfetch.ErrIdle) || ctx.Err() != nil {
				t.Fatalf("Write = %v, want a stall error (ErrIdle)", err)
			}
			if st, err := os.Stat(o.Target); err == nil && st.Size() != 0 {
				t.Errorf("target written (%d bytes) although the fetch failed before writing", st.Size())
			}
		})
	}
}

// Errors that can never succeed end the download at once: response headers
// over the limit, a redirect loop, an https→http redirect.
func TestHTTPPermanentErrorsNotRetried(t *testing.T) {
	img := gptImage(t, testImageSize, false, 61)
	plainHits := atomic.Int32{}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		w.Write(img)
	}))
	defer plain.Close()
	tests := []struct {
		name     string
		tls      bool
		handler  http.HandlerFunc
		want     error
		wantHits int32
	}{
		{"response headers too large", false, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("b", httpfetch.MaxHeaderBytes+1))
			w.Write(img)
		}, httpfetch.ErrHeaderTooLarge, 1},
		{"431", false, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "too large", http.StatusRequestHeaderFieldsTooLarge)
		}, ErrFetch, 1},
		{"redirect loop", false, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.Path+"x", http.StatusFound)
		}, httpfetch.ErrRedirect, httpfetch.MaxRedirects + 1},
		{"https to http", true, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, plain.URL+"/img", http.StatusFound)
		}, httpfetch.ErrRedirect, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); tt.handler(w, r) })
			srv := httptest.NewUnstartedServer(h)
			if tt.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			o := httpOpts(t, srv.URL+"/img")
			o.Checksum = sha(img)
			o.Retries = 5
			if tt.tls {
				o.CACert = pemCert(srv)
			}
			_, err := Write(context.Background(), o)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Write = %v, want %v", err, tt.want)
			}
			if n := hits.Load(); n != tt.wantHits {
				t.Errorf("server hit %d times, want %d (no retry)", n, tt.wantHits)
			}
		})
	}
	if n := plainHits.Load(); n != 0 {
		t.Errorf("the plain http server was reached %d times", n)
	}
}

// Plain http needs the opt-in, for the source, the bmap and oci+http; the
// error names the URL without its secrets and the opt-in, and nothing is
// fetched or written.
func TestHTTPNeedsOptIn(t *testing.T) {
	img := gptImage(t, testImageSize, false, 62)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(img)
	}))
	defer srv.Close()
	srcFile := writeFile(t, "img", img)
	secretURL := strings.Replace(srv.URL, "http://", "http://u:pw@", 1) + "/img?sig=SECRET"
	tests := []struct{ name, source, bmap string }{
		{"source", secretURL, ""},
		{"bmap", srcFile, secretURL},
		{"oci+http", "oci+" + srv.URL + "/repo@sha256:" + strings.Repeat("0", 64), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "out")
			_, err := Write(context.Background(), Options{Source: tt.source, Bmap: tt.bmap, ImageChecksum: sha(img), Target: target, Log: testLog(t)})
			if !errors.Is(err, httpfetch.ErrInsecureHTTP) {
				t.Fatalf("Write = %v, want ErrInsecureHTTP", err)
			}
			if !strings.Contains(err.Error(), "booty.insecure-http=1") || !strings.Contains(err.Error(), srv.Listener.Addr().String()) {
				t.Errorf("error %q does not name the URL and the opt-in", err)
			}
			if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "pw") {
				t.Errorf("error leaks a secret: %v", err)
			}
			if st, err := os.Stat(target); err == nil && st.Size() != 0 {
				t.Errorf("target written (%d bytes)", st.Size())
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("server hit %d times without the opt-in", n)
	}
}
