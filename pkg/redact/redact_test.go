package redact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// secrets appear in the inputs below and must never appear in an output.
var secrets = []string{"s3cret", "XYZ", "AKIAEXAMPLE", "sig=abc", "tok3n", "hunter2"}

func noSecret(t *testing.T, in, out string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%q → %q: leaks %q", in, out, s)
		}
	}
}

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"https://host.example/os.img", "https://host.example/os.img"},
		{"http://192.0.2.1:8080/a/b.raw.zst", "http://192.0.2.1:8080/a/b.raw.zst"},
		{"/var/lib/images/os.img", "/var/lib/images/os.img"},
		{"file:///images/os.img", "file:///images/os.img"},
		{"oci://registry.example/os/ubuntu@sha256:0123", "oci://registry.example/os/ubuntu@sha256:0123"},
		{"https://user:s3cret@host/config?access_token=XYZ", "https://<redacted>@host/config?<redacted>"},
		{"https://s3.example/bucket/os.img?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=sig=abc", "https://s3.example/bucket/os.img?<redacted>"},
		{"https://host/p#access_token=tok3n", "https://host/p#<redacted>"},
		{"https://host/p?", "https://host/p?<redacted>"},
		{"https://tok3n@host/", "https://<redacted>@host/"},
		{"//user:s3cret@host/x", "//<redacted>@host/x"},
		{"https://host/a%20b?q=XYZ", "https://host/a%20b?<redacted>"},
		// Unparseable: nothing but the scheme survives.
		{"https://user:s3cret/x@host/", "https://" + Unparseable},      // bad port
		{"https://user:pass%zzs3cret@host/", "https://" + Unparseable}, // bad escape
		{"https://host/\x00s3cret?XYZ", "https://" + Unparseable},      // control character
		{"http://[::1/s3cret", "http://" + Unparseable},                // open bracket
		{"ht tp://user:s3cret@host", Unparseable},                      // no valid scheme
		{"mailto:user:s3cret@host", "mailto:<redacted>@host"},          // opaque with credentials
	}
	for _, tt := range tests {
		got := URL(tt.in)
		if got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		noSecret(t, tt.in, got)
	}
}

func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"no url here", "no url here"},
		{"booty.config=https://user:s3cret@host/c.yaml?access_token=XYZ quiet", "booty.config=https://<redacted>@host/c.yaml?<redacted> quiet"},
		{`fetch https://h/os.img?sig=abc: Get "https://h/os.img?sig=abc": dial tcp: refused`,
			`fetch https://h/os.img?<redacted>: Get "https://h/os.img?<redacted>": dial tcp: refused`},
		{"see (https://h/x?t=XYZ).", "see (https://h/x?<redacted>)."},
		{"two: http://a/?XYZ and oci+http://b/r@sha256:1", "two: http://a/?<redacted> and oci+http://b/r@sha256:1"},
		{"weird ://x and 1://y", "weird ://x and 1://y"},
		{"plain https://host/path: ok", "plain https://host/path: ok"},
	}
	for _, tt := range tests {
		got := Text(tt.in)
		if got != tt.want {
			t.Errorf("Text(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
		noSecret(t, tt.in, got)
	}
}

// TestErrorFromHTTPClient redacts the *url.Error net/http returns, which
// carries the request's query, and keeps the error chain.
func TestErrorFromHTTPClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Close() // connection refused from now on
	_, err := http.Get(srv.URL + "/os.img?X-Amz-Signature=sig=abc")
	if err == nil {
		t.Fatal("want an error from a closed server")
	}
	if !strings.Contains(err.Error(), "sig=abc") {
		t.Fatalf("net/http no longer puts the query in its error (%v): this test proves nothing", err)
	}
	wrapped := fmt.Errorf("write image: %w", err)
	r := Error(wrapped)
	noSecret(t, wrapped.Error(), r.Error())
	if !strings.Contains(r.Error(), "/os.img?<redacted>") {
		t.Errorf("redacted error %q lacks the redacted URL", r)
	}
	var ue *url.Error
	if !errors.As(r, &ue) || !errors.Is(r, err) {
		t.Errorf("redacted error lost its chain: %v", r)
	}
	plain := fmt.Errorf("open /x: %w", fs.ErrNotExist)
	if Error(plain) != plain || Error(nil) != nil {
		t.Error("an error without URL secrets must come back as it is")
	}
}

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewTextHandler(&buf, nil)))
	log = log.With("server", "https://bootyd/?token=tok3n")
	log.WithGroup("g").Info("GET https://h/x?XYZ failed",
		"url", "https://user:s3cret@h/", "error", errors.New(`Get "https://h/i?sig=abc": EOF`),
		"args", []string{"--url=https://h/?hunter2"}, "n", 3,
		slog.Group("inner", "u", "https://h/?AKIAEXAMPLE"))
	out := buf.String()
	noSecret(t, "log record", out)
	for _, want := range []string{"GET https://h/x?<redacted> failed", "server=https://bootyd/?<redacted>",
		"g.url=https://<redacted>@h/", "g.n=3", "g.inner.u=https://h/?<redacted>"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if !log.Handler().Enabled(context.Background(), slog.LevelInfo) {
		t.Error("Enabled not passed through")
	}
}
