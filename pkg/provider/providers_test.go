package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
)

// fastBackoff keeps retry tests quick while still waiting between tries.
var fastBackoff = Backoff{Attempts: 3, Initial: time.Millisecond, Max: 4 * time.Millisecond}

type recorded struct {
	Method, Path, Auth, ContentType, Body string
}

// recorder is an httptest server that records every request and answers
// with handle (200 when nil).
type recorder struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []recorded
	handle func(w http.ResponseWriter, r *http.Request, n int)
}

func newRecorder(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *recorder {
	rec := &recorder{handle: handle}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(body)})
		n := len(rec.reqs)
		rec.mu.Unlock()
		if rec.handle != nil {
			rec.handle(w, r, n)
		}
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) requests() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recorded(nil), rec.reqs...)
}

// logBuffer is a slog logger writing to a buffer, to assert on what is logged.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// fakeProvider answers with a fixed config or error and counts calls.
type fakeProvider struct {
	name  string
	cfg   *config.MachineConfig
	err   error
	calls int
}

func (f *fakeProvider) Name() string { return f.name }
func (f *fakeProvider) Load(context.Context) (*config.MachineConfig, error) {
	f.calls++
	return f.cfg, f.err
}

func TestLoadChain(t *testing.T) {
	good := &config.MachineConfig{APIVersion: config.APIVersion, Hostname: "good"}
	tests := []struct {
		name      string
		ps        []*fakeProvider
		wantFrom  string
		wantErr   string
		noConfig  bool
		wantCalls []int
	}{
		{
			name:      "first answers, later ones not asked",
			ps:        []*fakeProvider{{name: "a", cfg: good}, {name: "b", cfg: good}},
			wantFrom:  "a",
			wantCalls: []int{1, 0},
		},
		{
			name: "falls through config.ErrNoConfig in order",
			ps: []*fakeProvider{
				{name: "cmdline", err: config.ErrNoConfig},
				{name: "drive", err: errors.Join(errors.New("x"), config.ErrNoConfig)},
				{name: "deploy", cfg: good},
				{name: "bootyd", cfg: good},
			},
			wantFrom:  "deploy",
			wantCalls: []int{1, 1, 1, 0},
		},
		{
			name: "real error stops the chain naming the provider",
			ps: []*fakeProvider{
				{name: "cmdline", err: config.ErrNoConfig},
				{name: "drive", err: &config.ValidationError{Problems: []string{"image.ur: unknown field"}}},
				{name: "deploy", cfg: good},
			},
			wantErr:   "config provider drive: image.ur: unknown field",
			wantCalls: []int{1, 1, 0},
		},
		{
			name:      "all empty",
			ps:        []*fakeProvider{{name: "a", err: config.ErrNoConfig}, {name: "b", err: config.ErrNoConfig}},
			wantErr:   "tried a, b",
			noConfig:  true,
			wantCalls: []int{1, 1},
		},
		{
			name:      "nil config without error is a bug",
			ps:        []*fakeProvider{{name: "a"}},
			wantErr:   "config provider a: returned no config and no error",
			wantCalls: []int{1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := make([]config.Provider, len(tt.ps))
			for i, p := range tt.ps {
				ps[i] = p
			}
			log, buf := logBuffer()
			cfg, from, err := LoadChain(context.Background(), log, ps...)
			for i, p := range tt.ps {
				if p.calls != tt.wantCalls[i] {
					t.Errorf("provider %s asked %d times, want %d", p.name, p.calls, tt.wantCalls[i])
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if errors.Is(err, config.ErrNoConfig) != tt.noConfig {
					t.Errorf("errors.Is(config.ErrNoConfig) wrong for %v", err)
				}
				return
			}
			if err != nil || cfg != good || from.Name() != tt.wantFrom {
				t.Fatalf("got %v from %v, err %v; want config from %s", cfg, from, err, tt.wantFrom)
			}
			if !strings.Contains(buf.String(), "provider="+tt.wantFrom) {
				t.Errorf("log does not say which provider answered:\n%s", buf)
			}
		})
	}
}

func TestProvidersFromCmdline(t *testing.T) {
	names := func(ps []config.Provider) []string {
		var out []string
		for _, p := range ps {
			switch p.(type) {
			case *URLProvider:
				out = append(out, "url")
			case *ConfigDriveProvider:
				out = append(out, "drive")
			case *DeployDirProvider:
				out = append(out, "deploy")
			case *ServerProvider:
				out = append(out, "server")
			}
		}
		return out
	}
	tests := map[string][]string{
		"":                              {"drive", "deploy"},
		"booty.config=/cfg.yaml":        {"url", "drive", "deploy"},
		"booty.server=http://192.0.2.1": {"drive", "deploy", "server"},
		"booty.config=http://x booty.server=http://y": {"url", "drive", "deploy", "server"},
		"booty.config= booty.server=":                 {"drive", "deploy"},
	}
	for cmdline, want := range tests {
		if got := names(ProvidersFromCmdline(ParseCmdline(cmdline))); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: providers %v, want %v", cmdline, got, want)
		}
	}
	ps := ProvidersFromCmdline(ParseCmdline("booty.config=/x booty.server=http://s"), WithDeployDir("/d"), WithSysRoot("/s"), WithBackoff(fastBackoff))
	if d := ps[2].(*DeployDirProvider); d.Dir != "/d" || d.Backoff != fastBackoff {
		t.Errorf("options not applied: %+v", d)
	}
	if s := ps[3].(*ServerProvider); s.URL != "http://s" || s.SysRoot != "/s" {
		t.Errorf("options not applied: %+v", s)
	}
}

// TestChainEndToEnd runs the real providers: no cmdline URL, no drive, an
// empty /deploy, then bootyd answering for the second MAC.
func TestChainEndToEnd(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if !fleetAnswer(t, w, r, "52:54:00:00:00:02", "tok", validYAML) {
			http.NotFound(w, r)
		}
	})
	fb := newFakeBlock(t)
	cl := ParseCmdline("console=ttyS0 booty.insecure-http=1 booty.server=" + srv.URL)
	ps := ProvidersFromCmdline(cl, WithSysRoot(fb.sysRoot), WithDevRoot(fb.devRoot), WithDeployDir(t.TempDir()),
		WithMACs(func() ([]string, error) { return []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}, nil }),
		WithBackoff(fastBackoff), WithLogger(testLogger(t)))
	cfg, from, err := LoadChain(context.Background(), testLogger(t), ps...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hostname != "from-drive" {
		t.Errorf("hostname %q", cfg.Hostname)
	}
	sp, ok := from.(*ServerProvider)
	if !ok || sp.MAC() != "52:54:00:00:00:02" {
		t.Fatalf("answered by %v", from)
	}
	var _ StatusReporter = sp
	var _ ProgressReporter = sp
	var _ LogReporter = sp
}

func TestURLProvider(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cfg.yaml")
	if err := os.WriteFile(file, []byte(validYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: booty.dev/v1\nhostnme: x\nmode: deprovision\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	flaky := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n < 3 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, validYAML)
	})
	down := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	missing := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) { http.NotFound(w, r) })

	tests := []struct {
		name, src string
		wantErr   string
		noConfig  bool
		rec       *recorder
		wantReqs  int
	}{
		{name: "absolute path", src: file},
		{name: "file URL", src: "file://" + file},
		{name: "http after two 503s", src: flaky.URL + "/cfg", rec: flaky, wantReqs: 3},
		{name: "http 500 gives up after bounded tries", src: down.URL + "/cfg", rec: down, wantReqs: 3, wantErr: "500 Internal Server Error: broken (gave up after 3 attempts)"},
		{name: "http 404 is not retried", src: missing.URL + "/cfg", rec: missing, wantReqs: 1, wantErr: "404 Not Found"},
		{name: "unset", src: "", noConfig: true, wantErr: "not set"},
		{name: "missing file", src: filepath.Join(dir, "nope.yaml"), wantErr: "no such file"},
		{name: "bad scheme", src: "ftp://x/cfg", wantErr: `scheme "ftp" not supported`},
		{name: "bad config names field", src: bad, wantErr: `hostnme: unknown field (did you mean "hostname"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &URLProvider{Source: tt.src, Backoff: fastBackoff, AllowHTTP: true, Log: testLogger(t)}
			cfg, err := p.Load(context.Background())
			if tt.rec != nil && len(tt.rec.requests()) != tt.wantReqs {
				t.Errorf("%d requests, want %d", len(tt.rec.requests()), tt.wantReqs)
			}
			if tt.rec != nil {
				tt.rec.mu.Lock()
				tt.rec.reqs = nil
				tt.rec.mu.Unlock()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if errors.Is(err, config.ErrNoConfig) != tt.noConfig {
					t.Errorf("config.ErrNoConfig = %v, want %v", !tt.noConfig, tt.noConfig)
				}
				return
			}
			if err != nil || cfg.Hostname != "from-drive" {
				t.Fatalf("cfg %+v err %v", cfg, err)
			}
		})
	}
}

// TestURLProviderTLS serves the config over TLS and verifies it with the CA PEM.
func TestURLProviderTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, validYAML) }))
	defer srv.Close()
	caPEM := pemOf(srv.Certificate().Raw)

	p := &URLProvider{Source: srv.URL + "/c", CACert: caPEM, Backoff: fastBackoff}
	if _, err := p.Load(context.Background()); err != nil {
		t.Fatalf("with CA: %v", err)
	}
	p = &URLProvider{Source: srv.URL + "/c", Backoff: Backoff{Attempts: 1}}
	if _, err := p.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without CA: err = %v, want a certificate error", err)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Attempts: 10, Initial: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 9: time.Second} {
		d := b.Delay(n)
		if d < want*8/10 || d > want*12/10 {
			t.Errorf("delay(%d) = %v, want %v ±20%%", n, d, want)
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDeployDirProvider(t *testing.T) {
	t.Run("config.yaml wins over vars", func(t *testing.T) {
		dir := tree(t, map[string]string{"config.yaml": validYAML, "vars": sampleVars})
		p := &DeployDirProvider{Dir: dir}
		cfg, err := p.Load(context.Background())
		if err != nil || cfg.Hostname != "from-drive" {
			t.Fatalf("cfg %+v err %v", cfg, err)
		}
		if p.Endpoints() != nil {
			t.Error("a config.yaml has no vars endpoints")
		}
		// Reporting without vars endpoints does nothing and does not fail.
		if err := p.ReportStatus(context.Background(), api.StatusReport{Step: "x", State: api.StateFailed}); err != nil {
			t.Error(err)
		}
	})
	t.Run("vars", func(t *testing.T) {
		dir := tree(t, map[string]string{"vars": sampleVars})
		cfg, err := (&DeployDirProvider{Dir: dir}).Load(context.Background())
		if err != nil || cfg.Hostname != "worker-7" {
			t.Fatalf("cfg %+v err %v", cfg, err)
		}
	})
	t.Run("empty dir", func(t *testing.T) {
		_, err := (&DeployDirProvider{Dir: t.TempDir()}).Load(context.Background())
		if !errors.Is(err, config.ErrNoConfig) {
			t.Fatalf("err = %v, want config.ErrNoConfig", err)
		}
	})
	t.Run("bad config names file and field", func(t *testing.T) {
		dir := tree(t, map[string]string{"config.yaml": "apiVersion: booty.dev/v1\nmode: deprovision\nmellanox: {numVFs: -2}\n"})
		_, err := (&DeployDirProvider{Dir: dir}).Load(context.Background())
		if err == nil || errors.Is(err, config.ErrNoConfig) || !strings.Contains(err.Error(), "config.yaml: mellanox.numVFs: want 0 to 65535") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestDeployDirReporting checks that status and logs reach BOOTy's
// endpoints as BOOTy sends them: text/plain, bearer token, one line per POST.
func TestDeployDirReporting(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 { // the first request fails once: it must be retried
			http.Error(w, "later", http.StatusBadGateway)
		}
	})
	vars := strings.ReplaceAll(sampleVars, "http://192.0.2.1", srv.URL)
	dir := tree(t, map[string]string{"vars": vars})
	log, buf := logBuffer()
	p := &DeployDirProvider{Dir: dir, Backoff: fastBackoff, AllowHTTP: true, Log: log}
	if _, err := p.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reports := []api.StatusReport{
		{Step: "select-disk", Index: 1, Total: 3, State: api.StateStarted},
		{Step: "select-disk", Index: 1, Total: 3, State: api.StateSucceeded},
		{Step: "write-image", Index: 2, Total: 3, State: api.StateFailed, Error: "checksum mismatch"},
		{Step: api.StepMachine, State: api.StateError, Error: "write-image: checksum mismatch"},
	}
	for _, r := range reports {
		if err := p.ReportStatus(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.ReportLogs(ctx, []api.LogLine{{Level: "info", Message: "hello"}, {Level: "WARN", Message: "careful"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.ReportStatus(ctx, api.StatusReport{Step: api.StepMachine, State: api.StateProvisioned}); err != nil {
		t.Fatal(err)
	}
	want := []recorded{
		{"POST", "/status/init", "Bearer caprf-secret-token", "text/plain", "provisioning started"}, // 502, retried
		{"POST", "/status/init", "Bearer caprf-secret-token", "text/plain", "provisioning started"},
		{"POST", "/log", "Bearer caprf-secret-token", "text/plain", "[INFO] step select-disk succeeded (1/3)"},
		{"POST", "/status/error", "Bearer caprf-secret-token", "text/plain", "step write-image failed: checksum mismatch"},
		// the machine error is not sent twice
		{"POST", "/log", "Bearer caprf-secret-token", "text/plain", "[INFO] hello"},
		{"POST", "/log", "Bearer caprf-secret-token", "text/plain", "[WARN] careful"},
		{"POST", "/status/success", "Bearer caprf-secret-token", "text/plain", "provisioned"},
	}
	if got := srv.requests(); !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n got %+v\nwant %+v", got, want)
	}
	if strings.Contains(buf.String(), "caprf-secret-token") {
		t.Errorf("token logged:\n%s", buf)
	}
	if !strings.Contains(buf.String(), "retrying") {
		t.Errorf("retry not logged:\n%s", buf)
	}
}

func TestServerProviderLoad(t *testing.T) {
	macs := func() ([]string, error) { return []string{"52:54:00:aa:bb:01", "52:54:00:aa:bb:02"}, nil }
	t.Run("unknown machine is config.ErrNoConfig listing MACs", func(t *testing.T) {
		srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) { http.NotFound(w, r) })
		_, err := (&ServerProvider{URL: srv.URL, AllowHTTP: true, MACs: macs, Backoff: fastBackoff}).Load(context.Background())
		if !errors.Is(err, config.ErrNoConfig) || !strings.Contains(err.Error(), "52:54:00:aa:bb:01, 52:54:00:aa:bb:02") {
			t.Fatalf("err = %v", err)
		}
		want := []string{"/v1/enroll"}
		var got []string
		for _, r := range srv.requests() {
			got = append(got, r.Path)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("paths %v, want %v", got, want)
		}
	})
	t.Run("server down is a real error naming it", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		_, err := (&ServerProvider{URL: url, AllowHTTP: true, MACs: macs, Backoff: fastBackoff}).Load(context.Background())
		if err == nil || errors.Is(err, config.ErrNoConfig) || !strings.Contains(err.Error(), "bootyd "+url) || !strings.Contains(err.Error(), "gave up after 3 attempts") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad config of a command is reported as load-config and the command's failure", func(t *testing.T) {
		srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
			fleetAnswer(t, w, r, "52:54:00:aa:bb:01", "tok-9", "apiVersion: booty.dev/v1\nmode: deprovision\nhandoff: warp\n")
		})
		log, buf := logBuffer()
		_, err := (&ServerProvider{URL: srv.URL, AllowHTTP: true, MACs: macs, Backoff: fastBackoff, Log: log}).Load(context.Background())
		if err == nil || !strings.Contains(err.Error(), `handoff: unknown handoff "warp"`) {
			t.Fatalf("err = %v", err)
		}
		reqs := srv.requests()
		if len(reqs) != 5 || reqs[4].Path != "/v1/machines/52:54:00:aa:bb:01/command" || reqs[4].Auth != "Bearer tok-9" {
			t.Fatalf("requests = %+v", reqs)
		}
		var first, last api.StatusReport
		json.Unmarshal([]byte(reqs[2].Body), &first)
		json.Unmarshal([]byte(reqs[3].Body), &last)
		if first.Step != api.StepLoadConfig || first.State != api.StateFailed || first.Generation != 7 || last.Step != api.StepMachine || last.State != api.StateError {
			t.Errorf("reports = %+v, %+v", first, last)
		}
		var res api.CommandResult
		json.Unmarshal([]byte(reqs[4].Body), &res)
		if res.Generation != 7 || !strings.Contains(res.Error, `handoff: unknown handoff "warp"`) {
			t.Errorf("result = %+v", res)
		}
		if strings.Contains(buf.String(), "tok-9") {
			t.Errorf("token logged:\n%s", buf)
		}
	})
	t.Run("no MACs", func(t *testing.T) {
		_, err := (&ServerProvider{URL: "http://127.0.0.1:1", AllowHTTP: true, MACs: func() ([]string, error) { return nil, nil }}).Load(context.Background())
		if !errors.Is(err, config.ErrNoConfig) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestServerProviderReports loads the config from bootyd, then reports
// status, progress and logs as JSON with the bearer token from the config,
// and checks the token never reaches the logs, even when reports fail.
func TestServerProviderReports(t *testing.T) {
	const token = "very-secret-machine-token"
	var srv *recorder
	srv = newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case fleetAnswer(t, w, r, "52:54:00:aa:bb:01", token, validYAML):
		case strings.HasSuffix(r.URL.Path, "/logs") && n == 4: // first logs POST: refused
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	log, buf := logBuffer()
	p := &ServerProvider{URL: srv.URL, AllowHTTP: true, Backoff: fastBackoff, Log: log,
		MACs: func() ([]string, error) { return []string{"52:54:00:aa:bb:01"}, nil }}
	ctx := context.Background()
	if _, _, err := LoadChain(ctx, log, p); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	st := api.StatusReport{Step: "write-image", Index: 2, Total: 5, State: api.StateStarted, Time: now}
	pr := api.ProgressReport{Step: "write-image", BytesDone: 10, BytesTotal: 100, Time: now}
	lines := []api.LogLine{{Time: now, Level: "INFO", Message: "hi"}}
	if err := p.ReportStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := p.ReportLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	if err := p.ReportProgress(ctx, pr); err != nil {
		t.Fatal(err)
	}
	base := "/v1/machines/52:54:00:aa:bb:01/"
	// Every report carries the generation of the command being run.
	stGen, prGen := st, pr
	stGen.Generation, prGen.Generation = 7, 7
	want := []recorded{
		{"POST", "/v1/enroll", "", "application/json", jsonOf(t, api.EnrollRequest{MACs: []string{"52:54:00:aa:bb:01"}})},
		{"GET", base + "command", "Bearer " + token, "", ""},
		{"POST", base + "status", "Bearer " + token, "application/json", jsonOf(t, stGen)},
		{"POST", base + "logs", "Bearer " + token, "application/json", jsonOf(t, api.LogBatch{Lines: lines, Generation: 7})},
		{"POST", base + "logs", "Bearer " + token, "application/json", jsonOf(t, api.LogBatch{Lines: lines, Generation: 7})},
		{"POST", base + "progress", "Bearer " + token, "application/json", jsonOf(t, prGen)},
	}
	if got := srv.requests(); !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n got %+v\nwant %+v", got, want)
	}

	// A refused report: an error, no token in it or in the logs.
	srv.handle = func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusUnauthorized) }
	err := p.ReportStatus(ctx, st)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v, want 401", err)
	}
	if strings.Contains(err.Error(), token) {
		t.Errorf("error holds the token: %v", err)
	}
	log.Info("loaded", "config", cfgOf(t, srv.URL, token)) // a config logged by mistake is redacted
	if strings.Contains(buf.String(), token) {
		t.Errorf("token logged:\n%s", buf)
	}
	if !strings.Contains(buf.String(), config.RedactedText) {
		t.Errorf("logged config not redacted:\n%s", buf)
	}
}

func cfgOf(t *testing.T, url, token string) *config.MachineConfig {
	cfg, err := config.Parse([]byte(validYAML + "server:\n  url: " + url + "\n  token: " + token + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestNewServerReporter(t *testing.T) {
	srv := newRecorder(t, nil)
	r, err := NewServerReporter(config.ServerSpec{URL: srv.URL + "/", Token: "tok"}, "52:54:00:AA:BB:01", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ReportProgress(context.Background(), api.ProgressReport{Step: "s"}); err != nil {
		t.Fatal(err)
	}
	got := srv.requests()
	if len(got) != 1 || got[0].Path != "/v1/machines/52:54:00:aa:bb:01/progress" || got[0].Auth != "Bearer tok" {
		t.Errorf("requests %+v", got)
	}
	for _, bad := range []struct {
		s   config.ServerSpec
		mac string
	}{
		{config.ServerSpec{URL: "ftp://x"}, "52:54:00:aa:bb:01"},
		{config.ServerSpec{URL: srv.URL}, "not-a-mac"},
		{config.ServerSpec{URL: srv.URL, CACert: "junk"}, "52:54:00:aa:bb:01"},
	} {
		if _, err := NewServerReporter(bad.s, bad.mac, true); err == nil {
			t.Errorf("NewServerReporter(%+v, %q) accepted", bad.s, bad.mac)
		}
	}
	// Reporting before Load is an error, not a request to nowhere.
	if err := (&ServerProvider{URL: srv.URL}).ReportStatus(context.Background(), api.StatusReport{}); err == nil {
		t.Error("report before Load succeeded")
	}
}

// TestServerReporterConcurrent reports from several goroutines at once, as
// the log shipper and the step runner do; run with -race.
func TestServerReporterConcurrent(t *testing.T) {
	srv := newRecorder(t, nil)
	p := &ServerProvider{URL: srv.URL, AllowHTTP: true, Backoff: fastBackoff,
		MACs: func() ([]string, error) { return []string{"52:54:00:aa:bb:01"}, nil }}
	srv.handle = func(w http.ResponseWriter, r *http.Request, n int) {
		fleetAnswer(t, w, r, "52:54:00:aa:bb:01", "tok", validYAML)
	}
	if _, err := p.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := p.ReportLogs(context.Background(), []api.LogLine{{Message: "m"}}); err != nil {
				t.Error(err)
			}
			if err := p.ReportStatus(context.Background(), api.StatusReport{Step: "s", Index: i}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(srv.requests()); n != 2+16 {
		t.Errorf("%d requests, want 18", n)
	}
}

// fleetAnswer plays bootyd's side of the fleet protocol: it enrolls the
// agent as mac with token and answers its command poll with a provision
// (generation 7) of cfgYAML. It returns false for any other request.
func fleetAnswer(t *testing.T, w http.ResponseWriter, r *http.Request, mac, token, cfgYAML string) bool {
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/enroll":
		json.NewEncoder(w).Encode(api.EnrollResponse{MachineID: "m-1", Name: "m1", MAC: mac, Token: token, HeartbeatSeconds: 3600, PollSeconds: 20})
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/command"):
		j, err := yaml.YAMLToJSON([]byte(cfgYAML))
		if err != nil {
			t.Error(err)
		}
		json.NewEncoder(w).Encode(api.AgentCommand{Kind: api.CommandProvision, Generation: 7, Config: j})
	default:
		return false
	}
	return true
}
