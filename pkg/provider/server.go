package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/network"
)

// ServerProvider is the agent's side of bootyd's fleet protocol
// (pkg/api/fleet.go): Load enrolls the machine (its MACs, boot MAC first,
// and its hardware report) and gets this boot's machine token, then
// heartbeats in the background and long-polls for a command. It runs
// inspections itself, returns a *CommandHandoff for reboot and poweroff,
// and returns the config of a provision or deprovision command; the run's
// end goes back with CompleteCommand. Reports (status, progress, logs)
// carry the command's generation and are retried within
// FleetReportBackoff. A machine bootyd does not know and will not
// discover gives config.ErrNoConfig.
//
// For a config from another provider that names a server,
// NewServerReporter reports with the config's static server.token.
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
	// MACs lists the machine's MAC addresses; nil is network.PhysicalMACs(SysRoot).
	MACs func() ([]string, error)
	// SysRoot is the sysfs root for the default MACs; default /sys.
	SysRoot string
	Log     *slog.Logger
	// BootMAC is the MAC the machine booted from (BOOTIF=), enrolled first.
	BootMAC string
	// Hardware collects the hardware report sent with the enrollment and
	// after an inspect command; nil sends none (and fails inspections).
	Hardware func(ctx context.Context) (*api.HardwareDetails, error)
	// Enrolled, when set, is called (from Load) after each successful
	// enrollment, with the provider ready to report: the agent passes it
	// to what reports in the background (a lost lease, a new hardware
	// report).
	Enrolled func(p *ServerProvider)

	mu    sync.Mutex
	rep   reportTarget // set by Load or NewServerReporter
	ready bool
	fleet *fleetState // set by an enrollment
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
func NewServerReporter(s config.ServerSpec, mac string, allowHTTP bool) (*ServerProvider, error) {
	if msg := config.CheckURL(s.URL, "http", "https"); msg != "" {
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

// ClientFor returns a client that shares p's connections to bootyd, for a
// download of bootyd's own files (the image) to reuse them instead of
// opening its own (20-35 ms of an emulated agent's boot each): when
// rawURL has the scheme, host and port of p.URL and caPEM is the CA p
// trusts, so the client verifies the server exactly as a new one would.
// It has no overall timeout (a download has its own idle bounds). It
// returns nil otherwise, and the caller makes its own client.
func (p *ServerProvider) ClientFor(rawURL, caPEM string) *http.Client {
	if caPEM != p.CACert {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil
	}
	base, err := url.Parse(p.URL)
	if err != nil || !httpfetch.SameOrigin(u, base) {
		return nil
	}
	c, err := p.client()
	if err != nil {
		return nil
	}
	cc := *c
	cc.Timeout = 0
	return &cc
}

// Load fetches the config by MAC; see ServerProvider.
func (p *ServerProvider) Load(ctx context.Context) (*config.MachineConfig, error) {
	if msg := config.CheckURL(p.URL, "http", "https"); msg != "" {
		return nil, fmt.Errorf("%s=%q: %s", CmdlineServer, redactURL(p.URL), msg)
	}
	if err := httpfetch.CheckURL(p.URL, p.AllowHTTP); err != nil {
		return nil, fmt.Errorf("%s: %w", CmdlineServer, err)
	}
	macsFn := p.MACs
	if macsFn == nil {
		macsFn = func() ([]string, error) { return network.PhysicalMACs(p.SysRoot) }
	}
	macs, err := macsFn()
	if err != nil {
		return nil, fmt.Errorf("list MAC addresses: %w", err)
	}
	if len(macs) == 0 {
		return nil, fmt.Errorf("%w: no physical network link to ask bootyd %s about", config.ErrNoConfig, redactURL(p.URL))
	}
	client, err := p.client()
	if err != nil {
		return nil, err
	}
	if err := p.enroll(ctx, client, macs); err != nil {
		return nil, err
	}
	return p.waitCommand(ctx, client, macs)
}

// ReportStatus POSTs r to /v1/machines/{mac}/status.
func (p *ServerProvider) ReportStatus(ctx context.Context, r api.StatusReport) error {
	if r.Generation == 0 {
		r.Generation = p.generation()
	}
	return p.report(ctx, "status", r)
}

// ReportProgress POSTs pr to /v1/machines/{mac}/progress.
func (p *ServerProvider) ReportProgress(ctx context.Context, pr api.ProgressReport) error {
	if pr.Generation == 0 {
		pr.Generation = p.generation()
	}
	return p.report(ctx, "progress", pr)
}

// ReportLogs POSTs the lines as one api.LogBatch to /v1/machines/{mac}/logs.
func (p *ServerProvider) ReportLogs(ctx context.Context, lines []api.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	return p.report(ctx, "logs", api.LogBatch{Lines: lines, Generation: p.generation()})
}

// ReportHardware POSTs hw to /v1/machines/{mac}/hardware: a new hardware
// report of the enrolled machine outside an inspection (the LLDP
// neighbours heard after the enrollment), which replaces bootyd's.
func (p *ServerProvider) ReportHardware(ctx context.Context, hw *api.HardwareDetails) error {
	if hw == nil {
		return fmt.Errorf("report hardware to bootyd %s: no report", redactURL(p.URL))
	}
	return p.report(ctx, "hardware", hw)
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
		if p.generation() != 0 {
			b = FleetReportBackoff
		}
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
