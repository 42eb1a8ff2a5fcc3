//go:build e2e

package e2e

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/test/bmcvm"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// powerLog is the hardware behind a test BMC: it records every power
// action the BMC passes on ("on:pxe", "off:hard", "off:soft", "reset")
// before the QEMU machine carries it out.
type powerLog struct {
	*bmcvm.Machine
	mu   sync.Mutex
	acts []string
}

func (p *powerLog) add(a string) {
	p.mu.Lock()
	p.acts = append(p.acts, a)
	p.mu.Unlock()
}

func (p *powerLog) PowerOn(ctx context.Context, dev bmc.Device) error {
	p.add("on:" + string(dev))
	return p.Machine.PowerOn(ctx, dev)
}

func (p *powerLog) PowerOff(ctx context.Context, graceful bool) error {
	p.add(map[bool]string{true: "off:soft", false: "off:hard"}[graceful])
	return p.Machine.PowerOff(ctx, graceful)
}

func (p *powerLog) Reset(ctx context.Context) error {
	p.add("reset")
	return p.Machine.Reset(ctx)
}

func (p *powerLog) actions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acts)
}

// Bounds of the Recoverer in TestRecovererPowerCyclesSilentAgent: the
// agent heartbeats every 10 s (bootyd's default), so 40 s of silence is
// four missed heartbeats; a power-cycled machine has 8 minutes to enroll
// again before it would be cycled a second time, longer than the test
// waits for it.
const (
	recoverHeartbeatTimeout = 40 * time.Second
	recoverStartTimeout     = 8 * time.Minute
)

// TestRecovererPowerCyclesSilentAgent is e2e (c) of issue 11. A QEMU
// machine behind the Redfish test BMC is registered through the operator
// API of an in-process bootyd (SQLite) with its BMC address and
// credentials, powered on through the BMC into PXE (a direct kernel boot
// of the agent with only booty.server=), enrolls and heartbeats. The
// Recoverer (pkg/manager, run by RunControlLoop) runs all along and leaves
// it alone for longer than its heartbeat bound. The VM is then paused
// through QMP stop: its heartbeats go stale, the Recoverer power-cycles it
// through the Redfish BMC (boot device PXE, hard off, on: the paused QEMU
// is killed, a new one starts), ends the agent session and records an
// AgentSilentPowerCycled warning naming the stale heartbeat; the new
// boot's agent enrolls again (a new agent session) and heartbeats.
func TestRecovererPowerCyclesSilentAgent(t *testing.T) {
	t.Parallel()
	a := buildArtifacts(t)
	start := time.Now()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	lab := harness.NewLabT(t, harness.LabOptions{Logger: log})
	db := lab.DB()
	ctx := t.Context()

	const mac, name = "52:54:00:ec:0e:01", "silent-1"
	qm, err := bmcvm.New(vm.Config{
		Kernel:     a.kernel,
		Initrd:     a.initrd,
		Net:        true,
		MAC:        mac,
		Append:     "console=ttyS0,115200 no_timer_check booty.server=" + lab.GuestURL() + " " + harness.InsecureHTTP + " panic=-1",
		Timeout:    20 * time.Minute,
		Console:    t.Output(),
		ConsoleLog: filepath.Join(vm.ArtifactDir(t), "console.log"),
		Logger:     log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := qm.Close(); err != nil {
			t.Errorf("close qemu machine: %v", err)
		}
	})
	hw := &powerLog{Machine: qm}
	const user, password = "admin", "recover-bmc-password"
	rf, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: hw, Username: user, Password: password, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rf.Close() })

	var reg api.MachineDetail
	operatorCall(t, lab.HostURL(), harness.OperatorToken, "POST", "/v1/machines", api.RegisterRequest{Name: name, BootMAC: mac, Online: true,
		BMC: &api.BMCRequest{Address: rf.Address(), Username: user, Password: password}}, &reg)
	if reg.BMC.Address != rf.Address() || reg.BMC.CredentialsRef == "" {
		t.Fatalf("registered BMC %+v, want address %s and a credentials ref", reg.BMC, rf.Address())
	}

	opts := bmc.Options{RootCAs: rf.CertPool(), PollInterval: 500 * time.Millisecond, Logger: log}
	rec, err := manager.NewRecoverer(&manager.BMCPowerCycler{DB: db, Options: opts}, manager.RecovererConfig{
		ControlLoopConfig: manager.ControlLoopConfig{DBQueryLimiter: rate.NewLimiter(rate.Every(500*time.Millisecond), 1), Logger: log},
		StartTimeout:      recoverStartTimeout,
		HeartbeatTimeout:  recoverHeartbeatTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan error, 1)
	go func() { loopDone <- manager.RunControlLoop(loopCtx, db, rec) }()
	t.Cleanup(func() {
		stopLoop()
		select {
		case err := <-loopDone:
			if err != nil {
				t.Errorf("recoverer loop: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("recoverer loop did not stop within a minute")
		}
	})

	// The operator powers the machine on through its BMC, into PXE.
	d, err := bmc.New(rf.Address(), bmc.Credentials{Username: user, Password: password}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.WithoutCancel(ctx))
	if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DevicePXE}); err != nil {
		t.Fatal(err)
	}
	if err := d.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	firstVM := qm.VM()
	t.Logf("powered on through the BMC; reproduce the VM with: %s", firstVM.CommandLine())

	// It enrolls and heartbeats.
	var first bmdb.AgentSession
	waitFor(t, "the agent to enroll and heartbeat", 8*time.Minute, func() bool {
		first, err = db.GetAgentSession(ctx, reg.ID)
		return err == nil && first.EndedAt.IsZero() && first.HeartbeatAt.After(first.StartedAt)
	})
	t.Logf("enrolled at %s, heartbeating, after %s", first.StartedAt.Format(time.TimeOnly), time.Since(start).Round(time.Second))
	// While it heartbeats, for longer than the Recoverer's bound, the
	// Recoverer leaves it alone.
	waitFor(t, "the live agent to outlast the heartbeat bound", 3*time.Minute, func() bool {
		if got := recoveries(t, db, reg.ID); len(got) != 0 {
			t.Fatalf("the Recoverer power-cycled a machine whose agent heartbeats: %+v", got)
		}
		return time.Since(first.StartedAt) > recoverHeartbeatTimeout+10*time.Second
	})
	if s, err := db.GetAgentSession(ctx, reg.ID); err != nil || !s.StartedAt.Equal(first.StartedAt) || !s.EndedAt.IsZero() ||
		time.Since(s.HeartbeatAt) > recoverHeartbeatTimeout {
		t.Fatalf("agent session %s after the first heartbeat: %+v, %v; want the same session, heartbeating", time.Since(first.HeartbeatAt).Round(time.Second), s, err)
	}

	// The agent goes silent: its VM is paused.
	before := len(hw.actions())
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = qm.QMP(qctx, "stop")
	cancel()
	if err != nil {
		t.Fatalf("pause the vm: %v", err)
	}
	paused := time.Now()
	var evs []bmdb.Event
	waitFor(t, "the Recoverer to power-cycle the silent machine", recoverHeartbeatTimeout+4*time.Minute, func() bool {
		evs = recoveries(t, db, reg.ID)
		return len(evs) > 0
	})
	t.Logf("power-cycled %s after the pause (%s after the start)", time.Since(paused).Round(time.Second), time.Since(start).Round(time.Second))
	if ev := evs[0]; ev.Type != bmdb.EventWarning || !strings.Contains(ev.Message, "last heartbeat") ||
		!strings.Contains(ev.Message, recoverHeartbeatTimeout.String()) {
		t.Errorf("recovery event %+v, want a warning naming the last heartbeat and the %s bound", ev, recoverHeartbeatTimeout)
	}
	if acts := hw.actions()[before:]; !slices.Equal(acts, []string{"off:hard", "on:pxe"}) {
		t.Errorf("power actions the BMC passed to the machine after the pause: %q, want a hard off and a power on into PXE", acts)
	}
	if n := countRequests(rf.Requests(), "POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset"); n < 3 {
		t.Errorf("the BMC saw %d reset actions, want the operator's power on and the Recoverer's off and on", n)
	}
	select {
	case <-firstVM.Exited():
	default:
		t.Error("the paused QEMU still runs after the power cycle")
	}
	if qm.VM() == firstVM || qm.State() != bmc.PowerOn {
		t.Fatalf("no new QEMU after the power cycle (power %s)", qm.State())
	}
	// The new boot's agent enrolls again and heartbeats.
	var second bmdb.AgentSession
	waitFor(t, "the agent to enroll again", 8*time.Minute, func() bool {
		second, err = db.GetAgentSession(ctx, reg.ID)
		return err == nil && second.EndedAt.IsZero() && second.StartedAt.After(first.StartedAt) && second.HeartbeatAt.After(second.StartedAt)
	})
	t.Logf("enrolled again %s after the power cycle (%s after the start)", second.StartedAt.Sub(evs[0].Time).Round(time.Second), time.Since(start).Round(time.Second))

	all, err := db.Events(ctx, reg.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var enrolled, ended int
	for _, e := range all {
		switch {
		case e.Reason == "Enrolled":
			enrolled++
		case e.Reason == "AgentSessionEnded" && strings.HasPrefix(e.Message, "recoverer: power-cycled: last heartbeat"):
			ended++
		}
	}
	if enrolled != 2 || ended != 1 {
		t.Errorf("events: %d Enrolled, %d AgentSessionEnded by the recoverer; want 2 and 1", enrolled, ended)
	}
	if n := len(recoveries(t, db, reg.ID)); n != 1 {
		t.Errorf("%d power cycles, want 1", n)
	}
	hist, err := db.WorkHistory(ctx, reg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(hist, func(w bmdb.WorkEvent) bool {
		return w.Process == manager.ProcessRecover && w.Event == bmdb.WorkFinished
	}) {
		t.Errorf("work history %+v lacks a finished recover", hist)
	}
	if m, err := db.GetMachine(ctx, reg.ID); err != nil || m.State != bmdb.StateRegistering {
		t.Errorf("machine after the recovery: %+v, %v; want it still registering", m, err)
	}
	t.Logf("e2e (c) took %s (accelerator %s)", time.Since(start).Round(time.Second), qm.VM().Accel())
}

// recoveries returns the machine's AgentSilentPowerCycled events.
func recoveries(t *testing.T, db *bmdb.DB, id string) []bmdb.Event {
	t.Helper()
	evs, err := db.Events(t.Context(), id, 0, 0)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	return slices.DeleteFunc(evs, func(e bmdb.Event) bool { return e.Reason != manager.ReasonAgentRecovered })
}

func countRequests(reqs []string, want string) int {
	n := 0
	for _, r := range reqs {
		if r == want {
			n++
		}
	}
	return n
}
