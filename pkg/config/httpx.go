package config

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/booty-dev/booty/pkg/redact"
)

// MaxConfigSize bounds a config read from any provider.
const MaxConfigSize = 4 << 20

// DefaultRequestTimeout bounds one HTTP request of a provider or reporter.
const DefaultRequestTimeout = 30 * time.Second

// Backoff bounds the retries of one operation: at most Attempts tries, with
// waits growing from Initial by doubling up to Max, each with ±20% jitter.
// Zero fields take the defaults 5 attempts, 1s, 30s.
type Backoff struct {
	Attempts int
	Initial  time.Duration
	Max      time.Duration
}

// DefaultBackoff is used where a provider's Backoff is left zero.
var DefaultBackoff = Backoff{Attempts: 5, Initial: time.Second, Max: 30 * time.Second}

func (b Backoff) withDefaults() Backoff {
	if b.Attempts <= 0 {
		b.Attempts = DefaultBackoff.Attempts
	}
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	return b
}

// delay is the wait after failed try number n (1-based).
func (b Backoff) delay(n int) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	jitter := time.Duration(float64(d) * 0.2 * (2*rand.Float64() - 1))
	return d + jitter
}

// retry runs try up to b.Attempts times, waiting between tries. try reports
// whether its error is worth another try; a permanent error, an exhausted
// budget or a cancelled ctx ends the loop with the last error.
func retry(ctx context.Context, b Backoff, log *slog.Logger, what string, try func(ctx context.Context) (retryable bool, err error)) error {
	b = b.withDefaults()
	var last error
	for n := 1; ; n++ {
		again, err := try(ctx)
		if err == nil {
			return nil
		}
		last = err
		if !again {
			return err
		}
		if n >= b.Attempts {
			return fmt.Errorf("%w (gave up after %d attempts)", last, n)
		}
		d := b.delay(n)
		log.Warn("retrying", "op", what, "attempt", n, "of", b.Attempts, "wait", d.Round(time.Millisecond), "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (cancelled while retrying: %w)", last, ctx.Err())
		case <-t.C:
		}
	}
}

// StatusError is a non-2xx HTTP answer.
type StatusError struct {
	Method, URL string
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

// retryableStatus reports whether an HTTP status is worth another try.
func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

// newHTTPClient returns a client whose requests time out after timeout and
// that trusts only the certificates in caPEM when it is set (the system pool
// otherwise). It fails when caPEM holds no certificate.
func newHTTPClient(caPEM string, timeout time.Duration) (*http.Client, error) {
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSHandshakeTimeout = min(timeout, 10*time.Second)
	tr.ResponseHeaderTimeout = timeout
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("load CA certificates: no PEM certificate found")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// doOnce sends one request and reads at most MaxConfigSize bytes of the
// answer. Transport errors are retryable; statuses per retryableStatus.
// The Authorization header is never part of an error.
func doOnce(ctx context.Context, c *http.Client, method, url, contentType string, body []byte, token string) (data []byte, code int, retryable bool, err error) {
	shown := redactURL(url)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, 0, false, fmt.Errorf("build request %s %s: %w", method, shown, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("User-Agent", "booty")
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, ctx.Err() == nil, fmt.Errorf("%s %s: %w", method, shown, err)
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(io.LimitReader(resp.Body, MaxConfigSize+1))
	if err != nil {
		return nil, resp.StatusCode, true, fmt.Errorf("%s %s: read answer: %w", method, shown, err)
	}
	if len(data) > MaxConfigSize {
		return nil, resp.StatusCode, false, fmt.Errorf("%s %s: answer larger than %d bytes", method, shown, MaxConfigSize)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return data, resp.StatusCode, retryableStatus(resp.StatusCode), &StatusError{Method: method, URL: shown, Code: resp.StatusCode, Body: string(truncateBytes(bytes.TrimSpace(data), 512))}
	}
	return data, resp.StatusCode, false, nil
}

// redactURL hides a URL's user info and query, for errors and logs.
func redactURL(s string) string { return redact.URL(s) }

func truncateBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// discardLogger drops everything; it stands in for a nil logger.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return discardLogger()
	}
	return l
}
