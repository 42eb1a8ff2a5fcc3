package reconciler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/provisioner"
	"github.com/booty-dev/booty/pkg/reconciler"
	"github.com/booty-dev/booty/pkg/server"
)

func TestMain(m *testing.M) { os.Exit(bmdbtest.Main(m)) }

const operatorToken = "reconciler-test-operator-token"

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// simMachine is the hardware behind the test BMC: a MemMachine that, when
// it boots from the network (or has no OS on its disk), runs a simulated
// agent speaking the real protocol (provider.ServerProvider) to a real
// bootyd. The agent enrolls, answers inspections with a hardware report,
// and "runs" provisions (the OS is then on the disk, the agent gone) and
// deprovisions (the disk is empty; the agent reboots into the network).
type simMachine struct {
	mem  *bmcsim.MemMachine
	url  string
	mac  string
	sim  func() *bmcsim.Redfish
	logs io.Writer

	mu            sync.Mutex
	cancel        context.CancelFunc
	wg            sync.WaitGroup
	osOnDisk      bool
	agentBoots    int
	failProvision string
	closed        bool
}

func (s *simMachine) PowerOn(ctx context.Context, dev bmc.Device) error {
	was := s.mem.State()
	if err := s.mem.PowerOn(ctx, dev); err != nil {
		return err
	}
	if was == bmc.PowerOff {
		s.boot(dev)
	}
	return nil
}

func (s *simMachine) PowerOff(ctx context.Context, graceful bool) error {
	if err := s.mem.PowerOff(ctx, graceful); err != nil {
		return err
	}
	if s.mem.State() == bmc.PowerOff {
		s.stopAgent()
	}
	return nil
}

// Reset restarts the machine from the BMC's boot override (a QEMU reset
// keeps its boot order; this machine reads the override, like firmware).
func (s *simMachine) Reset(ctx context.Context) error {
	if err := s.mem.Reset(ctx); err != nil {
		return err
	}
	s.stopAgent()
	s.boot(s.sim().Boot().Device)
	return nil
}

func (s *simMachine) State() bmc.PowerState { return s.mem.State() }

// boot starts the agent when the machine boots from the network or its
// disk holds no OS; otherwise the OS runs (nothing to simulate).
func (s *simMachine) boot(dev bmc.Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bootLocked(dev)
}

func (s *simMachine) bootLocked(dev bmc.Device) {
	if s.closed || dev != bmc.DevicePXE && s.osOnDisk {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.agentBoots++
	s.wg.Go(func() { s.runAgent(ctx) })
}

func (s *simMachine) stopAgent() {
	s.mu.Lock()
	c := s.cancel
	s.cancel = nil
	s.mu.Unlock()
	if c != nil {
		c()
	}
}

func (s *simMachine) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopAgent()
	s.wg.Wait()
}

func (s *simMachine) boots() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agentBoots
}

func (s *simMachine) runAgent(ctx context.Context) {
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("agent", s.mac)
	p := &provider.ServerProvider{URL: s.url, AllowHTTP: true, BootMAC: s.mac, Log: log,
		Client:  &http.Client{Timeout: time.Minute},
		MACs:    func() ([]string, error) { return []string{s.mac}, nil },
		Backoff: provider.Backoff{Attempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Hardware: func(context.Context) (*api.HardwareDetails, error) {
			return &api.HardwareDetails{RAMMebibytes: 2048, CPU: api.CPU{Arch: "x86_64", Count: 2},
				Storage: []api.Storage{{Name: "/dev/vda", Type: api.StorageHDD, SizeBytes: 8 << 30}}}, nil
		}}
	defer p.Close()
	cfg, err := p.Load(ctx)
	if err != nil {
		return
	}
	var runErr error
	s.mu.Lock()
	deprovision := cfg.Mode == config.ModeDeprovision || cfg.Mode == config.ModeSoftDeprovision
	switch {
	case deprovision:
		s.osOnDisk = false
	case s.failProvision != "":
		runErr, s.failProvision = errors.New(s.failProvision), ""
	default:
		s.osOnDisk = true
	}
	s.mu.Unlock()
	if err := p.CompleteCommand(ctx, runErr); err != nil {
		log.Warn("complete command", "err", err)
	}
	// A provisioned machine boots its OS; after a deprovision or a failure
	// the machine reboots into the network: the override is gone, so the
	// firmware's order (network first without an OS) decides.
	if !deprovision && runErr == nil {
		return
	}
	p.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() == nil {
		s.cancel()
		s.bootLocked(bmc.DevicePXE)
	}
}

// env is a real bootyd (operator API and agent protocol) over a real
// SQLite BMDB, a Redfish test BMC over a simMachine, and the reconciler.
type env struct {
	t    *testing.T
	ctx  context.Context
	dsn  string
	db   *bmdb.DB
	ts   *httptest.Server
	sim  *bmcsim.Redfish
	mach *simMachine
	rec  *reconciler.Reconciler
}

const bootMAC = "52:54:00:cc:00:01"

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	var dsn string
	for _, e := range bmdbtest.Engines() {
		if e.Name == "sqlite" {
			dsn = e.DSN(t)
		}
	}
	db, err := bmdb.Open(ctx, dsn, bmdb.WithLogger(logger(t)), bmdb.WithAgentSessionTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	srv, err := server.New(server.Options{DB: db, OperatorTokens: []string{operatorToken}, PublicURL: "http://bootyd.test",
		HeartbeatInterval: time.Second, Output: io.Discard, Logger: logger(t), AutoDiscover: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx) // the parked polls and heartbeats, before the database closes
	})
	e := &env{t: t, ctx: ctx, db: db, ts: ts}
	e.mach = &simMachine{mem: &bmcsim.MemMachine{}, url: ts.URL, mac: bootMAC, sim: func() *bmcsim.Redfish { return e.sim }, logs: t.Output()}
	t.Cleanup(e.mach.close)
	e.sim, err = bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: e.mach, Username: "admin", Password: "pw-rec",
		PowerDelay: 20 * time.Millisecond, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.sim.Close() })
	e.dsn = dsn
	e.rec = e.newReconciler(db)
	return e
}

// newReconciler returns a reconciler over db with the test's short waits.
func (e *env) newReconciler(db *bmdb.DB) *reconciler.Reconciler {
	e.t.Helper()
	f := provisioner.NewFactory(db, provisioner.Config{Logger: logger(e.t), BMC: bmc.Options{RootCAs: e.sim.CertPool(),
		PollInterval: 20 * time.Millisecond, Backoff: 10 * time.Millisecond, PowerTimeout: 2 * time.Second, SoftOffTimeout: 5 * time.Second}})
	rec, err := reconciler.New(db, reconciler.Config{
		ControlLoopConfig: manager.ControlLoopConfig{DBQueryLimiter: rate.NewLimiter(rate.Every(50*time.Millisecond), 1), Parallelism: 2, Logger: logger(e.t)},
		Factory:           f, Resync: 2 * time.Second,
		ErrorBackoff: bmdb.Backoff{Initial: time.Second, Maximum: 2 * time.Second, Exponent: 2}})
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// run runs the reconciler until the test ends.
func (e *env) run() { e.runReconciler(e.rec) }

func (e *env) runReconciler(rec *reconciler.Reconciler) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := rec.Run(ctx); err != nil {
			e.t.Errorf("reconciler: %v", err)
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
}

// replica runs a second reconciler, as another bootyd would, over its own
// connection to the same database.
func (e *env) replica() {
	e.t.Helper()
	db, err := bmdb.Open(e.ctx, e.dsn, bmdb.WithLogger(logger(e.t)), bmdb.WithAgentSessionTTL(3*time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	e.runReconciler(e.newReconciler(db))
}

// register creates the machine with its BMC, as the operator API does.
func (e *env) register(online bool, image string) bmdb.Machine {
	e.t.Helper()
	if err := e.db.PutCredentials(e.ctx, "bmc-node-1", bmdb.Credentials{Username: "admin", Password: "pw-rec"}); err != nil {
		e.t.Fatal(err)
	}
	m, err := e.db.CreateMachine(e.ctx, bmdb.NewMachine{Name: "node-1", BootMAC: bootMAC, Online: online,
		BMC: bmdb.BMC{Address: e.sim.Address(), CredentialsRef: "bmc-node-1"},
		Spec: bmdb.Spec{Image: bmdb.Image{URL: image, Checksum: "sha256:" + strings.Repeat("ab", 32)},
			RootDeviceHints: &bmdb.RootDeviceHints{DeviceName: "/dev/vda"}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) machine(id string) bmdb.Machine {
	e.t.Helper()
	m, err := e.db.GetMachine(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// waitFor polls cond until it holds; the bound is generous (a loaded
// machine), never a timing assert.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) waitState(id string, st bmdb.State, power bmc.PowerState) bmdb.Machine {
	e.t.Helper()
	var m bmdb.Machine
	e.waitFor(string(st)+" and power "+string(power), func() bool {
		m = e.machine(id)
		return m.State == st && m.Command == "" && e.mach.State() == power
	})
	return m
}

func (e *env) events(id, reason string) []bmdb.Event {
	e.t.Helper()
	evs, err := e.db.Events(e.ctx, id, 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []bmdb.Event
	for _, ev := range evs {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

func (e *env) setOnline(id string, on bool) {
	e.t.Helper()
	if _, err := e.db.UpdateMachine(e.ctx, id, 0, bmdb.MachineUpdate{Online: &on}); err != nil {
		e.t.Fatal(err)
	}
}

// TestReconcileLifecycle drives one machine behind a Redfish BMC through
// the state table: registered with an image and online → validated,
// powered on into PXE, inspected by its agent, provisioned (fast track:
// the agent that inspected gets the command), left on; offline → powered
// off (its agent session ended); online → powered on from its disk;
// image removed → deprovisioned (reset into PXE); offline → powered off;
// powering off before delete → deleting → deleted. A machine without a
// BMC is never touched.
func TestReconcileLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other, err := e.db.CreateMachine(e.ctx, bmdb.NewMachine{Name: "no-bmc", BootMAC: "52:54:00:cc:00:99", Online: true,
		Spec: bmdb.Spec{Image: bmdb.Image{URL: "http://10.0.0.1/os.raw"}}})
	if err != nil {
		t.Fatal(err)
	}
	m := e.register(true, "http://10.0.0.1/os.raw")
	e.run()

	m = e.waitState(m.ID, bmdb.StateProvisioned, bmc.PowerOn)
	if boots := e.mach.mem.Boots(); len(boots) != 1 || boots[0] != bmc.DevicePXE {
		t.Errorf("boots %v, want one from PXE", boots)
	}
	if n := e.mach.boots(); n != 1 {
		t.Errorf("the agent booted %d times, want once (inspection and provision on one boot)", n)
	}
	if hw, _, err := e.db.Hardware(e.ctx, m.ID); err != nil || !strings.Contains(string(hw), "/dev/vda") {
		t.Errorf("hardware report: %s %v", hw, err)
	}
	for _, r := range []string{"InspectionDone", "ProvisioningDone", provisioner.ReasonAgentBootRequest} {
		if len(e.events(m.ID, r)) == 0 {
			t.Errorf("no %s event", r)
		}
	}

	e.setOnline(m.ID, false)
	e.waitState(m.ID, bmdb.StateProvisioned, bmc.PowerOff)
	e.setOnline(m.ID, true)
	e.waitState(m.ID, bmdb.StateProvisioned, bmc.PowerOn)
	if b := e.sim.Boot(); b.Device != bmc.DeviceDisk || !b.Persistent {
		t.Errorf("boot override %+v after power on, want disk, persistent", b)
	}
	if n := e.mach.boots(); n != 1 {
		t.Errorf("agent boots %d after the power on, want still 1 (the OS booted)", n)
	}

	if _, err := e.db.UpdateMachine(e.ctx, m.ID, 0, bmdb.MachineUpdate{Spec: &bmdb.Spec{}}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("deprovisioned", func() bool {
		mm := e.machine(m.ID)
		return mm.State == bmdb.StateAvailable && len(e.events(m.ID, "DeprovisioningDone")) == 1
	})
	if boots := e.mach.mem.Boots(); len(boots) < 3 || boots[1] != bmc.DeviceDisk || boots[2] != bmc.DevicePXE {
		t.Errorf("boots %v, want PXE (inspect, provision), disk (the OS), PXE (deprovision)", boots)
	}
	e.setOnline(m.ID, false)
	e.waitState(m.ID, bmdb.StateAvailable, bmc.PowerOff)
	e.waitFor("the agent session ended", func() bool {
		s, err := e.db.GetAgentSession(e.ctx, m.ID)
		return err == nil && !s.EndedAt.IsZero()
	})

	if _, err := e.db.Transition(e.ctx, m.ID, bmdb.Transition{To: bmdb.StatePoweringOffBeforeDelete, Reason: "Test"}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the machine deleted", func() bool {
		_, err := e.db.GetMachine(e.ctx, m.ID)
		return errors.Is(err, bmdb.ErrNotFound)
	})

	o := e.machine(other.ID)
	if o.State != bmdb.StateRegistering || o.Status != bmdb.StatusOK {
		t.Errorf("machine without a BMC: %s/%s, want registering, untouched", o.State, o.Status)
	}
	if evs, _ := e.db.Events(e.ctx, other.ID, 0, 0); len(evs) != 1 {
		t.Errorf("machine without a BMC has %d events, want only its registration", len(evs))
	}
}

// TestReconcilePowerFailureRecovers: a power action that does not take
// (the Redfish BMC accepts it and never applies it) puts the machine in
// its error state with the reason, backs off (persisted in the BMDB), and
// once the BMC works again a retry clears the error and the machine goes
// on to provisioned.
func TestReconcilePowerFailureRecovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sim.SetFaults(bmcsim.Faults{IgnorePower: true})
	m := e.register(true, "http://10.0.0.1/os.raw")
	e.run()

	e.waitFor("the error state", func() bool { return e.machine(m.ID).Status == bmdb.StatusError })
	got := e.machine(m.ID)
	if got.State != bmdb.StateInspecting || got.Error.Type != bmdb.ErrorInspection || !strings.Contains(got.Error.Message, "did not take") || got.Error.Count < 1 {
		t.Fatalf("error state: %s %+v, want inspecting, inspection error naming the power action that did not take", got.State, got.Error)
	}
	b, err := e.db.GetBackoff(e.ctx, m.ID, reconciler.Process)
	if err != nil || !strings.Contains(b.Cause, "did not take") {
		t.Fatalf("persisted backoff: %+v %v", b, err)
	}
	if len(e.events(m.ID, reconciler.ReasonFailed)) == 0 {
		t.Error("no ReconcileFailed event")
	}

	e.sim.SetFaults(bmcsim.Faults{})
	m = e.waitState(m.ID, bmdb.StateProvisioned, bmc.PowerOn)
	if m.Status != bmdb.StatusOK || m.Error.Type != "" {
		t.Errorf("after the recovery: status %s error %+v, want OK", m.Status, m.Error)
	}
	if _, err := e.db.GetBackoff(e.ctx, m.ID, reconciler.Process); !errors.Is(err, bmdb.ErrNotFound) {
		t.Errorf("backoff after the recovery: %v, want none", err)
	}

	// Provisioned, a power off that does not take: power management error;
	// the retry (hard) that works clears it.
	e.sim.SetFaults(bmcsim.Faults{IgnorePower: true})
	e.setOnline(m.ID, false)
	e.waitFor("the power management error", func() bool {
		mm := e.machine(m.ID)
		return mm.Status == bmdb.StatusError && mm.Error.Type == bmdb.ErrorPowerManagement
	})
	if mm := e.machine(m.ID); mm.State != bmdb.StateProvisioned || !strings.Contains(mm.Error.Message, "did not take") {
		t.Errorf("power off error: %s %+v", mm.State, mm.Error)
	}
	e.sim.SetFaults(bmcsim.Faults{})
	m = e.waitState(m.ID, bmdb.StateProvisioned, bmc.PowerOff)
	e.waitFor("the error cleared", func() bool { return e.machine(m.ID).Status == bmdb.StatusOK })
	// The first error may be cleared by the agent's report or by the
	// reconciler, whichever comes first; this one only by the reconciler.
	if evs := e.events(m.ID, reconciler.ReasonRecovered); len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Message, "PowerOff succeeded; power management error cleared") {
		t.Errorf("ReconcileRecovered events %+v, want the last one for the power off", evs)
	}
}

// TestReconcileProvisionFailureRetries: the agent fails the provision; the
// machine is in its error state (provisioning error, the agent's reason),
// and the retry deprovisions it, makes it available and provisions it
// again, which succeeds.
func TestReconcileProvisionFailureRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mach.failProvision = "write image: checksum mismatch"
	m := e.register(true, "http://10.0.0.1/os.raw")
	e.run()

	e.waitFor("the provisioning error", func() bool {
		mm := e.machine(m.ID)
		return mm.Status == bmdb.StatusError && mm.Error.Type == bmdb.ErrorProvisioning
	})
	if got := e.machine(m.ID); !strings.Contains(got.Error.Message, "checksum mismatch") {
		t.Errorf("error message %q, want the agent's reason", got.Error.Message)
	}
	m = e.waitState(m.ID, bmdb.StateProvisioned, bmc.PowerOn)
	if m.Status != bmdb.StatusOK {
		t.Errorf("status %s after the retry, want OK", m.Status)
	}
	if len(e.events(m.ID, "DeprovisioningDone")) != 1 || len(e.events(m.ID, "ProvisioningDone")) != 1 {
		t.Errorf("want one deprovision and one successful provision")
	}
}

// TestReconcileTwoReplicas: two reconcilers over one database (two bootyd
// replicas, two workers each) drive the machine to provisioned without
// working it twice: one agent boot, one boot request, one provision.
func TestReconcileTwoReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.register(true, "http://10.0.0.1/os.raw")
	e.run()
	e.replica()
	m = e.waitState(m.ID, bmdb.StateProvisioned, bmc.PowerOn)
	if n := e.mach.boots(); n != 1 {
		t.Errorf("the agent booted %d times, want once", n)
	}
	for _, r := range []string{provisioner.ReasonAgentBootRequest, "ProvisioningStarted", "InspectionStarted"} {
		if n := len(e.events(m.ID, r)); n != 1 {
			t.Errorf("%d %s events, want 1", n, r)
		}
	}
	hist, err := e.db.WorkHistory(e.ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	sessions := map[string]bool{}
	open := 0
	for _, h := range hist {
		if h.Process != reconciler.Process {
			continue
		}
		sessions[h.SessionID] = true
		if h.Event == bmdb.WorkStarted {
			open++
		} else {
			open--
		}
		if open > 1 {
			t.Fatalf("two claims of the machine at once: %+v", hist)
		}
	}
	if len(sessions) < 2 {
		t.Logf("only %d session(s) worked the machine", len(sessions))
	}
}

// TestConfig: flags with a prefix, defaults, and a config that cannot work.
func TestConfig(t *testing.T) {
	var c reconciler.Config
	fs := pflagSet()
	c.AddFlags(fs, "reconcile")
	if err := fs.Parse([]string{"--reconcile-resync=30s", "--reconcile-error-backoff=2m", "--reconcile-parallelism=3"}); err != nil {
		t.Fatal(err)
	}
	if c.Resync != 30*time.Second || c.ErrorBackoff.Initial != 2*time.Minute || c.Parallelism != 3 ||
		c.ErrorBackoff.Maximum != reconciler.DefaultErrorBackoff.Maximum {
		t.Fatalf("parsed %+v", c)
	}
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "factory") {
		t.Fatalf("check without a factory: %v", err)
	}
	c.Factory = provisioner.NewFactory(nil, provisioner.Config{})
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	c.ErrorBackoff.Maximum = time.Second
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "error backoff") {
		t.Fatalf("check with max under initial: %v", err)
	}
}

func pflagSet() *pflag.FlagSet { return pflag.NewFlagSet("test", pflag.ContinueOnError) }
