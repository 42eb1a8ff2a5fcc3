package config

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/httpfetch"
)

// ServerProvider asks bootyd for this machine's config by MAC address, and
// reports status, progress and logs back to it.
//
// Load tries GET {URL}/v1/machines/{mac}/config for each MAC in turn: 200 is
// the config (parsed and validated), 404 means "not this MAC, try the next".
// Transport errors and 408/429/5xx are retried within Backoff; when they
// persist, or any other status answers, Load fails naming the server. When
// every MAC got 404, Load returns ErrNoConfig listing the MACs tried.
//
// After Load, reports go to cfg.server.url when set (else URL) for the MAC
// that answered, with the config's server.token as bearer token.
type ServerProvider struct {
	// URL is bootyd's base URL, from booty.server=.
	URL string
	// CACert is a PEM bundle that verifies an https URL; empty uses the system pool.
	CACert string
	// Client sends requests; nil builds one with DefaultRequestTimeout and CACert.
	Client *http.Client
	// Backoff bounds retries of one request; zero is DefaultBackoff.
	Backoff Backoff
	// AllowHTTP is the operator's opt-in to plain http:// for URL and the
	// config's server.url (booty.insecure-http=1); without it Load fails
	// naming the URL.
	AllowHTTP bool
	// IdleTimeout bounds the wait for headers and each read of an answer
	// (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MACs lists the machine's MAC addresses; nil is PhysicalMACs(SysRoot).
	MACs func() ([]string, error)
	// SysRoot is the sysfs root for the default MACs; default /sys.
	SysRoot string
	Log     *slog.Logger

	mu    sync.Mutex
	rep   reportTarget // set by Load or NewServerReporter
	ready bool
}

// reportTarget is where and as whom reports go.
type reportTarget struct {
	base, mac, token string
	client           *http.Client // nil: the provider's client
}

// Name names the provider and server in logs and errors.
func (p *ServerProvider) Name() string { return "bootyd " + redactURL(p.URL) }

// NewServerReporter returns a reporter for the bootyd named by s, reporting
// as mac, for a config that came from another provider. It fails when s.URL
// is not an https URL (or http with allowHTTP, the operator's opt-in), mac
// is not a MAC address, or s.CACert holds no certificate.
func NewServerReporter(s ServerSpec, mac string, allowHTTP bool) (*ServerProvider, error) {
	if msg := checkURL(s.URL, "http", "https"); msg != "" {
		return nil, fmt.Errorf("server reporter: server.url: %s", msg)
	}
	if err := httpfetch.CheckURL(s.URL, allowHTTP); err != nil {
		return nil, fmt.Errorf("server reporter: server.url: %w", err)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return nil, fmt.Errorf("server reporter: mac %q: %w", mac, err)
	}
	client, err := newHTTPClient(s.CACert, DefaultRequestTimeout, allowHTTP)
	if err != nil {
		return nil, fmt.Errorf("server reporter: %w", err)
	}
	p := &ServerProvider{URL: s.URL, CACert: s.CACert, Client: client, AllowHTTP: allowHTTP}
	p.rep = reportTarget{base: s.URL, mac: hw.String(), token: s.Token}
	p.ready = true
	return p, nil
}

// MAC returns the MAC address that reports are made for, or "" before Load.
func (p *ServerProvider) MAC() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rep.mac
}

func (p *ServerProvider) client() (*http.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Client != nil {
		return httpfetch.Secure(p.Client, p.AllowHTTP), nil
	}
	c, err := newHTTPClient(p.CACert, DefaultRequestTimeout, p.AllowHTTP)
	if err != nil {
		return nil, fmt.Errorf("bootyd %s: %w", redactURL(p.URL), err)
	}
	p.Client = c
	return c, nil
}

// Load fetches the config by MAC; see ServerProvider.
func (p *ServerProvider) Load(ctx context.Context) (*MachineConfig, error) {
	if msg := checkURL(p.URL, "http", "https"); msg != "" {
		return nil, fmt.Errorf("%s=%q: %s", CmdlineServer, redactURL(p.URL), msg)
	}
	if err := httpfetch.CheckURL(p.URL, p.AllowHTTP); err != nil {
		return nil, fmt.Errorf("%s: %w", CmdlineServer, err)
	}
	macsFn := p.MACs
	if macsFn == nil {
		macsFn = func() ([]string, error) { return PhysicalMACs(p.SysRoot) }
	}
	macs, err := macsFn()
	if err != nil {
		return nil, fmt.Errorf("list MAC addresses: %w", err)
	}
	if len(macs) == 0 {
		return nil, fmt.Errorf("%w: no physical network link to ask bootyd %s about", ErrNoConfig, redactURL(p.URL))
	}
	client, err := p.client()
	if err != nil {
		return nil, err
	}
	log := orDiscard(p.Log)
	for _, mac := range macs {
		u := machineURL(p.URL, mac, "config")
		resp, err := fetch(ctx, client, p.Backoff, log, "fetch config from bootyd", httpfetch.Request{URL: u, Idle: p.IdleTimeout},
			func(code int) bool { return code == http.StatusNotFound })
		if err != nil {
			return nil, fmt.Errorf("fetch config from bootyd %s for %s: %w", redactURL(p.URL), mac, err)
		}
		data := resp.Body
		if resp.Code == http.StatusNotFound {
			log.Debug("bootyd has no config for MAC", "mac", mac)
			continue
		}
		cfg, err := Parse(data)
		if err != nil {
			err = fmt.Errorf("config from bootyd %s for %s: %w", redactURL(p.URL), mac, err)
			p.reportBadConfig(ctx, data, mac, err)
			return nil, err
		}
		t := reportTarget{base: p.URL, mac: mac, token: cfg.Server.Token}
		if cfg.Server.URL != "" {
			t.base = cfg.Server.URL
			if err := httpfetch.CheckURL(t.base, p.AllowHTTP); err != nil {
				err = fmt.Errorf("config from bootyd %s for %s: server.url: %w", redactURL(p.URL), mac, err)
				p.reportBadConfig(ctx, data, mac, err)
				return nil, err
			}
		}
		if cfg.Server.CACert != "" {
			// The config names its own trust for its server.
			if t.client, err = newHTTPClient(cfg.Server.CACert, DefaultRequestTimeout, p.AllowHTTP); err != nil {
				return nil, fmt.Errorf("config from bootyd %s for %s: server.caCert: %w", redactURL(p.URL), mac, err)
			}
		}
		p.mu.Lock()
		p.rep = t
		p.ready = true
		p.mu.Unlock()
		log.Info("bootyd answered", "server", redactURL(p.URL), "mac", mac)
		return cfg, nil
	}
	return nil, fmt.Errorf("%w: bootyd %s has no config for %s", ErrNoConfig, redactURL(p.URL), strings.Join(macs, ", "))
}

// ReportStatus POSTs r to /v1/machines/{mac}/status.
func (p *ServerProvider) ReportStatus(ctx context.Context, r api.StatusReport) error {
	return p.report(ctx, "status", r)
}

// reportBadConfig tells bootyd that the config it served for mac is bad, so
// the operator sees the problem there and not only on the console. The
// token is read leniently from the bad config; without one nothing is sent.
func (p *ServerProvider) reportBadConfig(ctx context.Context, data []byte, mac string, cause error) {
	var lenient struct {
		Server struct {
			URL   string `json:"url"`
			Token string `json:"token"`
		} `json:"server"`
	}
	if yaml.Unmarshal(data, &lenient) != nil || lenient.Server.Token == "" {
		return
	}
	p.mu.Lock()
	p.rep = reportTarget{base: p.URL, mac: mac, token: lenient.Server.Token}
	p.ready = true
	p.mu.Unlock()
	now := time.Now()
	for _, r := range []api.StatusReport{
		{Step: api.StepLoadConfig, State: api.StateFailed, Error: cause.Error(), Time: now},
		{Step: api.StepMachine, State: api.StateError, Error: "step " + api.StepLoadConfig + ": " + cause.Error(), Time: now},
	} {
		if err := p.ReportStatus(ctx, r); err != nil {
			orDiscard(p.Log).Warn("cannot report the bad config to bootyd", "error", err)
			return
		}
	}
}

// ReportProgress POSTs pr to /v1/machines/{mac}/progress.
func (p *ServerProvider) ReportProgress(ctx context.Context, pr api.ProgressReport) error {
	return p.report(ctx, "progress", pr)
}

// ReportLogs POSTs the lines as one api.LogBatch to /v1/machines/{mac}/logs.
func (p *ServerProvider) ReportLogs(ctx context.Context, lines []api.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	return p.report(ctx, "logs", api.LogBatch{Lines: lines})
}

// report POSTs v as JSON with the bearer token, retrying transport errors and
// 408/429/5xx within Backoff. Before Load found a MAC it fails.
func (p *ServerProvider) report(ctx context.Context, what string, v any) error {
	p.mu.Lock()
	t, ready := p.rep, p.ready
	p.mu.Unlock()
	if !ready {
		return fmt.Errorf("report %s to bootyd %s: no machine MAC yet (Load has not succeeded)", what, redactURL(p.URL))
	}
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("report %s: encode: %w", what, err)
	}
	client := t.client
	if client == nil {
		if client, err = p.client(); err != nil {
			return err
		}
	}
	u := machineURL(t.base, t.mac, what)
	b := p.Backoff
	if b == (Backoff{}) {
		b = DefaultReportBackoff
	}
	_, err = fetch(ctx, client, b, p.Log, "report "+what, httpfetch.Request{Method: http.MethodPost, URL: u,
		Header: bearer(t.token, "application/json"), Body: body, Idle: p.IdleTimeout}, nil)
	if err != nil {
		return fmt.Errorf("report %s: %w", what, err)
	}
	return nil
}

// machineURL is {base}/v1/machines/{mac}/{what}.
func machineURL(base, mac, what string) string {
	return strings.TrimRight(base, "/") + "/" + api.Version + "/machines/" + url.PathEscape(strings.ToLower(mac)) + "/" + what
}

// PhysicalMACs lists the lower-case MAC addresses of the physical Ethernet
// links under sysRoot/class/net (default /sys), sorted by link name: a link
// counts when it has a device entry (virtual links such as bridges, bonds,
// VLANs and veth have none), is not lo, and has a 6-byte non-zero address.
func PhysicalMACs(sysRoot string) ([]string, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	dir := filepath.Join(sysRoot, "class", "net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list network links in %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var macs []string
	seen := map[string]bool{}
	for _, name := range names {
		if name == "lo" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, name, "device")); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name, "address"))
		if err != nil {
			continue
		}
		hw, err := net.ParseMAC(strings.TrimSpace(string(b)))
		if err != nil || len(hw) != 6 || isZero(hw) {
			continue
		}
		m := hw.String()
		if !seen[m] { // bond slaves may share an address
			seen[m] = true
			macs = append(macs, m)
		}
	}
	return macs, nil
}

func isZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
