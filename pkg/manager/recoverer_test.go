package manager_test

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/manager"
)

// bmcMachine registers a machine behind its own Redfish test BMC, powered
// on, with its agent enrolled.
func bmcMachine(t *testing.T, db *bmdb.DB, name string, n int, pool *x509.CertPool) (bmdb.Machine, *bmcsim.MemMachine) {
	t.Helper()
	ctx := testCtx(t)
	mm := &bmcsim.MemMachine{}
	sim, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: mm, Username: "admin", Password: "pw-" + name, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	pool.AppendCertsFromPEM(sim.CACertPEM())
	mm.PowerOn(ctx, "")
	if err := db.PutCredentials(ctx, "bmc-"+name, bmdb.Credentials{Username: "admin", Password: "pw-" + name}); err != nil {
		t.Fatal(err)
	}
	m, err := db.CreateMachine(ctx, bmdb.NewMachine{Name: name, BootMAC: mac(n), BMC: bmdb.BMC{Address: sim.Address(), CredentialsRef: "bmc-" + name}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Enroll(ctx, bmdb.Enrollment{MACs: []string{mac(n)}}); err != nil {
		t.Fatal(err)
	}
	return m, mm
}

// TestRecoverer: an agent that never heartbeats after enrolling is
// power-cycled through its BMC into PXE, its session ended and the event
// recorded; an agent that heartbeats is left alone; a machine that does
// not come back is cycled again and backs off. Silence is made by time
// passing beyond one-second bounds (the BMDB has no API to write an old
// heartbeat).
func TestRecoverer(t *testing.T) {
	for _, e := range bmdbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			db := open(t, e.DSN(t))
			ctx := testCtx(t)
			pool := x509.NewCertPool()
			silent, silentHW := bmcMachine(t, db, "silent", 1, pool)
			alive, aliveHW := bmcMachine(t, db, "alive", 2, pool)
			hbCtx, stopHB := context.WithCancel(ctx)
			defer stopHB()
			go func() {
				for hbCtx.Err() == nil {
					db.Heartbeat(hbCtx, alive.ID)
					time.Sleep(100 * time.Millisecond)
				}
			}()
			rec, err := manager.NewRecoverer(&manager.BMCPowerCycler{DB: db, Options: bmc.Options{RootCAs: pool, PollInterval: 20 * time.Millisecond, Backoff: 10 * time.Millisecond}},
				manager.RecovererConfig{ControlLoopConfig: loopConfig(t, 2), StartTimeout: time.Second, HeartbeatTimeout: 2 * time.Second,
					Backoff: bmdb.Backoff{Initial: time.Second, Maximum: 10 * time.Second, Exponent: 2}})
			if err != nil {
				t.Fatal(err)
			}
			runLoop(t, db, rec)
			eventually(t, 30*time.Second, "silent machine power-cycled", func() bool {
				return len(events(t, db, silent.ID, manager.ReasonAgentRecovered)) > 0
			})
			boots := silentHW.Boots()
			if len(boots) < 2 || boots[1] != bmc.DevicePXE || silentHW.State() != bmc.PowerOn {
				t.Fatalf("silent machine: boots %v power %s, want a power cycle into PXE", boots, silentHW.State())
			}
			s, err := db.GetAgentSession(ctx, silent.ID)
			if err != nil || s.EndedAt.IsZero() || !strings.HasPrefix(s.EndReason, "recoverer: ") {
				t.Fatalf("silent machine's session: %+v %v", s, err)
			}
			// It does not come back: cycled again, failing into a backoff.
			eventually(t, 30*time.Second, "second power cycle backs off", func() bool {
				b, err := db.GetBackoff(ctx, silent.ID, manager.ProcessRecover)
				return err == nil && strings.Contains(b.Cause, "did not come back") && b.LastInterval >= time.Second
			})
			if n := len(silentHW.Boots()); n < 3 {
				t.Fatalf("silent machine booted %d times, want a second power cycle", n)
			}
			if b := aliveHW.Boots(); len(b) != 1 || len(events(t, db, alive.ID, manager.ReasonAgentRecovered)) != 0 {
				t.Fatalf("machine with a live agent was power-cycled: boots %v", b)
			}
		})
	}
}

// TestRecovererWaitsStartTimeoutForFirstHeartbeat: an agent that enrolled
// and has not heartbeated yet is given StartTimeout, even when
// HeartbeatTimeout is shorter; an agent whose heartbeats stopped is silent
// after HeartbeatTimeout.
func TestRecovererWaitsStartTimeoutForFirstHeartbeat(t *testing.T) {
	db := open(t, bmdbtest.Engines()[0].DSN(t))
	ctx := testCtx(t)
	pool := x509.NewCertPool()
	starting, _ := bmcMachine(t, db, "starting", 1, pool)
	stale, _ := bmcMachine(t, db, "stale", 2, pool)
	eventually(t, 10*time.Second, "a heartbeat after the enrollment", func() bool {
		if err := db.Heartbeat(ctx, stale.ID); err != nil {
			t.Fatal(err)
		}
		s, err := db.GetAgentSession(ctx, stale.ID)
		return err == nil && s.HeartbeatAt.After(s.StartedAt)
	})
	rec, err := manager.NewRecoverer(&manager.BMCPowerCycler{DB: db},
		manager.RecovererConfig{ControlLoopConfig: loopConfig(t, 1), StartTimeout: time.Minute, HeartbeatTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	eventually(t, 10*time.Second, "the stale agent counts as silent", func() bool {
		ids, err = rec.Candidates(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(ids, stale.ID)
	})
	if slices.Contains(ids, starting.ID) {
		t.Fatalf("an agent enrolled %s ago without a heartbeat counts as silent; its start timeout is a minute", time.Since(starting.CreatedAt).Round(time.Millisecond))
	}
}
