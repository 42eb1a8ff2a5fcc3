package provider

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/httpfetch"
)

// Plain http:// for booty.config=, booty.server= and a config's server.url
// (which carries the machine token) is refused without the opt-in: the
// error names the URL, redacted, and the kernel parameter; nothing is sent.
func TestPlainHTTPNeedsOptIn(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if !fleetAnswer(t, w, r, "52:54:00:aa:bb:01", "tok", validYAML) {
			io.WriteString(w, validYAML+"server:\n  url: http://10.0.0.9:8080\n  token: tok\n")
		}
	})
	secret := strings.Replace(srv.URL, "http://", "http://u:pw@", 1) + "/cfg?access_token=XYZ"
	secretBase := srv.URL + "?access_token=XYZ" // booty.server= refuses user info itself
	macs := func() ([]string, error) { return []string{"52:54:00:aa:bb:01"}, nil }
	ctx := context.Background()
	for name, load := range map[string]func() error{
		"booty.config": func() error {
			_, err := (&URLProvider{Source: secret, Backoff: fastBackoff}).Load(ctx)
			return err
		},
		"booty.server": func() error {
			_, err := (&ServerProvider{URL: secretBase, Backoff: fastBackoff, MACs: macs}).Load(ctx)
			return err
		},
		"cmdline chain": func() error {
			_, _, err := LoadChain(ctx, nil, ProvidersFromCmdline(ParseCmdline("booty.config="+secret), WithDeployDir(t.TempDir()), WithSysRoot(t.TempDir()))...)
			return err
		},
		"server reporter": func() error {
			_, err := NewServerReporter(config.ServerSpec{URL: secretBase, Token: "tok"}, "52:54:00:aa:bb:01", false)
			return err
		},
	} {
		err := load()
		if !errors.Is(err, httpfetch.ErrInsecureHTTP) {
			t.Errorf("%s: err = %v, want ErrInsecureHTTP", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "booty.insecure-http=1") || !strings.Contains(err.Error(), srv.Listener.Addr().String()) {
			t.Errorf("%s: error %q does not name the URL and the opt-in", name, err)
		}
		if strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "XYZ") {
			t.Errorf("%s: error leaks a secret: %v", name, err)
		}
	}
	if n := len(srv.requests()); n != 0 {
		t.Errorf("%d requests sent without the opt-in", n)
	}

	// With the opt-in, bootyd over http is fine.
	p := &ServerProvider{URL: srv.URL, AllowHTTP: true, Backoff: fastBackoff, MACs: macs}
	if _, err := p.Load(ctx); err != nil {
		t.Fatalf("with the opt-in: %v", err)
	}
}

// A report redirected to another host (another port of 127.0.0.1 here)
// arrives there without the machine token.
func TestReportRedirectDoesNotLeakToken(t *testing.T) {
	const token = "machine-token-123"
	other := newRecorder(t, nil)
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	r, err := NewServerReporter(config.ServerSpec{URL: srv.URL, Token: token}, "52:54:00:aa:bb:01", true)
	if err != nil {
		t.Fatal(err)
	}
	r.Backoff = fastBackoff
	if err := r.ReportStatus(context.Background(), api.StatusReport{Step: "x", State: api.StateStarted}); err != nil {
		t.Fatal(err)
	}
	got := other.requests()
	if len(got) != 1 {
		t.Fatalf("other host got %d requests, want 1", len(got))
	}
	if got[0].Auth != "" {
		t.Errorf("other host got Authorization %q", got[0].Auth)
	}
	if first := srv.requests(); len(first) != 1 || first[0].Auth != "Bearer "+token {
		t.Errorf("bootyd got %+v, want the token", first)
	}
}

// A config server that sends headers and then stalls fails the fetch
// within the idle bound (and the bounded retries), not after the request
// timeout or never.
func TestConfigFetchStallFailsWithinIdleBound(t *testing.T) {
	stall := func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "mode: ")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	srv := newRecorder(t, stall)
	macs := func() ([]string, error) { return []string{"52:54:00:aa:bb:01"}, nil }
	for name, load := range map[string]func(ctx context.Context) error{
		"booty.config": func(ctx context.Context) error {
			_, err := (&URLProvider{Source: srv.URL + "/c", AllowHTTP: true, IdleTimeout: 200 * time.Millisecond, Backoff: fastBackoff}).Load(ctx)
			return err
		},
		"booty.server": func(ctx context.Context) error {
			_, err := (&ServerProvider{URL: srv.URL, AllowHTTP: true, IdleTimeout: 200 * time.Millisecond, Backoff: fastBackoff, MACs: macs}).Load(ctx)
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second) // a bound below the 30 s request timeout
		err := load(ctx)
		cancel()
		if !errors.Is(err, httpfetch.ErrIdle) || !errors.Is(err, httpfetch.ErrGaveUp) {
			t.Errorf("%s: err = %v, want ErrIdle after the bounded attempts", name, err)
		}
	}
	if n := len(srv.requests()); n != 2*fastBackoff.Attempts {
		t.Errorf("%d requests, want %d", n, 2*fastBackoff.Attempts)
	}
}
