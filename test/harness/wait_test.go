package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// fakeGuest stands in for a QEMU VM: it exits when told to or when killed.
type fakeGuest struct {
	mu     sync.Mutex
	exited chan struct{}
	lines  []string
	killed bool
}

func newFakeGuest(lines int) *fakeGuest {
	g := &fakeGuest{exited: make(chan struct{})}
	for i := range lines {
		g.lines = append(g.lines, fmt.Sprintf("console line %d", i))
	}
	return g
}

func (g *fakeGuest) Exited() <-chan struct{} { return g.exited }
func (g *fakeGuest) Console() []string       { return g.lines }
func (g *fakeGuest) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.exited:
	default:
		close(g.exited)
	}
}
func (g *fakeGuest) Kill() error {
	g.mu.Lock()
	g.killed = true
	g.mu.Unlock()
	g.exit()
	return nil
}
func (g *fakeGuest) Wait(ctx context.Context) error {
	select {
	case <-g.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestWaitOutcome(t *testing.T) {
	machine := api.StatusReport{Step: api.StepMachine}
	step := api.StatusReport{Step: "write-image", Index: 2, Total: 3}
	with := func(r api.StatusReport, state string) api.StatusReport { r.State = state; return r }

	tests := []struct {
		name string
		// before is reported before the boot, during while the VM runs.
		before, during []api.StatusReport
		exit           bool // the guest exits after the reports
		timeout        time.Duration
		wantState      string
		wantErr        error // nil, ErrNoOutcome, ErrStillRunning, context.DeadlineExceeded
		wantKilled     bool
	}{
		{
			name:      "provisioned then powered off",
			during:    []api.StatusReport{with(step, api.StateStarted), with(step, api.StateSucceeded), with(machine, api.StateProvisioned)},
			exit:      true,
			wantState: api.StateProvisioned,
		},
		{
			name:      "error then powered off",
			during:    []api.StatusReport{with(step, api.StateStarted), with(step, api.StateFailed), with(machine, api.StateError)},
			exit:      true,
			wantState: api.StateError,
		},
		{
			name:      "outcome of an earlier run does not count",
			before:    []api.StatusReport{with(machine, api.StateProvisioned)},
			during:    []api.StatusReport{with(step, api.StateStarted)},
			timeout:   500 * time.Millisecond,
			wantState: "running",
			wantErr:   context.DeadlineExceeded,
		},
		{
			name:      "exited without an outcome",
			during:    []api.StatusReport{with(step, api.StateStarted)},
			exit:      true,
			wantState: "running",
			wantErr:   ErrNoOutcome,
		},
		{
			name:       "outcome but no poweroff",
			during:     []api.StatusReport{with(machine, api.StateError)},
			wantState:  api.StateError,
			wantErr:    ErrStillRunning,
			wantKilled: true,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lab := NewLabT(t, LabOptions{FilesDir: filesDir(t), ExitGrace: 300 * time.Millisecond})
			m, err := lab.AddMachine(MachineSpec{MAC: fmt.Sprintf("52:54:00:00:03:%02x", i)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.before {
				report(t, lab, m, r)
			}
			time.Sleep(10 * time.Millisecond)
			g := newFakeGuest(60)
			m.mu.Lock()
			m.guest, m.bootedAt = g, time.Now()
			m.mu.Unlock()

			timeout := tt.timeout
			if timeout == 0 {
				timeout = 20 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			go func() {
				time.Sleep(50 * time.Millisecond)
				for _, r := range tt.during {
					report(t, lab, m, r)
				}
				if tt.exit {
					g.exit()
				}
			}()
			start := time.Now()
			st, err := m.WaitOutcome(ctx)
			took := time.Since(start)
			if st.State != tt.wantState {
				t.Errorf("state = %q, want %q", st.State, tt.wantState)
			}
			if g.killed != tt.wantKilled {
				t.Errorf("killed = %v, want %v", g.killed, tt.wantKilled)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("WaitOutcome: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WaitOutcome error = %v, want %v", err, tt.wantErr)
			}
			// Errors quote the last 40 console lines, and only those.
			msg := err.Error()
			if !strings.Contains(msg, "last 40 of 60 console lines") || !strings.Contains(msg, "console line 20\n") ||
				!strings.Contains(msg, "console line 59\n") || strings.Contains(msg, "console line 19\n") {
				t.Errorf("error does not quote the console tail:\n%s", msg)
			}
			if took > 15*time.Second {
				t.Errorf("WaitOutcome took %s", took)
			}
		})
	}
}
