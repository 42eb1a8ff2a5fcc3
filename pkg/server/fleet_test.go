package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/provider"
)

// agentFor is the real agent client (the bootyd provider of pkg/config)
// for macs, with a fake hardware report holding one disk.
func agentFor(e *testEnv, macs ...string) *provider.ServerProvider {
	sn := &sniffer{rt: http.DefaultTransport}
	p := &provider.ServerProvider{URL: e.ts.URL, AllowHTTP: true, BootMAC: macs[0], Client: &http.Client{Transport: sn, Timeout: time.Minute},
		MACs:    func() ([]string, error) { return macs, nil },
		Backoff: provider.Backoff{Attempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Hardware: func(context.Context) (*api.HardwareDetails, error) {
			return &api.HardwareDetails{RAMMebibytes: 2048, CPU: api.CPU{Arch: "x86_64", Count: 2},
				Storage: []api.Storage{{Name: "/dev/vda", Type: api.StorageHDD, SizeBytes: 8 << 30, SerialNumber: "disk-" + macs[0]}}}, nil
		}}
	sniffers.Store(p, sn)
	return p
}

// sniffer remembers the last bearer token its client sent.
type sniffer struct {
	rt  http.RoundTripper
	tok atomic.Value
}

func (s *sniffer) RoundTrip(r *http.Request) (*http.Response, error) {
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		s.tok.Store(strings.TrimPrefix(a, "Bearer "))
	}
	return s.rt.RoundTrip(r)
}

var sniffers sync.Map // *provider.ServerProvider → *sniffer

// show GETs a machine through the operator API.
func (e *testEnv) show(t *testing.T, ref string) api.MachineDetail {
	t.Helper()
	code, _, body := e.do(t, "GET", "/v1/machines/"+ref, testOperatorToken, nil, nil)
	if code != 200 {
		t.Fatalf("show %s: %d %s", ref, code, body)
	}
	var d api.MachineDetail
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// eventually polls cond every 20 ms for at most 20 s (a bound, not a timing assert).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type loaded struct {
	cfg *config.MachineConfig
	err error
	at  time.Time
}

// load runs p.Load in the background, cancelled at the test's end.
func load(t *testing.T, p *provider.ServerProvider) chan loaded {
	ch := make(chan loaded, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	go func() {
		defer cancel()
		cfg, err := p.Load(ctx)
		ch <- loaded{cfg, err, time.Now()}
	}()
	return ch
}

// TestFleetEnrollInspectProvision drives one discovered machine through
// the operator API with the real agent client: it enrolls, is inspected
// (its disk appears), is provisioned with a spec rendered into its config,
// reports a step under the command's generation and ends provisioned.
func TestFleetEnrollInspectProvision(t *testing.T) {
	e := newEnv(t, nil)
	const mac = "52:54:00:00:10:01"
	p := agentFor(e, mac, "52:54:00:00:10:02")
	defer p.Close()
	got := load(t, p)
	var name string
	eventually(t, "the enrollment", func() bool {
		code, _, body := e.do(t, "GET", "/v1/machines", testOperatorToken, nil, nil)
		var l api.MachineList
		json.Unmarshal([]byte(body), &l)
		if code == 200 && len(l.Machines) == 1 {
			name = l.Machines[0].Name
			return l.Machines[0].Agent != nil && l.Machines[0].Agent.Live
		}
		return false
	})
	d := e.show(t, mac) // by MAC
	if d.Status != api.StatusDiscovered || d.State != api.MachineRegistering || len(d.MACs) != 2 || d.BootMAC != mac {
		t.Fatalf("enrolled machine %+v", d.Machine)
	}
	if e.show(t, d.ID).Name != name || e.show(t, name).ID != d.ID {
		t.Fatal("the machine is not found by ID and name")
	}

	code, _, body := e.do(t, "POST", "/v1/machines/"+name+"/inspect", testOperatorToken, nil, nil)
	if code != 200 {
		t.Fatalf("inspect: %d %s", code, body)
	}
	eventually(t, "the inspection", func() bool { return e.show(t, name).State == api.MachineAvailable })
	d = e.show(t, name)
	if d.Hardware == nil || len(d.Hardware.Storage) != 1 || d.Hardware.Storage[0].SerialNumber != "disk-"+mac {
		t.Fatalf("hardware after inspection: %+v", d.Hardware)
	}

	// A spec that renders no valid config is refused and changes nothing.
	bad := api.ProvisionRequest{Spec: &api.MachineSpec{Image: api.ImageSpec{URL: "ftp://x/img"}}}
	if code, _, body := e.do(t, "POST", "/v1/machines/"+name+"/provision", testOperatorToken, bad, nil); code != 400 {
		t.Fatalf("bad spec: %d %s", code, body)
	}
	if e.show(t, name).State != api.MachineAvailable {
		t.Fatal("a refused provision changed the state")
	}
	yes := true
	req := api.ProvisionRequest{Spec: &api.MachineSpec{Image: api.ImageSpec{URL: "http://10.0.0.1/files/os.img.zst",
		Checksum: "sha256:" + strings.Repeat("ab", 32)}, Hostname: "node-7", UserData: "#cloud-config\n",
		RootDeviceHints: &api.RootDeviceHints{SerialNumber: "disk-" + mac, Rotational: &yes}}}
	asked := time.Now()
	code, _, body = e.do(t, "POST", "/v1/machines/"+name+"/provision", testOperatorToken, req, nil)
	if code != 200 {
		t.Fatalf("provision: %d %s", code, body)
	}
	var m api.Machine
	json.Unmarshal([]byte(body), &m)
	var l loaded
	select {
	case l = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not get the provision")
	}
	if l.err != nil {
		t.Fatal(l.err)
	}
	t.Logf("the waiting agent had its provision %s after the operator asked", l.at.Sub(asked))
	if l.cfg.Image.URL != req.Spec.Image.URL || l.cfg.Hostname != "node-7" || l.cfg.Mode != config.ModeProvision ||
		l.cfg.Disk.Hints["serial"] != "disk-"+mac || l.cfg.Disk.Hints["rotational"] != true || l.cfg.CloudInit.UserData != "#cloud-config\n" ||
		l.cfg.Server.Token != "" || l.cfg.Server.URL != "http://bootyd.test:8080" {
		t.Fatalf("rendered config %+v", l.cfg)
	}
	ctx := context.Background()
	if err := p.ReportStatus(ctx, api.StatusReport{Step: "write-image", Index: 3, Total: 6, State: api.StateStarted}); err != nil {
		t.Fatal(err)
	}
	if err := p.ReportProgress(ctx, api.ProgressReport{Step: "write-image", BytesDone: 5 << 20, BytesTotal: 10 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := p.ReportLogs(ctx, []api.LogLine{{Level: "INFO", Message: "writing the image"}}); err != nil {
		t.Fatal(err)
	}
	d = e.show(t, name)
	if d.State != api.MachineProvisioning || d.Progress == nil || d.Progress.BytesDone != 5<<20 ||
		d.Install == nil || d.Install.Generation != m.Generation || len(d.Install.Steps) != 1 || d.Install.Steps[0].Name != "write-image" {
		t.Fatalf("while provisioning: %+v install %+v", d.Machine, d.Install)
	}
	// A pseudo-step (no place in the plan) is accepted, for the run view.
	if code, _, body := e.agentDo(t, p, "status", api.StatusReport{Step: api.StepLoadConfig, State: api.StateFailed, Error: "x", Generation: m.Generation}); code != 200 {
		t.Errorf("load-config report: %d %s", code, body)
	}
	// A report of another generation is refused.
	code, _, _ = e.agentDo(t, p, "status", api.StatusReport{Step: "x", Index: 1, Total: 1, State: api.StateStarted, Generation: m.Generation - 1})
	if code != http.StatusConflict {
		t.Errorf("stale report: %d, want 409", code)
	}
	if err := p.CompleteCommand(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if d := e.show(t, name); d.State != api.MachineProvisioned || d.Agent == nil || d.Agent.Live {
		t.Fatalf("after the command: %+v", d.Machine)
	}
	code, _, body = e.do(t, "GET", "/v1/machines/"+name+"/logs?limit=10", testOperatorToken, nil, nil)
	if code != 200 || !strings.Contains(body, "writing the image") {
		t.Fatalf("logs: %d %s", code, body)
	}
	code, _, body = e.do(t, "GET", "/v1/machines/"+name+"/events", testOperatorToken, nil, nil)
	var ev api.EventList
	json.Unmarshal([]byte(body), &ev)
	reasons := []string{}
	for _, x := range ev.Events {
		reasons = append(reasons, x.Reason)
	}
	if code != 200 || !strings.Contains(strings.Join(reasons, " "), "Enrolled") || !strings.Contains(strings.Join(reasons, " "), "ProvisioningDone") {
		t.Fatalf("events: %d %v", code, reasons)
	}
	if out := e.out.String() + e.logs.String(); strings.Contains(out, "#cloud-config") {
		t.Errorf("user data reached bootyd's output")
	}
}

// agentDo posts a raw agent report as p's machine with p's token.
func (e *testEnv) agentDo(t *testing.T, p *provider.ServerProvider, what string, v any) (int, http.Header, string) {
	t.Helper()
	return e.do(t, "POST", "/v1/machines/"+p.MAC()+"/"+what, tokenOf(t, p), v, nil)
}

// tokenOf is the machine token p last sent (it polls for commands with it).
func tokenOf(t *testing.T, p *provider.ServerProvider) string {
	t.Helper()
	sn, _ := sniffers.Load(p)
	var tok string
	eventually(t, "the agent's first authenticated request", func() bool {
		tok, _ = sn.(*sniffer).tok.Load().(string)
		return tok != ""
	})
	return tok
}

// TestFleetConfigFileMachine: a --configs file is a registered machine;
// an agent booted with only booty.server= enrolls and gets the file (its
// server.token dropped) as a provision, on every boot.
func TestFleetConfigFileMachine(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.RegisterConfigs(context.Background())
	if d := e.show(t, testMAC); d.Name != "node1" || d.Labels[LabelSource] != "configs" {
		t.Fatalf("config file machine %+v", d.Machine)
	}
	writeFile(t, filepath.Join(e.cfgDir, "aa-bb-cc-dd-ee-ff.yaml"),
		"hostname: node1\nimage: {url: 'http://10.0.0.1/os.img', checksum: 'sha256:"+strings.Repeat("ab", 32)+"'}\ndisk: {device: /dev/vda}\nhandoff: poweroff\nserver:\n  url: http://bootyd\n  token: "+testToken+"\n")
	for boot := range 2 {
		p := agentFor(e, testMAC)
		l := <-load(t, p)
		if l.err != nil {
			t.Fatalf("boot %d: %v\n%s", boot, l.err, e.out.String())
		}
		if l.cfg.Image.URL != "http://10.0.0.1/os.img" || l.cfg.Handoff != "poweroff" || l.cfg.Server.Token != "" {
			t.Fatalf("boot %d: config %+v", boot, l.cfg)
		}
		if err := p.CompleteCommand(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		p.Close()
		if d := e.show(t, testMAC); d.State != api.MachineProvisioned {
			t.Fatalf("boot %d: state %s", boot, d.State)
		}
	}
}

// TestFleetRefusals: one 401 for an unknown MAC and a wrong token, the
// operator API needs its token, a second enrollment while the session is
// live is refused (an event), bodies are bounded (413), reports are rate
// limited (429), auto-discovery can be off.
func TestFleetRefusals(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ReportRate, o.ReportBurst = 1, 5 })
	p := agentFor(e, "52:54:00:00:20:01")
	defer p.Close()
	ch := load(t, p)
	eventually(t, "the enrollment", func() bool { return p.MAC() != "" })
	_, _, unknown := e.do(t, "POST", "/v1/machines/52:54:00:00:20:99/heartbeat", tokenOf(t, p), `{}`, nil)
	code, _, wrong := e.do(t, "POST", "/v1/machines/52:54:00:00:20:01/heartbeat", "not-the-token", `{}`, nil)
	if code != 401 || wrong != unknown {
		t.Errorf("wrong token %d %q, unknown MAC %q: want the same 401", code, wrong, unknown)
	}
	if code, _, _ := e.agentDo(t, p, "heartbeat", api.Heartbeat{}); code != 200 {
		t.Errorf("heartbeat: %d", code)
	}
	for _, tok := range []string{"", "wrong-operator-token-0000"} {
		if code, _, _ := e.do(t, "GET", "/v1/machines", tok, nil, nil); code != 401 {
			t.Errorf("operator API with token %q: %d, want 401", tok, code)
		}
	}
	// The same machine enrolling again while its agent is live.
	body := api.EnrollRequest{MACs: []string{"52:54:00:00:20:01"}}
	if code, _, resp := e.do(t, "POST", "/v1/enroll", "", body, nil); code != 409 {
		t.Errorf("second enrollment: %d %s, want 409", code, resp)
	}
	code, _, evs := e.do(t, "GET", "/v1/machines/52:54:00:00:20:01/events", testOperatorToken, nil, nil)
	if code != 200 || !strings.Contains(evs, "EnrollmentRefused") {
		t.Errorf("no EnrollmentRefused event: %s", evs)
	}
	big := api.LogBatch{Lines: []api.LogLine{{Message: strings.Repeat("x", 2<<20)}}}
	if code, _, _ := e.agentDo(t, p, "logs", big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("2 MiB log batch: %d, want 413", code)
	}
	lines := make([]api.LogLine, 10)
	code, hdr, _ := e.agentDo(t, p, "logs", api.LogBatch{Lines: lines})
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Errorf("log flood: %d, want 429 with Retry-After", code)
	}
	_ = ch
}

// TestFleetNoAutoDiscovery: with auto-discovery off an unknown agent gets
// ErrNoConfig (404 from bootyd).
func TestFleetNoAutoDiscovery(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.DB = testDB(t, bmdb.WithoutAutoDiscovery()) })
	p := agentFor(e, "52:54:00:00:30:01")
	l := <-load(t, p)
	if !errors.Is(l.err, config.ErrNoConfig) {
		t.Fatalf("err %v, want ErrNoConfig", l.err)
	}
}

// TestOnlineThroughOperatorAPI: online is set at registration, shown, and
// changed by PATCH without bumping the generation.
func TestOnlineThroughOperatorAPI(t *testing.T) {
	e := newEnv(t, nil)
	reg := api.RegisterRequest{Name: "on-1", BootMAC: "52:54:00:00:20:01", Online: true}
	if code, _, body := e.do(t, "POST", "/v1/machines", testOperatorToken, reg, nil); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	d := e.show(t, "on-1")
	if !d.Online {
		t.Fatalf("registered online, shown %+v", d.Machine)
	}
	off := false
	if code, _, body := e.do(t, "PATCH", "/v1/machines/on-1", testOperatorToken, api.UpdateRequest{Online: &off}, nil); code != 200 {
		t.Fatalf("patch online: %d %s", code, body)
	}
	if d2 := e.show(t, "on-1"); d2.Online || d2.Generation != d.Generation {
		t.Fatalf("after online=false: online %v generation %d (was %d)", d2.Online, d2.Generation, d.Generation)
	}
}
