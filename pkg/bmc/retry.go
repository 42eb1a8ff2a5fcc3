package bmc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// permanentError marks an error that a retry cannot fix (bad credentials,
// a 4xx answer, an unsupported action).
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// permanent marks err as not worth a retry.
func permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// retry runs fn with a deadline of o.Timeout per attempt, at most
// 1+o.Retries times, waiting o.Backoff before the first retry and twice as
// long before each next one, up to o.MaxBackoff. It stops at the first
// success, a permanent error, or ctx's end, and returns the last error
// (with the number of attempts when there were several).
func retry(ctx context.Context, o Options, fn func(ctx context.Context) error) error {
	wait := o.Backoff
	var err error
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, o.Timeout)
		err = fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		var p permanentError
		if errors.As(err, &p) || errors.Is(err, ErrAuth) || ctx.Err() != nil || attempt >= o.Retries {
			if attempt > 0 {
				return fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return err
		}
		o.Logger.Debug("bmc: retrying", "attempt", attempt+1, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, o.MaxBackoff)
	}
}

// waitPower polls state every o.PollInterval until it returns want, within
// bound. It fails with ErrPowerNotApplied naming want and the last state
// observed (and the last poll error when no poll succeeded), or with
// parent's error when parent ends first.
func waitPower(parent context.Context, o Options, bound time.Duration, what string, want PowerState, state func(context.Context) (PowerState, error)) error {
	ctx, cancel := context.WithTimeout(parent, bound)
	defer cancel()
	observed := PowerUnknown
	var lastErr error
	for {
		s, err := state(ctx)
		if err == nil {
			observed, lastErr = s, nil
			if s == want {
				return nil
			}
		} else {
			lastErr = err
		}
		t := time.NewTimer(o.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			if parent.Err() != nil {
				return fmt.Errorf("%s: wait for %s: %w (observed %s)", what, want, parent.Err(), observed)
			}
			if lastErr != nil && observed == PowerUnknown {
				return fmt.Errorf("%s: %w: want %s, state unknown after %s: %w", what, ErrPowerNotApplied, want, bound, lastErr)
			}
			return fmt.Errorf("%s: %w: want %s, observed %s after %s", what, ErrPowerNotApplied, want, observed, bound)
		case <-t.C:
		}
	}
}

// redactedError is an error whose text had a secret replaced; errors.Is
// and errors.As still see the original chain.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact returns err with every occurrence of secret in its text replaced
// by REDACTED: a last guard, for errors of libraries that might quote what
// they were given. Secrets shorter than 4 bytes are not searched for,
// since they would blank out ordinary words.
func redact(err error, secret string) error {
	if err == nil || len(secret) < 4 || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), secret, "REDACTED"), err: err}
}
