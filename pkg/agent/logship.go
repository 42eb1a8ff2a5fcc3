package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/safego"
)

// maxPending bounds the lines buffered for the server; older lines are
// dropped (and counted) when the server is slower than the log.
const maxPending = 2000

// logShipper is a slog.Handler that passes every record to the next handler
// (the console) and also queues it for the server, which gets batches every
// few seconds from a background goroutine. Shipping failures are written to
// the console handler only, never back into the shipper.
type logShipper struct {
	next  slog.Handler
	attrs []slog.Attr
	group string
	q     *shipQueue
}

type shipQueue struct {
	r       provider.LogReporter
	console slog.Handler
	mu      sync.Mutex
	pending []api.LogLine
	dropped int
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once
	closed  chan struct{}
}

func newLogShipper(r provider.LogReporter, console slog.Handler) *logShipper {
	q := &shipQueue{r: r, console: console, wake: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{})}
	go q.loop()
	return &logShipper{next: console, q: q}
}

func (h *logShipper) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *logShipper) Handle(ctx context.Context, rec slog.Record) error {
	err := h.next.Handle(ctx, rec)
	var b strings.Builder
	b.WriteString(rec.Message)
	write := func(a slog.Attr) bool {
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		fmt.Fprintf(&b, " %s=%v", key, a.Value.Resolve())
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	rec.Attrs(write)
	h.q.add(api.LogLine{Time: rec.Time, Level: rec.Level.String(), Message: b.String()})
	return err
}

func (h *logShipper) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

func (h *logShipper) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	if c.group != "" {
		c.group += "." + name
	} else {
		c.group = name
	}
	return &c
}

// Close sends what is queued (bounded by a timeout) and stops the goroutine.
func (h *logShipper) Close() { h.q.close() }

func (q *shipQueue) add(l api.LogLine) {
	q.mu.Lock()
	if len(q.pending) >= maxPending {
		q.pending = q.pending[1:]
		q.dropped++
	}
	q.pending = append(q.pending, l)
	q.mu.Unlock()
}

func (q *shipQueue) loop() {
	defer close(q.closed)
	// A panic stops shipping, not the agent: the console keeps every line.
	defer safego.Recover("ship logs", func(err error) {
		q.console.Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelError, "log shipping stopped: "+err.Error(), 0))
	})
	t := time.NewTicker(logShipInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			q.flush()
		case <-q.done:
			q.flush()
			return
		}
	}
}

func (q *shipQueue) flush() {
	q.mu.Lock()
	lines, dropped := q.pending, q.dropped
	q.pending, q.dropped = nil, 0
	q.mu.Unlock()
	if dropped > 0 {
		lines = append([]api.LogLine{{Time: time.Now(), Level: "WARN",
			Message: fmt.Sprintf("%d log lines dropped: server slower than the log", dropped)}}, lines...)
	}
	if len(lines) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), logShipFlushPeriod)
	defer cancel()
	if err := q.r.ReportLogs(ctx, lines); err != nil {
		_ = q.console.Handle(ctx, slog.NewRecord(time.Now(), slog.LevelWarn,
			fmt.Sprintf("shipping %d log lines to the server failed: %v", len(lines), err), 0))
	}
}

func (q *shipQueue) close() {
	q.once.Do(func() { close(q.done) })
	select {
	case <-q.closed:
	case <-time.After(logShipFlushPeriod + time.Second):
	}
}
