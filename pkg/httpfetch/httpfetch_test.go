package httpfetch

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var fast = Backoff{Attempts: 4, Initial: time.Millisecond, Max: 4 * time.Millisecond}

func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func caOf(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestCheckURLNeedsOptInForHTTP(t *testing.T) {
	raw := "http://user:s3cret@10.0.0.1/cfg?token=XYZ"
	err := CheckURL(raw, false)
	if !errors.Is(err, ErrInsecureHTTP) {
		t.Fatalf("CheckURL(http, no opt-in) = %v, want ErrInsecureHTTP", err)
	}
	for _, want := range []string{"10.0.0.1/cfg", "booty.insecure-http=1", "--insecure-http"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	for _, secret := range []string{"s3cret", "XYZ"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q leaks %q", err, secret)
		}
	}
	if Retryable(err) {
		t.Error("ErrInsecureHTTP is retryable")
	}
	for _, ok := range []struct {
		url   string
		allow bool
	}{{"https://h/x", false}, {"http://h/x", true}, {"HTTPS://h/x", false}} {
		if err := CheckURL(ok.url, ok.allow); err != nil {
			t.Errorf("CheckURL(%q, %v) = %v", ok.url, ok.allow, err)
		}
	}
	if err := CheckURL("ftp://h/x", true); err == nil {
		t.Error("ftp accepted")
	}
}

// An https server that redirects to plain http is refused, even with the
// opt-in, and the http server never sees the request.
func TestRedirectHTTPSToHTTPRefused(t *testing.T) {
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		io.WriteString(w, "downgraded")
	}))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/x", http.StatusFound)
	}))
	defer tlsSrv.Close()
	for _, allow := range []bool{false, true} {
		c, err := NewClient(ClientOptions{CACert: caOf(tlsSrv), AllowHTTP: allow})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Fetch(context.Background(), c, fast, testLog(t), "test", Request{URL: tlsSrv.URL + "/a", Idle: 10 * time.Second}, nil)
		if !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), "downgraded") {
			t.Errorf("allowHTTP=%v: err = %v, want ErrRedirect naming the downgrade", allow, err)
		}
	}
	if n := plainHits.Load(); n != 0 {
		t.Errorf("the http server got %d requests", n)
	}
}

// A redirect loop ends after MaxRedirects and is not retried.
func TestRedirectLoopBoundedNotRetried(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, fmt.Sprintf("/loop%d", hits.Load()), http.StatusFound)
	}))
	defer srv.Close()
	c, err := NewClient(ClientOptions{AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Fetch(context.Background(), c, fast, testLog(t), "test", Request{URL: srv.URL + "/start", Idle: 10 * time.Second}, nil)
	if !errors.Is(err, ErrRedirect) {
		t.Fatalf("err = %v, want ErrRedirect", err)
	}
	if n := hits.Load(); n != MaxRedirects+1 {
		t.Errorf("server hit %d times, want %d (one attempt, no retry)", n, MaxRedirects+1)
	}
}

// headerRecorder records the Authorization header of every request.
type headerRecorder struct {
	mu   sync.Mutex
	auth []string
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auth = append(h.auth, r.Header.Get("Authorization")+"|"+r.Header.Get("Cookie"))
	h.mu.Unlock()
	io.WriteString(w, "ok")
}

// A redirect to another host (here: another port of 127.0.0.1, which Go's
// own rule counts as the same host) does not carry the token; one to the
// same host does.
func TestCrossHostRedirectDropsToken(t *testing.T) {
	other := &headerRecorder{}
	otherSrv := httptest.NewServer(other)
	defer otherSrv.Close()
	same := &headerRecorder{}
	mux := http.NewServeMux()
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, otherSrv.URL+"/x", http.StatusFound) })
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/same", http.StatusFound) })
	mux.Handle("/same", same)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := NewClient(ClientOptions{AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Authorization": {"Bearer machine-token"}, "Cookie": {"s=1"}}
	for _, path := range []string{"/away", "/here"} {
		if _, err := Fetch(context.Background(), c, fast, testLog(t), "test", Request{URL: srv.URL + path, Header: h, Idle: 10 * time.Second}, nil); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if len(other.auth) != 1 || other.auth[0] != "|" {
		t.Errorf("the other host got credentials: %q", other.auth)
	}
	if len(same.auth) != 1 || same.auth[0] != "Bearer machine-token|s=1" {
		t.Errorf("the same host got %q, want the token", same.auth)
	}
}

// Header too large (the server's answer, or a 431) is not retried.
func TestHeaderTooLargeNotRetried(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    error
	}{
		{"response headers over the limit", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("a", MaxHeaderBytes+1024))
			io.WriteString(w, "x")
		}, ErrHeaderTooLarge},
		{"431 from the server", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "too large", http.StatusRequestHeaderFieldsTooLarge)
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				tt.handler(w, r)
			}))
			defer srv.Close()
			c, err := NewClient(ClientOptions{AllowHTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			_, err = Fetch(context.Background(), c, fast, testLog(t), "test", Request{URL: srv.URL, Idle: 10 * time.Second}, nil)
			var se *StatusError
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || (tt.want == nil && (!errors.As(err, &se) || se.Code != 431)) {
				t.Fatalf("err = %v", err)
			}
			if n := hits.Load(); n != 1 {
				t.Errorf("server hit %d times, want 1 (not retried)", n)
			}
		})
	}
}

// A server that stalls before the headers, or after some of the body,
// fails the attempt within the idle bound; it is retried (bounded).
func TestStallFailsWithinIdleBound(t *testing.T) {
	for _, name := range []string{"before headers", "after headers", "mid body"} {
		t.Run(name, func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if name != "before headers" {
					w.Header().Set("Content-Length", "100")
					w.WriteHeader(http.StatusOK)
					if name == "mid body" {
						io.WriteString(w, "0123456789")
					}
					w.(http.Flusher).Flush()
				}
				<-r.Context().Done()
			}))
			defer srv.Close()
			c, err := NewClient(ClientOptions{AllowHTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a bound, not an assert
			defer cancel()
			_, err = Fetch(ctx, c, Backoff{Attempts: 2, Initial: time.Millisecond}, testLog(t), "test", Request{URL: srv.URL, Idle: 200 * time.Millisecond}, nil)
			if !errors.Is(err, ErrIdle) || !errors.Is(err, ErrGaveUp) || ctx.Err() != nil {
				t.Fatalf("err = %v, want ErrIdle after the bounded attempts", err)
			}
			if n := hits.Load(); n != 2 {
				t.Errorf("%d attempts, want 2", n)
			}
		})
	}
}

func TestRetrierMinimumProgress(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	r := &Retrier{Backoff: Backoff{Attempts: 3, Initial: time.Microsecond, MinProgress: 100, MinProgressFraction: 0.01}, Log: log, Op: "t"}
	ctx := context.Background()
	cut := errors.New("connection cut")
	// Attempts moving 1 byte are failures: the third ends the fetch.
	for i := 1; i <= 2; i++ {
		if err := r.Retry(ctx, 1, 1000, cut); err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
	}
	// Progress (≥100 bytes and ≥1% of 1000) resets the failure count.
	if err := r.Retry(ctx, 500, 1000, cut); err != nil {
		t.Fatalf("after progress: %v", err)
	}
	// 150 bytes of a 100000-byte file is less than 1%: a failure.
	if err := r.Retry(ctx, 150, 100000, cut); err != nil {
		t.Fatalf("failure 2: %v", err)
	}
	err := r.Retry(ctx, 150, 100000, cut)
	if !errors.Is(err, ErrGaveUp) || !errors.Is(err, cut) || !strings.Contains(err.Error(), "after 5 attempts") {
		t.Fatalf("err = %v, want giving up after 5 attempts", err)
	}
	if got, want := strings.Count(buf.String(), "msg=retrying"), 4; got != want {
		t.Errorf("%d retry lines, want %d:\n%s", got, want, buf.String())
	}
	for n := 2; n <= 5; n++ {
		if !strings.Contains(buf.String(), fmt.Sprintf("attempt=%d ", n)) {
			t.Errorf("no retry line with attempt=%d:\n%s", n, buf.String())
		}
	}
	if err := (&Retrier{}).Retry(ctx, 0, 0, Permanent(cut)); !errors.Is(err, cut) || errors.Is(err, ErrGaveUp) {
		t.Errorf("permanent error: %v", err)
	}
}

func TestRetryStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := Do(ctx, Backoff{Attempts: 100, Initial: time.Hour}, nil, "x", func(context.Context, int) (int64, error) {
		n++
		cancel()
		return 0, errors.New("boom")
	})
	if n != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("n=%d err=%v", n, err)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Attempts: 10, Initial: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 9: time.Second} {
		if d := b.Delay(n); d < want*8/10 || d > want*12/10 {
			t.Errorf("Delay(%d) = %v, want %v ±20%%", n, d, want)
		}
	}
}

func TestParseURL(t *testing.T) {
	schemes := []string{"http", "https", "file"}
	for s, want := range map[string]string{
		"https://192.0.2.1/os.img":         "",
		"HTTP://192.0.2.1/os.img":          "",
		"file:///srv/os.img":               "",
		"file://localhost/srv/os.img":      "",
		"ftp://192.0.2.1/os.img":           `scheme "ftp" not supported`,
		"https:///os.img":                  "has no host",
		"https://u:secret@192.0.2.1/x":     "carries credentials",
		"file://host/os.img":               "a file URL has no host",
		"file:///":                         "want file:///absolute/path",
		"https://192.0.2.1/x?token=SECRET": "",
		"https://[::1/x":                   "is not a URL",
	} {
		_, err := ParseURL(s, schemes...)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParseURL(%q) = %v, want ok", s, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrBadURL)):
			t.Errorf("ParseURL(%q) = %v, want ErrBadURL saying %q", s, err, want)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("ParseURL(%q) error shows the password: %v", s, err)
		}
	}
}
