package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
)

const testToken = "op-secret-7f3a9c"

// tokenFile writes token into a temp file and returns its path.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("# operator token\n"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ctl runs bootyctl in-process and returns its exit code, stdout and stderr.
func ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, now: func() time.Time { return t0.Add(time.Minute) }, isTerminal: func(io.Writer) bool { return false }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := runEnv(ctx, e, args)
	t.Logf("bootyctl %s → %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

// conn are the connection flags for a plain-HTTP test server.
func conn(url, tokenPath string) []string {
	return []string{"--server", url, "--insecure-http", "--token-file", tokenPath}
}

func TestUsageErrorsNameTheFlag(t *testing.T) {
	_, srv := newFakeBootyd(t, testToken)
	tf := tokenFile(t, testToken)
	c := conn(srv.URL, tf)
	for _, tc := range []struct {
		name string
		args []string
		want []string // each must be in stderr
	}{
		{"no server", []string{"machines", "list", "--token-file", tf}, []string{"--server", "is required"}},
		{"plain http without opt-in", []string{"machines", "list", "--server", srv.URL, "--token-file", tf}, []string{"--server", "--insecure-http"}},
		{"bad server URL", []string{"machines", "list", "--server", "ftp://x", "--token-file", tf}, []string{"--server", "http:// or https://"}},
		{"no token file", []string{"machines", "list", "--server", srv.URL, "--insecure-http"}, []string{"--token-file", "is required"}},
		{"empty token file", []string{"machines", "list", "--server", srv.URL, "--insecure-http", "--token-file", tokenFile(t, "")}, []string{"--token-file", "holds no operator token"}},
		{"ca-cert with http", append([]string{"machines", "list", "--ca-cert", "/nonexistent"}, c...), []string{"--ca-cert", "https://"}},
		{"bad output", append([]string{"machines", "list", "-o", "xml"}, c...), []string{"-o/--output", "json, yaml or table"}},
		{"bad state", append([]string{"machines", "list", "--state", "ready"}, c...), []string{"--state", "available"}},
		{"missing name", append([]string{"machines", "register", "--mac", "52:54:00:00:00:01"}, c...), []string{"--name", "is required"}},
		{"missing mac", append([]string{"machines", "register", "--name", "n1"}, c...), []string{"--mac", "is required"}},
		{"bad mac", append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00"}, c...), []string{"--mac", "6-byte MAC"}},
		{"bad other mac", append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00:00:00:01", "--other-mac", "x"}, c...), []string{"--other-mac", "6-byte MAC"}},
		{"bad bmc", append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00:00:00:01", "--bmc", "telnet://b"}, c...), []string{"--bmc", "ipmi", "redfish"}},
		{"bad label", append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00:00:00:01", "--label", "rack"}, c...), []string{"--label", "KEY=VALUE"}},
		{"bad image", append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00:00:00:01", "--image", "ftp://x/y"}, c...), []string{"--image", "https://"}},
		{"bad checksum", append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00:00:00:01", "--checksum", "md5:00"}, c...), []string{"--checksum", "sha256:HEX"}},
		{"bad rotational", append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00:00:00:01", "--root-rotational", "maybe"}, c...), []string{"--root-rotational", "true or false"}},
		{"unknown flag", append([]string{"machines", "list", "--bogus"}, c...), []string{"--bogus", "machines list --help"}},
		{"show without machine", append([]string{"machines", "show"}, c...), []string{"MACHINE"}},
		{"watch json", append([]string{"machines", "watch", "-o", "json"}, c...), []string{"-o/--output", "list -o json"}},
		{"watch interval", append([]string{"machines", "watch", "--interval", "1ms"}, c...), []string{"--interval", "100ms"}},
		{"unknown command", []string{"machines", "frobnicate"}, []string{"frobnicate", "register"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := ctl(t, tc.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
		})
	}
}

func TestUsageErrorChangesNothing(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	ctl(t, append([]string{"machines", "register", "--name", "n1", "--mac", "52:54:00:00:00:01", "--checksum", "sha256:zz"}, conn(srv.URL, tokenFile(t, testToken))...)...)
	if len(f.requests) != 0 {
		t.Errorf("a bad flag still sent %d request(s) to bootyd", len(f.requests))
	}
}

func TestHelpExplainsEveryCommandWithAnExample(t *testing.T) {
	code, out, _ := ctl(t, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	all := []command{applyCommand()}
	for _, group := range []map[string]command{commands(), bmcCommands()} {
		for _, c := range group {
			all = append(all, c)
		}
	}
	for _, c := range all {
		name := c.fullName()
		if !strings.Contains(out, name+" ") {
			t.Errorf("top-level help does not list %s", name)
		}
		code, out, _ := ctl(t, append(strings.Fields(name), "--help")...)
		_, ex, found := strings.Cut(out, "Example:\n")
		ex, _, _ = strings.Cut(ex, "\nFlags:")
		if code != 0 || !found || !strings.Contains(ex, "  bootyctl "+name) || !strings.Contains(out, "--server") {
			t.Errorf("%s --help (exit %d) lacks an example or the global flags:\n%s", name, code, out)
		}
	}
}

func TestTokenIsSentAndNeverPrinted(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	code, out, stderr := ctl(t, append([]string{"machines", "list"}, conn(srv.URL, tokenFile(t, "wrong-"+testToken))...)...)
	if code != 1 || !strings.Contains(stderr, "401") {
		t.Errorf("a wrong token: exit %d, stderr %q; want 1 and the 401", code, stderr)
	}
	if strings.Contains(out+stderr, testToken) {
		t.Errorf("the token was printed")
	}
	code, _, _ = ctl(t, append([]string{"machines", "list"}, conn(srv.URL, tokenFile(t, testToken))...)...)
	if code != 0 || f.requests[len(f.requests)-1].Header.Get("Authorization") != "Bearer "+testToken {
		t.Errorf("the right token: exit %d, or the request did not carry it", code)
	}
}

func TestRegisterSendsTheSpec(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	dir := t.TempDir()
	ud := filepath.Join(dir, "user-data")
	os.WriteFile(ud, []byte("#cloud-config\n"), 0o600)
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("bmc-pass\n"), 0o600)
	sum := "sha256:" + strings.Repeat("ab", 32)
	code, out, _ := ctl(t, append([]string{"machines", "register", "--name", "node-1", "--mac", "52-54-00-AA-BB-01",
		"--other-mac", "52:54:00:aa:bb:02", "--label", "rack=r1", "--bmc", "ipmi://127.0.0.1:6230", "--bmc-username", "admin",
		"--bmc-password-file", pw, "--image", "http://10.0.0.1/files/debian.raw.zst", "--checksum", sum,
		"--root-serial", "S123", "--root-rotational=false", "--root-min-size-gb", "10", "--hostname", "node-1", "--user-data-file", ud},
		conn(srv.URL, tokenFile(t, testToken))...)...)
	if code != 0 || !strings.Contains(out, "machine node-1 registered: state registering") {
		t.Fatalf("register: exit %d, stdout %q", code, out)
	}
	var req api.RegisterRequest
	if err := json.Unmarshal([]byte(f.bodies[len(f.bodies)-1]), &req); err != nil {
		t.Fatal(err)
	}
	h := req.Spec.RootDeviceHints
	if req.BootMAC != "52:54:00:aa:bb:01" || len(req.MACs) != 1 || req.Labels["rack"] != "r1" ||
		req.BMC == nil || req.BMC.Address != "ipmi://127.0.0.1:6230" || req.BMC.Username != "admin" || req.BMC.Password != "bmc-pass" ||
		req.Spec.Image.URL != "http://10.0.0.1/files/debian.raw.zst" || req.Spec.Image.Checksum != sum || req.Spec.Hostname != "node-1" ||
		req.Spec.UserData != "#cloud-config\n" || h == nil || h.SerialNumber != "S123" || h.Rotational == nil || *h.Rotational || h.MinSizeGigabytes != 10 {
		t.Errorf("request body %+v (hints %+v) is not what the flags said", req, h)
	}
}

func TestProvisionMergesSpecFlagsOverTheSpec(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	f.add(api.Machine{Name: "node-1", State: api.MachineAvailable, Generation: 4})
	f.set("node-1", func(m *api.MachineDetail) {
		m.Spec = api.MachineSpec{Hostname: "keep-me", Image: api.ImageSpec{URL: "http://old/img", Checksum: "sha256:" + strings.Repeat("00", 32)},
			RootDeviceHints: &api.RootDeviceHints{Model: "QEMU"}}
	})
	sum := "sha256:" + strings.Repeat("cd", 32)
	code, out, _ := ctl(t, append([]string{"machines", "provision", "node-1", "--image", "http://new/img", "--checksum", sum, "--root-serial", "S9"},
		conn(srv.URL, tokenFile(t, testToken))...)...)
	if code != 0 || !strings.Contains(out, "state provisioning, generation 5") {
		t.Fatalf("provision: exit %d, stdout %q", code, out)
	}
	var req api.ProvisionRequest
	json.Unmarshal([]byte(f.bodies[len(f.bodies)-1]), &req)
	if req.Generation != 4 || req.Spec == nil || req.Spec.Hostname != "keep-me" || req.Spec.Image.URL != "http://new/img" ||
		req.Spec.Image.Checksum != sum || req.Spec.RootDeviceHints.Model != "QEMU" || req.Spec.RootDeviceHints.SerialNumber != "S9" {
		t.Errorf("provision request %+v: want the old spec with the new image and serial, at generation 4", req)
	}
}

func TestListFormats(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	f.add(api.Machine{ID: "m1", Name: "node-1", BootMAC: "52:54:00:00:00:01", State: api.MachineProvisioning, Status: api.StatusOK, Generation: 3,
		Agent:    &api.AgentInfo{Live: true, LastHeartbeat: t0.Add(50 * time.Second)},
		Progress: &api.InstallProgress{Step: "stream-image", BytesDone: 1 << 30, BytesTotal: 4 << 30}})
	f.add(api.Machine{ID: "m2", Name: "node-2", BootMAC: "52:54:00:00:00:02", State: api.MachineAvailable, Status: api.StatusError, Generation: 1,
		Error: &api.MachineError{Type: "inspection error", Message: "no disk\x1b[2J", Count: 2}})
	c := conn(srv.URL, tokenFile(t, testToken))

	code, out, _ := ctl(t, append([]string{"machines", "list"}, c...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.Contains(lines[1], "node-1") || !strings.Contains(lines[1], "provisioning") || !strings.Contains(lines[1], "25%") || !strings.Contains(lines[1], "live 10s ago") ||
		!strings.Contains(lines[2], "error: no disk") || strings.Contains(out, "\x1b") {
		t.Errorf("table (exit %d):\n%s", code, out)
	}

	code, out, _ = ctl(t, append([]string{"machines", "list", "-o", "json"}, c...)...)
	var l api.MachineList
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || len(l.Machines) != 2 || l.Machines[0].Progress == nil {
		t.Errorf("json (exit %d, %v): %+v", code, err, l)
	}

	code, out, _ = ctl(t, append([]string{"machines", "list", "-o", "yaml"}, c...)...)
	var ly api.MachineList
	if err := yaml.Unmarshal([]byte(out), &ly); code != 0 || err != nil || len(ly.Machines) != 2 || ly.Machines[0].BootMAC != "52:54:00:00:00:01" || !strings.Contains(out, "state: provisioning") {
		t.Errorf("yaml (exit %d, %v):\n%s", code, err, out)
	}
}

func TestShowEventsLogs(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	f.add(api.Machine{ID: "m1", Name: "node-1", BootMAC: "52:54:00:00:00:01", State: api.MachineProvisioned, Status: api.StatusOK, Generation: 7})
	f.set("node-1", func(m *api.MachineDetail) {
		m.Spec.UserData = "password: hunter2"
		m.Hardware = &api.HardwareDetails{RAMMebibytes: 2048, Storage: []api.Storage{{Name: "/dev/vda", Type: "HDD", SizeBytes: 8 << 30, SerialNumber: "DISK1"}}}
		m.Install = &api.Install{Kind: "provision", Generation: 7, Result: "succeeded", Steps: []api.InstallStep{
			{Index: 1, Total: 2, Name: "select-disk", Result: "succeeded", DurationMS: 20},
			{Index: 2, Total: 2, Name: "stream-image", Result: "succeeded", DurationMS: 42000}}}
	})
	f.events = []api.Event{{ID: 1, Time: t0, Type: "Normal", Reason: "Registered", Generation: 1}, {ID: 2, Time: t0, Type: "Normal", Reason: "ProvisionSucceeded", Generation: 7}}
	f.logs = []api.LogLine{{Time: t0, Level: "info", Message: "wrote 8 GiB"}}
	c := conn(srv.URL, tokenFile(t, testToken))

	code, out, _ := ctl(t, append([]string{"machines", "show", "node-1"}, c...)...)
	for _, w := range []string{"State:", "provisioned", "/dev/vda", "DISK1", "stream-image", "2/2", "User data:", "(not shown)"} {
		if !strings.Contains(out, w) {
			t.Errorf("show lacks %q", w)
		}
	}
	if code != 0 || strings.Contains(out, "hunter2") {
		t.Errorf("show: exit %d, or it printed the user data", code)
	}
	code, out, _ = ctl(t, append([]string{"machines", "events", "node-1"}, c...)...)
	if code != 0 || !strings.Contains(out, "ProvisionSucceeded") || strings.Count(out, "\n") != 3 {
		t.Errorf("events: exit %d\n%s", code, out)
	}
	code, out, _ = ctl(t, append([]string{"machines", "logs", "node-1"}, c...)...)
	if code != 0 || !strings.Contains(out, "wrote 8 GiB") {
		t.Errorf("logs: exit %d\n%s", code, out)
	}
	code, _, stderr := ctl(t, append([]string{"machines", "show", "nope"}, c...)...)
	if code != 1 || !strings.Contains(stderr, "404") || !strings.Contains(stderr, "nope") {
		t.Errorf("show of an unknown machine: exit %d, stderr %q", code, stderr)
	}
}

func TestWatchPrintsLinesWhenNotATerminal(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	f.add(api.Machine{ID: "m1", Name: "node-1", State: api.MachineProvisioning, Status: api.StatusOK,
		Progress: &api.InstallProgress{Step: "stream-image", BytesDone: 0, BytesTotal: 100 << 20}})
	f.add(api.Machine{ID: "m2", Name: "node-2", State: api.MachineAvailable, Status: api.StatusOK})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 10; i++ {
			time.Sleep(150 * time.Millisecond)
			f.set("node-1", func(m *api.MachineDetail) { m.Progress.BytesDone = int64(i) * 10 << 20 })
		}
		f.set("node-1", func(m *api.MachineDetail) { m.State = api.MachineProvisioned; m.Progress = nil })
	}()
	code, out, _ := ctl(t, append([]string{"machines", "watch", "--interval", "100ms", "--count", "25"}, conn(srv.URL, tokenFile(t, testToken))...)...)
	<-done
	if code != 0 || strings.Contains(out, "\x1b") || strings.Contains(out, "█") {
		t.Errorf("watch into a pipe: exit %d, or it drew with escape codes or bars:\n%q", code, out)
	}
	if strings.Count(out, "node-2") != 1 {
		t.Errorf("an unchanged machine should be printed once, got:\n%s", out)
	}
	for _, w := range []string{"node-1 provisioning OK step stream-image 0%", "node-1 provisioned OK"} {
		if !strings.Contains(out, w) {
			t.Errorf("watch lines lack %q:\n%s", w, out)
		}
	}
}

// TestTLSWithCACert: bootyctl verifies bootyd's certificate against
// --ca-cert, and refuses a server it cannot verify.
func TestTLSWithCACert(t *testing.T) {
	f := &fakeBootyd{token: testToken, machines: map[string]*api.MachineDetail{}}
	srv := httptest.NewTLSServer(f)
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := tokenFile(t, testToken)
	if code, _, stderr := ctl(t, "machines", "list", "--server", srv.URL, "--token-file", tf, "--ca-cert", ca); code != 0 {
		t.Errorf("https with --ca-cert: exit %d: %s", code, stderr)
	}
	code, _, stderr := ctl(t, "machines", "list", "--server", srv.URL, "--token-file", tf)
	if code != 1 || !strings.Contains(stderr, "certificate") {
		t.Errorf("https without the CA: exit %d, stderr %q; want a certificate error", code, stderr)
	}
	if code, _, stderr := ctl(t, "machines", "list", "--server", srv.URL, "--token-file", tf, "--insecure-http"); code != 2 || !strings.Contains(stderr, "--insecure-http") {
		t.Errorf("--insecure-http with https: exit %d, stderr %q", code, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("not a certificate"), 0o600)
	if code, _, stderr := ctl(t, "machines", "list", "--server", srv.URL, "--token-file", tf, "--ca-cert", bad); code != 2 || !strings.Contains(stderr, "--ca-cert") {
		t.Errorf("a --ca-cert without PEM: exit %d, stderr %q", code, stderr)
	}
}
