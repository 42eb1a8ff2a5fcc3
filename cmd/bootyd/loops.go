package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/provisioner"
	"github.com/booty-dev/booty/pkg/reconciler"
)

const usageLoops = `
Machines with a BMC (registered with bmc.address and credentials) are driven
by the host reconciler (--reconcile, on by default): registering → inspected
(powered on into PXE, the agent reports the hardware) → available → with an
image in the spec and online: provisioned and booted from disk; powered on
or off as online says; deprovisioned when the image is removed. A failure
puts the machine in an error state with the reason and is retried with a
backoff kept in the database (--reconcile-error-backoff doubling up to
--reconcile-error-backoff-max). Machines without a BMC are left to their
operator's commands. The Recoverer (--recover, on by default) power-cycles,
through the BMC, machines whose agent went silent. With several replicas on
one PostgreSQL, each machine is worked by one replica at a time.
`

// loopsConfig is the command line of bootyd's control loops.
type loopsConfig struct {
	reconcile bool
	rec       reconciler.Config
	recover   bool
	recoverer manager.RecovererConfig
	// bmc tunes the BMC drivers of both loops.
	bmc bmc.Options
}

// addLoopFlags declares --reconcile, --recover and their loops' flags.
func addLoopFlags(fs *pflag.FlagSet, c *loopsConfig) {
	fs.BoolVar(&c.reconcile, "reconcile", true, "run the host reconciler: drive machines with a BMC through inspection, provisioning and power as their spec and online say")
	c.rec.AddFlags(fs, "reconcile")
	fs.BoolVar(&c.recover, "recover", true, "run the Recoverer: power-cycle, through their BMC, machines whose agent went silent")
	c.recoverer.AddFlags(fs)
}

// check validates the loops' flags (copies: the loops are built later, with
// the database).
func (c *loopsConfig) check() error {
	if c.reconcile {
		rc := c.rec
		rc.Factory = provisioner.NewFactory(nil, provisioner.Config{})
		if err := rc.Check(); err != nil {
			return fmt.Errorf("--reconcile-*: %w", err)
		}
	}
	if c.recover {
		rv := c.recoverer
		if err := rv.Check(); err != nil {
			return fmt.Errorf("--recoverer-*: %w", err)
		}
	}
	return nil
}

// startLoops starts the enabled loops over db and returns the function that
// stops them and waits for them to end.
func startLoops(ctx context.Context, c loopsConfig, db *bmdb.DB, log *slog.Logger) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop := func() { cancel(); wg.Wait() }
	if c.reconcile {
		c.rec.Logger = log
		c.rec.Factory = provisioner.NewFactory(db, provisioner.Config{BMC: c.bmc, Logger: log})
		rec, err := reconciler.New(db, c.rec)
		if err != nil {
			cancel()
			return nil, err
		}
		wg.Go(func() {
			if err := rec.Run(ctx); err != nil {
				log.Error("host reconciler stopped", "err", err)
			}
		})
	}
	if c.recover {
		c.recoverer.Logger = log
		rv, err := manager.NewRecoverer(&manager.BMCPowerCycler{DB: db, Options: c.bmc}, c.recoverer)
		if err != nil {
			stop()
			return nil, err
		}
		wg.Go(func() {
			if err := manager.RunControlLoop(ctx, db, rv); err != nil {
				log.Error("recoverer stopped", "err", err)
			}
		})
	}
	if !c.reconcile && !c.recover {
		return stop, nil
	}
	log.Info("control loops started", "reconcile", c.reconcile, "recover", c.recover)
	return stop, nil
}
