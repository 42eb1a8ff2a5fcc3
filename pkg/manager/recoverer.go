package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// ProcessRecover is the Recoverer's process in the BMDB.
const ProcessRecover bmdb.Process = "recover"

// ReasonAgentRecovered is the event the Recoverer records after a power
// cycle.
const ReasonAgentRecovered = "AgentSilentPowerCycled"

// recoveredPrefix starts the end reason of the agent sessions the Recoverer
// ended.
const recoveredPrefix = "recoverer: "

// RecovererConfig configures the Recoverer.
type RecovererConfig struct {
	ControlLoopConfig
	// StartTimeout is how long an agent may go without its first heartbeat
	// after it enrolled, and how long a power-cycled machine has to enroll
	// again; default 30 minutes (Monogon's).
	StartTimeout time.Duration
	// HeartbeatTimeout is how old an agent's last heartbeat may be; default
	// 10 minutes (Monogon's).
	HeartbeatTimeout time.Duration
	// Backoff is how long a machine that was power-cycled and did not come
	// back is left before the next cycle; default Monogon's 1 minute growing
	// ×1.2 to 1 hour, 20 % jitter, its Initial raised to StartTimeout.
	Backoff bmdb.Backoff
}

// RegisterFlags registers the config's flags on pflag.CommandLine.
func (rc *RecovererConfig) RegisterFlags() { rc.AddFlags(pflag.CommandLine) }

// AddFlags registers the loop's flags (recoverer-db-query-rate,
// recoverer-parallelism) and recoverer-start-timeout,
// recoverer-heartbeat-timeout on fs.
func (rc *RecovererConfig) AddFlags(fs *pflag.FlagSet) {
	rc.ControlLoopConfig.AddFlags(fs, "recoverer")
	rc.defaults()
	fs.DurationVar(&rc.StartTimeout, "recoverer-start-timeout", rc.StartTimeout, "how long an agent may go without its first heartbeat")
	fs.DurationVar(&rc.HeartbeatTimeout, "recoverer-heartbeat-timeout", rc.HeartbeatTimeout, "how old an agent's last heartbeat may be")
}

func (rc *RecovererConfig) defaults() {
	if rc.StartTimeout == 0 {
		rc.StartTimeout = 30 * time.Minute
	}
	if rc.HeartbeatTimeout == 0 {
		rc.HeartbeatTimeout = 10 * time.Minute
	}
	if rc.Backoff == (bmdb.Backoff{}) {
		rc.Backoff = bmdb.Backoff{Initial: time.Minute, Maximum: time.Hour, Exponent: 1.2, Jitter: 0.2}
	}
	// A machine power-cycled again is given at least StartTimeout to boot.
	rc.Backoff.Initial = max(rc.Backoff.Initial, rc.StartTimeout)
	rc.Backoff.Maximum = max(rc.Backoff.Maximum, rc.Backoff.Initial)
}

// Check fills in defaults and returns an error naming a field that is not
// valid.
func (rc *RecovererConfig) Check() error {
	if err := rc.ControlLoopConfig.Check(); err != nil {
		return fmt.Errorf("recoverer: %w", err)
	}
	rc.defaults()
	if rc.StartTimeout < time.Second || rc.HeartbeatTimeout < time.Second {
		return fmt.Errorf("recoverer: start timeout %s and heartbeat timeout %s must be at least 1s", rc.StartTimeout, rc.HeartbeatTimeout)
	}
	return nil
}

// PowerCycler power-cycles a machine (Monogon's shepherd recoverer).
type PowerCycler interface {
	// PowerCycle turns the machine off and on again so it boots the agent.
	PowerCycle(ctx context.Context, m bmdb.Machine) error
}

// BMCPowerCycler power-cycles machines through their BMC with the
// credentials the BMDB stores for them.
type BMCPowerCycler struct {
	DB *bmdb.DB
	// Options tune the drivers; DisableCertificateVerification is the
	// machine's.
	Options bmc.Options
	// NewDriver makes a driver; default bmc.New.
	NewDriver func(address string, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error)
}

// PowerCycle sets the boot device to PXE for the next boot, powers the
// machine off hard (when it is on) and on again, each verified by the
// driver. A machine without a BMC address or credentials fails.
func (c *BMCPowerCycler) PowerCycle(ctx context.Context, m bmdb.Machine) error {
	if m.BMC.Address == "" || m.BMC.CredentialsRef == "" {
		return fmt.Errorf("power cycle %s: no BMC address or credentials: %w", m.Name, bmc.ErrUnsupported)
	}
	cr, err := c.DB.GetCredentials(ctx, m.BMC.CredentialsRef)
	if err != nil {
		return fmt.Errorf("power cycle %s: %w", m.Name, err)
	}
	opts := c.Options
	opts.DisableCertificateVerification = m.BMC.DisableCertificateVerification
	nd := c.NewDriver
	if nd == nil {
		nd = bmc.New
	}
	d, err := nd(m.BMC.Address, bmc.Credentials{Username: cr.Username, Password: cr.Password}, opts)
	if err != nil {
		return fmt.Errorf("power cycle %s: %w", m.Name, err)
	}
	defer d.Close(context.WithoutCancel(ctx))
	if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DevicePXE}); err != nil {
		return fmt.Errorf("power cycle %s: %w", m.Name, err)
	}
	if err := d.PowerOff(ctx, bmc.OffHard); err != nil {
		return fmt.Errorf("power cycle %s: %w", m.Name, err)
	}
	if err := d.PowerOn(ctx); err != nil {
		return fmt.Errorf("power cycle %s: %w", m.Name, err)
	}
	return nil
}

// Recoverer power-cycles machines whose agent went silent: no heartbeat
// within StartTimeout after it enrolled, a last heartbeat older than
// HeartbeatTimeout, or, after a power cycle, no new enrollment within
// StartTimeout.
type Recoverer struct {
	RecovererConfig
	pc  PowerCycler
	log *slog.Logger
}

// NewRecoverer checks the config and returns the loop for RunControlLoop.
func NewRecoverer(pc PowerCycler, rc RecovererConfig) (*Recoverer, error) {
	if pc == nil {
		return nil, errors.New("new recoverer: no power cycler")
	}
	if err := rc.Check(); err != nil {
		return nil, err
	}
	return &Recoverer{RecovererConfig: rc, pc: pc, log: rc.Logger.With("component", "recoverer")}, nil
}

// Process returns ProcessRecover.
func (r *Recoverer) Process() bmdb.Process { return ProcessRecover }

// LoopConfig returns the loop's config.
func (r *Recoverer) LoopConfig() *ControlLoopConfig { return &r.ControlLoopConfig }

// Backoff returns the configured backoff.
func (r *Recoverer) Backoff() bmdb.Backoff { return r.RecovererConfig.Backoff }

// agentStates are the states in which a machine runs its agent.
var agentStates = []bmdb.State{bmdb.StateRegistering, bmdb.StateInspecting, bmdb.StateAvailable,
	bmdb.StatePreparing, bmdb.StateProvisioning, bmdb.StateDeprovisioning}

// Filter claims machines in an agent state whose agent is silent (the
// BMDB checks the heartbeat again in the claim) that no Initializer work
// holds.
func (r *Recoverer) Filter() bmdb.Filter {
	return bmdb.Filter{States: agentStates, AgentSilentFor: min(r.StartTimeout, r.HeartbeatTimeout), Exclusive: []bmdb.Process{ProcessInitialize}}
}

// silence says why machine id's agent counts as silent ("" when it does
// not) and whether the Recoverer power-cycled it before without it
// coming back.
func (r *Recoverer) silence(ctx context.Context, db *bmdb.DB, id string) (string, bool, error) {
	s, err := db.GetAgentSession(ctx, id)
	if errors.Is(err, bmdb.ErrNotFound) {
		return "", false, nil // never enrolled: the Initializer's or the operator's
	}
	if err != nil {
		return "", false, err
	}
	switch {
	case !s.EndedAt.IsZero():
		if strings.HasPrefix(s.EndReason, recoveredPrefix) && time.Since(s.EndedAt) > r.StartTimeout {
			return fmt.Sprintf("no enrollment within %s of the last power cycle", r.StartTimeout), true, nil
		}
	case s.HeartbeatAt.Equal(s.StartedAt):
		// No heartbeat yet: only StartTimeout counts, even when it is
		// longer than HeartbeatTimeout.
		if time.Since(s.StartedAt) > r.StartTimeout {
			return fmt.Sprintf("no heartbeat within %s of enrolling at %s", r.StartTimeout, s.StartedAt.Format(time.RFC3339)), false, nil
		}
	case time.Since(s.HeartbeatAt) > r.HeartbeatTimeout:
		return fmt.Sprintf("last heartbeat %s, over %s ago", s.HeartbeatAt.Format(time.RFC3339), r.HeartbeatTimeout), false, nil
	}
	return "", false, nil
}

// Candidates are the machines in an agent state whose agent is silent.
// The BMDB lists those not heard from within the shorter timeout (a few in
// a healthy fleet, instead of every machine with a query for its session
// each); silence then decides.
func (r *Recoverer) Candidates(ctx context.Context, db *bmdb.DB) ([]string, error) {
	quiet := time.Now().Add(-min(r.StartTimeout, r.HeartbeatTimeout))
	ms, err := listMachinesWith(ctx, db, bmdb.ListOptions{States: agentStates, AgentQuietBefore: quiet})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		why, _, err := r.silence(ctx, db, m.ID)
		if err != nil {
			return nil, err
		}
		if why != "" {
			out = append(out, m.ID)
		}
	}
	return out, nil
}

// ErrNotBack is wrapped by the failure the Recoverer records when a machine
// it power-cycled before did not come back; the failure makes the next
// cycle wait for the growing backoff.
var ErrNotBack = errors.New("the agent did not come back after the last power cycle")

// Work re-checks the silence, power-cycles the machine (PowerCycler), ends
// its agent session (reason "recoverer: …", so a new enrollment is
// accepted) and records an AgentSilentPowerCycled warning. A first cycle
// finishes the work (resetting the backoff); a machine cycled before that
// did not come back is cycled again and the work fails with ErrNotBack, so
// further cycles back off. A failed power cycle fails the work.
func (r *Recoverer) Work(ctx context.Context, db *bmdb.DB, m bmdb.Machine) (*bmdb.Transition, error) {
	why, again, err := r.silence(ctx, db, m.ID)
	if err != nil {
		return nil, err
	}
	if why == "" {
		return nil, fmt.Errorf("agent of %s is not silent any more: %w", m.Name, ErrSkip)
	}
	if err := r.pc.PowerCycle(ctx, m); err != nil {
		return nil, fmt.Errorf("recover %s (%s): %w", m.Name, why, err)
	}
	if err := db.EndAgentSession(ctx, m.ID, recoveredPrefix+"power-cycled: "+why); err != nil {
		return nil, err
	}
	if err := db.RecordEvent(ctx, m.ID, bmdb.EventWarning, ReasonAgentRecovered, "agent silent ("+why+"): power-cycled through the BMC into PXE"); err != nil {
		return nil, err
	}
	r.log.Warn("silent agent: machine power-cycled", "machine", m.Name, "why", why)
	if again {
		return nil, fmt.Errorf("recover %s: %w; power-cycled again", m.Name, ErrNotBack)
	}
	return nil, nil
}
