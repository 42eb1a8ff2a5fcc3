package provider

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/httpfetch"
)

// DefaultDeployDir is where the initramfs carries a baked-in config.
const DefaultDeployDir = "/deploy"

// DefaultReportBackoff bounds the retries of one report: BOOTy's 3 tries,
// 1s then 2s apart.
var DefaultReportBackoff = Backoff{Attempts: 3, Initial: time.Second, Max: 4 * time.Second}

// DeployDirProvider reads the config baked into the initramfs: Dir/config.yaml
// (a MachineConfig; config.json also works), else Dir/vars in telekom BOOTy's
// format (see ParseVars). Neither file gives config.ErrNoConfig.
//
// After loading a vars file, the provider reports as BOOTy does (its CAPRF
// client): text/plain POSTs with "Authorization: Bearer TOKEN" to INIT_URL
// when the first step starts, ERROR_URL when a step or the run fails,
// SUCCESS_URL when the run succeeds, and one POST per log line, "[LEVEL]
// message", to LOG_URL. An endpoint that is not set is skipped. With a
// config.yaml, or before Load, reporting does nothing: use NewServerReporter
// for cfg.server then.
type DeployDirProvider struct {
	Dir string // default /deploy
	// Client sends reports; nil builds one with DefaultRequestTimeout.
	Client *http.Client
	// Backoff bounds the retries of one report; zero is DefaultReportBackoff.
	Backoff Backoff
	// AllowHTTP is the operator's opt-in to plain http:// report URLs
	// (booty.insecure-http=1); without it such a report fails naming the URL.
	AllowHTTP bool
	Log       *slog.Logger

	mu        sync.Mutex
	client    *http.Client // Client made safe, or built
	endpoints *config.VarsEndpoints
	errorSent bool // a step failure went to ERROR_URL; the run's error is not sent again
}

// Name names the provider in logs and errors.
func (p *DeployDirProvider) Name() string { return "deploy dir " + p.dir() }

func (p *DeployDirProvider) dir() string {
	if p.Dir == "" {
		return DefaultDeployDir
	}
	return p.Dir
}

// Endpoints returns the reporting endpoints of the loaded vars file, or nil.
func (p *DeployDirProvider) Endpoints() *config.VarsEndpoints {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endpoints
}

// Load reads config.yaml, config.json or vars from Dir, in that order; the
// first that exists is parsed and validated, and its errors are returned
// naming the file.
func (p *DeployDirProvider) Load(ctx context.Context) (*config.MachineConfig, error) {
	for _, name := range []string{"config.yaml", "config.json"} {
		path := filepath.Join(p.dir(), name)
		data, err := readLimited(os.ReadFile, path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		cfg, err := config.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return cfg, nil
	}
	path := filepath.Join(p.dir(), "vars")
	data, err := readLimited(os.ReadFile, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no config.yaml, config.json or vars in %s", config.ErrNoConfig, p.dir())
	}
	if err != nil {
		return nil, err
	}
	cfg, ep, err := config.ParseVars(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(ep.Ignored) > 0 {
		orDiscard(p.Log).Info("vars keys not used by booty", "file", path, "keys", strings.Join(ep.Ignored, ","))
	}
	p.mu.Lock()
	p.endpoints, p.errorSent = ep, false
	p.mu.Unlock()
	return cfg, nil
}

// ReportStatus maps a step report onto BOOTy's endpoints: the first step
// starting goes to INIT_URL ("provisioning started"), a failed step to
// ERROR_URL ("step NAME failed: ERROR"), the machine's provisioned or
// deprovisioned outcome to SUCCESS_URL, the machine's error to ERROR_URL
// unless a step failure was already sent, and every other step event to
// LOG_URL. It returns the error of the POST after bounded retries.
func (p *DeployDirProvider) ReportStatus(ctx context.Context, r api.StatusReport) error {
	ep := p.Endpoints()
	if ep == nil {
		return nil
	}
	var url, msg string
	switch {
	case r.Step == api.StepMachine && (r.State == api.StateProvisioned || r.State == api.StateDeprovisioned):
		url, msg = ep.SuccessURL, r.State
	case r.Step == api.StepMachine && (r.State == api.StateError || r.State == api.StateFailed):
		p.mu.Lock()
		sent := p.errorSent
		p.errorSent = true
		p.mu.Unlock()
		if sent {
			return nil
		}
		url, msg = ep.ErrorURL, r.Error
	case r.State == api.StateFailed:
		p.mu.Lock()
		p.errorSent = true
		p.mu.Unlock()
		url, msg = ep.ErrorURL, fmt.Sprintf("step %s failed: %s", r.Step, r.Error)
	case r.State == api.StateStarted && r.Index == 1:
		url, msg = ep.InitURL, "provisioning started"
	default:
		url, msg = ep.LogURL, fmt.Sprintf("[INFO] step %s %s (%d/%d)", r.Step, r.State, r.Index, r.Total)
	}
	if url == "" {
		return nil
	}
	return p.post(ctx, url, msg, ep.Token)
}

// ReportLogs sends each line to LOG_URL as "[LEVEL] message", one POST per
// line as BOOTy does, and stops at the first line that fails after retries.
func (p *DeployDirProvider) ReportLogs(ctx context.Context, lines []api.LogLine) error {
	ep := p.Endpoints()
	if ep == nil || ep.LogURL == "" {
		return nil
	}
	for i, l := range lines {
		if err := p.post(ctx, ep.LogURL, "["+strings.ToUpper(l.Level)+"] "+l.Message, ep.Token); err != nil {
			return fmt.Errorf("ship log line %d of %d: %w", i+1, len(lines), err)
		}
	}
	return nil
}

func (p *DeployDirProvider) post(ctx context.Context, url, body, token string) error {
	if err := httpfetch.CheckURL(url, p.AllowHTTP); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	p.mu.Lock()
	if p.client == nil {
		c, err := clientOr(p.Client, "", p.AllowHTTP)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		p.client = c
	}
	client := p.client
	p.mu.Unlock()
	b := p.Backoff
	if b == (Backoff{}) {
		b = DefaultReportBackoff
	}
	_, err := fetch(ctx, client, b, p.Log, "report", httpfetch.Request{Method: http.MethodPost, URL: url,
		Header: bearer(token, "text/plain"), Body: []byte(body)}, nil)
	return err
}
