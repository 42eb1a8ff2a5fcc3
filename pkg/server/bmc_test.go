package server

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
)

const bmcTestPassword = "bmc-pw-9d2e71"

// fastBMC are driver options that keep failing tests short: one retry,
// short polls and power bounds (bounds, not timing asserts).
func fastBMC() bmc.Options {
	return bmc.Options{Timeout: 5 * time.Second, Retries: 1, Backoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		PowerTimeout: 3 * time.Second, SoftOffTimeout: 3 * time.Second, PollInterval: 50 * time.Millisecond}
}

// newRedfishEnv starts a bmcsim Redfish BMC over HTTPS and a bootyd that
// trusts its CA through Options.BMCCACert.
func newRedfishEnv(t *testing.T) (*testEnv, *bmcsim.Redfish, *bmcsim.MemMachine) {
	t.Helper()
	m := &bmcsim.MemMachine{}
	r, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: m, Username: "admin", Password: bmcTestPassword,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ca := filepath.Join(t.TempDir(), "bmc-ca.pem")
	writeFile(t, ca, string(r.CACertPEM()))
	e := newEnv(t, func(o *Options) { o.BMCCACert = ca; o.BMC = fastBMC() })
	return e, r, m
}

func (e *testEnv) register(t *testing.T, name, mac string, b *api.BMCRequest) {
	t.Helper()
	if code, _, body := e.do(t, "POST", "/v1/machines", testOperatorToken, api.RegisterRequest{Name: name, BootMAC: mac, BMC: b}, nil); code != 201 {
		t.Fatalf("register %s: %d %s", name, code, body)
	}
}

// bmcDo calls a BMC route and decodes a 200 answer into out.
func (e *testEnv) bmcDo(t *testing.T, method, path string, body, out any) (int, string) {
	t.Helper()
	code, _, b := e.do(t, method, path, testOperatorToken, body, nil)
	if code == 200 && out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return code, b
}

// TestBMCRoutesRedfish drives a Redfish BMC (HTTPS, trusted through
// --bmc-ca-cert) through bootyd: state, on, boot device, reset, soft off,
// off; each call is an event naming the operator token and the outcome,
// and the password is in no answer, event or log.
func TestBMCRoutesRedfish(t *testing.T) {
	e, r, m := newRedfishEnv(t)
	e.register(t, "rf-1", "52:54:00:00:50:01", &api.BMCRequest{Address: r.Address(), Username: "admin", Password: bmcTestPassword})
	var p api.BMCPower
	if code, b := e.bmcDo(t, "GET", "/v1/machines/rf-1/bmc/power", nil, &p); code != 200 || p.State != "Off" {
		t.Fatalf("power state: %d %s, want Off", code, b)
	}
	var bd api.BMCBootDeviceRequest
	if code, b := e.bmcDo(t, "POST", "/v1/machines/rf-1/bmc/bootdev", api.BMCBootDeviceRequest{Device: "pxe", Persistent: true}, &bd); code != 200 || bd.Mode != "uefi" {
		t.Fatalf("bootdev pxe: %d %s", code, b)
	}
	if got := r.Boot(); got.Device != bmc.DevicePXE || !got.Persistent || got.Mode != bmc.BootUEFI {
		t.Fatalf("the BMC's boot override is %+v, want pxe persistent UEFI", got)
	}
	if code, b := e.bmcDo(t, "POST", "/v1/machines/rf-1/bmc/power", api.BMCPowerRequest{Action: "on"}, &p); code != 200 || p.State != "On" {
		t.Fatalf("power on: %d %s", code, b)
	}
	if m.State() != bmc.PowerOn || len(m.Boots()) != 1 || m.Boots()[0] != bmc.DevicePXE {
		t.Fatalf("machine after power on: %s, boots %v; want on, booted from pxe", m.State(), m.Boots())
	}
	if code, b := e.bmcDo(t, "POST", "/v1/machines/rf-1/bmc/power", api.BMCPowerRequest{Action: "reset"}, &p); code != 200 || p.State != "On" || r.WaitPower() != nil || len(m.Boots()) != 2 {
		t.Fatalf("reset: %d %s, boots %v, resets %d", code, b, m.Boots(), m.Resets())
	}
	if code, b := e.bmcDo(t, "POST", "/v1/machines/rf-1/bmc/power", api.BMCPowerRequest{Action: "soft-off"}, &p); code != 200 || p.State != "Off" {
		t.Fatalf("soft-off: %d %s", code, b)
	}
	if code, b := e.bmcDo(t, "POST", "/v1/machines/rf-1/bmc/power", api.BMCPowerRequest{Action: "off"}, &p); code != 200 || p.State != "Off" {
		t.Fatalf("off of a machine that is off: %d %s", code, b)
	}

	// A power action the BMC accepts and never applies: 502 naming it.
	r.SetFaults(bmcsim.Faults{IgnorePower: true})
	code, b := e.bmcDo(t, "POST", "/v1/machines/rf-1/bmc/power", api.BMCPowerRequest{Action: "on"}, nil)
	if code != 502 || !strings.Contains(b, "did not take") {
		t.Errorf("power on that does not take: %d %s, want 502 naming it", code, b)
	}
	r.SetFaults(bmcsim.Faults{})

	var evs api.EventList
	e.bmcDo(t, "GET", "/v1/machines/rf-1/events", nil, &evs)
	var msgs []string
	for _, ev := range evs.Events {
		if strings.HasPrefix(ev.Reason, "BMC") {
			msgs = append(msgs, ev.Type+" "+ev.Reason+": "+ev.Message)
		}
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"Normal BMCPowerState: power state by operator token 1 from 127.0.0.1: power is Off",
		"Normal BMCBootDevice: boot device pxe (persistent, UEFI) by operator token 1 from 127.0.0.1: set",
		"Normal BMCPower: power on by operator token 1 from 127.0.0.1: done, power is On",
		"Normal BMCPower: power reset by",
		"Normal BMCPower: power soft-off by",
		"Warning BMCPower: power on by operator token 1 from 127.0.0.1: failed: ",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("events lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, bmcTestPassword) || strings.Contains(e.logs.String(), bmcTestPassword) || strings.Contains(e.out.String(), bmcTestPassword) {
		t.Errorf("the BMC password reached an event, bootyd's logs or its output")
	}
}

// TestBMCRoutesRefusals: bad requests get 400 and touch no BMC; a machine
// without BMC or credentials 409; wrong credentials, an untrusted
// certificate and an unreachable BMC 502 with the BMC's error and no
// secret.
func TestBMCRoutesRefusals(t *testing.T) {
	e, r, m := newRedfishEnv(t)
	e.register(t, "rf-ok", "52:54:00:00:51:01", &api.BMCRequest{Address: r.Address(), Username: "admin", Password: bmcTestPassword})
	e.register(t, "no-bmc", "52:54:00:00:51:02", nil)
	e.register(t, "no-creds", "52:54:00:00:51:03", &api.BMCRequest{Address: r.Address()})
	e.register(t, "wrong-pw", "52:54:00:00:51:04", &api.BMCRequest{Address: r.Address(), Username: "admin", Password: "wrong-pw-5c1a"})
	e.register(t, "gone", "52:54:00:00:51:05", &api.BMCRequest{Address: "ipmi://127.0.0.1:1", Username: "admin", Password: "gone-pw-77aa"})
	before := len(r.Requests())
	for _, tc := range []struct {
		name, method, path string
		body               any
		code               int
		want               string
	}{
		{"bad action", "POST", "/v1/machines/rf-ok/bmc/power", api.BMCPowerRequest{Action: "explode"}, 400, "want on, off, soft-off or reset"},
		{"bad device", "POST", "/v1/machines/rf-ok/bmc/bootdev", api.BMCBootDeviceRequest{Device: "floppy"}, 400, `boot device \"floppy\"`},
		{"bad mode", "POST", "/v1/machines/rf-ok/bmc/bootdev", api.BMCBootDeviceRequest{Device: "pxe", Mode: "bios"}, 400, `mode \"bios\"`},
		{"unknown machine", "GET", "/v1/machines/nope/bmc/power", nil, 404, "no machine"},
		{"no BMC", "GET", "/v1/machines/no-bmc/bmc/power", nil, 409, "has no BMC address"},
		{"no credentials", "POST", "/v1/machines/no-creds/bmc/power", api.BMCPowerRequest{Action: "on"}, 409, "has no BMC credentials"},
	} {
		code, b := e.bmcDo(t, tc.method, tc.path, tc.body, nil)
		if code != tc.code || !strings.Contains(b, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, b, tc.code, tc.want)
		}
	}
	if n := len(r.Requests()); n != before || m.State() != bmc.PowerOff {
		t.Errorf("refused requests reached the BMC: %d requests, machine %s", n-before, m.State())
	}
	code, b := e.bmcDo(t, "POST", "/v1/machines/wrong-pw/bmc/power", api.BMCPowerRequest{Action: "on"}, nil)
	if code != 502 || !strings.Contains(b, "authentication") || strings.Contains(b, "wrong-pw-5c1a") {
		t.Errorf("wrong password: %d %s, want 502 naming the authentication failure, without the password", code, b)
	}
	code, b = e.bmcDo(t, "GET", "/v1/machines/gone/bmc/power", nil, nil)
	if code != 502 || strings.Contains(b, "gone-pw-77aa") {
		t.Errorf("unreachable BMC: %d %s, want 502", code, b)
	}
	if m.State() != bmc.PowerOff {
		t.Errorf("machine is %s after refused calls", m.State())
	}

	// Without the CA the Redfish certificate is not trusted.
	e2 := newEnv(t, func(o *Options) { o.BMC = fastBMC() })
	e2.register(t, "rf-untrusted", "52:54:00:00:51:06", &api.BMCRequest{Address: r.Address(), Username: "admin", Password: bmcTestPassword})
	code, b = e2.bmcDo(t, "GET", "/v1/machines/rf-untrusted/bmc/power", nil, nil)
	if code != 502 || !strings.Contains(b, "certificate") {
		t.Errorf("untrusted certificate: %d %s, want 502 naming the certificate", code, b)
	}
	for _, l := range []string{e.logs.String(), e2.logs.String()} {
		for _, pw := range []string{bmcTestPassword, "wrong-pw-5c1a", "gone-pw-77aa"} {
			if strings.Contains(l, pw) {
				t.Errorf("password %q in bootyd's logs", pw)
			}
		}
	}
	if _, err := New(Options{DB: testDB(t), BMCCACert: filepath.Join(t.TempDir(), "missing.pem")}); err == nil || !strings.Contains(err.Error(), "BMC CA certificate") {
		t.Errorf("New with a missing BMC CA file: %v, want an error naming it", err)
	}
}

// TestBMCRoutesIPMI drives the IPMI test BMC (lanplus) through bootyd.
func TestBMCRoutesIPMI(t *testing.T) {
	m := &bmcsim.MemMachine{}
	s, err := bmcsim.NewIPMI(bmcsim.IPMIConfig{Machine: m, Username: "admin", Password: bmcTestPassword,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, func(o *Options) { o.BMC = fastBMC() })
	e.register(t, "ipmi-1", "52:54:00:00:52:01", &api.BMCRequest{Address: s.Address(), Username: "admin", Password: bmcTestPassword})
	var bd api.BMCBootDeviceRequest
	if code, b := e.bmcDo(t, "POST", "/v1/machines/ipmi-1/bmc/bootdev", api.BMCBootDeviceRequest{Device: "disk", Mode: "legacy"}, &bd); code != 200 || bd.Mode != "legacy" {
		t.Fatalf("bootdev disk legacy: %d %s", code, b)
	}
	if got := s.Boot(); got.Device != bmc.DeviceDisk || got.Persistent || got.Mode != bmc.BootLegacy {
		t.Fatalf("the BMC's boot override is %+v, want disk once legacy", got)
	}
	var p api.BMCPower
	if code, b := e.bmcDo(t, "POST", "/v1/machines/ipmi-1/bmc/power", api.BMCPowerRequest{Action: "on"}, &p); code != 200 || p.State != "On" || m.State() != bmc.PowerOn {
		t.Fatalf("power on: %d %s, machine %s", code, b, m.State())
	}
	if code, b := e.bmcDo(t, "GET", "/v1/machines/ipmi-1/bmc/power", nil, &p); code != 200 || p.State != "On" {
		t.Fatalf("power state: %d %s", code, b)
	}
	if code, b := e.bmcDo(t, "POST", "/v1/machines/ipmi-1/bmc/power", api.BMCPowerRequest{Action: "off"}, &p); code != 200 || p.State != "Off" || m.State() != bmc.PowerOff {
		t.Fatalf("power off: %d %s, machine %s", code, b, m.State())
	}
	if strings.Contains(e.logs.String(), bmcTestPassword) {
		t.Error("the IPMI password reached bootyd's logs")
	}
}

// BMCOptions carries --bmc-ca-cert's roots (what bootyd gives its
// reconciler and Recoverer): a driver built with them verifies the Redfish
// BMC's certificate, one without them does not.
func TestBMCOptionsTrustBMCCACert(t *testing.T) {
	e, r, _ := newRedfishEnv(t)
	creds := bmc.Credentials{Username: "admin", Password: bmcTestPassword}
	d, err := bmc.New(r.Address(), creds, e.srv.BMCOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.PowerState(t.Context()); err != nil {
		t.Fatalf("power state with BMCOptions: %v", err)
	}
	d, err = bmc.New(r.Address(), creds, fastBMC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.PowerState(t.Context()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("power state without the CA: %v, want a certificate error", err)
	}
}
