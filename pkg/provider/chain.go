package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
)

// bootIF is the MAC of BOOTIF=01-aa-bb-cc-dd-ee-ff on the command line, "" without one.
func bootIF(cl Cmdline) string {
	v, ok := cl.Get("BOOTIF")
	if !ok {
		return ""
	}
	v = strings.TrimPrefix(v, "01-")
	hw, err := net.ParseMAC(strings.ReplaceAll(v, "-", ":"))
	if err != nil || len(hw) != 6 {
		return ""
	}
	return hw.String()
}

// LoadChain asks each provider in order for the config. A provider that
// returns config.ErrNoConfig is skipped; the first config wins and is returned with
// its provider (which may implement StatusReporter, ProgressReporter,
// LogReporter). Any other error stops the chain and is returned naming the
// provider: a config that exists but is bad must not be silently replaced by
// a later one. When every provider has nothing, the error wraps config.ErrNoConfig
// and names them all. Only provider names are logged, never the config.
func LoadChain(ctx context.Context, log *slog.Logger, providers ...config.Provider) (*config.MachineConfig, config.Provider, error) {
	log = orDiscard(log)
	var tried []string
	for _, p := range providers {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("load config: %w", err)
		}
		log.Debug("asking config provider", "provider", p.Name())
		cfg, err := p.Load(ctx)
		switch {
		case err == nil && cfg == nil:
			return nil, nil, fmt.Errorf("config provider %s: returned no config and no error", p.Name())
		case err == nil:
			log.Info("config loaded", "provider", p.Name(), "mode", cfg.Mode, "hostname", cfg.Hostname)
			return cfg, p, nil
		case errors.Is(err, config.ErrNoConfig):
			log.Info("config provider has nothing", "provider", p.Name(), "reason", err)
			tried = append(tried, p.Name())
		default:
			return nil, nil, fmt.Errorf("config provider %s: %w", p.Name(), err)
		}
	}
	if len(tried) == 0 {
		return nil, nil, fmt.Errorf("%w: no config providers", config.ErrNoConfig)
	}
	return nil, nil, fmt.Errorf("%w: tried %s", config.ErrNoConfig, strings.Join(tried, ", "))
}

// ChainOption adjusts the providers that ProvidersFromCmdline builds.
type ChainOption func(*chainOptions)

type chainOptions struct {
	sysRoot, devRoot, deployDir, mountDir string
	caCert                                string
	client                                *http.Client
	backoff                               Backoff
	log                                   *slog.Logger
	mount                                 MountFunc
	unmount                               UnmountFunc
	macs                                  func() ([]string, error)
	allowHTTP                             bool
	hardware                              func(context.Context) (*api.HardwareDetails, error)
	drives                                func() ([]Drive, error)
	enrolled                              func(*ServerProvider)
}

// WithEnrolled sets the bootyd provider's Enrolled hook.
func WithEnrolled(f func(*ServerProvider)) ChainOption {
	return func(o *chainOptions) { o.enrolled = f }
}

// WithConfigDrives sets how the config drive provider lists the labelled
// drives (ConfigDriveProvider.Drives); default: a scan of its own.
func WithConfigDrives(f func() ([]Drive, error)) ChainOption {
	return func(o *chainOptions) { o.drives = f }
}

// WithHardware sets the hardware collector the bootyd provider enrolls
// with and inspects through.
func WithHardware(f func(context.Context) (*api.HardwareDetails, error)) ChainOption {
	return func(o *chainOptions) { o.hardware = f }
}

// WithSysRoot sets the sysfs root (default /sys) for the config drive and MAC discovery.
func WithSysRoot(dir string) ChainOption { return func(o *chainOptions) { o.sysRoot = dir } }

// WithDevRoot sets the device root (default /dev) for the config drive.
func WithDevRoot(dir string) ChainOption { return func(o *chainOptions) { o.devRoot = dir } }

// WithDeployDir sets the /deploy directory of the initramfs.
func WithDeployDir(dir string) ChainOption { return func(o *chainOptions) { o.deployDir = dir } }

// WithMountDir sets where the config drive is mounted (default /run/booty/configdrive).
func WithMountDir(dir string) ChainOption { return func(o *chainOptions) { o.mountDir = dir } }

// WithMount replaces the config drive's mount and unmount calls.
func WithMount(m MountFunc, u UnmountFunc) ChainOption {
	return func(o *chainOptions) { o.mount, o.unmount = m, u }
}

// WithCACert sets a PEM bundle that verifies https config URLs and bootyd.
func WithCACert(pem string) ChainOption { return func(o *chainOptions) { o.caCert = pem } }

// WithHTTPClient sets the client used by the URL and bootyd providers.
func WithHTTPClient(c *http.Client) ChainOption { return func(o *chainOptions) { o.client = c } }

// WithBackoff sets the retry bounds of the URL and bootyd providers.
func WithBackoff(b Backoff) ChainOption { return func(o *chainOptions) { o.backoff = b } }

// WithLogger sets the logger handed to every provider.
func WithLogger(l *slog.Logger) ChainOption { return func(o *chainOptions) { o.log = l } }

// WithInsecureHTTP passes the operator's opt-in to plain http (kernel
// parameter booty.insecure-http=1) to providers built without a command
// line (LocalProviders); ProvidersFromCmdline reads it from the command line.
func WithInsecureHTTP(allow bool) ChainOption { return func(o *chainOptions) { o.allowHTTP = allow } }

// WithMACs replaces the MAC discovery of the bootyd provider.
func WithMACs(f func() ([]string, error)) ChainOption { return func(o *chainOptions) { o.macs = f } }

// ProvidersFromCmdline builds the provider order from the kernel command
// line: booty.config= (when set), the config drive (labels BOOTY, config-2),
// /deploy in the initramfs, and bootyd by MAC (when booty.server= is set).
// Plain http:// URLs work only with booty.insecure-http=1 on the line.
func ProvidersFromCmdline(cl Cmdline, opts ...ChainOption) []config.Provider {
	var o chainOptions
	for _, opt := range opts {
		opt(&o)
	}
	allowHTTP := cl.Flag(CmdlineInsecureHTTP)
	var ps []config.Provider
	if src, ok := cl.Get(CmdlineConfig); ok && src != "" {
		ps = append(ps, &URLProvider{Source: src, CACert: o.caCert, Client: o.client, Backoff: o.backoff, AllowHTTP: allowHTTP, Log: o.log})
	}
	o.allowHTTP = o.allowHTTP || allowHTTP
	ps = append(ps, localProviders(o)...)
	if srv, ok := cl.Get(CmdlineServer); ok && srv != "" {
		ps = append(ps, &ServerProvider{URL: srv, CACert: o.caCert, Client: o.client, Backoff: o.backoff, AllowHTTP: allowHTTP,
			SysRoot: o.sysRoot, MACs: o.macs, Log: o.log, BootMAC: bootIF(cl), Hardware: o.hardware, Enrolled: o.enrolled})
	}
	return ps
}

// LocalProviders builds the providers that need no network, in the chain's
// order: the config drive (labels BOOTY, config-2), then /deploy in the
// initramfs. The agent asks them before it brings the network up, so that
// their network: section can configure it.
func LocalProviders(opts ...ChainOption) []config.Provider {
	var o chainOptions
	for _, opt := range opts {
		opt(&o)
	}
	return localProviders(o)
}

func localProviders(o chainOptions) []config.Provider {
	return []config.Provider{
		&ConfigDriveProvider{
			SysRoot: o.sysRoot, DevRoot: o.devRoot, MountDir: o.mountDir,
			Mount: o.mount, Unmount: o.unmount, Drives: o.drives, Log: o.log,
		},
		&DeployDirProvider{Dir: o.deployDir, Client: o.client, Backoff: o.backoff, AllowHTTP: o.allowHTTP, Log: o.log},
	}
}
