package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/manager"
)

// countingLoop moves registering machines to available. It records how
// many workers act on each machine at once and how often it succeeded on
// each; machines named flaky-* fail their first attempt.
type countingLoop struct {
	cfg manager.ControlLoopConfig

	mu       sync.Mutex
	inFlight map[string]int
	overlaps []string
	done     map[string]int
	failed   map[string]bool
}

func newCountingLoop(cfg manager.ControlLoopConfig) *countingLoop {
	return &countingLoop{cfg: cfg, inFlight: map[string]int{}, done: map[string]int{}, failed: map[string]bool{}}
}

func (l *countingLoop) Process() bmdb.Process                  { return "test" }
func (l *countingLoop) LoopConfig() *manager.ControlLoopConfig { return &l.cfg }
func (l *countingLoop) Backoff() bmdb.Backoff {
	return bmdb.Backoff{Initial: time.Second, Maximum: time.Minute, Exponent: 2}
}
func (l *countingLoop) Filter() bmdb.Filter {
	return bmdb.Filter{States: []bmdb.State{bmdb.StateRegistering}}
}

func (l *countingLoop) Candidates(ctx context.Context, db *bmdb.DB) ([]string, error) {
	ms, err := db.ListMachines(ctx, bmdb.ListOptions{States: []bmdb.State{bmdb.StateRegistering}})
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids, err
}

func (l *countingLoop) Work(ctx context.Context, db *bmdb.DB, m bmdb.Machine) (*bmdb.Transition, error) {
	l.mu.Lock()
	l.inFlight[m.Name]++
	if l.inFlight[m.Name] > 1 {
		l.overlaps = append(l.overlaps, m.Name)
	}
	l.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // hold the machine while others look for work
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight[m.Name]--
	if strings.HasPrefix(m.Name, "flaky-") && !l.failed[m.Name] {
		l.failed[m.Name] = true
		return nil, errors.New("first attempt fails")
	}
	l.done[m.Name]++
	return &bmdb.Transition{To: bmdb.StateAvailable, Reason: "Tested"}, nil
}

// TestControlLoopReplicas runs the loop as two replicas (two BMDB handles on
// one database, three workers each) over 24 machines: every machine is
// worked to success exactly once, never by two workers at once, and a
// machine that failed is left alone for its persisted backoff, then retried,
// and its backoff is reset by the success.
func TestControlLoopReplicas(t *testing.T) {
	for _, e := range bmdbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			dsn := e.DSN(t)
			db1, db2 := open(t, dsn), open(t, dsn)
			ctx := testCtx(t)
			const n = 24
			for i := range n {
				name := fmt.Sprintf("m-%02d", i)
				if i < 3 {
					name = fmt.Sprintf("flaky-%d", i)
				}
				if _, err := db1.CreateMachine(ctx, bmdb.NewMachine{Name: name, BootMAC: mac(i + 1)}); err != nil {
					t.Fatal(err)
				}
			}
			loop := newCountingLoop(loopConfig(t, 3))
			// One loop value shared by both replicas records every worker.
			runLoop(t, db1, loop)
			runLoop(t, db2, loop)
			eventually(t, 90*time.Second, "all machines available", func() bool {
				ms, err := db1.ListMachines(ctx, bmdb.ListOptions{States: []bmdb.State{bmdb.StateAvailable}})
				return err == nil && len(ms) == n
			})
			loop.mu.Lock()
			defer loop.mu.Unlock()
			if len(loop.overlaps) > 0 {
				t.Fatalf("machines worked by two workers at once: %v", loop.overlaps)
			}
			for name, c := range loop.done {
				if c != 1 {
					t.Errorf("%s succeeded %d times", name, c)
				}
			}
			if len(loop.done) != n {
				t.Fatalf("%d machines succeeded, want %d", len(loop.done), n)
			}
			m, _ := db1.MachineByName(ctx, "flaky-0")
			hist, err := db1.WorkHistory(ctx, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			var failedAt, finishedAt time.Time
			for _, h := range hist {
				switch h.Event {
				case bmdb.WorkFailed:
					failedAt = h.Time
				case bmdb.WorkFinished:
					finishedAt = h.Time
				}
			}
			if failedAt.IsZero() || finishedAt.IsZero() {
				t.Fatalf("flaky-0 history: %+v", hist)
			}
			// The retry waited out the persisted backoff (1 s, whole seconds),
			// the BMDB's times, not a stopwatch.
			if d := finishedAt.Sub(failedAt); d < 900*time.Millisecond {
				t.Fatalf("flaky-0 retried %s after failing, inside its 1 s backoff", d)
			}
			if _, err := db1.GetBackoff(ctx, m.ID, "test"); !errors.Is(err, bmdb.ErrNotFound) {
				t.Fatalf("backoff after success: %v, want none", err)
			}
		})
	}
}

// TestControlLoopConfigFlags: flags set the limiter and parallelism; bad
// values are refused naming them; Check requires a limiter.
func TestControlLoopConfigFlags(t *testing.T) {
	var c manager.ControlLoopConfig
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c.AddFlags(fs, "recoverer")
	if err := fs.Parse([]string{"--recoverer-db-query-rate=250ms,5", "--recoverer-parallelism=4"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if c.Parallelism != 4 || c.DBQueryLimiter.Burst() != 5 || c.DBQueryLimiter.Limit() != 4 {
		t.Fatalf("config: parallelism %d burst %d limit %v", c.Parallelism, c.DBQueryLimiter.Burst(), c.DBQueryLimiter.Limit())
	}
	for _, bad := range []string{"--recoverer-db-query-rate=fast", "--recoverer-db-query-rate=1s,0", "--recoverer-db-query-rate=-1s"} {
		err := fs.Parse([]string{bad})
		if err == nil || !strings.Contains(err.Error(), "recoverer-db-query-rate") {
			t.Errorf("%s: %v, want an error naming the flag", bad, err)
		}
	}
	if err := (&manager.ControlLoopConfig{}).Check(); err == nil {
		t.Fatal("a config without a limiter passed Check")
	}
	if err := (&manager.ControlLoopConfig{DBQueryLimiter: c.DBQueryLimiter, Parallelism: -1}).Check(); err == nil {
		t.Fatal("negative parallelism passed Check")
	}
}
