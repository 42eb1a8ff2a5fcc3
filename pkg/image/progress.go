package image

import (
	"sync/atomic"
	"time"

	"github.com/booty-dev/booty/pkg/safego"
)

// reporter calls a Progress callback every interval from its own goroutine,
// and once more with Done from finish, never two calls at once.
type reporter struct {
	fn       func(Progress)
	total    int64
	written  *atomic.Int64
	start    time.Time
	lastT    time.Time
	lastN    int64
	rate     float64
	stop     chan struct{}
	finished chan struct{}
}

func startReporter(fn func(Progress), interval time.Duration, total int64, written *atomic.Int64, onPanic func(error)) *reporter {
	now := time.Now()
	r := &reporter{fn: fn, total: total, written: written, start: now, lastT: now, stop: make(chan struct{}), finished: make(chan struct{})}
	if fn == nil {
		close(r.finished)
		return r
	}
	go func() {
		defer close(r.finished)
		defer safego.Recover("progress callback", onPanic)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case now := <-t.C:
				r.fn(r.snapshot(now, false))
			}
		}
	}()
	return r
}

// snapshot computes a Progress: the rate smoothed over recent intervals
// while running, the average over the whole run when final.
func (r *reporter) snapshot(now time.Time, final bool) Progress {
	n := r.written.Load()
	if dt := now.Sub(r.lastT).Seconds(); dt > 0 {
		inst := float64(n-r.lastN) / dt
		if r.lastN == 0 && r.rate == 0 {
			r.rate = inst
		} else {
			r.rate = 0.5*r.rate + 0.5*inst
		}
	}
	r.lastT, r.lastN = now, n
	if final {
		if el := now.Sub(r.start).Seconds(); el > 0 {
			r.rate = float64(n) / el
		}
	}
	p := Progress{BytesDone: n, BytesTotal: r.total, Rate: r.rate, Done: final}
	if p.BytesTotal < n {
		p.BytesTotal = 0 // the hint was only a lower bound
	}
	if p.BytesTotal > 0 && r.rate > 0 && !final {
		p.ETA = time.Duration(float64(p.BytesTotal-n) / r.rate * float64(time.Second))
	}
	return p
}

// finish stops the ticker goroutine and makes the final call.
func (r *reporter) finish() {
	if r.fn == nil {
		return
	}
	close(r.stop)
	<-r.finished
	r.fn(r.snapshot(time.Now(), true))
}
