// Package httpfetch is how the agent talks HTTP: clients that verify TLS,
// refuse plain http unless the operator opted in, bound and police
// redirects; one attempt of a small fetch with an idle bound on every read;
// and the one retry helper (bounded attempts, backoff with jitter, a
// minimum-progress rule, a class of errors that are never retried) used by
// every fetch and report of the agent.
package httpfetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/redact"
)

// Errors that callers tell apart with errors.Is. None of them is retried.
var (
	// ErrInsecureHTTP: a plain http:// URL without the operator's opt-in.
	ErrInsecureHTTP = errors.New("plain http is not allowed without the opt-in")
	// ErrRedirect: a redirect was refused (https to http, a scheme other
	// than http(s)) or there were more than MaxRedirects.
	ErrRedirect = errors.New("redirect refused")
	// ErrHeaderTooLarge: the server's response headers exceed MaxHeaderBytes.
	ErrHeaderTooLarge = errors.New("response headers too large")
	// ErrIdle: no byte arrived within the idle bound (retried).
	ErrIdle = errors.New("no data within the idle timeout")
	// ErrTooLarge: the answer is larger than the caller's limit.
	ErrTooLarge = errors.New("answer too large")
)

// OptIn names the operator's consent to plain HTTP, for error messages.
const OptIn = "kernel parameter booty.insecure-http=1 (booty CLI commands: --insecure-http)"

// Bounds of every client NewClient builds or Secure adjusts.
const (
	// MaxRedirects is how many redirects one request may follow.
	MaxRedirects = 5
	// MaxHeaderBytes bounds the response headers of one answer.
	MaxHeaderBytes = 256 << 10
)

// CheckURL fails unless raw is an https URL, or an http URL and allowHTTP
// is set. The error names the URL (redacted) and the opt-in.
func CheckURL(raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse URL %s: %w", redact.URL(raw), err)
	}
	return checkScheme(u, allowHTTP)
}

func checkScheme(u *url.URL, allowHTTP bool) error {
	switch strings.ToLower(u.Scheme) {
	case "https":
		return nil
	case "http", "oci+http":
		if allowHTTP {
			return nil
		}
		return fmt.Errorf("%s: TLS is required; to allow plain HTTP set the %s: %w", redact.URL(u.String()), OptIn, ErrInsecureHTTP)
	}
	return fmt.Errorf("%s: scheme %q is not http or https: %w", redact.URL(u.String()), u.Scheme, ErrInsecureHTTP)
}

// credentialHeaders are dropped from a redirect to another host (host and
// port): a token or password is only for the host it was given for.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// CheckRedirect returns an http.Client CheckRedirect that follows at most
// MaxRedirects redirects, never from https to http, to http only with
// allowHTTP, to no scheme other than http(s), and drops the credential
// headers (Authorization, Cookie) when the target's host or port differs
// from the first request's, so a token never reaches another server. A
// refused redirect fails the request with ErrRedirect.
func CheckRedirect(allowHTTP bool) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		to := redact.URL(req.URL.String())
		if len(via) > MaxRedirects {
			return fmt.Errorf("redirect to %s: more than %d redirects: %w", to, MaxRedirects, ErrRedirect)
		}
		prev := via[len(via)-1].URL
		switch strings.ToLower(req.URL.Scheme) {
		case "https":
		case "http":
			if strings.EqualFold(prev.Scheme, "https") || strings.EqualFold(via[0].URL.Scheme, "https") {
				return fmt.Errorf("redirect from %s to %s: https must not be downgraded to http: %w", redact.URL(prev.String()), to, ErrRedirect)
			}
			if !allowHTTP {
				return fmt.Errorf("redirect to %s: plain http without the %s: %w", to, OptIn, ErrRedirect)
			}
		default:
			return fmt.Errorf("redirect to %s: scheme %q: %w", to, req.URL.Scheme, ErrRedirect)
		}
		if !sameHost(req.URL, via[0].URL) {
			for _, h := range credentialHeaders {
				req.Header.Del(h)
			}
		}
		return nil
	}
}

// SameOrigin reports whether a and b have the same scheme, host and port
// (the scheme's default port when absent).
func SameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && sameHost(a, b)
}

// sameHost compares host and port (the scheme's default port when absent).
func sameHost(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "http") {
			return "80"
		}
		return "443"
	}
	return strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// Secure returns a copy of c whose redirects are checked by
// CheckRedirect(allowHTTP) (then by c's own CheckRedirect, if any).
func Secure(c *http.Client, allowHTTP bool) *http.Client {
	cc := *c
	check, own := CheckRedirect(allowHTTP), c.CheckRedirect
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := check(req, via); err != nil {
			return err
		}
		if own != nil {
			return own(req, via)
		}
		return nil
	}
	return &cc
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	// CACert is a PEM bundle trusted for https; nil uses the system pool.
	CACert []byte
	// AllowHTTP is the operator's opt-in to plain http (redirects to http).
	AllowHTTP bool
	// ConnectTimeout bounds TCP connect and the TLS handshake (default 30 s).
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for response headers (default 30 s).
	HeaderTimeout time.Duration
	// Timeout bounds a whole request with its body; 0 is none (downloads).
	Timeout time.Duration
}

// NewClient returns a client that verifies TLS (1.2 or newer) against
// CACert or the system pool, checks redirects with CheckRedirect, refuses
// response headers over MaxHeaderBytes and never decompresses
// transparently (digests are over the bytes as served). It fails when
// CACert holds no certificate.
func NewClient(o ClientOptions) (*http.Client, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 30 * time.Second
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CACert != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.CACert) {
			return nil, errors.New("load CA certificates: no PEM certificate found")
		}
		tlsConf.RootCAs = pool
	}
	dialer := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    o.ConnectTimeout,
		ResponseHeaderTimeout:  o.HeaderTimeout,
		MaxResponseHeaderBytes: MaxHeaderBytes,
		DisableCompression:     true,
		ForceAttemptHTTP2:      true,
		IdleConnTimeout:        90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: CheckRedirect(o.AllowHTTP)}, nil
}

// Send is c.Do(req) with the error classified: response headers over the
// limit become ErrHeaderTooLarge. The error names the URL redacted.
func Send(c *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := c.Do(req)
	if err == nil {
		return resp, nil
	}
	msg := err.Error()
	if strings.Contains(msg, "response headers exceeded") || strings.Contains(msg, "header list larger than") {
		return nil, fmt.Errorf("%s %s: %w (over %d bytes)", req.Method, redact.URL(req.URL.String()), ErrHeaderTooLarge, MaxHeaderBytes)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// url.Error quotes the URL with its query; keep only the cause.
		return nil, fmt.Errorf("%s %s: %w", req.Method, redact.URL(req.URL.String()), ue.Err)
	}
	return nil, fmt.Errorf("%s %s: %w", req.Method, redact.URL(req.URL.String()), err)
}

// StatusError is a non-2xx HTTP answer.
type StatusError struct {
	Method, URL string // URL redacted
	Code        int
	Body        string // at most 512 bytes of the answer
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, http.StatusText(e.Code))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Request is one small fetch: a whole answer read into memory.
type Request struct {
	Method string // default GET
	URL    string
	Header http.Header
	Body   []byte
	// Limit bounds the answer; a larger one fails with ErrTooLarge.
	Limit int64
	// Idle bounds the wait for the headers and then for every read of the
	// body; 0 is none (the client's timeouts still apply).
	Idle time.Duration
}

// Response is the answer to a Request.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// Get sends r once with c and reads the whole answer. It returns how many
// body bytes arrived (for the minimum-progress rule). A non-2xx answer is
// returned with a *StatusError carrying its first 512 bytes. A stall of
// r.Idle before the headers or between body bytes fails with ErrIdle. No
// header value (Authorization) is ever part of an error.
func Get(ctx context.Context, c *http.Client, r Request) (*Response, int64, error) {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	shown := redact.URL(r.URL)
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var rd io.Reader
	if r.Body != nil {
		rd = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(actx, method, r.URL, rd)
	if err != nil {
		return nil, 0, Permanent(fmt.Errorf("build request %s %s: %w", method, shown, err))
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	w := watch(r.Idle, cancel)
	defer w.stop()
	resp, err := Send(c, req)
	if err != nil {
		return nil, 0, w.explain(actx, method+" "+shown, err)
	}
	defer resp.Body.Close()
	limit := r.Limit
	if limit <= 0 {
		limit = 4 << 20
	}
	data, err := io.ReadAll(io.LimitReader(&touchReader{r: resp.Body, w: w}, limit+1))
	moved := int64(len(data))
	if err != nil {
		return nil, moved, w.explain(actx, method+" "+shown, fmt.Errorf("%s %s: read answer after %d bytes: %w", method, shown, moved, err))
	}
	if moved > limit {
		return nil, moved, Permanent(fmt.Errorf("%s %s: answer larger than %d bytes: %w", method, shown, limit, ErrTooLarge))
	}
	out := &Response{Code: resp.StatusCode, Header: resp.Header, Body: data}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return out, moved, &StatusError{Method: method, URL: shown, Code: resp.StatusCode, Body: string(truncate(bytes.TrimSpace(data), 512))}
	}
	return out, moved, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// watchdog cancels an attempt's context with ErrIdle when touch is not
// called for idle.
type watchdog struct {
	idle time.Duration
	t    *time.Timer
}

func watch(idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{idle: idle}
	if idle > 0 {
		w.t = time.AfterFunc(idle, func() { cancel(ErrIdle) })
	}
	return w
}

func (w *watchdog) touch() {
	if w.t != nil {
		w.t.Reset(w.idle)
	}
}

func (w *watchdog) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// explain turns the error of an attempt the watchdog cancelled into
// ErrIdle, naming what (method and redacted URL).
func (w *watchdog) explain(actx context.Context, what string, err error) error {
	if errors.Is(context.Cause(actx), ErrIdle) {
		return fmt.Errorf("%s: stalled, no data for %s: %w", what, w.idle, ErrIdle)
	}
	return err
}

// touchReader resets the watchdog on every read that brings bytes.
type touchReader struct {
	r io.Reader
	w *watchdog
}

func (t *touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.w.touch()
	}
	return n, err
}

// ErrBadURL is wrapped by ParseURL's errors.
var ErrBadURL = errors.New("bad URL")

// ParseURL is the one grammar of the URLs booty fetches (image sources,
// bmaps, configs, bootyd): an absolute URL with one of schemes; http and
// https need a host and may not carry credentials (tokens go in headers,
// never in a URL that is logged); file needs an absolute path and no host.
// Errors wrap ErrBadURL and show the URL redacted. Plain http passes here:
// whether it may be used is the run's policy (CheckURL).
func ParseURL(s string, schemes ...string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the URL with its secrets
		}
		return nil, fmt.Errorf("%q is not a URL: %v: %w", redact.URL(s), err, ErrBadURL)
	}
	shown := redact.URL(s)
	if !slices.Contains(schemes, u.Scheme) {
		return nil, fmt.Errorf("scheme %q not supported in %q, want %s: %w", u.Scheme, shown, strings.Join(schemes, ", "), ErrBadURL)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("%q has no host: %w", shown, ErrBadURL)
		}
		if u.User != nil {
			return nil, fmt.Errorf("%q carries credentials in the URL; give them as a token instead: %w", shown, ErrBadURL)
		}
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("%q: a file URL has no host, want file:///path: %w", shown, ErrBadURL)
		}
		if !strings.HasPrefix(u.Path, "/") || len(u.Path) < 2 {
			return nil, fmt.Errorf("%q: want file:///absolute/path: %w", shown, ErrBadURL)
		}
	}
	return u, nil
}
