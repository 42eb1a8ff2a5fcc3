package provider

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/httpfetch"
)

// URLProvider loads the config named on the kernel command line by
// booty.config=: an http(s):// URL, a file:/// URL or an absolute path.
//
// Source empty means the provider does not apply (config.ErrNoConfig). A named
// source that cannot be read, answers non-2xx, or does not parse is an error:
// the operator asked for it explicitly.
type URLProvider struct {
	// Source is the booty.config= value.
	Source string
	// CACert is a PEM bundle that verifies an https Source; empty uses the system pool.
	CACert string
	// Client sends the request; nil builds one with DefaultRequestTimeout and CACert.
	Client *http.Client
	// Backoff bounds retries of transport errors, stalls and 408/429/5xx answers.
	Backoff Backoff
	// AllowHTTP is the operator's opt-in to a plain http:// Source
	// (booty.insecure-http=1); without it such a Source fails naming it.
	AllowHTTP bool
	// IdleTimeout bounds the wait for headers and each read of the answer
	// (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// ReadFile reads file sources; nil is os.ReadFile.
	ReadFile func(name string) ([]byte, error)
	// Log receives retries; nil discards.
	Log *slog.Logger
}

// Name names the provider and its source in logs and errors.
func (p *URLProvider) Name() string { return "cmdline " + CmdlineConfig + "=" + redactURL(p.Source) }

// Load fetches Source (with bounded retries for http), then parses and validates it.
func (p *URLProvider) Load(ctx context.Context) (*config.MachineConfig, error) {
	data, err := p.fetch(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config from %s: %w", redactURL(p.Source), err)
	}
	return cfg, nil
}

func (p *URLProvider) fetch(ctx context.Context) ([]byte, error) {
	src := strings.TrimSpace(p.Source)
	if src == "" {
		return nil, fmt.Errorf("%w: %s not set", config.ErrNoConfig, CmdlineConfig)
	}
	readFile := p.ReadFile
	if readFile == nil {
		readFile = os.ReadFile
	}
	if strings.HasPrefix(src, "/") {
		return readLimited(readFile, src)
	}
	u, err := url.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("parse %s=%q: %w", CmdlineConfig, src, err)
	}
	switch u.Scheme {
	case "file":
		if u.Path == "" {
			return nil, fmt.Errorf("%s=%q: want file:///absolute/path", CmdlineConfig, src)
		}
		return readLimited(readFile, u.Path)
	case "http", "https":
	default:
		return nil, fmt.Errorf("%s=%q: scheme %q not supported, want http, https, file or an absolute path", CmdlineConfig, redactURL(src), u.Scheme)
	}

	if err := httpfetch.CheckURL(src, p.AllowHTTP); err != nil {
		return nil, fmt.Errorf("%s: %w", CmdlineConfig, err)
	}
	client, err := clientOr(p.Client, p.CACert, p.AllowHTTP)
	if err != nil {
		return nil, fmt.Errorf("config from %s: %w", redactURL(src), err)
	}
	resp, err := fetch(ctx, client, p.Backoff, p.Log, "fetch config", httpfetch.Request{URL: src, Idle: p.IdleTimeout}, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch config: %w", err)
	}
	return resp.Body, nil
}

// readLimited reads a config file, refusing one over config.MaxConfigSize.
func readLimited(readFile func(string) ([]byte, error), path string) ([]byte, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	if len(data) > config.MaxConfigSize {
		return nil, fmt.Errorf("read config %s: larger than %d bytes", path, config.MaxConfigSize)
	}
	return data, nil
}
