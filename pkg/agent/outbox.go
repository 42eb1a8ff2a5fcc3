package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/safego"
)

// Bounds of the outbox: lines it keeps for bootyd (older ones are dropped
// and counted), the wait of one delivery, and the pause after a failed
// one, doubled up to its cap.
const (
	outboxMaxLines     = 200
	outboxSendTimeout  = 90 * time.Second
	outboxRetryInitial = time.Second
	outboxRetryMax     = 30 * time.Second
)

// hardwareReporter is a provider that takes a fresh hardware report
// outside an inspection (*provider.ServerProvider, once enrolled).
type hardwareReporter interface {
	ReportHardware(ctx context.Context, hw *api.HardwareDetails) error
}

// outbox holds what the agent learns in the background that bootyd must
// hear, until there is a reporter to tell it through and the network
// carries it:
//   - log lines (a lost DHCP lease): kept, in order, until bootyd took
//     them; the lease's address is gone, so the first tries may fail
//     until a new lease comes;
//   - LLDP neighbours heard after the last hardware report: a new report
//     (collected again, with every neighbour known) replaces bootyd's.
//
// A reporter comes with the enrollment (attach from the provider's
// Enrolled hook) or with the config's provider after it loaded. run
// delivers until its ctx ends, pausing with backoff after a failure.
type outbox struct {
	console *slog.Logger // where delivery failures are told; never shipped
	// collect gathers the hardware report; nil sends no hardware.
	collect func(ctx context.Context) (*api.HardwareDetails, error)
	nb      *neighbours

	mu       sync.Mutex
	lines    []queuedLine
	seq      int // of the last line added
	dropped  int
	logs     provider.LogReporter
	hw       hardwareReporter
	reported int // the neighbours version of the last report bootyd has
	wake     chan struct{}
}

// queuedLine is a line and its place in the order of lines added.
type queuedLine struct {
	seq  int
	line api.LogLine
}

func newOutbox(console *slog.Logger, nb *neighbours, collect func(context.Context) (*api.HardwareDetails, error)) *outbox {
	return &outbox{console: console, nb: nb, collect: collect, wake: make(chan struct{}, 1)}
}

func (o *outbox) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// attach sets the reporters deliveries go through; a nil one keeps the
// one attached before.
func (o *outbox) attach(logs provider.LogReporter, hw hardwareReporter) {
	o.mu.Lock()
	if logs != nil {
		o.logs = logs
	}
	if hw != nil {
		o.hw = hw
	}
	o.mu.Unlock()
	o.poke()
}

// add queues a line for bootyd.
func (o *outbox) add(l api.LogLine) {
	o.mu.Lock()
	if len(o.lines) >= outboxMaxLines {
		o.lines = o.lines[1:]
		o.dropped++
	}
	o.seq++
	o.lines = append(o.lines, queuedLine{o.seq, l})
	o.mu.Unlock()
	o.poke()
}

// hardware collects the report an enrollment or inspection sends, and
// notes which neighbours it holds so run does not send them again.
func (o *outbox) hardware(ctx context.Context) (*api.HardwareDetails, error) {
	_, v := o.nb.snapshot()
	hw, err := o.collect(ctx)
	if hw != nil {
		o.mu.Lock()
		o.reported = max(o.reported, v)
		o.mu.Unlock()
	}
	return hw, err
}

// run delivers until ctx ends: at once when something is added or a
// reporter attached, again after a failure with a pause that doubles from
// outboxRetryInitial up to outboxRetryMax (a success resets it).
func (o *outbox) run(ctx context.Context) {
	err := safego.Call("bootyd outbox", func() error {
		pause := outboxRetryInitial
		for {
			if err := o.deliver(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				o.console.Warn("cannot tell bootyd yet; retrying", "in", pause, "error", err)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(pause):
				}
				pause = min(2*pause, outboxRetryMax)
				continue
			}
			pause = outboxRetryInitial
			select {
			case <-ctx.Done():
				return nil
			case <-o.wake:
			}
		}
	})
	if err != nil {
		o.console.Error("bootyd outbox stopped", "error", err)
	}
}

// deliver sends the queued lines and, when neighbours came after the last
// report, a new hardware report, through the attached reporters (nothing
// without them). Lines bootyd took leave the queue; on failure they stay.
func (o *outbox) deliver(ctx context.Context) error {
	o.mu.Lock()
	logs, hw, reported := o.logs, o.hw, o.reported
	var send []api.LogLine
	last := 0
	if o.dropped > 0 {
		send = append(send, api.LogLine{Time: time.Now(), Level: slog.LevelWarn.String(),
			Message: fmt.Sprintf("%d earlier lines for bootyd dropped while it could not be reached", o.dropped)})
	}
	dropped := o.dropped
	for _, q := range o.lines {
		send = append(send, q.line)
		last = q.seq
	}
	o.mu.Unlock()

	if logs != nil && len(send) > 0 {
		sctx, cancel := context.WithTimeout(ctx, outboxSendTimeout)
		err := logs.ReportLogs(sctx, send)
		cancel()
		if err != nil {
			return fmt.Errorf("send %d log lines: %w", len(send), err)
		}
		o.mu.Lock()
		for len(o.lines) > 0 && o.lines[0].seq <= last {
			o.lines = o.lines[1:]
		}
		o.dropped -= dropped
		o.mu.Unlock()
	}

	if hw == nil || o.collect == nil {
		return nil
	}
	_, v := o.nb.snapshot()
	if v <= reported {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, outboxSendTimeout)
	defer cancel()
	report, err := o.collect(sctx)
	if report == nil {
		return fmt.Errorf("collect the hardware report with the lldp neighbours: %w", err)
	}
	if err := hw.ReportHardware(sctx, report); err != nil {
		return fmt.Errorf("send the hardware report with the lldp neighbours: %w", err)
	}
	o.mu.Lock()
	o.reported = max(o.reported, v)
	o.mu.Unlock()
	return nil
}
