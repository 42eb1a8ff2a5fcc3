package bmc_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
)

const (
	testUser     = "admin"
	testPassword = "pw-Zq81x" // asserted never to appear in errors
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fastOptions are driver options with short polls and bounds for tests
// against the in-memory machine (bounds, not timing asserts).
func fastOptions(t *testing.T) bmc.Options {
	return bmc.Options{
		Timeout:        10 * time.Second,
		Backoff:        10 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
		PowerTimeout:   20 * time.Second,
		SoftOffTimeout: 20 * time.Second,
		PollInterval:   20 * time.Millisecond,
		Logger:         testLogger(t),
	}
}

// rig is one driver against one test BMC and its in-memory machine.
type rig struct {
	name      string
	machine   *bmcsim.MemMachine
	address   string
	opts      bmc.Options
	boot      func() bmc.BootDevice
	settle    func() error // waits for the BMC's pending power changes
	setIgnore func(bool)
	redfish   *bmcsim.Redfish
}

func (r rig) driver(t *testing.T, creds bmc.Credentials, opts bmc.Options) bmc.Driver {
	t.Helper()
	d, err := bmc.New(r.address, creds, opts)
	if err != nil {
		t.Fatalf("new driver for %s: %v", r.address, err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	return d
}

func ipmiRig(t *testing.T, m *bmcsim.MemMachine) rig {
	s, err := bmcsim.NewIPMI(bmcsim.IPMIConfig{Machine: m, Username: testUser, Password: testPassword, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return rig{name: "ipmi", machine: m, address: s.Address(), opts: fastOptions(t), boot: s.Boot, settle: s.WaitPower, setIgnore: s.SetIgnorePower}
}

func redfishRig(t *testing.T, m *bmcsim.MemMachine, session bool) rig {
	s, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: m, Username: testUser, Password: testPassword, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	o := fastOptions(t)
	o.RootCAs = s.CertPool()
	o.SessionAuth = session
	name := "redfish"
	if session {
		name = "redfish-session"
	}
	return rig{name: name, machine: m, address: s.Address(), opts: o, boot: s.Boot, settle: s.WaitPower,
		setIgnore: func(b bool) { s.SetFaults(bmcsim.Faults{IgnorePower: b}) }, redfish: s}
}

func allRigs(t *testing.T, m func() *bmcsim.MemMachine) []rig {
	return []rig{ipmiRig(t, m()), redfishRig(t, m(), false), redfishRig(t, m(), true)}
}

var creds = bmc.Credentials{Username: testUser, Password: testPassword}

// TestDriverCalls runs every driver call against each test BMC and checks
// the machine behind it: power state, boot device once and persistent,
// power on, reset, hard and soft off, reset of a machine that is off.
func TestDriverCalls(t *testing.T) {
	for _, r := range allRigs(t, func() *bmcsim.MemMachine { return &bmcsim.MemMachine{} }) {
		t.Run(r.name, func(t *testing.T) {
			ctx := t.Context()
			d := r.driver(t, creds, r.opts)
			m := r.machine
			mustState := func(want bmc.PowerState) {
				t.Helper()
				got, err := d.PowerState(ctx)
				if err != nil || got != want {
					t.Fatalf("PowerState = %s, %v; want %s", got, err, want)
				}
				if m.State() != want {
					t.Fatalf("machine is %s, want %s", m.State(), want)
				}
			}
			mustState(bmc.PowerOff)

			if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DevicePXE}); err != nil {
				t.Fatal(err)
			}
			if got := r.boot(); got != (bmc.BootDevice{Device: bmc.DevicePXE, Mode: bmc.BootUEFI}) {
				t.Fatalf("boot override = %+v, want pxe once UEFI", got)
			}
			if err := d.PowerOn(ctx); err != nil {
				t.Fatal(err)
			}
			mustState(bmc.PowerOn)
			if got := m.Boots(); !slices.Equal(got, []bmc.Device{bmc.DevicePXE}) {
				t.Fatalf("boots = %q, want [pxe]", got)
			}
			if got := r.boot(); got.Device != "" {
				t.Fatalf("one-time override kept after the boot: %+v", got)
			}
			if err := d.PowerOn(ctx); err != nil {
				t.Fatalf("power on a machine that is on: %v", err)
			}
			r.settle()
			if n := len(m.Boots()); n != 1 {
				t.Fatalf("power on of a machine that is on booted it again (%d boots)", n)
			}

			if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DeviceDisk, Persistent: true, Mode: bmc.BootLegacy}); err != nil {
				t.Fatal(err)
			}
			if got := r.boot(); got != (bmc.BootDevice{Device: bmc.DeviceDisk, Persistent: true, Mode: bmc.BootLegacy}) {
				t.Fatalf("boot override = %+v, want disk persistent Legacy", got)
			}
			if err := d.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.settle(); err != nil {
				t.Fatal(err)
			}
			mustState(bmc.PowerOn)
			boots := m.Boots()
			if len(boots) != 2 {
				t.Fatalf("boots after reset = %q, want a second boot", boots)
			}
			if r.name == "ipmi" {
				// IPMI hard reset is the reset line: same boot device.
				if m.Resets() != 1 {
					t.Fatalf("resets = %d, want 1", m.Resets())
				}
			} else if boots[1] != bmc.DeviceDisk {
				// Redfish ForceRestart is off then on: the override applies.
				t.Fatalf("boot after ForceRestart = %q, want disk", boots[1])
			}

			if err := d.PowerOff(ctx, bmc.OffHard); err != nil {
				t.Fatal(err)
			}
			mustState(bmc.PowerOff)
			if err := d.PowerOff(ctx, bmc.OffHard); err != nil {
				t.Fatalf("power off a machine that is off: %v", err)
			}
			if err := d.PowerOn(ctx); err != nil {
				t.Fatal(err)
			}
			if got := m.Boots(); got[len(got)-1] != bmc.DeviceDisk {
				t.Fatalf("boots = %q, want the persistent disk override kept", got)
			}
			if err := d.PowerOff(ctx, bmc.OffSoft); err != nil {
				t.Fatal(err)
			}
			mustState(bmc.PowerOff)
			if err := d.Reset(ctx); err != nil {
				t.Fatalf("reset of a machine that is off: %v", err)
			}
			mustState(bmc.PowerOn)

			before := r.boot()
			err := d.SetBootDevice(ctx, bmc.BootDevice{Device: "floppy"})
			if err == nil || !strings.Contains(err.Error(), `boot device "floppy"`) {
				t.Fatalf("SetBootDevice(floppy) = %v, want an error naming the device", err)
			}
			if r.boot() != before {
				t.Fatal("a refused boot device changed the override")
			}
		})
	}
}

// TestPowerActionDoesNotTake: a BMC that accepts power actions but does
// not apply them makes the driver fail after its bound, naming the wanted
// and the observed state.
func TestPowerActionDoesNotTake(t *testing.T) {
	for _, r := range allRigs(t, func() *bmcsim.MemMachine { return &bmcsim.MemMachine{} }) {
		t.Run(r.name, func(t *testing.T) {
			r.setIgnore(true)
			o := r.opts
			o.PowerTimeout = 300 * time.Millisecond
			d := r.driver(t, creds, o)
			err := d.PowerOn(t.Context())
			if !errors.Is(err, bmc.ErrPowerNotApplied) {
				t.Fatalf("PowerOn = %v, want ErrPowerNotApplied", err)
			}
			for _, s := range []string{"power on", "want On", "observed Off", "after 300ms", "127.0.0.1"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			r.setIgnore(false)
			if err := d.PowerOn(t.Context()); err != nil {
				t.Fatalf("PowerOn after the fault cleared: %v", err)
			}
		})
	}
}

// TestSoftOffIgnored: an OS that ignores the ACPI power button makes a soft
// power off fail after SoftOffTimeout; a hard one then works.
func TestSoftOffIgnored(t *testing.T) {
	for _, r := range allRigs(t, func() *bmcsim.MemMachine { return &bmcsim.MemMachine{IgnoreACPI: true} }) {
		t.Run(r.name, func(t *testing.T) {
			o := r.opts
			o.SoftOffTimeout = 300 * time.Millisecond
			d := r.driver(t, creds, o)
			if err := d.PowerOn(t.Context()); err != nil {
				t.Fatal(err)
			}
			err := d.PowerOff(t.Context(), bmc.OffSoft)
			if !errors.Is(err, bmc.ErrPowerNotApplied) || !strings.Contains(err.Error(), "power off (soft)") || !strings.Contains(err.Error(), "observed On") {
				t.Fatalf("soft PowerOff = %v, want ErrPowerNotApplied naming soft off and observed On", err)
			}
			if err := d.PowerOff(t.Context(), bmc.OffHard); err != nil {
				t.Fatal(err)
			}
			if r.machine.State() != bmc.PowerOff {
				t.Fatal("machine still on after a hard off")
			}
		})
	}
}

// TestWrongPassword: a refused login is ErrAuth, is not retried, never
// quotes the password, and changes nothing.
func TestWrongPassword(t *testing.T) {
	for _, r := range allRigs(t, func() *bmcsim.MemMachine { return &bmcsim.MemMachine{} }) {
		t.Run(r.name, func(t *testing.T) {
			bad := bmc.Credentials{Username: testUser, Password: "wrong-Kx9"}
			d := r.driver(t, bad, r.opts)
			err := d.PowerOn(t.Context())
			if !errors.Is(err, bmc.ErrAuth) {
				t.Fatalf("PowerOn with a wrong password = %v, want ErrAuth", err)
			}
			if strings.Contains(err.Error(), "wrong-Kx9") || strings.Contains(err.Error(), testPassword) {
				t.Fatalf("error leaks a password: %v", err)
			}
			if strings.Contains(err.Error(), "attempts") {
				t.Fatalf("an auth failure was retried: %v", err)
			}
			r.settle()
			if r.machine.State() != bmc.PowerOff {
				t.Fatal("machine powered on with a wrong password")
			}
		})
	}
}

// TestRedfishRejectAuthFault: the injected auth failure surfaces as ErrAuth
// with the BMC's message.
func TestRedfishRejectAuthFault(t *testing.T) {
	r := redfishRig(t, &bmcsim.MemMachine{}, false)
	r.redfish.SetFaults(bmcsim.Faults{RejectAuth: true})
	_, err := r.driver(t, creds, r.opts).PowerState(t.Context())
	if !errors.Is(err, bmc.ErrAuth) || !strings.Contains(err.Error(), "http 401") || !strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("PowerState = %v, want ErrAuth quoting http 401 and the message", err)
	}
	if n := len(r.redfish.Requests()); n != 1 {
		t.Fatalf("%d requests, want 1 (no retry on auth failure)", n)
	}
}

// TestRedfishSlowAnswers: an answer slower than the request timeout fails
// after the bounded retries; one within it succeeds.
func TestRedfishSlowAnswers(t *testing.T) {
	r := redfishRig(t, &bmcsim.MemMachine{}, false)
	r.redfish.SetFaults(bmcsim.Faults{Latency: 2 * time.Second})
	o := r.opts
	o.Timeout = 200 * time.Millisecond
	o.Retries = 2
	_, err := r.driver(t, creds, o).PowerState(t.Context())
	if err == nil || !strings.Contains(err.Error(), "after 3 attempts") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PowerState against a slow BMC = %v, want a deadline error after 3 attempts", err)
	}
	if n := len(r.redfish.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	r.redfish.SetFaults(bmcsim.Faults{Latency: 50 * time.Millisecond})
	o.Timeout = 10 * time.Second
	if s, err := r.driver(t, creds, o).PowerState(t.Context()); err != nil || s != bmc.PowerOff {
		t.Fatalf("PowerState with a small latency = %s, %v", s, err)
	}
}

// TestRedfishTransientFailuresRetried: 503 answers are retried with backoff
// until one succeeds.
func TestRedfishTransientFailuresRetried(t *testing.T) {
	r := redfishRig(t, &bmcsim.MemMachine{}, false)
	r.redfish.SetFaults(bmcsim.Faults{FailRequests: 2})
	if s, err := r.driver(t, creds, r.opts).PowerState(t.Context()); err != nil || s != bmc.PowerOff {
		t.Fatalf("PowerState = %s, %v; want Off after two retried 503s", s, err)
	}
	if n := len(r.redfish.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	r.redfish.SetFaults(bmcsim.Faults{FailRequests: 10})
	o := r.opts
	o.Retries = 1
	_, err := r.driver(t, creds, o).PowerState(t.Context())
	if err == nil || !strings.Contains(err.Error(), "http 503") || !strings.Contains(err.Error(), "after 2 attempts") {
		t.Fatalf("PowerState = %v, want http 503 after 2 attempts", err)
	}
}

// TestRedfishTLS: the BMC's certificate is verified against RootCAs; an
// unknown CA fails unless verification is disabled; plain http needs an
// address that says so.
func TestRedfishTLS(t *testing.T) {
	r := redfishRig(t, &bmcsim.MemMachine{}, false)
	o := r.opts
	o.RootCAs = nil
	o.Retries = -1
	_, err := r.driver(t, creds, o).PowerState(t.Context())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("PowerState with an unknown CA = %v, want a certificate error", err)
	}
	o.DisableCertificateVerification = true
	if _, err := r.driver(t, creds, o).PowerState(t.Context()); err != nil {
		t.Fatalf("PowerState with verification disabled: %v", err)
	}

	m := &bmcsim.MemMachine{}
	plain, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: m, Username: testUser, Password: testPassword, PlainHTTP: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	if !strings.HasPrefix(plain.Address(), "redfish+http://") {
		t.Fatalf("plain http BMC address %q", plain.Address())
	}
	d, err := bmc.New(plain.Address(), creds, fastOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.PowerOn(t.Context()); err != nil {
		t.Fatalf("PowerOn over redfish+http: %v", err)
	}
	httpsAddr := strings.Replace(plain.Address(), "redfish+http://", "redfish://", 1)
	o = fastOptions(t)
	o.Retries = -1
	d, _ = bmc.New(httpsAddr, creds, o)
	if _, err := d.PowerState(t.Context()); err == nil {
		t.Fatal("redfish:// (https) spoke to a plain http BMC")
	}
}

// TestRedfishVirtualMedia inserts, replaces and ejects the virtual CD.
func TestRedfishVirtualMedia(t *testing.T) {
	r := redfishRig(t, &bmcsim.MemMachine{}, false)
	addr := strings.Replace(r.address, "redfish://", "redfish-virtualmedia://", 1)
	d, err := bmc.New(addr, creds, r.opts)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Address().VirtualMedia {
		t.Fatal("redfish-virtualmedia address not marked VirtualMedia")
	}
	vm, ok := d.(bmc.VirtualMedia)
	if !ok {
		t.Fatal("redfish driver has no VirtualMedia")
	}
	ctx := t.Context()
	if err := vm.InsertMedia(ctx, "http://10.0.2.2:8080/booty.iso"); err != nil {
		t.Fatal(err)
	}
	if img, in := r.redfish.Media(); img != "http://10.0.2.2:8080/booty.iso" || !in {
		t.Fatalf("media = %q inserted %v", img, in)
	}
	if err := vm.InsertMedia(ctx, "https://files.example/other.iso"); err != nil {
		t.Fatalf("insert over an inserted image: %v", err)
	}
	if img, _ := r.redfish.Media(); img != "https://files.example/other.iso" {
		t.Fatalf("media = %q after the second insert", img)
	}
	if err := vm.EjectMedia(ctx); err != nil {
		t.Fatal(err)
	}
	if _, in := r.redfish.Media(); in {
		t.Fatal("media still inserted after eject")
	}
	if err := vm.EjectMedia(ctx); err != nil {
		t.Fatalf("eject with nothing inserted: %v", err)
	}
	if err := vm.InsertMedia(ctx, "/local/file.iso"); err == nil || !strings.Contains(err.Error(), "http(s)://") {
		t.Fatalf("insert of a non-URL = %v, want an error", err)
	}
	if _, ok := r.driver(t, creds, r.opts).(bmc.VirtualMedia); !ok {
		t.Fatal("redfish driver without virtual media scheme has no VirtualMedia")
	}
	ipmi := ipmiRig(t, &bmcsim.MemMachine{})
	if _, ok := ipmi.driver(t, creds, ipmi.opts).(bmc.VirtualMedia); ok {
		t.Fatal("ipmi driver claims virtual media")
	}
}

// TestRedfishFindsTheOnlySystem: an address without a system path uses the
// only member of /redfish/v1/Systems.
func TestRedfishFindsTheOnlySystem(t *testing.T) {
	r := redfishRig(t, &bmcsim.MemMachine{}, false)
	addr := strings.TrimSuffix(r.address, "/redfish/v1/Systems/1")
	d, err := bmc.New(addr, creds, r.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.PowerOn(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r.machine.State() != bmc.PowerOn {
		t.Fatal("machine not on")
	}
}

// TestRedfishSession logs in once, reuses the token, and logs out.
func TestRedfishSession(t *testing.T) {
	r := redfishRig(t, &bmcsim.MemMachine{}, true)
	d := r.driver(t, creds, r.opts)
	for range 3 {
		if _, err := d.PowerState(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	logins := 0
	for _, req := range r.redfish.Requests() {
		if req == "POST /redfish/v1/SessionService/Sessions" {
			logins++
		}
	}
	if logins != 1 || r.redfish.Sessions() != 1 {
		t.Fatalf("%d logins, %d sessions open; want 1 and 1", logins, r.redfish.Sessions())
	}
	if err := d.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r.redfish.Sessions() != 0 {
		t.Fatal("session left open after Close")
	}
	if _, err := d.PowerState(t.Context()); err != nil || r.redfish.Sessions() != 1 {
		t.Fatalf("driver after Close: %v, %d sessions; want it to log in again", err, r.redfish.Sessions())
	}
}

// TestNewRefusesBadInput: a bad address or an empty user name fails before
// any BMC is contacted.
func TestNewRefusesBadInput(t *testing.T) {
	if _, err := bmc.New("telnet://bmc", creds, bmc.Options{}); !errors.Is(err, bmc.ErrBadAddress) {
		t.Fatalf("New(telnet://) = %v, want ErrBadAddress", err)
	}
	if _, err := bmc.New("ipmi://bmc", bmc.Credentials{Password: "x"}, bmc.Options{}); err == nil || !strings.Contains(err.Error(), "empty user name") {
		t.Fatalf("New without a user = %v, want an error naming the empty user name", err)
	}
}
