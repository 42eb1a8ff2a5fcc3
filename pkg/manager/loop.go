package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// ControlLoopConfig should be embedded in every component that acts as a
// control loop. RegisterFlags should be called by the component whenever it
// is registering its own flags. Check should be called whenever the
// component is instantiated, after RegisterFlags has been called.
type ControlLoopConfig struct {
	// DBQueryLimiter limits the rate at which the BMDB is queried for
	// machines needing the loop's work. Must be set.
	DBQueryLimiter *rate.Limiter
	// Parallelism is how many workers of the loop run, each with its own
	// BMDB session and at most one machine at a time. 0 means 1.
	Parallelism int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// DefaultDBQueryRate is the default of the -db-query-rate flags: one query
// a second, bursts of one.
const DefaultDBQueryRate = "1s,1"

// RegisterFlags registers the config's flags on pflag.CommandLine, named
// after prefix (the component's name): PREFIX-db-query-rate and
// PREFIX-parallelism.
func (c *ControlLoopConfig) RegisterFlags(prefix string) { c.AddFlags(pflag.CommandLine, prefix) }

// AddFlags registers the config's flags on fs (see RegisterFlags).
func (c *ControlLoopConfig) AddFlags(fs *pflag.FlagSet, prefix string) {
	if c.DBQueryLimiter == nil {
		c.DBQueryLimiter, _ = ParseLimiter(DefaultDBQueryRate)
	}
	fs.Var(&limiterValue{l: &c.DBQueryLimiter}, prefix+"-db-query-rate",
		"how often the "+prefix+" loop queries the BMDB for work, as INTERVAL,BURST (\"1s,1\": once a second)")
	fs.IntVar(&c.Parallelism, prefix+"-parallelism", max(c.Parallelism, 1), "how many "+prefix+" workers run at once")
}

// Check should be called after RegisterFlags but before the control loop is
// run. If an error is returned, the control loop cannot start. A zero
// Parallelism becomes 1.
func (c *ControlLoopConfig) Check() error {
	if c.DBQueryLimiter == nil {
		return errors.New("control loop: DBQueryLimiter must be set")
	}
	if c.Parallelism < 0 {
		return fmt.Errorf("control loop: parallelism %d is negative", c.Parallelism)
	}
	if c.Parallelism == 0 {
		c.Parallelism = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// ParseLimiter parses "INTERVAL,BURST" (a Go duration and a positive
// integer; BURST defaults to 1) into a limiter allowing one event per
// INTERVAL with bursts of BURST.
func ParseLimiter(s string) (*rate.Limiter, error) {
	iv, b, _ := strings.Cut(strings.TrimSpace(s), ",")
	d, err := time.ParseDuration(strings.TrimSpace(iv))
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("rate %q: interval %q is not a positive duration", s, iv)
	}
	burst := 1
	if b != "" {
		if burst, err = strconv.Atoi(strings.TrimSpace(b)); err != nil || burst < 1 {
			return nil, fmt.Errorf("rate %q: burst %q is not a positive integer", s, b)
		}
	}
	return rate.NewLimiter(rate.Every(d), burst), nil
}

// limiterValue is a pflag.Value setting a *rate.Limiter from
// "INTERVAL,BURST".
type limiterValue struct {
	l   **rate.Limiter
	raw string
}

func (v *limiterValue) String() string {
	if v == nil || v.l == nil || *v.l == nil {
		return ""
	}
	if v.raw != "" {
		return v.raw
	}
	return fmt.Sprintf("%s,%d", time.Duration(float64(time.Second)/float64((*v.l).Limit())), (*v.l).Burst())
}

func (v *limiterValue) Set(s string) error {
	l, err := ParseLimiter(s)
	if err != nil {
		return err
	}
	*v.l, v.raw = l, s
	return nil
}

func (v *limiterValue) Type() string { return "rate" }

// ControlLoop is a kind of work on machines that RunControlLoop runs:
// Initializer and Recoverer implement it.
type ControlLoop interface {
	// Process names the work in the BMDB (work rows, history, backoff) and
	// the loop's component sessions.
	Process() bmdb.Process
	// LoopConfig returns the loop's parallelism and rate.
	LoopConfig() *ControlLoopConfig
	// Backoff is how long a machine whose work failed is left alone.
	Backoff() bmdb.Backoff
	// Candidates returns the IDs of machines that may need the work. Each
	// is claimed with Filter (plus its ID), which the BMDB checks again in
	// the claim's transaction.
	Candidates(ctx context.Context, db *bmdb.DB) ([]string, error)
	// Filter is what a claim requires of a machine.
	Filter() bmdb.Filter
	// Work does the work on a claimed machine. It returns the transition
	// Finish applies (nil for none); an error Fails the work with Backoff,
	// one wrapping ErrSkip cancels it without a backoff.
	Work(ctx context.Context, db *bmdb.DB, m bmdb.Machine) (*bmdb.Transition, error)
}

// ErrSkip tells RunControlLoop that a claimed machine turned out not to need
// the work: the claim is cancelled, with no backoff.
var ErrSkip = errors.New("machine does not need the work")

// maxClaimsPerIteration bounds the claims (write transactions) one
// iteration tries: candidates in backoff or held elsewhere are refused by the
// claim, and the next iteration shuffles again.
const maxClaimsPerIteration = 16

// sessionInterval is the lease of a worker's BMDB session.
const sessionInterval = 10 * time.Second

// RunControlLoop runs loop against the BMDB until ctx ends, with
// LoopConfig().Parallelism workers. Each worker opens a BMDB session
// (component: the loop's process) and repeats: wait for DBQueryLimiter,
// claim one machine among the loop's candidates (the BMDB's Claim: one
// transaction, so several workers and several bootyd replicas never hold
// one machine at once, and machines in backoff are skipped), do the work
// with a context that ends if the session's lease lapses, then Finish (with
// the loop's transition) or Fail (with the loop's backoff, persisted in the
// BMDB). A session that ended is reopened, with a bounded backoff when the
// BMDB cannot be reached. It returns nil when ctx ended, or the config's
// error.
func RunControlLoop(ctx context.Context, db *bmdb.DB, loop ControlLoop) error {
	cfg := loop.LoopConfig()
	if err := cfg.Check(); err != nil {
		return fmt.Errorf("run %s loop: %w", loop.Process(), err)
	}
	host, _ := os.Hostname()
	var wg sync.WaitGroup
	for i := range cfg.Parallelism {
		w := &worker{db: db, loop: loop, cfg: cfg, info: fmt.Sprintf("%s pid %d worker %d", host, os.Getpid(), i),
			log: cfg.Logger.With("component", string(loop.Process()), "worker", i)}
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
	return nil
}

type worker struct {
	db   *bmdb.DB
	loop ControlLoop
	cfg  *ControlLoopConfig
	info string
	log  *slog.Logger
}

func (w *worker) run(ctx context.Context) {
	retry := time.Second
	for ctx.Err() == nil {
		s, err := w.db.StartSession(ctx, bmdb.SessionConfig{Component: string(w.loop.Process()), RuntimeInfo: w.info, Interval: sessionInterval})
		if err != nil {
			w.log.Warn("start session failed; retrying", "err", err, "in", retry)
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			retry = min(2*retry, 30*time.Second)
			continue
		}
		retry = time.Second
		w.session(ctx, s)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := s.Close(cctx); err != nil {
			w.log.Warn("close session", "err", err)
		}
		cancel()
	}
}

// session runs iterations until the session or ctx ends.
func (w *worker) session(ctx context.Context, s *bmdb.Session) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-sctx.Done():
		}
	}()
	for {
		if err := w.cfg.DBQueryLimiter.Wait(sctx); err != nil {
			return
		}
		if err := w.iterate(sctx, s); errors.Is(err, bmdb.ErrSessionExpired) || sctx.Err() != nil {
			if err != nil && ctx.Err() == nil {
				w.log.Warn("session ended; reopening", "err", err)
			}
			return
		} else if err != nil && !errors.Is(err, bmdb.ErrNothingToDo) {
			w.log.Warn("iteration failed", "err", err)
		}
	}
}

// iterate claims one machine and works it.
func (w *worker) iterate(ctx context.Context, s *bmdb.Session) error {
	ids, err := w.loop.Candidates(ctx, w.db)
	if err != nil {
		return fmt.Errorf("%s: candidates: %w", w.loop.Process(), err)
	}
	// Workers start at different places, so they do not all race for the
	// first candidate.
	mrand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	if len(ids) > maxClaimsPerIteration {
		ids = ids[:maxClaimsPerIteration]
	}
	var work *bmdb.Work
	for _, id := range ids {
		f := w.loop.Filter()
		f.MachineID = id
		work, err = s.Claim(ctx, w.loop.Process(), f)
		if err == nil {
			break
		}
		if !errors.Is(err, bmdb.ErrNothingToDo) {
			return err
		}
	}
	if work == nil {
		return bmdb.ErrNothingToDo
	}
	return w.work(ctx, work)
}

func (w *worker) work(ctx context.Context, work *bmdb.Work) error {
	log := w.log.With("machine", work.MachineID)
	// The outcome is written even when ctx ended meanwhile; the BMDB refuses
	// it if the claim was lost.
	end := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}
	m, err := w.db.GetMachine(ctx, work.MachineID)
	var tr *bmdb.Transition
	if err == nil {
		tr, err = w.loop.Work(ctx, w.db, m)
	}
	ectx, cancel := end()
	defer cancel()
	switch {
	case errors.Is(err, ErrSkip):
		log.Debug("claimed machine needs no work", "reason", err)
		return work.Cancel(ectx, err.Error())
	case err != nil:
		log.Warn("work failed; backing off", "err", err)
		if ferr := work.Fail(ectx, w.loop.Backoff(), err.Error()); ferr != nil {
			return fmt.Errorf("fail %s on %s: %w", work.Process, work.MachineID, ferr)
		}
		return nil
	}
	if ferr := work.Finish(ectx, tr); ferr != nil {
		if errors.Is(ferr, bmdb.ErrInvalidTransition) || errors.Is(ferr, bmdb.ErrStaleGeneration) {
			log.Warn("finish: the transition no longer applies", "err", ferr)
			return work.Fail(ectx, w.loop.Backoff(), ferr.Error())
		}
		return fmt.Errorf("finish %s on %s: %w", work.Process, work.MachineID, ferr)
	}
	log.Info("work finished")
	return nil
}

// listMachines returns every machine in one of states (all when empty),
// a page at a time.
func listMachines(ctx context.Context, db *bmdb.DB, states ...bmdb.State) ([]bmdb.Machine, error) {
	return listMachinesWith(ctx, db, bmdb.ListOptions{States: states})
}

// listMachinesWith returns every machine o selects, a page at a time.
func listMachinesWith(ctx context.Context, db *bmdb.DB, o bmdb.ListOptions) ([]bmdb.Machine, error) {
	var out []bmdb.Machine
	after := ""
	for {
		o.AfterName = after
		page, err := db.ListMachines(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out, nil
		}
		after = page[len(page)-1].Name
	}
}
