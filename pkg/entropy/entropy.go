// Package entropy waits, with a bound, for the kernel's random number
// generator (the CRNG behind getrandom(2)) before the agent does something
// that needs cryptographic randomness: TLS to bootyd or to an https image.
// Nothing else the agent does on the way to the first image byte needs it
// (DHCP transaction IDs, backoff jitter and temporary names come from
// math/rand and the runtime), so a machine without a hardware RNG gets an
// address and plain-http work done while the pool fills.
package entropy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Message is said once, on the console and in the shipped log, when the
// agent has to wait for the pool.
const Message = "waiting for the kernel's random number generator (no hardware RNG: add virtio-rng to a VM, or enable RDRAND)"

// ErrNotReady is wrapped by Wait's error when the pool was not ready
// within the bound.
var ErrNotReady = errors.New("the kernel's random number generator is not ready")

// Defaults of Pool.
const (
	DefaultTimeout  = 3 * time.Minute
	DefaultInterval = 250 * time.Millisecond
)

// Pool is the kernel's random pool as the agent sees it. The zero value
// asks the kernel (Linux); tests set Ready and Kick.
type Pool struct {
	// Ready reports whether the CRNG is initialised; default: getrandom(2)
	// of one byte with GRND_NONBLOCK succeeds (EAGAIN: not yet).
	Ready func() (bool, error)
	// Kick is called once, when a wait starts: by default it leaves one
	// goroutine blocked in getrandom(2), which makes the kernel (5.4 and
	// later) gather entropy from CPU timing jitter until the CRNG is
	// ready. Polling with GRND_NONBLOCK alone never does.
	Kick func()
	// Timeout bounds one wait (DefaultTimeout); Interval is the pause
	// between polls (DefaultInterval).
	Timeout  time.Duration
	Interval time.Duration
	// CPUInfo and HWRNGCurrent are read by Sources; defaults
	// DefaultCPUInfo and DefaultHWRNGCurrent.
	CPUInfo      string
	HWRNGCurrent string

	mu     sync.Mutex
	ready  bool
	kicked bool
	said   bool
}

// Wait returns at once when the pool is ready. Otherwise it logs Message
// (once per Pool, whoever waits) with why, kicks the kernel, and polls
// every Interval until the pool is ready, Timeout passed or ctx ended; it
// then logs and returns how long it waited. A pool still not ready is an
// error wrapping ErrNotReady that names the time waited, why, and what to
// do; an error of Ready is returned as it is. Calls are serialised.
func (p *Pool) Wait(ctx context.Context, log *slog.Logger, why string) (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready {
		return 0, nil
	}
	ready := p.Ready
	if ready == nil {
		ready = kernelReady
	}
	ok, err := ready()
	if err != nil {
		return 0, fmt.Errorf("ask the kernel whether its random number generator is ready: %w", err)
	}
	if ok {
		p.ready = true
		return 0, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !p.said {
		log.Warn(Message, "for", why)
		p.said = true
	}
	if !p.kicked {
		p.kicked = true
		kick := p.Kick
		if kick == nil {
			kick = kernelKick
		}
		kick()
	}
	timeout, interval := p.Timeout, p.Interval
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			waited := time.Since(start).Round(time.Millisecond)
			return waited, fmt.Errorf("%w after waiting %s for %s (no hardware RNG: add virtio-rng to a VM, or enable RDRAND): %w",
				ErrNotReady, waited, why, context.Cause(wctx))
		case <-tick.C:
		}
		ok, err := ready()
		if err != nil {
			return time.Since(start), fmt.Errorf("ask the kernel whether its random number generator is ready: %w", err)
		}
		if ok {
			p.ready = true
			waited := time.Since(start).Round(time.Millisecond)
			log.Info("the kernel's random number generator is ready", "waited", waited.String(), "for", why)
			return waited, nil
		}
	}
}
