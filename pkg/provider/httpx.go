package provider

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/redact"
)

// DefaultRequestTimeout bounds one HTTP request of a provider or reporter.
const DefaultRequestTimeout = 30 * time.Second

// DefaultIdleTimeout bounds the wait for the headers and for each read of
// an answer's body: a server that stalls fails the attempt after it.
const DefaultIdleTimeout = 15 * time.Second

// Backoff bounds the retries of one operation; see httpfetch.Backoff.
// Zero fields take the defaults 5 attempts, 1s, 30s.
type Backoff = httpfetch.Backoff

// DefaultBackoff is used where a provider's Backoff is left zero.
var DefaultBackoff = httpfetch.DefaultBackoff

// StatusError is a non-2xx HTTP answer.
type StatusError = httpfetch.StatusError

// newHTTPClient returns a client whose requests time out after timeout,
// that trusts only the certificates in caPEM when it is set (the system
// pool otherwise) and whose redirects httpfetch.CheckRedirect polices
// (plain http only with allowHTTP). It fails when caPEM holds no certificate.
func newHTTPClient(caPEM string, timeout time.Duration, allowHTTP bool) (*http.Client, error) {
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	var ca []byte
	if caPEM != "" {
		ca = []byte(caPEM)
	}
	return httpfetch.NewClient(httpfetch.ClientOptions{CACert: ca, AllowHTTP: allowHTTP,
		ConnectTimeout: min(timeout, 10*time.Second), HeaderTimeout: timeout, Timeout: timeout})
}

// clientOr returns c made safe by httpfetch.Secure, or a new client.
func clientOr(c *http.Client, caPEM string, allowHTTP bool) (*http.Client, error) {
	if c != nil {
		return httpfetch.Secure(c, allowHTTP), nil
	}
	return newHTTPClient(caPEM, DefaultRequestTimeout, allowHTTP)
}

// fetch is httpfetch.Fetch with the answer bounded by config.MaxConfigSize, the
// idle bound DefaultIdleTimeout when r has none, and booty's User-Agent.
func fetch(ctx context.Context, c *http.Client, b Backoff, log *slog.Logger, op string, r httpfetch.Request, accept func(code int) bool) (*httpfetch.Response, error) {
	if r.Limit == 0 {
		r.Limit = config.MaxConfigSize
	}
	if r.Idle == 0 {
		r.Idle = DefaultIdleTimeout
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header.Set("User-Agent", "booty")
	return httpfetch.Fetch(ctx, c, b, orDiscard(log), op, r, accept)
}

// bearer is an Authorization header with token, or nil without one.
func bearer(token string, contentType string) http.Header {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return h
}

// redactURL hides a URL's user info and query, for errors and logs.
func redactURL(s string) string { return redact.URL(s) }

// discardLogger drops everything; it stands in for a nil logger.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return discardLogger()
	}
	return l
}
