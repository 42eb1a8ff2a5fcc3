// Package agent is what booty does as PID 1 once the machine is up: network,
// config, the provisioning run, and the decision of how to leave the machine.
// It never performs the handoff itself; Run returns it, and the caller hands
// off through initsys in one place.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bootloader"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/entropy"
	"github.com/booty-dev/booty/pkg/initsys"
	"github.com/booty-dev/booty/pkg/inventory"
	"github.com/booty-dev/booty/pkg/network"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/provision"
	"github.com/booty-dev/booty/pkg/redact"
)

// Timeouts of the agent's phases. Every wait has one.
const (
	NetworkTimeout = 90 * time.Second
	ConfigTimeout  = 5 * time.Minute
	// StandbyTimeout bounds how long an agent enrolled with bootyd waits
	// for a command before its failure policy reboots the machine.
	StandbyTimeout     = 7 * 24 * time.Hour
	RunTimeout         = 4 * time.Hour
	DefaultFailDelay   = 30 * time.Second
	logShipInterval    = 2 * time.Second
	logShipFlushPeriod = 10 * time.Second
)

// Pipeline is what the agent needs of a provisioning run; *provision.Orchestrator implements it.
type Pipeline interface {
	Provision(ctx context.Context) error
	Deprovision(ctx context.Context) error
	FirmwareChanged() bool
	// Kexec is the installed kernel prepared for a kexec handoff, or nil.
	Kexec() *provision.KexecEntry
}

// Agent holds the agent's dependencies. Fields are seams: New fills them with
// the real implementations and tests replace them.
type Agent struct {
	Log     *slog.Logger
	Cmdline provider.Cmdline

	ConfigureNetwork func(ctx context.Context, opts network.Options) (*network.Result, error)
	LoadConfig       func(ctx context.Context, cl provider.Cmdline) (*config.MachineConfig, config.Provider, error)
	NewPipeline      func(cfg *config.MachineConfig, p config.Provider, log *slog.Logger) Pipeline
	// LoadLocalConfig asks the providers that need no network (config
	// drive, /deploy) before the network is up; nil skips that.
	LoadLocalConfig func(ctx context.Context, cl provider.Cmdline) (*config.MachineConfig, config.Provider, error)
	// Random is the kernel's random pool, waited for (bounded) before the
	// first TLS connection; nil does not wait.
	Random *entropy.Pool
	// Failures remembers consecutive failed boots so the failure policy's
	// delay grows; nil keeps the delay fixed.
	Failures FailureMemory
	// Sleep waits before a failure action; it returns early when ctx ends.
	Sleep func(ctx context.Context, d time.Duration)
	// FindConfigDrives scans the block devices for config drives (virtual
	// media). The agent calls it once per boot (see configDrives): the
	// local config, the provider chain and the protection of the boot
	// medium share that answer. nil finds none.
	FindConfigDrives func() ([]provider.Drive, error)
	// ListenLLDP listens on links for at most wait and calls heard with
	// each link's neighbour as it comes (inventory.WatchLLDP); nil does
	// not listen.
	ListenLLDP func(ctx context.Context, links []string, wait time.Duration, heard func(link string, n inventory.Neighbor)) map[string]inventory.Neighbor
	// CarrierLinks lists the physical links with carrier, listened on for
	// LLDP besides the agent's own; nil lists none.
	CarrierLinks func() []string
	// WaitDevices waits until the coldplug loaded every driver (all disks
	// are there); Run calls it before anything looks at block devices
	// (config drives, disk selection). nil does not wait.
	WaitDevices func(ctx context.Context) error

	// neighbours is what the LLDP listen heard; the hardware reports read it.
	neighbours neighbours
	// outbox tells bootyd what the agent learns in the background; Run
	// makes one when New did not.
	outbox *outbox

	drivesOnce sync.Once
	drives     []provider.Drive
	drivesErr  error
}

// New returns an Agent for the brought-up system.
func New(sys *initsys.System) *Agent {
	a := &Agent{
		// No URL secret (user info, query) reaches the console, whoever logs it.
		Log:              slog.New(redact.NewHandler(slog.NewTextHandler(sys.Console, nil))),
		Cmdline:          provider.ParseCmdline(sys.Cmdline.Raw),
		ConfigureNetwork: network.Configure,
		Random:           &entropy.Pool{},
		Sleep: func(ctx context.Context, d time.Duration) {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		},
		ListenLLDP:  inventory.WatchLLDP,
		WaitDevices: sys.WaitColdplug,
	}
	a.Failures = newFailureMemory(bootloader.EFIVars{Log: a.Log})
	a.FindConfigDrives = (&provider.ConfigDriveProvider{Log: a.Log}).Find
	inv := inventory.NewCollector()
	// No wait for LLDP: the reports hold what the background listen
	// (startLLDP) heard so far, and the outbox sends a new report when
	// it hears more.
	inv.LLDPWait, inv.Neighbors = 0, a.neighbours.known
	inv.Log = a.Log
	a.CarrierLinks = func() []string { return carrierLinks(inv) }
	a.outbox = newOutbox(a.Log, &a.neighbours, inv.Collect)
	a.LoadConfig = func(ctx context.Context, cl provider.Cmdline) (*config.MachineConfig, config.Provider, error) {
		return provider.LoadChain(ctx, a.Log, provider.ProvidersFromCmdline(cl, a.chainOptions()...)...)
	}
	a.LoadLocalConfig = func(ctx context.Context, cl provider.Cmdline) (*config.MachineConfig, config.Provider, error) {
		return provider.LoadChain(ctx, a.Log, provider.LocalProviders(provider.WithLogger(a.Log),
			provider.WithInsecureHTTP(cl.Flag(provider.CmdlineInsecureHTTP)), provider.WithConfigDrives(a.configDrives))...)
	}
	a.NewPipeline = func(cfg *config.MachineConfig, p config.Provider, log *slog.Logger) Pipeline {
		dm := disk.NewManager()
		dm.BootDevices = bootDevices(log, a.configDrives)
		o := provision.NewOrchestrator(cfg, p, dm)
		o.SetLogger(log)
		o.SetAllowHTTP(a.Cmdline.Flag(provider.CmdlineInsecureHTTP))
		provision.SetDebugLogger(log)
		return o
	}
	return a
}

// Run asks the local providers for the config (see localConfig), brings up
// the network (see planNetwork), loads the config from the whole chain
// unless a local provider had it, runs the provisioning (or
// deprovisioning) plan and returns how to leave the machine. Failures are
// logged and reported; they choose the handoff through the failure policy.
func (a *Agent) Run(ctx context.Context) initsys.Handoff {
	ctx, endRun := context.WithCancel(ctx) // ends DHCP lease renewal with the run
	defer endRun()
	if a.outbox == nil {
		a.outbox = newOutbox(a.Log, &a.neighbours, nil)
	}
	go a.outbox.run(ctx)
	hold := a.Cmdline.HoldRequested()
	if a.Cmdline.Flag(provider.CmdlineInsecureHTTP) {
		a.Log.Warn("plain HTTP allowed by " + provider.CmdlineInsecureHTTP + ": configs, images and the machine token may travel unencrypted")
	}
	if a.Random != nil {
		s := a.Random.Sources()
		a.Log.Info("random number sources", "rdrand", s.RDRAND, "hwrng", s.HWRNG, "crng_ready", s.Ready)
	}

	var cfg *config.MachineConfig
	var prov config.Provider
	var netRes *network.Result
	var netErr error
	if a.networkNeedsNoLocalConfig() {
		// The network comes up while the storage drivers still load.
		netRes, netErr = a.network(ctx, nil)
		a.waitDevices(ctx)
		cfg, prov = a.localConfig(ctx)
	} else {
		// A config drive may name the network, and it needs every disk:
		// DHCP wins its lease meanwhile, applied only when the local
		// config leaves the network to DHCP (see speculativeNetwork).
		spec := a.speculativeNetwork(ctx)
		a.waitDevices(ctx)
		cfg, prov = a.localConfig(ctx)
		netRes, netErr = a.networkAfter(ctx, spec, cfg)
	}
	if netErr != nil {
		// Not fatal: a config drive or /deploy still works without network.
		a.Log.Warn("network not configured; continuing", "error", netErr)
	}

	if cfg == nil && netErr == nil { // without a network the fetch fails anyway: no wait
		if err := a.waitRandom(ctx, a.Log, cmdlineNeedsTLS(a.Cmdline)); err != nil {
			a.Log.Error("cannot load the machine config", "step", api.StepLoadConfig, "error", err)
			return a.failure(ctx, nil, hold, failRandom)
		}
	}
	if cfg == nil {
		timeout := ConfigTimeout
		if srv, ok := a.Cmdline.Get(provider.CmdlineServer); ok && srv != "" {
			timeout = StandbyTimeout // an enrolled agent waits for its command
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var err error
		cfg, prov, err = a.LoadConfig(cctx, a.Cmdline)
		cancel()
		var ch *provider.CommandHandoff
		if errors.As(err, &ch) {
			a.Log.Info("bootyd asked for a handoff", "command", ch.Kind)
			if ch.Kind == api.CommandPowerOff {
				return initsys.Handoff{Action: initsys.Poweroff}
			}
			return initsys.Handoff{Action: initsys.Reboot}
		}
		if err != nil {
			if netErr != nil {
				a.Log.Error("cannot load the machine config", "step", api.StepLoadConfig, "error", err, "network_error", netErr)
				return a.failure(ctx, nil, hold, failNetwork)
			}
			a.Log.Error("cannot load the machine config", "step", api.StepLoadConfig, "error", err)
			return a.failure(ctx, nil, hold, api.StepLoadConfig)
		}
	}

	prov = a.withReporter(cfg, prov, netRes)
	if lr, ok := prov.(provider.LogReporter); ok {
		a.outbox.attach(lr, nil)
	}
	log := a.Log
	var ship *logShipper
	if lr, ok := prov.(provider.LogReporter); ok {
		ship = newLogShipper(lr, a.Log.Handler())
		log = slog.New(redact.NewHandler(ship)) // what is shipped is redacted too
		defer ship.Close()
	}

	if netErr == nil {
		if err := a.waitRandom(ctx, log, configNeedsTLS(cfg)); err != nil {
			log.Error("run failed", "mode", cfg.Mode, "error", err)
			if ship != nil {
				ship.Close()
			}
			return a.failure(ctx, cfg, hold, failRandom)
		}
	}

	r := a.NewPipeline(cfg, prov, log)
	rctx, cancel := context.WithTimeout(ctx, RunTimeout)
	defer cancel()
	var err error
	switch cfg.Mode {
	case config.ModeDeprovision, config.ModeSoftDeprovision:
		err = r.Deprovision(rctx)
	default:
		err = r.Provision(rctx)
	}
	if err != nil {
		log.Error("run failed", "mode", cfg.Mode, "step", provision.FailedStep(err), "error", err)
		if ship != nil {
			ship.Close()
		}
		a.completeCommand(ctx, prov, err)
		return a.failure(ctx, cfg, hold, provision.FailedStep(err))
	}
	h := Decide(cfg, r.FirmwareChanged(), r.Kexec())
	if a.Failures != nil {
		if err := a.Failures.Clear(); err != nil {
			log.Warn("the next failure policy delay may not start from its base", "error", err)
		}
	}
	log.Info("run succeeded; handing off", "action", h.Action.String())
	if ship != nil {
		ship.Close()
	}
	a.completeCommand(ctx, prov, nil)
	return h
}

// networkNeedsNoLocalConfig reports whether the network plan is known
// before the local providers are asked: ip= on the kernel command line
// decides it (planNetwork puts it first), and booty.config= means no local
// provider is asked at all. Then the network comes up while the storage
// drivers load; otherwise a config drive, which needs every disk, may
// hold the network config, and the network waits for it.
func (a *Agent) networkNeedsNoLocalConfig() bool {
	if _, ok := a.Cmdline.Get(provider.CmdlineIP); ok {
		return true
	}
	src, ok := a.Cmdline.Get(provider.CmdlineConfig)
	return ok && src != ""
}

// DevicesTimeout bounds the wait for the coldplug before the agent looks
// at block devices anyway.
const DevicesTimeout = 2 * time.Minute

// waitDevices waits (bounded by DevicesTimeout) for WaitDevices; when it
// does not finish, the agent goes on with the disks there are, and says so.
func (a *Agent) waitDevices(ctx context.Context) {
	if a.WaitDevices == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, DevicesTimeout)
	defer cancel()
	if err := a.WaitDevices(ctx); err != nil {
		a.Log.Warn("drivers still loading; going on with the devices there are", "error", err)
	}
}

// commandCompleter is a provider that gave a command's config (bootyd's)
// and takes the run's result back.
type commandCompleter interface {
	CompleteCommand(ctx context.Context, runErr error) error
}

// completeCommand tells bootyd how the run of its command ended (after the
// logs were shipped, before the handoff); the provider retries it with
// backoff, and a failure is only logged: the handoff goes ahead.
func (a *Agent) completeCommand(ctx context.Context, p config.Provider, runErr error) {
	if rp, ok := p.(reportingProvider); ok {
		p = rp.Provider
	}
	c, ok := p.(commandCompleter)
	if !ok {
		return
	}
	if err := c.CompleteCommand(ctx, runErr); err != nil {
		a.Log.Warn("cannot report the end of the command to bootyd", "error", err)
	}
}

// network configures the agent's network as planNetwork decides from ip=
// and the local config (nil when there is none).
func (a *Agent) network(ctx context.Context, local *config.MachineConfig) (*network.Result, error) {
	plan, err := planNetwork(a.Cmdline, local)
	if err != nil {
		return nil, err
	}
	if plan.Off {
		a.Log.Info("network disabled by kernel parameter ip=")
		return nil, nil
	}
	opts := plan.options(ctx, a.Log, a.leaseLost)
	nctx, cancel := context.WithTimeout(ctx, NetworkTimeout)
	defer cancel()
	res, err := a.ConfigureNetwork(nctx, opts)
	if err != nil {
		return nil, err
	}
	a.networkUp(ctx, plan, res)
	return res, nil
}

// errLocalNetwork stops the speculative DHCP run, its lease unused: the
// local config names the network.
var errLocalNetwork = errors.New("the local config names the network")

// specNet is a DHCP run started before the local config is known; see
// speculativeNetwork.
type specNet struct {
	plan   netPlan
	apply  chan struct{} // closed: the gate lets the lease be applied
	cancel context.CancelCauseFunc
	done   chan struct{}
	res    *network.Result
	err    error
}

// speculativeNetwork starts, in the background, the network plan the
// kernel command line alone gives when it is DHCP (no ip=): the links
// come up and DHCP wins a lease while the storage drivers still load, but
// the lease waits at network.Options.Gate until networkAfter knows the
// local config. It returns nil (networkAfter then just configures the
// network) when the command line plans something else.
func (a *Agent) speculativeNetwork(ctx context.Context) *specNet {
	plan, err := planNetwork(a.Cmdline, nil)
	if err != nil || plan.Source != netFromDHCP {
		return nil
	}
	sctx, cancel := context.WithCancelCause(ctx)
	s := &specNet{plan: plan, apply: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	opts := plan.options(ctx, a.Log, a.leaseLost) // the lease lives as long as the run
	opts.Gate = func() error {
		select {
		case <-s.apply:
			return nil
		case <-sctx.Done():
			return context.Cause(sctx)
		}
	}
	go func() {
		defer close(s.done)
		nctx, ncancel := context.WithTimeout(sctx, NetworkTimeout)
		defer ncancel()
		s.res, s.err = a.ConfigureNetwork(nctx, opts)
	}()
	return s
}

// networkAfter configures the network for the local config (nil: none)
// once it is known: when that leaves the network to DHCP, as the
// speculative run s planned, s's lease is applied and its result (or
// failure) is the network's; otherwise s is stopped, nothing of it
// applied, and the local config's plan configured. A nil s just
// configures the network.
func (a *Agent) networkAfter(ctx context.Context, s *specNet, local *config.MachineConfig) (*network.Result, error) {
	if s == nil {
		return a.network(ctx, local)
	}
	if plan, err := planNetwork(a.Cmdline, local); err == nil && plan.Source == netFromDHCP {
		close(s.apply)
		<-s.done
		if s.err != nil {
			return nil, s.err
		}
		a.networkUp(ctx, s.plan, s.res)
		return s.res, nil
	}
	s.cancel(errLocalNetwork)
	<-s.done
	a.Log.Info("the local config names the network: the DHCP run started while the disks were found is stopped, its lease not used")
	return a.network(ctx, local)
}

// networkUp logs the configured network and starts listening for LLDP
// neighbours on its links.
func (a *Agent) networkUp(ctx context.Context, plan netPlan, res *network.Result) {
	a.Log.Info("network up", "interface", res.Interface, "mac", res.MAC, "address", res.Address.String(),
		"gateway", res.Gateway.String(), "method", string(res.Method), "from", plan.Source)
	var carrier []string
	if a.CarrierLinks != nil {
		carrier = a.CarrierLinks()
	}
	a.startLLDP(ctx, a.Log, lldpLinks(plan, res, carrier), a.outbox.poke) // in the background, ends with the run
}

// leaseLost queues the loss of link's DHCP lease (err names the address
// removed) for bootyd; the outbox delivers it once a reporter is there
// and the network carries it again.
func (a *Agent) leaseLost(link string, err error) {
	a.outbox.add(api.LogLine{Time: time.Now(), Level: slog.LevelError.String(),
		Message: fmt.Sprintf("network lost on %s: the DHCP lease ran out and its address was removed: %v", link, err)})
}

// carrierLinks lists the physical links with carrier in c's sysfs; a
// failure is logged and lists none.
func carrierLinks(c *inventory.Collector) []string {
	links, err := c.Links()
	if err != nil {
		c.Log.Warn("cannot list the links to listen for lldp on", "error", err)
		return nil
	}
	var out []string
	for _, l := range links {
		if l.Carrier {
			out = append(out, l.Name)
		}
	}
	return out
}

// chainOptions are the options of the provider chain: the logger, the
// shared config drive scan, and for bootyd the hardware report (collected
// through the outbox, which notes the LLDP neighbours it holds) and the
// enrollment hook that lets the outbox report through the enrolled
// provider.
func (a *Agent) chainOptions() []provider.ChainOption {
	return []provider.ChainOption{provider.WithLogger(a.Log), provider.WithConfigDrives(a.configDrives),
		provider.WithHardware(a.outbox.hardware),
		provider.WithEnrolled(func(p *provider.ServerProvider) { a.outbox.attach(p, p) })}
}

// configDrives returns the config drives FindConfigDrives found on its
// first call; later calls answer the same without scanning again.
func (a *Agent) configDrives() ([]provider.Drive, error) {
	a.drivesOnce.Do(func() {
		if a.FindConfigDrives != nil {
			a.drives, a.drivesErr = a.FindConfigDrives()
		}
	})
	return a.drives, a.drivesErr
}

// bootDevices lists the devices that carry a config drive (virtual media),
// as find lists them: they are never chosen as the target, even when
// unmounted.
func bootDevices(log *slog.Logger, find func() ([]provider.Drive, error)) []string {
	drives, err := find()
	if err != nil {
		log.Warn("cannot look for config drives to protect them", "error", err)
		return nil
	}
	var devs []string
	for _, d := range drives {
		devs = append(devs, d.Device)
	}
	return devs
}

// withReporter makes sure reports reach bootyd when the config names a
// server but came from a provider that cannot report (a URL, config drive).
func (a *Agent) withReporter(cfg *config.MachineConfig, p config.Provider, netRes *network.Result) config.Provider {
	if _, ok := p.(provider.StatusReporter); ok || cfg.Server.URL == "" {
		return p
	}
	mac := ""
	if netRes != nil {
		mac = netRes.MAC
	}
	if mac == "" {
		a.Log.Warn("config names a server but no MAC is known to report as; reports disabled")
		return p
	}
	r, err := provider.NewServerReporter(cfg.Server, mac, a.Cmdline.Flag(provider.CmdlineInsecureHTTP))
	if err != nil {
		a.Log.Warn("cannot report to the config's server", "error", err)
		return p
	}
	return reportingProvider{Provider: p, ServerProvider: r}
}

type reportingProvider struct {
	config.Provider
	*provider.ServerProvider
}

func (r reportingProvider) Name() string { return r.Provider.Name() }
func (r reportingProvider) Load(ctx context.Context) (*config.MachineConfig, error) {
	return r.Provider.Load(ctx)
}

// Decide returns the handoff after a successful run: a hard reboot when
// firmware changed, otherwise what the config asks. Kexec loads the kernel
// the run prepared from the installed OS's default boot entry; without one
// (deprovisioning, or no kernel found) it falls back to a reboot.
func Decide(cfg *config.MachineConfig, firmwareChanged bool, k *provision.KexecEntry) initsys.Handoff {
	if firmwareChanged {
		return initsys.Handoff{Action: initsys.Reboot}
	}
	switch cfg.Handoff {
	case config.HandoffPoweroff:
		return initsys.Handoff{Action: initsys.Poweroff}
	case config.HandoffReboot:
		return initsys.Handoff{Action: initsys.Reboot}
	}
	if k == nil || cfg.Mode == config.ModeDeprovision || cfg.Mode == config.ModeSoftDeprovision {
		return initsys.Handoff{Action: initsys.Reboot}
	}
	return initsys.Handoff{Action: initsys.Kexec, Kernel: k.Kernel, Initrd: k.Initrd, Cmdline: k.Cmdline}
}

// failure applies the failure policy: hold when asked (config or
// booty.debug=hold), otherwise record the failed boot of this kind in
// Failures and wait the delay, doubled for each consecutive failed boot of
// the same kind before it (see failDelay), then reboot or power off.
func (a *Agent) failure(ctx context.Context, cfg *config.MachineConfig, hold bool, kind string) initsys.Handoff {
	action, delay := config.FailureReboot, DefaultFailDelay
	if cfg != nil {
		if cfg.OnFailure.Action != "" {
			action = cfg.OnFailure.Action
		}
		if cfg.OnFailure.Delay.Duration > 0 {
			delay = cfg.OnFailure.Delay.Duration
		}
	}
	if kind == "" {
		kind = failRun
	}
	if hold || action == config.FailureHold {
		a.Log.Error("holding the machine for debugging (failure policy hold or booty.debug=hold)")
		return initsys.Handoff{Action: initsys.Hold}
	}
	if a.Failures != nil {
		n, err := a.Failures.Record(kind)
		if err != nil {
			a.Log.Warn("cannot remember this failed boot; the delay does not grow", "error", err)
		}
		delay = failDelay(delay, n)
		a.Log.Error(fmt.Sprintf("failure policy: %s in %s", action, delay), "kind", kind, "consecutive_failed_boots", n)
	} else {
		a.Log.Error(fmt.Sprintf("failure policy: %s in %s", action, delay), "kind", kind)
	}
	a.Sleep(ctx, delay)
	if action == config.FailurePoweroff {
		return initsys.Handoff{Action: initsys.Poweroff}
	}
	return initsys.Handoff{Action: initsys.Reboot}
}
