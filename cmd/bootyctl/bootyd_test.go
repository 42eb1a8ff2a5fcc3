package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/server"
)

// startBootyd runs the real bootyd (pkg/server on a temp SQLite BMDB) on
// loopback and returns its URL; it stops with the test.
func startBootyd(t *testing.T) string {
	t.Helper()
	url, _ := startBootydWith(t, nil)
	return url
}

// startBootydWith is startBootyd with options changed by mutate; it also
// returns bootyd's logs (debug level: every request) and human output.
func startBootydWith(t *testing.T, mutate func(*server.Options)) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := bmdb.Open(ctx, filepath.Join(t.TempDir(), "bmdb.db"), bmdb.WithLogger(log))
	if err != nil {
		t.Fatalf("open BMDB: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	opts := server.Options{DB: db, OperatorTokens: []string{testToken}, PublicURL: url, AutoDiscover: true,
		Output: logs, Logger: log, ShutdownTimeout: 5 * time.Second}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatalf("new bootyd: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bootyd: %v", err)
		}
		db.Close()
	})
	return url, logs
}

// testAgent speaks the agent side of the protocol (package api) to bootyd,
// as booty does when it boots with only booty.server=.
type testAgent struct {
	t      *testing.T
	server string
	mac    string
	token  string
}

func (a *testAgent) do(method, path string, body, out any) int {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.server+path, rd)
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("agent %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		a.t.Fatalf("agent %s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("agent %s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func (a *testAgent) enroll(hw *api.HardwareDetails) {
	a.t.Helper()
	var er api.EnrollResponse
	a.token = ""
	a.do(http.MethodPost, "/v1/enroll", api.EnrollRequest{BootMAC: a.mac, MACs: []string{a.mac}, Hardware: hw}, &er)
	a.token, a.mac = er.Token, er.MAC
}

// command long-polls until a command comes (bounded).
func (a *testAgent) command() api.AgentCommand {
	a.t.Helper()
	for range 10 {
		var c api.AgentCommand
		if a.do(http.MethodGet, "/v1/machines/"+a.mac+"/command?wait=5", nil, &c) == http.StatusOK {
			return c
		}
	}
	a.t.Fatalf("agent %s: no command within 50s", a.mac)
	return api.AgentCommand{}
}

func (a *testAgent) report(path string, body any) {
	a.t.Helper()
	a.do(http.MethodPost, "/v1/machines/"+a.mac+path, body, nil)
}

var testHardware = &api.HardwareDetails{RAMMebibytes: 4096, CPU: api.CPU{Arch: "x86_64", Count: 4, Model: "QEMU Virtual CPU"},
	NIC:     []api.NIC{{Name: "eth0", MAC: "52:54:00:aa:00:01", PXE: true}},
	Storage: []api.Storage{{Name: "/dev/vda", Type: api.StorageHDD, SizeBytes: 20 << 30, SerialNumber: "BOOTY-DISK-A", Model: "QEMU HARDDISK"}}}

// TestFleetFlowAgainstBootyd drives the fleet flow of the README with
// bootyctl against the real bootyd, an agent speaking the protocol on the
// other side: register, enroll, inspect, show the disks, provision with
// hints, watch the write on a terminal, provisioned, events and logs,
// deprovision back to available, delete.
func TestFleetFlowAgainstBootyd(t *testing.T) {
	url := startBootyd(t)
	c := conn(url, tokenFile(t, testToken))
	run := func(args ...string) string {
		t.Helper()
		code, out, stderr := ctl(t, append(args, c...)...)
		if code != 0 {
			t.Fatalf("bootyctl %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return out
	}
	sum := "sha256:" + strings.Repeat("ab", 32)
	run("machines", "register", "--name", "node-1", "--mac", "52:54:00:AA:00:01", "--label", "rack=r1",
		"--image", url+"/files/debian.raw", "--checksum", sum, "--hostname", "node-1")
	if out := run("machines", "list"); !strings.Contains(out, "node-1") || !strings.Contains(out, "registering") {
		t.Fatalf("list after register:\n%s", out)
	}
	code, _, stderr := ctl(t, append([]string{"machines", "register", "--name", "node-1", "--mac", "52:54:00:aa:00:09"}, c...)...)
	if code != 1 || !strings.Contains(stderr, "409") {
		t.Errorf("registering a name twice: exit %d, stderr %q; want bootyd's 409", code, stderr)
	}

	ag := &testAgent{t: t, server: url, mac: "52:54:00:aa:00:01"}
	ag.enroll(testHardware)
	run("machines", "inspect", "node-1")
	cmd := ag.command()
	if cmd.Kind != api.CommandInspect {
		t.Fatalf("agent got %q, want inspect", cmd.Kind)
	}
	ag.report("/command", api.CommandResult{Kind: cmd.Kind, Generation: cmd.Generation, Hardware: testHardware})
	out := run("machines", "show", "node-1")
	for _, w := range []string{"available", "/dev/vda", "BOOTY-DISK-A", "20.0 GiB", "rack=r1"} {
		if !strings.Contains(out, w) {
			t.Errorf("show after inspection lacks %q:\n%s", w, out)
		}
	}

	out = run("machines", "provision", "node-1", "--root-serial", "BOOTY-DISK-A", "--hostname", "web-1")
	if !strings.Contains(out, "provisioning") {
		t.Fatalf("provision: %s", out)
	}
	cmd = ag.command()
	if cmd.Kind != api.CommandProvision || !bytes.Contains(cmd.Config, []byte("BOOTY-DISK-A")) || !bytes.Contains(cmd.Config, []byte("web-1")) {
		t.Fatalf("agent got %q with config %s: want provision with the serial hint and hostname", cmd.Kind, cmd.Config)
	}
	g := cmd.Generation
	ag.report("/status", api.StatusReport{Step: "select-disk", Index: 1, Total: 2, State: api.StateSucceeded, DurationMS: 12, Time: time.Now(), Generation: g})
	ag.report("/status", api.StatusReport{Step: "stream-image", Index: 2, Total: 2, State: api.StateStarted, Time: time.Now(), Generation: g})
	ag.report("/progress", api.ProgressReport{Step: "stream-image", BytesDone: 1 << 30, BytesTotal: 2 << 30, Time: time.Now(), Generation: g})
	ag.report("/logs", api.LogBatch{Lines: []api.LogLine{{Time: time.Now(), Level: "info", Message: "stream-image: half way"}}, Generation: g})

	// watch, on a terminal, draws the bar of the write half done.
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	defer ptmx.Close()
	var screen syncBuffer
	go io.Copy(&screen, ptmx)
	var errb bytes.Buffer
	e := &env{stdout: tty, stderr: &errb, now: time.Now, isTerminal: isTerminal}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code := runEnv(ctx, e, append([]string{"machines", "watch", "--interval", "100ms", "--count", "2"}, c...)); code != 0 {
		t.Fatalf("watch: exit %d: %s", code, errb.String())
	}
	tty.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(screen.String(), "\x1b[?25h") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := screen.String(); !strings.Contains(s, "[████████████░░░░░░░░░░░░]  50% 1.0 GiB/2.0 GiB") || !strings.Contains(s, "stream-image") {
		t.Errorf("watch on a terminal did not draw node-1's write at 50%%:\n%q", s)
	}

	ag.report("/status", api.StatusReport{Step: "stream-image", Index: 2, Total: 2, State: api.StateSucceeded, DurationMS: 42000, Time: time.Now(), Generation: g})
	ag.report("/command", api.CommandResult{Kind: cmd.Kind, Generation: g})
	out = run("machines", "show", "node-1")
	for _, w := range []string{"provisioned", "select-disk", "stream-image", "2/2", "42s", "BOOTY-DISK-A"} {
		if !strings.Contains(out, w) {
			t.Errorf("show after the provision lacks %q:\n%s", w, out)
		}
	}
	var d api.MachineDetail
	if err := json.Unmarshal([]byte(run("machines", "show", "node-1", "-o", "json")), &d); err != nil || d.State != api.MachineProvisioned ||
		d.Spec.Hostname != "web-1" || d.Spec.Image.Checksum != sum || d.Install == nil || len(d.Install.Steps) != 2 {
		t.Errorf("show -o json: %v, %+v", err, d)
	}
	if out := run("machines", "events", "node-1"); !strings.Contains(out, "Registered") || strings.Count(out, "\n") < 4 {
		t.Errorf("events:\n%s", out)
	}
	if out := run("machines", "logs", "node-1"); !strings.Contains(out, "stream-image: half way") {
		t.Errorf("logs:\n%s", out)
	}

	// Deprovision: the installed OS reboots into the agent, which enrolls
	// again and gets the command.
	if out := run("machines", "deprovision", "node-1"); !strings.Contains(out, "deprovisioning") {
		t.Errorf("deprovision: %s", out)
	}
	ag.enroll(testHardware)
	cmd = ag.command()
	if cmd.Kind != api.CommandDeprovision {
		t.Fatalf("agent got %q, want deprovision", cmd.Kind)
	}
	ag.report("/command", api.CommandResult{Kind: cmd.Kind, Generation: cmd.Generation})
	if out := run("machines", "list", "-o", "yaml"); !strings.Contains(out, "state: available") {
		t.Errorf("list after deprovision:\n%s", out)
	}

	run("machines", "delete", "node-1")
	code, _, stderr = ctl(t, append([]string{"machines", "show", "node-1"}, c...)...)
	if code != 1 || !strings.Contains(stderr, "404") {
		t.Errorf("show after delete: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = ctl(t, append([]string{"machines", "list"}, conn(url, tokenFile(t, "not-the-operator-token"))...)...)
	if code != 1 || !strings.Contains(stderr, "401") || strings.Contains(stderr, testToken) {
		t.Errorf("a wrong operator token: exit %d, stderr %q", code, stderr)
	}
}
