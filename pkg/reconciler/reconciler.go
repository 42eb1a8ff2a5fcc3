package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/provisioner"
)

// Process is the reconciler's process in the BMDB (work rows, history,
// backoff).
const Process bmdb.Process = "reconcile"

// Defaults of Config.
const (
	// DefaultResync is how long a machine whose last call was complete is
	// left alone unless it changes.
	DefaultResync = time.Minute
	// DefaultDBQueryRate: five queries a second, bursts of five.
	DefaultDBQueryRate = "200ms,5"
	// DefaultParallelism: BMC calls wait for power changes, so several
	// machines are worked at once.
	DefaultParallelism = 4
)

// DefaultErrorBackoff is metal3's: a host in an error state is retried
// after 2^n minutes, n capped at 9, up to half of it earlier at random.
var DefaultErrorBackoff = bmdb.Backoff{Initial: time.Minute, Maximum: 512 * time.Minute, Exponent: 2, Jitter: 0.5}

// Reasons of the events the reconciler records.
const (
	ReasonFailed    = "ReconcileFailed"
	ReasonRecovered = "ReconcileRecovered"
	ReasonDeleting  = "PoweredOffBeforeDelete"
)

// agentEndReason ends the agent session of a machine the reconciler powered
// off (the Recoverer leaves such sessions alone).
const agentEndReason = "reconciler: powered off"

// Config configures the reconciler.
type Config struct {
	manager.ControlLoopConfig
	// Factory makes each machine's Provisioner; required
	// (provisioner.NewFactory over the same BMDB).
	Factory provisioner.Factory
	// ErrorBackoff is how long a machine is left after a failed call;
	// default DefaultErrorBackoff.
	ErrorBackoff bmdb.Backoff
	// Resync is how long a machine whose last call was complete is left
	// unless it changes; default DefaultResync.
	Resync time.Duration
	// BootMode is the firmware boot mode the agent and the OS boot in;
	// default UEFI.
	BootMode provisioner.BootMode
}

// AddFlags registers the loop's flags on fs, named after prefix:
// PREFIX-db-query-rate, PREFIX-parallelism (manager.ControlLoopConfig),
// PREFIX-resync, PREFIX-error-backoff and PREFIX-error-backoff-max.
func (c *Config) AddFlags(fs *pflag.FlagSet, prefix string) {
	if c.DBQueryLimiter == nil {
		c.DBQueryLimiter, _ = manager.ParseLimiter(DefaultDBQueryRate)
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	c.defaults()
	c.ControlLoopConfig.AddFlags(fs, prefix)
	fs.DurationVar(&c.Resync, prefix+"-resync", c.Resync, "how long the "+prefix+" loop leaves a machine with nothing to do, unless it changes")
	fs.DurationVar(&c.ErrorBackoff.Initial, prefix+"-error-backoff", c.ErrorBackoff.Initial,
		"first wait before a machine in an error state is retried; each further failure doubles it")
	fs.DurationVar(&c.ErrorBackoff.Maximum, prefix+"-error-backoff-max", c.ErrorBackoff.Maximum, "longest wait before a machine in an error state is retried")
}

// RegisterFlags registers the flags on pflag.CommandLine (see AddFlags).
func (c *Config) RegisterFlags(prefix string) { c.AddFlags(pflag.CommandLine, prefix) }

func (c *Config) defaults() {
	if c.ErrorBackoff == (bmdb.Backoff{}) {
		c.ErrorBackoff = DefaultErrorBackoff
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.BootMode == "" {
		c.BootMode = provisioner.DefaultBootMode
	}
}

// Check fills in defaults and returns an error naming what is not valid.
func (c *Config) Check() error {
	if c.DBQueryLimiter == nil {
		c.DBQueryLimiter = rate.NewLimiter(rate.Every(200*time.Millisecond), 5)
	}
	if err := c.ControlLoopConfig.Check(); err != nil {
		return fmt.Errorf("reconciler: %w", err)
	}
	c.defaults()
	switch {
	case c.Factory == nil:
		return errors.New("reconciler: no provisioner factory")
	case c.Resync < time.Second:
		return fmt.Errorf("reconciler: resync %s is under 1s", c.Resync)
	case c.ErrorBackoff.Initial < time.Second || c.ErrorBackoff.Maximum < c.ErrorBackoff.Initial:
		return fmt.Errorf("reconciler: error backoff %s (max %s): want at least 1s and a max not under it",
			c.ErrorBackoff.Initial, c.ErrorBackoff.Maximum)
	case c.ErrorBackoff.Exponent != 0 && c.ErrorBackoff.Exponent < 1, c.ErrorBackoff.Jitter < 0 || c.ErrorBackoff.Jitter >= 1:
		return fmt.Errorf("reconciler: error backoff exponent %g (want ≥ 1) or jitter %g (want [0, 1)) out of range",
			c.ErrorBackoff.Exponent, c.ErrorBackoff.Jitter)
	}
	return nil
}

// Reconciler is the host reconciler, a manager.ControlLoop.
type Reconciler struct {
	cfg Config
	db  *bmdb.DB
	log *slog.Logger

	mu sync.Mutex
	// seen is when each machine is due again and what it looked like
	// after its last call.
	seen map[string]seen
	// deletable are machines in deleting that were found powered off.
	deletable map[string]bool
}

type seen struct {
	due     time.Time
	updated time.Time
	state   bmdb.State
}

// New checks cfg and returns the reconciler over db.
func New(db *bmdb.DB, cfg Config) (*Reconciler, error) {
	if db == nil {
		return nil, errors.New("new reconciler: no BMDB")
	}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("new reconciler: %w", err)
	}
	return &Reconciler{cfg: cfg, db: db, log: cfg.Logger.With("component", "reconciler"),
		seen: map[string]seen{}, deletable: map[string]bool{}}, nil
}

// Run runs the reconciler until ctx ends (manager.RunControlLoop).
func (r *Reconciler) Run(ctx context.Context) error { return manager.RunControlLoop(ctx, r.db, r) }

// Process returns Process.
func (r *Reconciler) Process() bmdb.Process { return Process }

// LoopConfig returns the loop's parallelism and rate.
func (r *Reconciler) LoopConfig() *manager.ControlLoopConfig { return &r.cfg.ControlLoopConfig }

// Backoff returns the error backoff.
func (r *Reconciler) Backoff() bmdb.Backoff { return r.cfg.ErrorBackoff }

// Filter keeps the reconciler off machines the Recoverer or the Initializer
// works on.
func (r *Reconciler) Filter() bmdb.Filter {
	return bmdb.Filter{Exclusive: []bmdb.Process{manager.ProcessRecover, manager.ProcessInitialize}}
}

// managed reports whether the reconciler drives m: it has a BMC and is not
// detached.
func managed(m bmdb.Machine) bool {
	return m.BMC.Address != "" && m.Status != bmdb.StatusDetached
}

// Candidates deletes the machines found powered off in deleting (a delete
// that finds work held on a machine waits for the next round), then
// returns the managed machines that are due: never called, their requeue
// time passed, or changed since their last call.
func (r *Reconciler) Candidates(ctx context.Context, db *bmdb.DB) ([]string, error) {
	r.sweep(ctx)
	var out []string
	now := time.Now()
	live := map[string]bool{}
	after := ""
	for {
		// Only machines with a BMC can be managed: a fleet of agents
		// without BMCs is not read several times a second.
		page, err := db.ListMachines(ctx, bmdb.ListOptions{WithBMC: true, AfterName: after})
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		for _, m := range page {
			live[m.ID] = true
			if !managed(m) {
				continue
			}
			s, ok := r.seen[m.ID]
			if !ok || !now.Before(s.due) || !m.UpdatedAt.Equal(s.updated) || m.State != s.state {
				out = append(out, m.ID)
			}
		}
		r.mu.Unlock()
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Name
	}
	r.mu.Lock()
	for id := range r.seen {
		if !live[id] {
			delete(r.seen, id)
		}
	}
	r.mu.Unlock()
	return out, nil
}

// sweep deletes the machines in deleting that were found powered off.
func (r *Reconciler) sweep(ctx context.Context) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.deletable))
	for id := range r.deletable {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		host, err := provisioner.LoadHostData(ctx, r.db, id)
		if errors.Is(err, bmdb.ErrNotFound) {
			r.forget(id)
			continue
		}
		if err != nil {
			r.log.Warn("delete machine: load it", "machine", id, "err", err)
			continue
		}
		p, err := r.cfg.Factory.NewProvisioner(ctx, host, r.publisher(host.Name))
		if err != nil {
			r.log.Warn("delete machine", "machine", host.Name, "err", err)
			continue
		}
		res, err := p.Delete()
		if err != nil {
			r.log.Info("delete machine: not yet", "machine", host.Name, "err", err)
			continue
		}
		if !res.Dirty {
			r.log.Info("machine deleted", "machine", host.Name)
			r.forget(id)
		}
	}
}

func (r *Reconciler) forget(id string) {
	r.mu.Lock()
	delete(r.deletable, id)
	delete(r.seen, id)
	r.mu.Unlock()
}

func (r *Reconciler) publisher(name string) provisioner.EventPublisher {
	return func(reason, msg string) {
		r.log.Info("provisioner event", "machine", name, "reason", reason, "message", msg)
	}
}

// outcome is what one step did.
type outcome struct {
	// call names the Provisioner call, for logs and errors.
	call string
	// errType is the error type a failure of the call records.
	errType bmdb.ErrorType
	res     provisioner.Result
	// finish is applied when the claim ends (nil for none).
	finish *bmdb.Transition
	// poweredOff: the call powered the machine off (or found it off).
	poweredOff bool
	// deletable: the machine is in deleting and off.
	deletable bool
}

// Work takes one step on machine m (see the package doc's state table):
// it makes m's Provisioner, calls it by m's state, records a failure as
// m's error state, clears that state after a success, and remembers when
// m is due again. A failure or a Go error is returned, so the claim fails
// with the error backoff.
func (r *Reconciler) Work(ctx context.Context, db *bmdb.DB, m bmdb.Machine) (*bmdb.Transition, error) {
	if !managed(m) {
		return nil, fmt.Errorf("machine %s has no BMC or is detached: %w", m.Name, manager.ErrSkip)
	}
	_, err := db.GetBackoff(ctx, m.ID, Process)
	retrying := err == nil
	if err != nil && !errors.Is(err, bmdb.ErrNotFound) {
		return nil, err
	}
	host, err := provisioner.LoadHostData(ctx, db, m.ID)
	if err != nil {
		return nil, err
	}
	p, err := r.cfg.Factory.NewProvisioner(ctx, host, r.publisher(m.Name))
	if err != nil {
		return nil, err
	}
	log := r.log.With("machine", m.Name, "state", m.State)
	o, err := r.step(ctx, p, m, retrying)
	// After a failure the BMDB's backoff decides when the claim succeeds
	// again; it is never shorter than this, so candidates in backoff are
	// not offered to a claim (a write) at every round.
	inBackoff := max(time.Second, time.Duration(float64(r.cfg.ErrorBackoff.Initial)*(1-r.cfg.ErrorBackoff.Jitter)))
	if err != nil {
		r.remember(ctx, m.ID, inBackoff)
		return nil, fmt.Errorf("reconcile %s (%s): %s: %w", m.Name, m.State, o.call, err)
	}
	if o.res.ErrorMessage != "" {
		err := r.recordFailure(ctx, m, o, retrying)
		r.remember(ctx, m.ID, inBackoff) // after the failure's own change of the machine
		if err != nil {
			return nil, err
		}
		log.Warn("reconcile failed; backing off", "call", o.call, "error_type", o.errType, "reason", o.res.ErrorMessage)
		return nil, fmt.Errorf("reconcile %s (%s): %s: %s", m.Name, m.State, o.call, o.res.ErrorMessage)
	}
	if o.poweredOff {
		if err := r.endAgent(ctx, m.ID); err != nil {
			return nil, err
		}
	}
	if err := r.clearFailure(ctx, m.ID, o); err != nil {
		return nil, err
	}
	if o.deletable {
		r.mu.Lock()
		r.deletable[m.ID] = true
		r.mu.Unlock()
	}
	next := r.cfg.Resync
	if o.res.Dirty {
		next = o.res.RequeueAfter
	}
	r.remember(ctx, m.ID, next)
	log.Debug("reconciled", "call", o.call, "dirty", o.res.Dirty, "requeue_after", o.res.RequeueAfter)
	return o.finish, nil
}

// endAgent ends the agent session of a machine that was powered off, if
// one is open.
func (r *Reconciler) endAgent(ctx context.Context, id string) error {
	s, err := r.db.GetAgentSession(ctx, id)
	if errors.Is(err, bmdb.ErrNotFound) || err == nil && !s.EndedAt.IsZero() {
		return nil
	}
	if err != nil {
		return err
	}
	return r.db.EndAgentSession(ctx, id, agentEndReason)
}

// remember records when machine id is due again (after d) and what it
// looks like now; a machine whose state moved on meanwhile is due at once.
func (r *Reconciler) remember(ctx context.Context, id string, d time.Duration) {
	m, err := r.db.GetMachine(ctx, id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		delete(r.seen, id)
		return
	}
	r.seen[id] = seen{due: time.Now().Add(d), updated: m.UpdatedAt, state: m.State}
}

// recordFailure puts the machine in its error state: status error, the
// call's error type, the reason, the count plus one. A first failure that
// only repeats an error the machine holds already (its agent's, which the
// reason quotes) is not counted twice.
func (r *Reconciler) recordFailure(ctx context.Context, m bmdb.Machine, o outcome, retrying bool) error {
	cur, err := r.db.GetMachine(ctx, m.ID)
	if err != nil {
		return err
	}
	if !retrying && cur.Status == bmdb.StatusError && cur.Error.Type == o.errType && cur.Error.Message != "" && strings.Contains(o.res.ErrorMessage, cur.Error.Message) {
		return nil
	}
	_, err = r.db.Transition(ctx, m.ID, bmdb.Transition{To: cur.State, Reason: ReasonFailed,
		Message: o.call + " failed", Error: &bmdb.ErrorInfo{Type: o.errType, Message: o.res.ErrorMessage}})
	if err != nil {
		return fmt.Errorf("record the failure of %s on %s: %w", o.call, m.Name, err)
	}
	return nil
}

// clearFailure ends the error state of a machine whose call succeeded.
func (r *Reconciler) clearFailure(ctx context.Context, id string, o outcome) error {
	cur, err := r.db.GetMachine(ctx, id)
	if err != nil {
		return err
	}
	if cur.Status != bmdb.StatusError {
		return nil
	}
	_, err = r.db.Transition(ctx, id, bmdb.Transition{To: cur.State, Status: bmdb.StatusOK, Reason: ReasonRecovered,
		Message: fmt.Sprintf("%s succeeded; %s cleared", o.call, cur.Error.Type)})
	if err != nil {
		return fmt.Errorf("clear the error state of %s: %w", cur.Name, err)
	}
	return nil
}

// step makes the Provisioner call m's state asks for (the package doc's
// table).
func (r *Reconciler) step(ctx context.Context, p provisioner.Provisioner, m bmdb.Machine, retrying bool) (outcome, error) {
	switch m.State {
	case bmdb.StateRegistering:
		o := outcome{call: "ValidateManagementAccess", errType: bmdb.ErrorRegistration}
		var err error
		o.res, _, err = p.ValidateManagementAccess(provisioner.ManagementAccessData{BootMode: r.cfg.BootMode,
			State: provisioner.StateRegistering}, false, retrying)
		if err != nil || o.res != (provisioner.Result{}) {
			return o, err
		}
		return r.inspect(p, retrying, true)
	case bmdb.StateInspecting:
		return r.inspect(p, retrying, false)
	case bmdb.StateAvailable:
		if m.Spec.Image.URL != "" && m.Online {
			o, ok, err := r.capacity(p, "Provision", bmdb.ErrorProvisioning)
			if !ok || err != nil {
				return o, err
			}
			o.res, err = p.Provision(r.provisionData(m), false)
			return o, err
		}
		return r.power(p, m.Online, provisioner.RebootModeHard, true)
	case bmdb.StateProvisioning:
		o := outcome{call: "Provision", errType: bmdb.ErrorProvisioning}
		var err error
		if m.Status == bmdb.StatusError && m.Command == "" && retrying {
			// The provision failed: clean the disk, then it is provisioned
			// again from available.
			o.call = "Deprovision"
			o.res, err = p.Deprovision(true)
			return o, err
		}
		if m.Spec.Image.URL == "" {
			// An operator's provision with config overrides only: nothing
			// for the Provisioner, whose provisions name an image.
			o.res = provisioner.Result{Dirty: true, RequeueAfter: r.cfg.Resync}
			return o, nil
		}
		o.res, err = p.Provision(r.provisionData(m), false)
		return o, err
	case bmdb.StateProvisioned, bmdb.StateExternallyProvisioned:
		if m.State == bmdb.StateProvisioned && m.Spec.Image.URL == "" {
			o := outcome{call: "Deprovision", errType: bmdb.ErrorProvisioning}
			var err error
			o.res, err = p.Deprovision(retrying)
			return o, err
		}
		mode := provisioner.RebootModeSoft
		if retrying {
			mode = provisioner.RebootModeHard
		}
		return r.power(p, m.Online, mode, retrying)
	case bmdb.StateDeprovisioning:
		o := outcome{call: "Deprovision", errType: bmdb.ErrorProvisioning}
		var err error
		o.res, err = p.Deprovision(retrying)
		return o, err
	case bmdb.StatePoweringOffBeforeDelete, bmdb.StateDeleting:
		o, err := r.power(p, false, provisioner.RebootModeHard, true)
		if err != nil || o.res != (provisioner.Result{}) {
			return o, err
		}
		if m.State == bmdb.StateDeleting {
			o.deletable = true
		} else {
			o.finish = &bmdb.Transition{To: bmdb.StateDeleting, Reason: ReasonDeleting, Message: "powered off through the BMC"}
		}
		return o, nil
	}
	// preparing: booty never prepares; nothing to do.
	return outcome{call: "none"}, nil
}

// inspect calls InspectHardware; starting asks HasCapacity first.
func (r *Reconciler) inspect(p provisioner.Provisioner, retrying, starting bool) (outcome, error) {
	o := outcome{call: "InspectHardware", errType: bmdb.ErrorInspection}
	if starting {
		var ok bool
		var err error
		if o, ok, err = r.capacity(p, o.call, o.errType); !ok || err != nil {
			return o, err
		}
	}
	var err error
	o.res, _, _, err = p.InspectHardware(provisioner.InspectData{BootMode: r.cfg.BootMode}, retrying, false, false)
	return o, err
}

// capacity asks HasCapacity before call; without a free slot the outcome
// is Dirty (try again in provisioner.RequeueWait) and ok false.
func (r *Reconciler) capacity(p provisioner.Provisioner, call string, t bmdb.ErrorType) (outcome, bool, error) {
	o := outcome{call: call, errType: t}
	ok, err := p.HasCapacity()
	if err != nil {
		o.call = "HasCapacity"
		return o, false, err
	}
	if !ok {
		o.res = provisioner.Result{Dirty: true, RequeueAfter: provisioner.RequeueWait}
	}
	return o, ok, nil
}

// power powers the machine on, or off in mode (force: hard whatever the
// mode).
func (r *Reconciler) power(p provisioner.Provisioner, on bool, mode provisioner.RebootMode, force bool) (outcome, error) {
	o := outcome{call: "PowerOn", errType: bmdb.ErrorPowerManagement}
	var err error
	if on {
		o.res, err = p.PowerOn(false)
		return o, err
	}
	o.call = "PowerOff"
	o.res, err = p.PowerOff(mode, force)
	o.poweredOff = err == nil && o.res.ErrorMessage == ""
	return o, err
}

// provisionData is what Provision needs, from m's spec.
func (r *Reconciler) provisionData(m bmdb.Machine) provisioner.ProvisionData {
	s := m.Spec
	d := provisioner.ProvisionData{
		Image: provisioner.Image{URL: s.Image.URL, Checksum: s.Image.Checksum, ChecksumType: s.Image.ChecksumType,
			DiskFormat: s.Image.Format},
		HostConfig: provisioner.StaticHostConfig{User: s.UserData, Network: s.NetworkData, Meta: s.MetaData},
		BootMode:   r.cfg.BootMode,
	}
	if s.RootDeviceHints != nil {
		h := provisioner.RootDeviceHints(*s.RootDeviceHints)
		d.RootDeviceHints = &h
	}
	return d
}
