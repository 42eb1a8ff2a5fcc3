package provisioner_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/provisioner"
)

func TestMain(m *testing.M) { os.Exit(bmdbtest.Main(m)) }

const bootMAC = "52:54:00:aa:00:01"

// env is one host behind a Redfish test BMC with an in-memory machine, and
// booty's provisioner over a real BMDB.
type env struct {
	t    *testing.T
	ctx  context.Context
	db   *bmdb.DB
	sim  *bmcsim.Redfish
	mach *bmcsim.MemMachine
	f    provisioner.Factory
	host provisioner.HostData
	// events published by the provisioners, "Reason: message".
	published []string
}

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func newEnv(t *testing.T, dsn string, cfg provisioner.Config) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	db, err := bmdb.Open(ctx, dsn, bmdb.WithLogger(logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mach := &bmcsim.MemMachine{}
	sim, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: mach, Username: "admin", Password: "pw-prov", Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	cfg.BMC.RootCAs = sim.CertPool()
	cfg.BMC.PollInterval = 20 * time.Millisecond
	cfg.BMC.Backoff = 10 * time.Millisecond
	if cfg.BMC.PowerTimeout == 0 {
		cfg.BMC.PowerTimeout = 20 * time.Second
	}
	cfg.BMC.SoftOffTimeout = 20 * time.Second
	cfg.Logger = logger(t)
	e := &env{t: t, ctx: ctx, db: db, sim: sim, mach: mach, f: provisioner.NewFactory(db, cfg)}
	e.host = provisioner.HostData{Name: "node-1", BMCAddress: sim.Address(), BootMACAddress: bootMAC,
		BMCCredentials: bmc.Credentials{Username: "admin", Password: "pw-prov"}}
	return e
}

// p returns a fresh provisioner for the host, as a reconcile makes one.
func (e *env) p() provisioner.Provisioner {
	e.t.Helper()
	p, err := e.f.NewProvisioner(e.ctx, e.host, func(reason, msg string) { e.published = append(e.published, reason+": "+msg) })
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// register runs ValidateManagementAccess until it completes.
func (e *env) register() bmdb.Machine {
	e.t.Helper()
	for i := 0; i < 5; i++ {
		r, id, err := e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, false, false)
		if err != nil || r.ErrorMessage != "" {
			e.t.Fatalf("register: %+v %v", r, err)
		}
		e.host.ProvisionerID = id
		if !r.Dirty {
			return e.machine()
		}
	}
	e.t.Fatal("register: still dirty after 5 calls")
	return bmdb.Machine{}
}

func (e *env) machine() bmdb.Machine {
	e.t.Helper()
	m, err := e.db.GetMachine(e.ctx, e.host.ProvisionerID)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) transition(to bmdb.State, cmd bmdb.CommandKind) bmdb.Machine {
	e.t.Helper()
	m, err := e.db.Transition(e.ctx, e.host.ProvisionerID, bmdb.Transition{To: to, Command: cmd, Reason: "Test"})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// agentDone has the agent report the pending command done (failure "" is
// success).
func (e *env) agentDone(failure string) bmdb.Machine {
	e.t.Helper()
	m := e.machine()
	if m.Command == "" {
		e.t.Fatalf("agent done: no command pending (state %s)", m.State)
	}
	m, err := e.db.CompleteCommand(e.ctx, m.ID, m.CommandGeneration, bmdb.CommandResult{Error: failure})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// enroll has the agent enroll with a hardware report (a live session).
func (e *env) enroll() {
	e.t.Helper()
	if _, err := e.db.Enroll(e.ctx, bmdb.Enrollment{MACs: []string{bootMAC},
		Hardware: []byte(`{"ramMebibytes":8192,"cpu":{"arch":"x86_64","count":4},"nics":[{"name":"eth0","mac":"` + bootMAC + `","pxe":true}],"storage":[{"name":"/dev/vda","type":"SSD","sizeBytes":68719476736}]}`)}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) events(reason string) int {
	e.t.Helper()
	evs, err := e.db.Events(e.ctx, e.host.ProvisionerID, 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Reason == reason {
			n++
		}
	}
	return n
}

func (e *env) waitPower() {
	e.t.Helper()
	if err := e.sim.WaitPower(); err != nil {
		e.t.Fatal(err)
	}
}

// want checks a Result's shape: "dirty-step" (Dirty, 3 s + ≤25 %),
// "dirty-wait" (Dirty, 10 s + ≤25 %), "complete", or "failed: SUBSTRING".
func want(t *testing.T, what string, r provisioner.Result, err error, shape string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: error %v, want %s", what, err, shape)
	}
	inRange := func(base time.Duration) bool { return r.RequeueAfter >= base && r.RequeueAfter <= base+base/4 }
	ok := false
	switch {
	case shape == "dirty-step":
		ok = r.Dirty && inRange(provisioner.RequeueStep) && r.ErrorMessage == ""
	case shape == "dirty-wait":
		ok = r.Dirty && inRange(provisioner.RequeueWait) && r.ErrorMessage == ""
	case shape == "complete":
		ok = r == provisioner.Result{}
	case strings.HasPrefix(shape, "failed: "):
		ok = !r.Dirty && strings.Contains(r.ErrorMessage, strings.TrimPrefix(shape, "failed: "))
	}
	if !ok {
		t.Fatalf("%s: %+v, want %s", what, r, shape)
	}
}

func engines(t *testing.T, fn func(t *testing.T, dsn string)) {
	for _, e := range bmdbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) { fn(t, e.DSN(t)) })
	}
}

// TestValidateManagementAccess: unregistered → created (Dirty, provID) with
// its BMC and stored credentials; registered → complete after reading the
// power state; changed credentials → stored (Dirty); a BMC refusing the
// login → failed; detached → attached (Dirty); no boot MAC → failed.
func TestValidateManagementAccess(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		e := newEnv(t, dsn, provisioner.Config{})
		noMAC := e.host
		noMAC.BootMACAddress = ""
		p, _ := e.f.NewProvisioner(e.ctx, noMAC, nil)
		r, _, err := p.ValidateManagementAccess(provisioner.ManagementAccessData{}, false, false)
		want(t, "no boot MAC", r, err, "failed: boot MAC")

		r, id, err := e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, false, false)
		want(t, "register", r, err, "dirty-step")
		if id == "" {
			t.Fatal("register: no provisioner ID")
		}
		e.host.ProvisionerID = id
		m := e.machine()
		if m.State != bmdb.StateRegistering || m.BMC.Address != e.sim.Address() || m.BootMAC != bootMAC || m.BMC.CredentialsRef == "" {
			t.Fatalf("registered machine: %+v", m)
		}
		if c, err := e.db.GetCredentials(e.ctx, m.BMC.CredentialsRef); err != nil || c.Password != "pw-prov" {
			t.Fatalf("stored credentials: %v %v", c, err)
		}
		before := len(e.sim.Requests())
		r, id2, err := e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, false, false)
		want(t, "validate", r, err, "complete")
		if id2 != id || len(e.sim.Requests()) == before {
			t.Fatalf("validate: id %s (want %s), BMC requests %d → %d", id2, id, before, len(e.sim.Requests()))
		}

		e.host.BMCCredentials.Password = "pw-new"
		r, _, err = e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, true, false)
		want(t, "credentials changed", r, err, "dirty-step")
		if c, _ := e.db.GetCredentials(e.ctx, m.BMC.CredentialsRef); c.Password != "pw-new" {
			t.Fatal("changed credentials were not stored")
		}
		// The controller may keep saying "changed" until a call completes:
		// stored credentials are not stored again; the BMC is asked.
		r, _, err = e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, true, false)
		want(t, "credentials changed, said again", r, err, "failed: authentication")
		r, _, err = e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, false, false)
		want(t, "validate with wrong password", r, err, "failed: authentication")

		e.host.BMCCredentials.Password = "pw-prov"
		e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, true, false)
		r, err = e.p().Detach()
		want(t, "detach", r, err, "dirty-step")
		if e.machine().Status != bmdb.StatusDetached {
			t.Fatal("detach: status not detached")
		}
		r, err = e.p().Detach()
		want(t, "detach again", r, err, "complete")
		r, _, err = e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, false, false)
		want(t, "attach", r, err, "dirty-step")
		r, _, err = e.p().ValidateManagementAccess(provisioner.ManagementAccessData{}, false, false)
		want(t, "validate attached", r, err, "complete")
		if m := e.machine(); m.Status != bmdb.StatusOK {
			t.Fatalf("attached machine status %s", m.Status)
		}
	})
}

// TestInspectHardware walks the inspection's state table: unregistered,
// start, boot into the agent once, wait, done with details, refresh with a
// live agent (no reboot), failure with and without restartOnFailure.
func TestInspectHardware(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		e := newEnv(t, dsn, provisioner.Config{})
		if _, _, _, err := e.p().InspectHardware(provisioner.InspectData{}, false, false, false); !errors.Is(err, provisioner.ErrNeedsRegistration) {
			t.Fatalf("inspect unregistered: %v, want ErrNeedsRegistration", err)
		}
		e.register()
		inspect := func(restart, refresh bool) (provisioner.Result, bool, *provisioner.HardwareDetails, error) {
			return e.p().InspectHardware(provisioner.InspectData{BootMode: provisioner.UEFI}, restart, refresh, false)
		}
		r, started, d, err := inspect(false, false)
		want(t, "start", r, err, "dirty-step")
		if m := e.machine(); !started || d != nil || m.State != bmdb.StateInspecting || m.Command != bmdb.CommandInspect {
			t.Fatalf("start: started %v, details %v, machine %s/%s", started, d, m.State, m.Command)
		}
		r, started, _, err = inspect(false, false)
		want(t, "boot the agent", r, err, "dirty-wait")
		e.waitPower()
		if boots := e.mach.Boots(); started || len(boots) != 1 || boots[0] != bmc.DevicePXE || e.mach.State() != bmc.PowerOn {
			t.Fatalf("boot the agent: started %v, boots %v, power %s", started, boots, e.mach.State())
		}
		if e.events(provisioner.ReasonAgentBootRequest) != 1 {
			t.Fatal("no AgentBootRequested event")
		}
		r, _, _, err = inspect(false, false)
		want(t, "wait for the agent", r, err, "dirty-wait")
		e.waitPower()
		if len(e.mach.Boots()) != 1 {
			t.Fatalf("booted again while waiting: %v", e.mach.Boots())
		}
		e.enroll()
		r, _, _, err = inspect(false, false)
		want(t, "agent running", r, err, "dirty-wait")
		e.agentDone("")
		r, started, d, err = inspect(false, false)
		want(t, "done", r, err, "complete")
		if started || d == nil || d.RAMMebibytes != 8192 || d.Storage[0].Name != "/dev/vda" {
			t.Fatalf("done: started %v details %+v", started, d)
		}

		r, started, _, err = inspect(false, true)
		want(t, "refresh", r, err, "dirty-step")
		if !started {
			t.Fatal("refresh did not start an inspection")
		}
		r, _, _, err = inspect(false, false)
		want(t, "live agent", r, err, "dirty-wait")
		e.waitPower()
		if len(e.mach.Boots()) != 1 || e.events(provisioner.ReasonAgentBootRequest) != 1 {
			t.Fatalf("a live agent was rebooted: boots %v", e.mach.Boots())
		}
		e.agentDone("lshw crashed")
		r, _, _, err = inspect(false, false)
		want(t, "failed", r, err, "failed: lshw crashed")
		r, started, _, err = inspect(true, false)
		want(t, "restart on failure", r, err, "dirty-step")
		if m := e.machine(); !started || m.Command != bmdb.CommandInspect {
			t.Fatalf("restart: started %v command %q", started, m.Command)
		}
	})
}

// TestProvision walks provisioning: registering → available, the spec set,
// provisioning started, the agent booted, done; a failure with the same
// image fails, with another image deprovisions first; bad input changes
// nothing.
func TestProvision(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		e := newEnv(t, dsn, provisioner.Config{})
		rot := false
		data := provisioner.ProvisionData{
			Image:           provisioner.Image{URL: "http://10.0.0.1/debian.raw.zst", Checksum: "sha256:ab"},
			HostConfig:      provisioner.StaticHostConfig{User: "#cloud-config\n", Network: "{}", Meta: "{}"},
			BootMode:        provisioner.UEFI,
			RootDeviceHints: &provisioner.RootDeviceHints{MinSizeGigabytes: 20, Rotational: &rot},
		}
		if _, err := e.p().Provision(data, false); !errors.Is(err, provisioner.ErrNeedsRegistration) {
			t.Fatalf("provision unregistered: %v", err)
		}
		e.register()
		bad := data
		bad.RootDeviceHints = &provisioner.RootDeviceHints{MinSizeGigabytes: -1}
		r, err := e.p().Provision(bad, false)
		want(t, "bad hints", r, err, "failed: minSizeGigabytes")
		r, err = e.p().Provision(provisioner.ProvisionData{Image: data.Image, CustomDeploy: &provisioner.CustomDeploy{Method: "install_coreos"}}, false)
		want(t, "custom deploy", r, err, "failed: install_coreos")
		if m := e.machine(); m.State != bmdb.StateRegistering || m.Generation != 1 {
			t.Fatalf("bad input changed the machine: %s gen %d", m.State, m.Generation)
		}

		r, err = e.p().Provision(data, false)
		want(t, "make available", r, err, "dirty-step")
		r, err = e.p().Provision(data, false)
		want(t, "set spec", r, err, "dirty-step")
		m := e.machine()
		if m.State != bmdb.StateAvailable || m.Spec.Image.URL != data.Image.URL || m.Spec.UserData != "#cloud-config\n" ||
			m.Spec.RootDeviceHints == nil || m.Spec.RootDeviceHints.MinSizeGigabytes != 20 {
			t.Fatalf("spec: %s %+v", m.State, m.Spec)
		}
		r, err = e.p().Provision(data, false)
		want(t, "start", r, err, "dirty-step")
		if m := e.machine(); m.State != bmdb.StateProvisioning || m.Command != bmdb.CommandProvision {
			t.Fatalf("start: %s/%s", m.State, m.Command)
		}
		r, err = e.p().Provision(data, false)
		want(t, "boot the agent", r, err, "dirty-wait")
		e.waitPower()
		if b := e.mach.Boots(); len(b) != 1 || b[0] != bmc.DevicePXE {
			t.Fatalf("boots %v", b)
		}
		r, err = e.p().Provision(data, false)
		want(t, "in progress", r, err, "dirty-wait")
		e.enroll()
		e.agentDone("")
		r, err = e.p().Provision(data, false)
		want(t, "done", r, err, "complete")
		if e.machine().State != bmdb.StateProvisioned {
			t.Fatal("not provisioned")
		}

		// A failed provision: the same image fails, another deprovisions.
		r, err = e.p().Deprovision(false)
		want(t, "deprovision", r, err, "dirty-step")
		e.agentDone("")
		e.transition(bmdb.StateProvisioning, bmdb.CommandProvision)
		e.agentDone("checksum mismatch")
		r, err = e.p().Provision(data, false)
		want(t, "failed, same image", r, err, "failed: checksum mismatch")
		other := data
		other.Image.URL = "http://10.0.0.1/other.raw.zst"
		r, err = e.p().Provision(other, false)
		want(t, "failed, other image", r, err, "dirty-step")
		if m := e.machine(); m.State != bmdb.StateDeprovisioning || m.Command != bmdb.CommandDeprovision {
			t.Fatalf("failed with another image: %s/%s", m.State, m.Command)
		}
	})
}

// TestDeprovision: provisioned → started (Dirty); pending with the machine
// on and no agent → reset into PXE once; done → complete; a failure fails
// unless restartOnFailure, which issues the command again.
func TestDeprovision(t *testing.T) {
	e := newEnv(t, bmdbtest.Engines()[0].DSN(t), provisioner.Config{})
	e.register()
	r, err := e.p().Deprovision(false)
	want(t, "registering", r, err, "complete")
	e.transition(bmdb.StateAvailable, "")
	e.transition(bmdb.StateProvisioning, bmdb.CommandProvision)
	e.agentDone("")
	if r, err := e.p().PowerOn(false); err != nil || !r.Dirty {
		t.Fatalf("power on: %+v %v", r, err)
	}
	e.waitPower()
	r, err = e.p().Deprovision(false)
	want(t, "start", r, err, "dirty-step")
	r, err = e.p().Deprovision(false)
	want(t, "reset into the agent", r, err, "dirty-wait")
	e.waitPower()
	if b := e.mach.Boots(); len(b) != 2 || b[1] != bmc.DevicePXE || e.mach.State() != bmc.PowerOn {
		t.Fatalf("after reset: boots %v power %s", b, e.mach.State())
	}
	r, err = e.p().Deprovision(false)
	want(t, "in progress", r, err, "dirty-wait")
	e.enroll()
	e.agentDone("")
	r, err = e.p().Deprovision(false)
	want(t, "done", r, err, "complete")

	e.transition(bmdb.StateProvisioning, bmdb.CommandProvision)
	e.agentDone("")
	e.p().Deprovision(false)
	e.agentDone("wipe failed")
	r, err = e.p().Deprovision(false)
	want(t, "failed", r, err, "failed: wipe failed")
	r, err = e.p().Deprovision(true)
	want(t, "restart", r, err, "dirty-step")
	if m := e.machine(); m.Command != bmdb.CommandDeprovision {
		t.Fatalf("restart: command %q", m.Command)
	}
}

// TestPower: power on/off through the real Redfish driver against the test
// BMC; the state a second call finds is complete; a power action that does
// not take fails; UpdateHardwareState reads the power.
func TestPower(t *testing.T) {
	e := newEnv(t, bmdbtest.Engines()[0].DSN(t), provisioner.Config{BMC: bmc.Options{PowerTimeout: 2 * time.Second}})
	if _, err := e.p().PowerOn(false); !errors.Is(err, provisioner.ErrNeedsRegistration) {
		t.Fatalf("power on unregistered: %v", err)
	}
	e.register()
	hs, err := e.p().UpdateHardwareState()
	if err != nil || hs.PoweredOn == nil || *hs.PoweredOn {
		t.Fatalf("hardware state off: %+v %v", hs, err)
	}
	r, err := e.p().PowerOn(false)
	want(t, "power on", r, err, "dirty-step")
	if e.mach.State() != bmc.PowerOn || e.events(provisioner.ReasonPowerOn) != 1 {
		t.Fatalf("power on: machine %s", e.mach.State())
	}
	r, err = e.p().PowerOn(false)
	want(t, "power on again", r, err, "complete")
	if hs, _ := e.p().UpdateHardwareState(); hs.PoweredOn == nil || !*hs.PoweredOn {
		t.Fatal("hardware state: not on")
	}
	r, err = e.p().PowerOff(provisioner.RebootModeSoft, false)
	want(t, "soft power off", r, err, "dirty-step")
	if e.mach.State() != bmc.PowerOff {
		t.Fatal("soft power off: still on")
	}
	e.p().PowerOn(false)
	e.mach.IgnoreACPI = true
	r, err = e.p().PowerOff(provisioner.RebootModeHard, false)
	want(t, "hard power off", r, err, "dirty-step")
	e.sim.SetFaults(bmcsim.Faults{IgnorePower: true})
	r, err = e.p().PowerOn(false)
	want(t, "power on that does not take", r, err, "failed: did not take")
}

// TestPowerOnProvisionedBootsDisk: a provisioned machine that is off is
// powered on with boot device disk (persistent), whatever override the
// agent's PXE boot left.
func TestPowerOnProvisionedBootsDisk(t *testing.T) {
	e := newEnv(t, bmdbtest.Engines()[0].DSN(t), provisioner.Config{})
	m := e.register()
	e.transition(bmdb.StateInspecting, bmdb.CommandInspect)
	e.agentDone("")
	if _, err := e.db.UpdateMachine(e.ctx, m.ID, 0, bmdb.MachineUpdate{Spec: &bmdb.Spec{Image: bmdb.Image{URL: "http://10.0.0.1/os.raw"}}}); err != nil {
		t.Fatal(err)
	}
	e.transition(bmdb.StateProvisioning, bmdb.CommandProvision)
	e.agentDone("")
	if err := e.sim.WaitPower(); err != nil {
		t.Fatal(err)
	}
	r, err := e.p().PowerOn(false)
	want(t, "power on provisioned", r, err, "dirty-step")
	e.waitPower()
	if b := e.sim.Boot(); b.Device != bmc.DeviceDisk || !b.Persistent {
		t.Fatalf("boot override %+v, want disk, persistent", b)
	}
	if boots := e.mach.Boots(); len(boots) != 1 || boots[0] != bmc.DeviceDisk {
		t.Fatalf("boots %v, want [disk]", boots)
	}
}

// TestProvisionKeepsChecksums: a spec whose image carries more digests
// (Checksums, which metal3's Image has not) keeps them when Provision is
// called with the same image URL: the spec is not rewritten.
func TestProvisionKeepsChecksums(t *testing.T) {
	e := newEnv(t, bmdbtest.Engines()[0].DSN(t), provisioner.Config{})
	m := e.register()
	e.transition(bmdb.StateAvailable, "")
	img := bmdb.Image{URL: "http://10.0.0.1/os.raw.zst", Checksum: "sha256:aa", Checksums: []string{"sha256:bb"}}
	m, err := e.db.UpdateMachine(e.ctx, m.ID, 0, bmdb.MachineUpdate{Spec: &bmdb.Spec{Image: img}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.p().Provision(provisioner.ProvisionData{Image: provisioner.Image{URL: img.URL, Checksum: img.Checksum}}, false)
	want(t, "provision", r, err, "dirty-step")
	got := e.machine()
	if got.State != bmdb.StateProvisioning || len(got.Spec.Image.Checksums) != 1 || got.Spec.Image.Checksums[0] != "sha256:bb" {
		t.Fatalf("state %s, image %+v: want provisioning with the checksums kept", got.State, got.Spec.Image)
	}
}

// TestLifecycleOther covers Adopt, Delete, HasCapacity, TryInit, the data
// image over virtual media and what booty does not support.
func TestLifecycleOther(t *testing.T) {
	e := newEnv(t, bmdbtest.Engines()[0].DSN(t), provisioner.Config{ProvisioningLimit: 2})
	if r, err := e.p().Delete(); err != nil || r.Dirty {
		t.Fatalf("delete unregistered: %+v %v", r, err)
	}
	m := e.register()
	if ok, err := e.p().TryInit(); !ok || err != nil {
		t.Fatalf("try init: %v %v", ok, err)
	}
	r, err := e.p().Adopt(provisioner.AdoptData{State: provisioner.StateExternallyProvisioned}, false)
	want(t, "adopt", r, err, "dirty-step")
	r, err = e.p().Adopt(provisioner.AdoptData{State: provisioner.StateExternallyProvisioned}, false)
	want(t, "adopted", r, err, "complete")
	if e.machine().State != bmdb.StateExternallyProvisioned {
		t.Fatal("not externally provisioned")
	}

	// Capacity: two other machines inspecting fill the limit of 2.
	for i, mac := range []string{"52:54:00:bb:00:01", "52:54:00:bb:00:02"} {
		o, err := e.db.CreateMachine(e.ctx, bmdb.NewMachine{Name: "busy-" + string(rune('a'+i)), BootMAC: mac})
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := e.p().HasCapacity(); !ok {
			t.Fatalf("no capacity with %d busy", i)
		}
		if _, err := e.db.Transition(e.ctx, o.ID, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Test"}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := e.p().HasCapacity(); ok || err != nil {
		t.Fatalf("capacity with the limit reached: %v %v", ok, err)
	}

	if err := e.p().AttachDataImage("https://10.0.0.1/data.iso"); err != nil {
		t.Fatal(err)
	}
	if img, in := e.sim.Media(); !in || img != "https://10.0.0.1/data.iso" {
		t.Fatalf("virtual media: %q inserted %v", img, in)
	}
	if busy, err := e.p().IsDataImageReady(); busy || err != nil {
		t.Fatalf("data image ready: busy %v %v", busy, err)
	}
	if err := e.p().DetachDataImage(); err != nil {
		t.Fatal(err)
	}
	if _, in := e.sim.Media(); in {
		t.Fatal("virtual media still inserted")
	}

	if f, err := e.p().PreprovisioningImageFormats(); f != nil || err != nil {
		t.Fatalf("preprovisioning formats: %v %v", f, err)
	}
	if _, _, err := e.p().GetFirmwareSettings(true); !errors.Is(err, provisioner.ErrFirmwareUpdateUnsupported) {
		t.Fatalf("firmware settings: %v", err)
	}
	if _, _, err := e.p().Service(provisioner.ServicingData{TargetFirmwareComponents: []provisioner.FirmwareUpdate{{Component: "bios", URL: "http://x"}}}, false, false); !errors.Is(err, provisioner.ErrFirmwareUpdateUnsupported) {
		t.Fatalf("service firmware: %v", err)
	}
	r, started, err := e.p().Prepare(provisioner.PrepareData{TargetRAIDConfig: &provisioner.RAIDConfig{HardwareRAIDVolumes: []provisioner.HardwareRAIDVolume{{Level: "1"}}}}, true, false)
	want(t, "prepare RAID", r, err, "failed: RAID")
	r, started, err = e.p().Prepare(provisioner.PrepareData{RootDeviceHints: &provisioner.RootDeviceHints{DeviceName: "/dev/sda"}}, true, false)
	want(t, "prepare nothing", r, err, "complete")
	if started {
		t.Fatal("prepare with nothing to do started")
	}
	r, err = e.p().AddBMCEventSubscriptionForNode(&provisioner.BMCEventSubscription{Destination: "http://x"}, nil)
	want(t, "event subscription", r, err, "failed: not supported")

	r, err = e.p().Delete()
	want(t, "delete", r, err, "dirty-step")
	r, err = e.p().Delete()
	want(t, "deleted", r, err, "complete")
	if _, err := e.db.GetMachine(e.ctx, m.ID); !errors.Is(err, bmdb.ErrNotFound) {
		t.Fatalf("machine after delete: %v", err)
	}
	if _, err := e.db.GetCredentials(e.ctx, m.BMC.CredentialsRef); !errors.Is(err, bmdb.ErrNotFound) {
		t.Fatalf("credentials after delete: %v", err)
	}
}

// TestRootDeviceHints: metal3's names map onto Ironic's grammar as metal3's
// Ironic provisioner writes them, and parse with the agent's parser.
func TestRootDeviceHints(t *testing.T) {
	yes := true
	h := provisioner.RootDeviceHints{DeviceName: "/dev/disk/by-path/pci-0000:00:1f.2-ata-1", HCTL: "0:0:0:0", Model: "Samsung",
		Vendor: "ATA", SerialNumber: "S1", MinSizeGigabytes: 100, WWN: "0x5000", WWNWithExtension: "0x5000x", WWNVendorExtension: "0x1", Rotational: &yes}
	m := h.HintMap()
	for k, v := range map[string]any{"by_path": "s== /dev/disk/by-path/pci-0000:00:1f.2-ata-1", "hctl": "s== 0:0:0:0", "model": "<in> Samsung",
		"vendor": "<in> ATA", "serial": "s== S1", "size": ">= 100", "wwn": "s== 0x5000", "wwn_with_extension": "s== 0x5000x",
		"wwn_vendor_extension": "s== 0x1", "rotational": true} {
		if m[k] != v {
			t.Errorf("hint %s = %v, want %v", k, m[k], v)
		}
	}
	if len(m) != 10 {
		t.Errorf("%d hints, want 10: %v", len(m), m)
	}
	hints, err := h.Hints()
	if err != nil || len(hints) != 10 {
		t.Fatalf("parse: %v %v", hints, err)
	}
	if m := (provisioner.RootDeviceHints{DeviceName: "/dev/sda"}).HintMap(); m["name"] != "s== /dev/sda" {
		t.Fatalf("device name: %v", m)
	}
	if _, err := (provisioner.RootDeviceHints{MinSizeGigabytes: -5}).Hints(); err == nil {
		t.Fatal("negative size accepted")
	}
}

// TestLoadHostData: the host data of a machine carries its BMC and the
// credentials the BMDB stores; an unknown machine is not found.
func TestLoadHostData(t *testing.T) {
	e := newEnv(t, bmdbtest.Engines()[0].DSN(t), provisioner.Config{})
	m := e.register()
	h, err := provisioner.LoadHostData(e.ctx, e.db, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "node-1" || h.ProvisionerID != m.ID || h.BMCAddress != e.sim.Address() || h.BootMACAddress != bootMAC ||
		h.BMCCredentials != (bmc.Credentials{Username: "admin", Password: "pw-prov"}) {
		t.Fatalf("host data: %+v", h)
	}
	if _, err := provisioner.LoadHostData(e.ctx, e.db, "no-such-id"); !errors.Is(err, bmdb.ErrNotFound) {
		t.Fatalf("unknown machine: %v", err)
	}
	if _, err := e.f.NewProvisioner(e.ctx, provisioner.HostData{}, nil); err == nil {
		t.Fatal("a provisioner for a host without name or ID")
	}
}
