package httpfetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"
)

// Backoff bounds the attempts of one fetch. Zero fields take the defaults
// of DefaultBackoff.
//
// Attempts counts failures: an attempt that ended in a retryable error after
// moving fewer than MinProgress bytes (or less than MinProgressFraction of
// the known total) is a failure, and after Attempts consecutive failures the
// fetch gives up. An attempt that moved more is progress: it resets the
// failure count and the wait, but still counts against MaxAttempts, which
// bounds every fetch whatever the server does. Waits grow from Initial by
// doubling up to Max, each with ±20% jitter.
type Backoff struct {
	Attempts int
	Initial  time.Duration
	Max      time.Duration
	// MinProgress is how many bytes a failed attempt must have moved to
	// count as progress; 0 makes every failed attempt a failure (fetches
	// that start over from the first byte).
	MinProgress int64
	// MinProgressFraction is the share of the known total (0.01 = 1%) a
	// failed attempt must also have moved to count as progress.
	MinProgressFraction float64
	// MaxAttempts bounds all attempts, progress or not (default 200).
	MaxAttempts int
}

// DefaultBackoff is used for the zero fields of a Backoff.
var DefaultBackoff = Backoff{Attempts: 5, Initial: time.Second, Max: 30 * time.Second, MaxAttempts: 200}

// WithDefaults returns b with its zero fields set from DefaultBackoff.
func (b Backoff) WithDefaults() Backoff {
	if b.Attempts <= 0 {
		b.Attempts = DefaultBackoff.Attempts
	}
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max <= 0 {
		b.Max = max(DefaultBackoff.Max, b.Initial)
	}
	if b.MaxAttempts <= 0 {
		b.MaxAttempts = DefaultBackoff.MaxAttempts
	}
	b.MaxAttempts = max(b.MaxAttempts, b.Attempts)
	return b
}

// Delay is the wait after failure number n (1-based): Initial doubled n-1
// times, at most Max, ±20% jitter from math/rand/v2 (never blocks on the
// kernel's entropy pool).
func (b Backoff) Delay(n int) time.Duration {
	b = b.WithDefaults()
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return d + time.Duration(float64(d)*0.2*(2*rand.Float64()-1))
}

// progress reports whether an attempt that moved bytes out of total (-1 or
// 0 when unknown) counts as progress.
func (b Backoff) progress(moved, total int64) bool {
	if b.MinProgress <= 0 || moved < b.MinProgress {
		return false
	}
	return total <= 0 || b.MinProgressFraction <= 0 || float64(moved) >= b.MinProgressFraction*float64(total)
}

// ErrGaveUp marks the error of a fetch whose attempts ran out.
var ErrGaveUp = errors.New("gave up")

// Retrier counts the attempts of one fetch and waits between them. Make one
// per fetch; it is not safe for concurrent use.
type Retrier struct {
	Backoff Backoff
	// Log receives one warning per retry, with the attempt number; nil discards.
	Log *slog.Logger
	// Op names the fetch in logs ("fetch config").
	Op string

	attempt  int // attempts made
	failures int // consecutive failures
}

// Attempt is the number (1-based) of the attempt running now, or of the last one.
func (r *Retrier) Attempt() int { return max(r.attempt, 1) }

// Retry records that the current attempt failed with err after moving
// moved bytes (of total, -1 when unknown). It returns nil, after the
// backoff wait, when another attempt may run; otherwise the error that ends
// the fetch: err itself when it is not Retryable, err wrapped with the
// attempt count (and ErrGaveUp) when the bound is reached, or err with the
// cancellation when ctx ends first.
func (r *Retrier) Retry(ctx context.Context, moved, total int64, err error) error {
	b := r.Backoff.WithDefaults()
	r.attempt = max(r.attempt, 1)
	n := r.attempt
	if ctx.Err() != nil {
		return fmt.Errorf("%w (cancelled: %w)", err, context.Cause(ctx))
	}
	if !Retryable(err) {
		return err
	}
	if b.progress(moved, total) {
		r.failures = 0
	}
	r.failures++
	if r.failures >= b.Attempts || n >= b.MaxAttempts {
		return fmt.Errorf("%w (%w after %d attempts)", err, ErrGaveUp, n)
	}
	d := b.Delay(r.failures)
	r.attempt++
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log.Warn("retrying", "op", r.Op, "attempt", r.attempt, "of", b.MaxAttempts, "failures", r.failures,
		"max_failures", b.Attempts, "moved", moved, "wait", d.Round(time.Millisecond), "error", err)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w (cancelled while retrying: %w)", err, context.Cause(ctx))
	case <-t.C:
		return nil
	}
}

// Do runs try until it succeeds, under a Retrier with b, log and op: try
// gets the attempt number and returns how many bytes it moved and its
// error. Do returns nil or the error that ended the fetch (see Retry).
func Do(ctx context.Context, b Backoff, log *slog.Logger, op string, try func(ctx context.Context, attempt int) (moved int64, err error)) error {
	r := &Retrier{Backoff: b, Log: log, Op: op}
	for {
		moved, err := try(ctx, r.Attempt())
		if err == nil {
			return nil
		}
		if err := r.Retry(ctx, moved, -1, err); err != nil {
			return err
		}
	}
}

// Fetch sends r with c under Do: one Get per attempt, retried within b.
// accept, when set, may take a non-2xx answer as final (404 "not here",
// 401 "authenticate first"): Fetch then returns it without error. On
// failure the last answer, if any, is returned with the error.
func Fetch(ctx context.Context, c *http.Client, b Backoff, log *slog.Logger, op string, r Request, accept func(code int) bool) (*Response, error) {
	var resp *Response
	err := Do(ctx, b, log, op, func(ctx context.Context, _ int) (int64, error) {
		res, moved, err := Get(ctx, c, r)
		resp = res
		if err != nil && res != nil && accept != nil && accept(res.Code) {
			return moved, nil
		}
		return moved, err
	})
	return resp, err
}

// permanent marks an error that no retry can cure.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent marks err as not worth another attempt (a checksum mismatch, a
// changed source); Retryable then reports false. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Retryable reports whether another attempt may cure err. Not retryable:
// errors marked Permanent, cancellation, plain HTTP without the opt-in, a
// refused or looping redirect, response headers too large, TLS
// verification failures, and HTTP statuses other than 408, 429 and 5xx.
// Everything else (network errors, timeouts, idle bounds, cut connections)
// is; Retrier.Retry stops anyway when its own context ended.
func Retryable(err error) bool {
	var se *StatusError
	switch {
	case err == nil:
		return false
	case errors.As(err, new(permanent)):
		return false
	case errors.Is(err, context.Canceled) && !errors.Is(err, ErrIdle):
		return false
	case errors.Is(err, ErrInsecureHTTP), errors.Is(err, ErrRedirect), errors.Is(err, ErrHeaderTooLarge):
		return false
	case errors.As(err, new(*tls.CertificateVerificationError)), errors.As(err, new(x509.UnknownAuthorityError)),
		errors.As(err, new(x509.HostnameError)), errors.As(err, new(x509.CertificateInvalidError)):
		return false
	case errors.As(err, &se):
		return se.Code >= 500 || se.Code == http.StatusTooManyRequests || se.Code == http.StatusRequestTimeout
	}
	return true
}
