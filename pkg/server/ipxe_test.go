package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/bmdb"
)

func TestMachineIPXE(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.PublicURL = "https://boot.example:8443/"
		o.IPXEKernel = "booty/vmlinuz-6.1"
		o.IPXEInitrd = "booty/initrd#1.img"
		o.IPXECmdline = "console=ttyS1,115200 quiet"
	})
	code, hdr, body := e.do(t, "GET", "/v1/machines/AA-BB-CC-DD-EE-FF/ipxe", "", nil, nil)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q", ct)
	}
	want := []string{
		"#!ipxe\n",
		"\nkernel --name kernel https://boot.example:8443/files/booty/vmlinuz-6.1 initrd=initrd booty.server=https://boot.example:8443 BOOTIF=01-aa-bb-cc-dd-ee-ff console=ttyS1,115200 quiet || goto failed\n",
		"\ninitrd --name initrd https://boot.example:8443/files/booty/initrd%231.img || goto failed\n",
		"\nboot || goto failed\n",
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("script lacks %q:\n%s", w, body)
		}
	}
	if !strings.HasPrefix(body, "#!ipxe\n") {
		t.Errorf("script does not start with #!ipxe:\n%s", body)
	}
	if strings.Contains(body, testToken) {
		t.Errorf("script leaks the token")
	}
	if code, _, _ := e.do(t, "GET", "/v1/machines/00:11:22:33:44:55/ipxe", "", nil, nil); code != 404 {
		t.Errorf("unknown MAC: status %d, want 404", code)
	}
	if code, _, _ := e.do(t, "GET", "/v1/machines/zz/ipxe", "", nil, nil); code != 400 {
		t.Errorf("bad MAC: status %d, want 400", code)
	}
}

// TestIPXENeverFromHostHeader: scripts name --public-url whatever Host the
// request carries, and without it bootyd refuses to render them.
func TestIPXENeverFromHostHeader(t *testing.T) {
	off := newEnv(t, func(o *Options) { o.PublicURL = "" })
	for _, p := range []string{"/v1/boot.ipxe", "/v1/machines/" + testMAC + "/ipxe"} {
		if code, _, body := off.do(t, "GET", p, "", nil, nil); code != http.StatusServiceUnavailable || !strings.Contains(body, "--public-url") {
			t.Errorf("GET %s without --public-url: %d %s, want 503 naming --public-url", p, code, body)
		}
	}
	e := newEnv(t, nil)
	base := "http://bootyd.test:8080"
	_, _, body := e.do(t, "GET", "/v1/machines/"+testMAC+"/ipxe", "", nil, map[string]string{"Host": "evil.example"})
	if strings.Contains(body, "evil.example") {
		t.Errorf("script names the request's Host:\n%s", body)
	}
	for _, w := range []string{
		"kernel --name kernel " + base + "/files/vmlinuz initrd=initrd booty.server=" + base + " BOOTIF=01-aa-bb-cc-dd-ee-ff " + DefaultIPXECmdline + " ",
		"initrd --name initrd " + base + "/files/initramfs.img ",
	} {
		if !strings.Contains(body, w) {
			t.Errorf("script lacks %q:\n%s", w, body)
		}
	}

	code, _, chain := e.do(t, "GET", "/v1/boot.ipxe", "", nil, map[string]string{"Host": "evil.example"})
	if code != 200 {
		t.Fatalf("boot.ipxe status %d", code)
	}
	for _, w := range []string{
		"#!ipxe\n",
		"chain --autofree " + base + "/v1/machines/${netX/mac:hexhyp}/ipxe || goto net0\n",
		":net0\nisset ${booty-local-boot} && goto local ||\nchain --autofree " + base + "/v1/machines/${net0/mac:hexhyp}/ipxe || goto failed\n",
		":failed\nisset ${booty-local-boot} && goto local ||\necho booty: bootyd at ",
		"exit 1\n:local\nexit 1\n",
	} {
		if !strings.Contains(chain, w) {
			t.Errorf("chain script lacks %q:\n%s", w, chain)
		}
	}
	// The MAC as iPXE's hexhyp spells it must reach the per-MAC script.
	if code, _, _ := e.do(t, "GET", "/v1/machines/aa-bb-cc-dd-ee-ff/ipxe", "", nil, nil); code != 200 {
		t.Errorf("hexhyp MAC: status %d, want 200", code)
	}
}

// TestMachineIPXELocalBoot: a provisioned machine with a BMC network-boots
// into a script that exits with a failure after setting booty-local-boot,
// which the chain script checks (the firmware goes on to its disk); the same
// machine while deprovisioning gets the agent again, and a provisioned
// machine without a BMC keeps getting the agent.
func TestMachineIPXELocalBoot(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	db := e.srv.opts.DB
	mk := func(name, mac, bmcAddr string) bmdb.Machine {
		m, err := db.CreateMachine(ctx, bmdb.NewMachine{Name: name, BootMAC: mac, BMC: bmdb.BMC{Address: bmcAddr},
			Spec: bmdb.Spec{Image: bmdb.Image{URL: "http://10.0.0.1/os.raw"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range []bmdb.Transition{{To: bmdb.StateAvailable, Reason: "Test"},
			{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Test"}} {
			if _, err := db.Transition(ctx, m.ID, tr); err != nil {
				t.Fatal(err)
			}
		}
		m, err = db.GetMachine(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m, err = db.CompleteCommand(ctx, m.ID, m.CommandGeneration, bmdb.CommandResult{}); err != nil || m.State != bmdb.StateProvisioned {
			t.Fatalf("provisioned: %v %v", m.State, err)
		}
		return m
	}
	script := func(mac string) string {
		t.Helper()
		code, _, body := e.do(t, "GET", "/v1/machines/"+mac+"/ipxe", "", nil, nil)
		if code != 200 {
			t.Fatalf("GET ipxe of %s: %d %s", mac, code, body)
		}
		return body
	}
	withBMC := mk("with-bmc", "52:54:00:00:20:01", "ipmi://127.0.0.1:623")
	if got := script("52-54-00-00-20-01"); got != LocalBootIPXE("with-bmc") || !strings.Contains(got, "\nset booty-local-boot 1\n") || !strings.HasSuffix(got, "\nexit 1\n") {
		t.Errorf("provisioned machine with a BMC: script\n%s\nwant the local boot's exit", got)
	}
	mk("no-bmc", "52:54:00:00:20:02", "")
	if got := script("52-54-00-00-20-02"); !strings.Contains(got, "\nkernel ") || strings.Contains(got, "booty-local-boot") {
		t.Errorf("provisioned machine without a BMC: script\n%s\nwant the agent", got)
	}
	if _, err := db.Transition(ctx, withBMC.ID, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision, Reason: "Test"}); err != nil {
		t.Fatal(err)
	}
	if got := script("52-54-00-00-20-01"); !strings.Contains(got, "\nkernel ") {
		t.Errorf("deprovisioning machine: script\n%s\nwant the agent", got)
	}
}
