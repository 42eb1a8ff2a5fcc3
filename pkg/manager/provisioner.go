package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/names"
)

// ProvisionerConfig configures the provisioning process.
type ProvisionerConfig struct {
	// MaxCount is the maximum count of managed machines. No new machines
	// are brought in after reaching the limit; none are removed.
	MaxCount uint
	// ReconcileLoopLimiter limits the rate of the reconciliation loop.
	ReconcileLoopLimiter *rate.Limiter
	// DeviceCreationLimiter limits the rate at which machines are created.
	DeviceCreationLimiter *rate.Limiter
	// ChunkSize is how many machines are brought in per round at most.
	// Higher numbers fill the BMDB faster, lower ones run the guard more
	// often. 20 is a decent starting point.
	ChunkSize uint
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// RegisterFlags registers the config's flags on pflag.CommandLine.
func (pc *ProvisionerConfig) RegisterFlags() { pc.AddFlags(pflag.CommandLine) }

// AddFlags registers provisioner-max-count, provisioner-reconcile-rate,
// provisioner-creation-rate and provisioner-chunk-size on fs.
func (pc *ProvisionerConfig) AddFlags(fs *pflag.FlagSet) {
	if pc.ReconcileLoopLimiter == nil {
		pc.ReconcileLoopLimiter, _ = ParseLimiter("1m,1")
	}
	if pc.DeviceCreationLimiter == nil {
		pc.DeviceCreationLimiter, _ = ParseLimiter("5s,1")
	}
	if pc.ChunkSize == 0 {
		pc.ChunkSize = 20
	}
	fs.UintVar(&pc.MaxCount, "provisioner-max-count", pc.MaxCount, "most machines the provisioner brings into the BMDB")
	fs.Var(&limiterValue{l: &pc.ReconcileLoopLimiter}, "provisioner-reconcile-rate", "how often the provisioner reconciles, as INTERVAL,BURST")
	fs.Var(&limiterValue{l: &pc.DeviceCreationLimiter}, "provisioner-creation-rate", "how fast the provisioner creates machines, as INTERVAL,BURST")
	fs.UintVar(&pc.ChunkSize, "provisioner-chunk-size", pc.ChunkSize, "most machines the provisioner creates per round")
}

// Check returns an error naming the first field that is not set.
func (pc *ProvisionerConfig) Check() error {
	switch {
	case pc.ReconcileLoopLimiter == nil:
		return errors.New("provisioner: ReconcileLoopLimiter must be set")
	case pc.DeviceCreationLimiter == nil:
		return errors.New("provisioner: DeviceCreationLimiter must be set")
	case pc.ChunkSize == 0:
		return errors.New("provisioner: ChunkSize must be set")
	}
	if pc.Logger == nil {
		pc.Logger = slog.Default()
	}
	return nil
}

// Provisioner brings machines from a Source into the BMDB, up to MaxCount.
// It is a reconcile loop, not a work loop: each round compares the source
// with the machines the BMDB has from it (label LabelProvider).
type Provisioner struct {
	ProvisionerConfig
	src Source
	log *slog.Logger
}

// NewProvisioner checks the config and the source's name.
func NewProvisioner(src Source, pc ProvisionerConfig) (*Provisioner, error) {
	if src == nil {
		return nil, errors.New("new provisioner: no source")
	}
	if err := names.LabelValue(src.Name()); err != nil || src.Name() == "" {
		return nil, fmt.Errorf("new provisioner: source name %q is not a label value", src.Name())
	}
	if err := pc.Check(); err != nil {
		return nil, err
	}
	return &Provisioner{ProvisionerConfig: pc, src: src, log: pc.Logger.With("component", "provisioner", "source", src.Name())}, nil
}

// Run reconciles until ctx ends, paced by ReconcileLoopLimiter. A failed
// round (the guard refusing, the source or BMDB failing) is logged and the
// next round tries again. It returns nil when ctx ended.
func (p *Provisioner) Run(ctx context.Context, db *bmdb.DB) error {
	for {
		if err := p.ReconcileLoopLimiter.Wait(ctx); err != nil {
			return nil
		}
		if n, err := p.Reconcile(ctx, db); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.log.Warn("reconcile failed", "err", err, "created", n)
		} else if n > 0 {
			p.log.Info("machines brought into the BMDB", "count", n)
		}
	}
}

// ErrDisagree is wrapped by the error of a round the guard stopped.
var ErrDisagree = errors.New("source and BMDB disagree")

// Reconcile runs one round and returns how many machines it created:
//
//  1. List the source and the BMDB's machines labelled with the source.
//  2. Guard (Monogon's): a machine the source says is used but the BMDB
//     lacks, or one the BMDB has (and that has not failed: status error)
//     but the source lacks or says is free, stops the round with an error
//     wrapping ErrDisagree, naming the machines; nothing is created.
//  3. Create up to min(MaxCount − managed, ChunkSize) machines the BMDB
//     lacks, in name order, each after DeviceCreationLimiter: Create in the
//     source, then CreateMachine in the BMDB (state registering, label
//     LabelProvider, BMC address and credentials name, online, and the
//     source's credentials, stored under that name). A machine another
//     replica created meanwhile (a taken name) is skipped.
func (p *Provisioner) Reconcile(ctx context.Context, db *bmdb.DB) (int, error) {
	srcMachines, err := p.src.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("provisioner: list source %s: %w", p.src.Name(), err)
	}
	all, err := listMachines(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("provisioner: list BMDB machines: %w", err)
	}
	managed := map[string]bmdb.Machine{}
	byName := map[string]bool{}
	for _, m := range all {
		byName[m.Name] = true
		if m.Labels[LabelProvider] == p.src.Name() {
			managed[m.Name] = m
		}
	}
	inSource := map[string]SourceMachine{}
	var problems []string
	for _, sm := range srcMachines {
		inSource[sm.Name] = sm
		if _, ok := managed[sm.Name]; !ok && sm.Availability == AvailabilityUsed {
			problems = append(problems, fmt.Sprintf("%s is used in the source but not in the BMDB", sm.Name))
		}
	}
	for name, m := range managed {
		if m.Status == bmdb.StatusError {
			continue
		}
		sm, ok := inSource[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s is in the BMDB but not in the source", name))
		case sm.Availability == AvailabilityFree:
			problems = append(problems, fmt.Sprintf("%s is in the BMDB but free in the source", name))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return 0, fmt.Errorf("provisioner: refusing to act: %w: %s", ErrDisagree, strings.Join(problems, "; "))
	}
	if uint(len(managed)) >= p.MaxCount {
		return 0, nil
	}
	budget := min(p.MaxCount-uint(len(managed)), p.ChunkSize)
	created := 0
	for _, sm := range srcMachines {
		if budget == 0 {
			break
		}
		if _, ok := managed[sm.Name]; ok || byName[sm.Name] || sm.Availability == AvailabilityUsed {
			continue
		}
		if err := p.DeviceCreationLimiter.Wait(ctx); err != nil {
			return created, err
		}
		if err := sm.Check(); err != nil {
			return created, fmt.Errorf("provisioner: source %s: %w", p.src.Name(), err)
		}
		got, err := p.src.Create(ctx, sm.Name)
		if err != nil {
			return created, fmt.Errorf("provisioner: create %s in source %s: %w", sm.Name, p.src.Name(), err)
		}
		sm = got
		_, err = db.CreateMachine(ctx, bmdb.NewMachine{
			Name: sm.Name, BootMAC: sm.BootMAC, Labels: map[string]string{LabelProvider: p.src.Name()},
			BMC:         bmdb.BMC{Address: sm.BMCAddress, CredentialsRef: sm.CredentialsName, DisableCertificateVerification: sm.DisableCertificateVerification},
			Credentials: sm.Credentials, Online: sm.Online,
			Message: "brought in from source " + p.src.Name(),
		})
		if errors.Is(err, bmdb.ErrConflict) {
			p.log.Info("machine created elsewhere meanwhile", "machine", sm.Name, "err", err)
			continue
		}
		if err != nil {
			return created, fmt.Errorf("provisioner: create machine %s: %w", sm.Name, err)
		}
		created++
		budget--
	}
	return created, nil
}
