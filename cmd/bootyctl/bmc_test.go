package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/pkg/server"
)

const bmcPassword = "bmc-cli-pw-4e6a2b"

// fastBMCOptions keep failing BMC calls short (bounds, not timing asserts).
func fastBMCOptions(o *server.Options) {
	o.BMC = bmc.Options{Timeout: 5 * time.Second, Retries: 1, Backoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		PowerTimeout: 5 * time.Second, SoftOffTimeout: 5 * time.Second, PollInterval: 50 * time.Millisecond}
}

// TestBMCCommandsAgainstBootyd registers machines behind a Redfish BMC
// (HTTPS, trusted by bootyd through its BMC CA option) and an IPMI BMC with
// bootyctl apply, then powers them and sets their boot device with
// bootyctl bmc through the real bootyd; the BMC password stays in bootyd.
func TestBMCCommandsAgainstBootyd(t *testing.T) {
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	rm := &bmcsim.MemMachine{}
	rf, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: rm, Username: "admin", Password: bmcPassword, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rf.Close() })
	im := &bmcsim.MemMachine{}
	ip, err := bmcsim.NewIPMI(bmcsim.IPMIConfig{Machine: im, Username: "admin", Password: bmcPassword, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ip.Close() })
	dir := t.TempDir()
	ca := filepath.Join(dir, "bmc-ca.pem")
	if err := os.WriteFile(ca, rf.CACertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	srvURL, logs := startBootydWith(t, func(o *server.Options) { o.BMCCACert = ca; fastBMCOptions(o) })
	c := conn(srvURL, tokenFile(t, testToken))
	var outputs strings.Builder
	run := ctlRunner(t, c, &outputs)
	t.Setenv("BOOTYCTL_TEST_BMC_PW", bmcPassword)
	hosts := `apiVersion: booty.dev/v1alpha1
kind: BareMetalHost
metadata: {name: rf-node}
spec:
  bootMACAddress: 52:54:00:00:60:01
  bmc: {address: "` + rf.Address() + `", credentials: {username: admin, passwordEnv: BOOTYCTL_TEST_BMC_PW}}
---
apiVersion: booty.dev/v1alpha1
kind: BareMetalHost
metadata: {name: ipmi-node}
spec:
  bootMACAddress: 52:54:00:00:60:02
  bmc: {address: "` + ip.Address() + `", credentials: {username: admin, passwordEnv: BOOTYCTL_TEST_BMC_PW}}
---
apiVersion: booty.dev/v1alpha1
kind: BareMetalHost
metadata: {name: no-bmc}
spec: {bootMACAddress: "52:54:00:00:60:03"}
`
	f := filepath.Join(dir, "hosts.yaml")
	if err := os.WriteFile(f, []byte(hosts), 0o600); err != nil {
		t.Fatal(err)
	}
	run(0, "apply", "-f", f)

	for _, tc := range []struct {
		name string
		m    *bmcsim.MemMachine
		boot func() bmc.BootDevice
	}{{"rf-node", rm, rf.Boot}, {"ipmi-node", im, ip.Boot}} {
		if out := run(0, "bmc", "power", "status", tc.name); out != tc.name+": power is Off\n" {
			t.Errorf("%s: power status printed %q", tc.name, out)
		}
		if out := run(0, "bmc", "bootdev", "pxe", tc.name, "--persistent"); out != tc.name+": boots from pxe (every boot, uefi)\n" {
			t.Errorf("%s: bootdev printed %q", tc.name, out)
		}
		if b := tc.boot(); b.Device != bmc.DevicePXE || !b.Persistent {
			t.Errorf("%s: the BMC's boot override is %+v, want pxe persistent", tc.name, b)
		}
		if out := run(0, "bmc", "power", "on", tc.name); out != tc.name+": power on done, power is On\n" {
			t.Errorf("%s: power on printed %q", tc.name, out)
		}
		if tc.m.State() != bmc.PowerOn || len(tc.m.Boots()) == 0 || tc.m.Boots()[0] != bmc.DevicePXE {
			t.Errorf("%s: machine %s, boots %v; want on from pxe", tc.name, tc.m.State(), tc.m.Boots())
		}
		if out := run(0, "bmc", "power", "status", tc.name, "-o", "json"); !strings.Contains(out, `"state": "On"`) {
			t.Errorf("%s: status -o json printed %q", tc.name, out)
		}
		if out := run(0, "bmc", "power", "off", tc.name); out != tc.name+": power off done, power is Off\n" || tc.m.State() != bmc.PowerOff {
			t.Errorf("%s: power off printed %q, machine %s", tc.name, out, tc.m.State())
		}
		if out := run(0, "machines", "events", tc.name); !strings.Contains(out, "BMCPower") || !strings.Contains(out, "power on by operator token 1 from 127.0.0.1: done, power is On") {
			t.Errorf("%s: events lack the BMC calls:\n%s", tc.name, out)
		}
	}
	run(0, "bmc", "bootdev", "disk", "ipmi-node", "--mode", "legacy")
	if b := ip.Boot(); b.Device != bmc.DeviceDisk || b.Persistent || b.Mode != bmc.BootLegacy {
		t.Errorf("bootdev disk --mode legacy: the BMC has %+v", b)
	}

	if out := run(1, "bmc", "power", "on", "no-bmc"); !strings.Contains(out, "409") || !strings.Contains(out, "no BMC address") {
		t.Errorf("power on of a machine without BMC: %q, want bootyd's 409", out)
	}
	rf.SetFaults(bmcsim.Faults{RejectAuth: true})
	if out := run(1, "bmc", "power", "status", "rf-node"); !strings.Contains(out, "502") || !strings.Contains(out, "authentication") {
		t.Errorf("a BMC refusing the credentials: %q, want bootyd's 502 naming it", out)
	}
	rf.SetFaults(bmcsim.Faults{})
	for _, args := range [][]string{{"bmc", "power", "explode", "rf-node"}, {"bmc", "bootdev", "floppy", "rf-node"},
		{"bmc", "bootdev", "pxe", "rf-node", "--mode", "bios"}, {"bmc", "power", "on"}, {"bmc", "reboot", "rf-node"}} {
		if out := run(2, args...); !strings.Contains(out, "want") {
			t.Errorf("bootyctl %s: %q, want a usage error saying what is wanted", strings.Join(args, " "), out)
		}
	}
	if strings.Contains(outputs.String(), bmcPassword) || strings.Contains(logs.String(), bmcPassword) {
		t.Error("the BMC password reached bootyctl's output or bootyd's logs")
	}
}

// TestNewCommandsHelp: apply and the bmc commands explain themselves with
// an example, and the top-level help lists them.
func TestNewCommandsHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"apply", "--help"}, []string{"bootyctl apply -f FILE", "Example:", "kind: BareMetalHost", "passwordFile", "--dry-run", "-f, --filename"}},
		{[]string{"bmc", "power", "--help"}, []string{"bootyctl bmc power on|off|soft-off|reset|status MACHINE", "Example:", "bootyctl bmc power on node-1"}},
		{[]string{"bmc", "bootdev", "--help"}, []string{"bootyctl bmc bootdev pxe|disk|cdrom MACHINE", "Example:", "--persistent", "--mode"}},
		{[]string{"--help"}, []string{"apply -f FILE", "bmc power on|off", "bmc bootdev", "machines list"}},
	} {
		code, out, _ := ctl(t, tc.args...)
		for _, w := range tc.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("bootyctl %s: exit %d, lacks %q", strings.Join(tc.args, " "), code, w)
			}
		}
	}
}
