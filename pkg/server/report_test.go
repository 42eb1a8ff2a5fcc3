package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

func TestAuth(t *testing.T) {
	e := newEnv(t, nil)
	writeFile(t, filepath.Join(e.cfgDir, "00-00-00-00-00-01.yaml"), "hostname: tokenless\nserver:\n  url: http://x\n")
	writeFile(t, filepath.Join(e.cfgDir, "00-00-00-00-00-02.yaml"), "server: [this is: not a map\n")
	body := `{"lines":[{"message":"hi"}]}`
	tests := []struct {
		name     string
		mac      string
		auth     string // full Authorization header
		wantCode int
		wantMsg  string
	}{
		{"right token", testMAC, "Bearer " + testToken, 200, ""},
		{"scheme case-insensitive", "AA-BB-CC-DD-EE-FF", "bearer " + testToken, 200, ""},
		// Every refusal is the same 401: it does not tell a MAC bootyd
		// knows from one it does not.
		{"missing", testMAC, "", 401, "unauthorized"},
		{"wrong", testMAC, "Bearer wrong-token", 401, "unauthorized"},
		{"prefix of token", testMAC, "Bearer " + testToken[:5], 401, "unauthorized"},
		{"basic scheme", testMAC, "Basic " + testToken, 401, "unauthorized"},
		{"bearer without token", testMAC, "Bearer ", 401, "unauthorized"},
		{"config lacks token", "00:00:00:00:00:01", "Bearer anything", 401, "unauthorized"},
		{"config unparsable", "00:00:00:00:00:02", "Bearer anything", 401, "unauthorized"},
		{"unknown MAC", "00:00:00:00:00:09", "Bearer " + testToken, 401, "unauthorized"},
		{"bad MAC", "nope", "Bearer " + testToken, 401, "unauthorized"},
	}
	for _, tt := range tests {
		for _, kind := range []string{"status", "progress", "logs"} {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				b := body
				switch kind {
				case "status":
					b = `{"step":"select-disk","index":1,"total":2,"state":"started"}`
				case "progress":
					b = `{"step":"write-image","bytesDone":1,"bytesTotal":2}`
				}
				code, hdr, resp := e.do(t, "POST", "/v1/machines/"+tt.mac+"/"+kind, "", b, map[string]string{"Authorization": tt.auth})
				if code != tt.wantCode {
					t.Fatalf("status %d, want %d (%s)", code, tt.wantCode, resp)
				}
				if tt.wantCode == 200 {
					return
				}
				if msg := apiError(t, resp); !strings.Contains(msg, tt.wantMsg) {
					t.Errorf("error %q lacks %q", msg, tt.wantMsg)
				}
				if code == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("401 without WWW-Authenticate: Bearer")
				}
			})
		}
	}
	if _, ok := e.srv.Machine("00:00:00:00:00:01"); ok {
		t.Errorf("refused report was recorded")
	}
}

func TestAllowNoToken(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.AllowNoToken = true })
	writeFile(t, filepath.Join(e.cfgDir, "00-00-00-00-00-01.yaml"), "hostname: tokenless\n")
	code, _, resp := e.do(t, "POST", "/v1/machines/00:00:00:00:00:01/logs", "", `{"lines":[{"message":"hi"}]}`, nil)
	if code != 200 {
		t.Fatalf("status %d, want 200 (%s)", code, resp)
	}
	// A machine that has a token still needs it.
	if code, _, _ := e.do(t, "POST", "/v1/machines/"+testMAC+"/logs", "", `{"lines":[]}`, nil); code != 401 {
		t.Fatalf("tokened machine without token: status %d, want 401", code)
	}
}

func TestBadBodies(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxBodyBytes = 256 })
	tests := []struct {
		name, kind, body string
		wantCode         int
		wantMsg          string
	}{
		{"not json", "status", "hello", 400, "decode StatusReport"},
		{"truncated", "progress", `{"step":"w"`, 400, "decode ProgressReport"},
		{"wrong type", "logs", `{"lines":"x"}`, 400, "decode LogBatch"},
		{"empty", "status", "", 400, "empty body"},
		{"trailing data", "status", `{"step":"a","state":"started"} {}`, 400, "after the JSON object"},
		{"too large", "logs", `{"lines":[{"message":"` + strings.Repeat("x", 300) + `"}]}`, 413, "larger than 256 bytes"},
		{"no step", "status", `{"state":"started"}`, 400, "step is empty"},
		{"unknown state", "status", `{"step":"a","state":"exploded"}`, 400, `state "exploded"`},
		{"step state on machine", "status", `{"step":"machine","state":"succeeded"}`, 400, `"provisioned"`},
		{"machine state on step", "status", `{"step":"a","state":"provisioned"}`, 400, `"started"`},
		{"progress without step", "progress", `{"bytesDone":1}`, 400, "step is empty"},
		{"negative progress", "progress", `{"step":"w","bytesDone":-1}`, 400, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, resp := e.do(t, "POST", "/v1/machines/"+testMAC+"/"+tt.kind, testToken, tt.body, nil)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d (%s)", code, tt.wantCode, resp)
			}
			if msg := apiError(t, resp); !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("error %q lacks %q", msg, tt.wantMsg)
			}
		})
	}
	if _, ok := e.srv.Machine(testMAC); ok {
		t.Errorf("bad reports were recorded")
	}
	// Unknown fields are accepted: fields are only ever added to the API.
	e.post(t, "status", `{"step":"a","state":"started","future":true}`)
}

func status(step string, i, n int, state string) api.StatusReport {
	return api.StatusReport{Step: step, Index: i, Total: n, State: state, Time: time.Unix(1700000000, 0).UTC()}
}

func TestStateTransitions(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxLogLines = 3 })
	steps := func() []string {
		m, _ := e.srv.Machine(testMAC)
		var out []string
		for _, s := range m.Steps {
			out = append(out, s.Step+":"+s.State)
		}
		return out
	}
	state := func() string { m, _ := e.srv.Machine(testMAC); return m.State }

	if _, ok := e.srv.Machine(testMAC); ok {
		t.Fatal("machine recorded before any report")
	}
	e.post(t, "status", status("select-disk", 1, 2, api.StateStarted))
	if got := state(); got != StateRunning {
		t.Fatalf("after first start: state %q, want running", got)
	}
	e.post(t, "status", status("select-disk", 1, 2, api.StateSucceeded))
	e.post(t, "status", status("write-image", 2, 2, api.StateStarted))
	e.post(t, "progress", api.ProgressReport{Step: "write-image", BytesDone: 10, BytesTotal: 20})
	e.post(t, "progress", api.ProgressReport{Step: "write-image", BytesDone: 20, BytesTotal: 20})
	e.post(t, "status", status("write-image", 2, 2, api.StateSucceeded))
	if got := state(); got != StateRunning {
		t.Fatalf("before machine outcome: state %q", got)
	}
	e.post(t, "status", status(api.StepMachine, 0, 2, api.StateProvisioned))
	if got := state(); got != api.StateProvisioned {
		t.Fatalf("state %q, want provisioned", got)
	}
	want := []string{"select-disk:started", "select-disk:succeeded", "write-image:started", "write-image:succeeded", "machine:provisioned"}
	if got := steps(); !reflect.DeepEqual(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	m, _ := e.srv.Machine(testMAC)
	if m.Progress == nil || m.Progress.BytesDone != 20 {
		t.Fatalf("progress %+v, want last report (20 bytes)", m.Progress)
	}

	// A late step report does not undo the outcome.
	e.post(t, "status", status("write-image", 2, 2, api.StateSucceeded))
	if got := state(); got != api.StateProvisioned {
		t.Fatalf("late report changed state to %q", got)
	}

	// A new run (deprovision) starts afresh, then fails.
	e.post(t, "status", status("wipe", 1, 1, api.StateStarted))
	if got := state(); got != StateRunning {
		t.Fatalf("new run: state %q, want running", got)
	}
	if got := steps(); !reflect.DeepEqual(got, []string{"wipe:started"}) {
		t.Fatalf("new run steps %v", got)
	}
	if m, _ := e.srv.Machine(testMAC); m.Progress != nil {
		t.Fatalf("new run kept old progress %+v", m.Progress)
	}
	fail := status("wipe", 1, 1, api.StateFailed)
	fail.Error = "wipe /dev/sda: device busy"
	e.post(t, "status", fail)
	e.post(t, "status", api.StatusReport{Step: api.StepMachine, State: api.StateError, Error: "step wipe failed"})
	if got := state(); got != api.StateError {
		t.Fatalf("state %q, want error", got)
	}

	// Logs: bounded ring keeps the newest lines.
	e.post(t, "logs", api.LogBatch{Lines: []api.LogLine{{Message: "1"}, {Message: "2"}}})
	e.post(t, "logs", api.LogBatch{Lines: []api.LogLine{{Message: "3"}, {Message: "4"}, {Message: "5"}}})
	m, _ = e.srv.Machine(testMAC)
	var msgs []string
	for _, l := range m.Logs {
		msgs = append(msgs, l.Message)
		if l.Time.IsZero() {
			t.Errorf("log line %q without time", l.Message)
		}
	}
	if !reflect.DeepEqual(msgs, []string{"3", "4", "5"}) {
		t.Fatalf("logs %v, want [3 4 5]", msgs)
	}

	if n := len(e.srv.Machines()); n != 1 {
		t.Fatalf("Machines: %d, want 1", n)
	}
}

func TestPersistence(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	e := newEnv(t, func(o *Options) { o.StateDir = stateDir })
	e.post(t, "status", status("write-image", 1, 1, api.StateStarted))
	e.post(t, "progress", api.ProgressReport{Step: "write-image", BytesDone: 5, BytesTotal: 10, Time: time.Unix(1700000001, 0).UTC()})
	e.post(t, "logs", api.LogBatch{Lines: []api.LogLine{{Time: time.Unix(1700000002, 0).UTC(), Level: "info", Message: "hello"}}})
	e.post(t, "status", api.StatusReport{Step: api.StepMachine, State: api.StateProvisioned, Time: time.Unix(1700000003, 0).UTC(),
		Detail: map[string]string{"disk": "/dev/vda"}})
	want, _ := e.srv.Machine(testMAC)

	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "aa-bb-cc-dd-ee-ff.json" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("state dir holds %v, want only aa-bb-cc-dd-ee-ff.json", names)
	}
	// A corrupt file and a leftover temp file are skipped at load.
	writeFile(t, filepath.Join(stateDir, "00-00-00-00-00-01.json"), "{not json")
	writeFile(t, filepath.Join(stateDir, ".tmp-00-00-00-00-00-02-123"), "{}")

	s2, err := New(Options{ConfigDir: e.cfgDir, StateDir: stateDir, DB: testDB(t)})
	if err != nil {
		t.Fatalf("New over existing state: %v", err)
	}
	got, ok := s2.Machine(testMAC)
	if !ok {
		t.Fatal("state not loaded")
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded state differs:\n got %+v\nwant %+v", got, want)
	}
	if n := len(s2.Machines()); n != 1 {
		t.Fatalf("loaded %d machines, want 1", n)
	}
}

func TestWaitFor(t *testing.T) {
	e := newEnv(t, nil)
	done := make(chan api.MachineState, 1)
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		m, err := e.srv.WaitFor(ctx, "AA-BB-CC-DD-EE-FF", func(m api.MachineState) bool {
			return m.State == api.StateProvisioned || m.State == api.StateError
		})
		errc <- err
		done <- m
	}()
	e.post(t, "status", status("a", 1, 1, api.StateStarted))
	e.post(t, "status", status("a", 1, 1, api.StateSucceeded))
	select {
	case <-errc:
		t.Fatal("WaitFor returned before the outcome")
	case <-time.After(50 * time.Millisecond):
	}
	e.post(t, "status", status(api.StepMachine, 0, 1, api.StateProvisioned))
	if err := <-errc; err != nil {
		t.Fatalf("WaitFor: %v", err)
	}
	if m := <-done; m.State != api.StateProvisioned || len(m.Steps) != 3 {
		t.Fatalf("WaitFor returned %+v", m)
	}

	// Already true: returns at once.
	if _, err := e.srv.WaitFor(ctx, testMAC, func(m api.MachineState) bool { return m.State == api.StateProvisioned }); err != nil {
		t.Fatalf("WaitFor on satisfied state: %v", err)
	}
	// Never true: returns the context's error and the last state.
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	m, err := e.srv.WaitFor(short, testMAC, func(api.MachineState) bool { return false })
	if !errors.Is(err, context.DeadlineExceeded) || m.State != api.StateProvisioned {
		t.Fatalf("WaitFor timeout: %+v, %v", m, err)
	}
	if _, err := e.srv.WaitFor(ctx, "bogus", func(api.MachineState) bool { return true }); !errors.Is(err, ErrBadMAC) {
		t.Fatalf("WaitFor bad MAC: %v", err)
	}
}

func TestHumanOutput(t *testing.T) {
	e := newEnv(t, nil)
	e.post(t, "status", status("write-image", 3, 6, api.StateStarted))
	e.post(t, "progress", api.ProgressReport{Step: "write-image", BytesDone: 512 << 20, BytesTotal: 1 << 30, RateBPS: 85 << 20, ETASeconds: 6})
	e.post(t, "progress", api.ProgressReport{Step: "other", BytesDone: 1536})
	ok := status("write-image", 3, 6, api.StateSucceeded)
	ok.DurationMS = 75_000
	e.post(t, "status", ok)
	fail := status("configure", 4, 6, api.StateFailed)
	fail.DurationMS = 1200
	fail.Error = "write /etc/hostname: read-only file system"
	e.post(t, "status", fail)
	e.post(t, "status", api.StatusReport{Step: api.StepMachine, State: api.StateError, Error: "provisioning failed"})
	e.post(t, "logs", api.LogBatch{Lines: []api.LogLine{{Level: "warn", Message: "evil \x1b[2Jclear\nsecond line"}, {Message: "plain"}}})

	out := e.out.String()
	want := []string{
		"aa:bb:cc:dd:ee:ff [3/6 write-image] started\n",
		"aa:bb:cc:dd:ee:ff [3/6 write-image] 512.0 MiB / 1.0 GiB (50%) 85.0 MiB/s ETA 6s\n",
		"aa:bb:cc:dd:ee:ff [other] 1.5 KiB\n",
		"aa:bb:cc:dd:ee:ff [3/6 write-image] succeeded in 1m15s\n",
		"aa:bb:cc:dd:ee:ff [4/6 configure] FAILED after 1.2s: write /etc/hostname: read-only file system\n",
		"aa:bb:cc:dd:ee:ff ERROR in step configure: provisioning failed\n",
		"aa:bb:cc:dd:ee:ff | WARN  evil \\x1b[2Jclear\\nsecond line\n",
		"aa:bb:cc:dd:ee:ff | INFO  plain\n",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q\noutput:\n%s", w, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("output passes a raw escape character through")
	}
}

// TestTokenNeverLogged drives every route, with right and wrong tokens, at
// debug level, and looks for the tokens in the human output and the logs.
func TestTokenNeverLogged(t *testing.T) {
	e := newEnv(t, nil)
	const wrong = "WRONG-t0ken-5e7d"
	e.do(t, "GET", "/v1/machines/"+testMAC+"/config", "", nil, nil)
	e.do(t, "GET", "/v1/machines/"+testMAC+"/ipxe", "", nil, nil)
	e.do(t, "GET", "/v1/boot.ipxe", "", nil, nil)
	e.post(t, "status", status("a", 1, 1, api.StateStarted))
	e.post(t, "progress", api.ProgressReport{Step: "a", BytesDone: 1})
	e.post(t, "logs", api.LogBatch{Lines: []api.LogLine{{Message: "hello"}}})
	fail := status("a", 1, 1, api.StateFailed)
	fail.Error = "boom"
	e.post(t, "status", fail)
	e.post(t, "status", api.StatusReport{Step: api.StepMachine, State: api.StateError, Error: "boom"})
	for _, kind := range []string{"status", "progress", "logs"} {
		if code, _, _ := e.do(t, "POST", "/v1/machines/"+testMAC+"/"+kind, wrong, `{}`, nil); code != 401 {
			t.Fatalf("wrong token: %d", code)
		}
		e.do(t, "POST", "/v1/machines/"+testMAC+"/"+kind, testToken, `{bad`, nil)
	}
	e.do(t, "GET", "/v1/machines", "", nil, nil)

	logs, out := e.logs.String(), e.out.String()
	if !strings.Contains(logs, "msg=request") || !strings.Contains(out, "aa:bb:cc:dd:ee:ff") {
		t.Fatalf("nothing was logged; the test would prove nothing\nlogs:\n%s\noutput:\n%s", logs, out)
	}
	for _, secret := range []string{testToken, wrong} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain token %q:\n%s", secret, logs)
		}
		if strings.Contains(out, secret) {
			t.Errorf("output contains token %q:\n%s", secret, out)
		}
	}
}

func TestServeAndShutdown(t *testing.T) {
	e := newEnv(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.srv.Serve(ctx, ln) }()
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/v1/machines/"+testMAC+"/config", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Fatal("listener still accepts after shutdown")
	}
}

// TestConcurrentReportsPersistLatest fires reports in parallel and checks the
// state file ends equal to the in-memory state (no older snapshot wins).
func TestConcurrentReportsPersistLatest(t *testing.T) {
	stateDir := t.TempDir()
	e := newEnv(t, func(o *Options) { o.StateDir = stateDir })
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := api.LogBatch{Lines: []api.LogLine{{Message: fmt.Sprintf("line %d", i)}}}
			if code, _, resp := e.do(t, "POST", "/v1/machines/"+testMAC+"/logs", testToken, body, nil); code != 200 {
				t.Errorf("POST logs: %d %s", code, resp)
			}
		}()
	}
	wg.Wait()
	mem, _ := e.srv.Machine(testMAC)
	if len(mem.Logs) != n {
		t.Fatalf("%d log lines in memory, want %d", len(mem.Logs), n)
	}
	data, err := os.ReadFile(filepath.Join(stateDir, "aa-bb-cc-dd-ee-ff.json"))
	if err != nil {
		t.Fatal(err)
	}
	var disk api.MachineState
	if err := json.Unmarshal(data, &disk); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(disk, mem) {
		t.Fatalf("state file is not the latest state: %d lines on disk, %d in memory", len(disk.Logs), len(mem.Logs))
	}
}
