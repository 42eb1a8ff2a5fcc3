package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/initsys"
	"github.com/booty-dev/booty/pkg/network"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/provision"
)

type fakePipeline struct {
	provisionErr error
	firmware     bool
	kexec        *provision.KexecEntry
	ran          string
	log          *slog.Logger
}

func (r *fakePipeline) Provision(context.Context) error {
	r.ran = "provision"
	r.log.Info("writing image", "step", "write-image")
	return r.provisionErr
}
func (r *fakePipeline) Deprovision(context.Context) error { r.ran = "deprovision"; return nil }
func (r *fakePipeline) FirmwareChanged() bool             { return r.firmware }
func (r *fakePipeline) Kexec() *provision.KexecEntry      { return r.kexec }

type logSink struct {
	mu    sync.Mutex
	lines []api.LogLine
}

func (s *logSink) Name() string { return "sink" }
func (s *logSink) Load(context.Context) (*config.MachineConfig, error) {
	return nil, config.ErrNoConfig
}
func (s *logSink) ReportLogs(_ context.Context, l []api.LogLine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, l...)
	return nil
}

func testAgent(t *testing.T, cmdline string, cfg *config.MachineConfig, loadErr error, r *fakePipeline) (*Agent, *bytes.Buffer, *[]time.Duration, *logSink) {
	var out bytes.Buffer
	sink := &logSink{}
	var slept []time.Duration
	a := &Agent{
		Log:     slog.New(slog.NewTextHandler(&out, nil)),
		Cmdline: provider.ParseCmdline(cmdline),
		ConfigureNetwork: func(context.Context, network.Options) (*network.Result, error) {
			return &network.Result{Method: network.MethodDHCP, Interface: "eth0", MAC: "52:54:00:12:34:56",
				Address: netip.MustParsePrefix("10.0.2.15/24")}, nil
		},
		LoadConfig: func(context.Context, provider.Cmdline) (*config.MachineConfig, config.Provider, error) {
			return cfg, sink, loadErr
		},
		NewPipeline: func(_ *config.MachineConfig, _ config.Provider, log *slog.Logger) Pipeline {
			r.log = log
			return r
		},
		Sleep: func(_ context.Context, d time.Duration) { slept = append(slept, d) },
	}
	return a, &out, &slept, sink
}

func cfgWith(f func(*config.MachineConfig)) *config.MachineConfig {
	c := &config.MachineConfig{APIVersion: config.APIVersion, Mode: config.ModeProvision, Handoff: config.HandoffPoweroff,
		OnFailure: config.FailureSpec{Action: config.FailureReboot, Delay: config.Duration{Duration: 5 * time.Second}}}
	if f != nil {
		f(c)
	}
	return c
}

func TestRunHandoff(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		cmdline string
		cfg     *config.MachineConfig
		loadErr error
		runErr  error
		fw      bool
		kexec   *provision.KexecEntry
		want    initsys.Action
		slept   []time.Duration
		ran     string
	}{
		{name: "success poweroff", cfg: cfgWith(nil), want: initsys.Poweroff, ran: "provision"},
		{name: "success reboot", cfg: cfgWith(func(c *config.MachineConfig) { c.Handoff = config.HandoffReboot }), want: initsys.Reboot, ran: "provision"},
		{name: "firmware changed forces reboot", cfg: cfgWith(nil), fw: true, want: initsys.Reboot, ran: "provision"},
		{name: "kexec into the prepared kernel", cfg: cfgWith(func(c *config.MachineConfig) { c.Handoff = config.HandoffKexec }),
			kexec: &provision.KexecEntry{Kernel: "/run/k", Initrd: "/run/i", Cmdline: "root=UUID=x ro"}, want: initsys.Kexec, ran: "provision"},
		{name: "kexec without a kernel reboots", cfg: cfgWith(func(c *config.MachineConfig) { c.Handoff = config.HandoffKexec }), want: initsys.Reboot, ran: "provision"},
		{name: "firmware change beats kexec", cfg: cfgWith(func(c *config.MachineConfig) { c.Handoff = config.HandoffKexec }), fw: true,
			kexec: &provision.KexecEntry{Kernel: "/run/k"}, want: initsys.Reboot, ran: "provision"},
		{name: "deprovision mode", cfg: cfgWith(func(c *config.MachineConfig) { c.Mode = config.ModeDeprovision }), want: initsys.Poweroff, ran: "deprovision"},
		{name: "failure reboots after delay", cfg: cfgWith(nil), runErr: boom, want: initsys.Reboot, slept: []time.Duration{5 * time.Second}, ran: "provision"},
		{name: "failure poweroff", cfg: cfgWith(func(c *config.MachineConfig) { c.OnFailure.Action = config.FailurePoweroff }), runErr: boom, want: initsys.Poweroff, slept: []time.Duration{5 * time.Second}, ran: "provision"},
		{name: "failure hold by config", cfg: cfgWith(func(c *config.MachineConfig) { c.OnFailure.Action = config.FailureHold }), runErr: boom, want: initsys.Hold, ran: "provision"},
		{name: "failure hold by cmdline", cmdline: "console=ttyS0 booty.debug=hold", cfg: cfgWith(nil), runErr: boom, want: initsys.Hold, ran: "provision"},
		{name: "no config: default policy", loadErr: config.ErrNoConfig, want: initsys.Reboot, slept: []time.Duration{DefaultFailDelay}},
		{name: "no config: hold", cmdline: "booty.debug=hold", loadErr: config.ErrNoConfig, want: initsys.Hold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakePipeline{provisionErr: tt.runErr, firmware: tt.fw, kexec: tt.kexec}
			a, out, slept, _ := testAgent(t, tt.cmdline, tt.cfg, tt.loadErr, r)
			h := a.Run(context.Background())
			if h.Action != tt.want {
				t.Fatalf("handoff = %v, want %v\n%s", h.Action, tt.want, out)
			}
			if tt.want == initsys.Kexec && (h.Kernel != tt.kexec.Kernel || h.Initrd != tt.kexec.Initrd || h.Cmdline != tt.kexec.Cmdline) {
				t.Fatalf("kexec handoff = %+v, want %+v", h, tt.kexec)
			}
			if len(*slept) != len(tt.slept) || (len(tt.slept) > 0 && (*slept)[0] != tt.slept[0]) {
				t.Fatalf("slept %v, want %v", *slept, tt.slept)
			}
			if r.ran != tt.ran {
				t.Fatalf("ran %q, want %q", r.ran, tt.ran)
			}
		})
	}
}

func TestRunShipsLogs(t *testing.T) {
	r := &fakePipeline{}
	a, out, _, sink := testAgent(t, "", cfgWith(nil), nil, r)
	a.Run(context.Background())
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var msgs []string
	for _, l := range sink.lines {
		msgs = append(msgs, l.Message)
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "writing image step=write-image") || !strings.Contains(all, "run succeeded") {
		t.Fatalf("shipped lines = %q", msgs)
	}
	if !strings.Contains(out.String(), "writing image") {
		t.Fatalf("console lacks the line: %s", out)
	}
}

func TestBadIPParamIsNotFatal(t *testing.T) {
	r := &fakePipeline{}
	a, out, _, _ := testAgent(t, "ip=1.2.3", cfgWith(nil), nil, r)
	if h := a.Run(context.Background()); h.Action != initsys.Poweroff {
		t.Fatalf("handoff = %v", h.Action)
	}
	if !strings.Contains(out.String(), "ip=1.2.3") {
		t.Fatalf("bad ip= not named in log: %s", out)
	}
}

// booty.insecure-http=1 is warned about once; without it nothing is said.
func TestInsecureHTTPWarnedOnce(t *testing.T) {
	for cmdline, want := range map[string]int{"booty.insecure-http=1": 1, "": 0, "booty.insecure-http=0": 0} {
		a, out, _, _ := testAgent(t, cmdline, cfgWith(nil), nil, &fakePipeline{})
		a.Run(context.Background())
		if got := strings.Count(out.String(), "plain HTTP allowed"); got != want {
			t.Errorf("cmdline %q: %d warnings, want %d:\n%s", cmdline, got, want, out.String())
		}
	}
}

// The config drives are scanned once per boot: the local config, the whole
// provider chain and the pipeline's boot-medium protection share the
// answer.
func TestConfigDrivesScannedOnce(t *testing.T) {
	a := New(&initsys.System{Console: t.Output()})
	scans := 0
	// A failed scan stops a chain with its error: each chain shows it
	// asked the shared scan rather than scanning on its own.
	errScan := errors.New("test scan: block devices unreadable")
	a.FindConfigDrives = func() ([]provider.Drive, error) {
		scans++
		return nil, errScan
	}
	ctx := context.Background()
	if _, _, err := a.LoadLocalConfig(ctx, a.Cmdline); !errors.Is(err, errScan) {
		t.Fatalf("local config: %v, want the shared scan's error", err)
	}
	if _, _, err := a.LoadConfig(ctx, a.Cmdline); !errors.Is(err, errScan) {
		t.Fatalf("config chain: %v, want the shared scan's error", err)
	}
	a.NewPipeline(cfgWith(nil), nil, a.Log)
	if scans != 1 {
		t.Errorf("config drives scanned %d times, want once", scans)
	}

	found := []provider.Drive{{Device: "/dev/sr0", FSType: "iso9660", Label: provider.LabelBooty}}
	devs := bootDevices(a.Log, func() ([]provider.Drive, error) { return found, nil })
	if len(devs) != 1 || devs[0] != "/dev/sr0" {
		t.Errorf("boot devices %v, want the config drive /dev/sr0", devs)
	}
	if devs := bootDevices(a.Log, func() ([]provider.Drive, error) { return nil, errors.New("no sysfs") }); devs != nil {
		t.Errorf("boot devices after a failed scan %v, want none", devs)
	}
}

// The network comes up while the storage drivers load. When the kernel
// command line decides it (ip=) or names the config (booty.config=, no
// local provider asked), it is configured at once. Otherwise a config
// drive, which needs every disk, may still decide it: DHCP wins its lease
// while the disks are found, and the lease is applied only once the local
// config turned out to leave the network to DHCP; a local static network
// refuses it and is configured instead.
func TestNetworkOverlapsColdplug(t *testing.T) {
	static := cfgWith(func(c *config.MachineConfig) {
		c.Network = config.NetworkSpec{Address: "192.0.2.10/24", Gateway: "192.0.2.1"}
	})
	for _, tt := range []struct {
		name    string
		cmdline string
		local   *config.MachineConfig
		want    []string
	}{
		{"no local config", "booty.server=http://10.0.2.2:8080", nil,
			[]string{"dhcp lease", "devices settled", "local config", "applied"}},
		{"local config without network", "booty.server=http://10.0.2.2:8080", cfgWith(nil),
			[]string{"dhcp lease", "devices settled", "local config", "applied"}},
		{"local static network", "booty.server=http://10.0.2.2:8080", static,
			[]string{"dhcp lease", "devices settled", "local config", "refused", "static", "applied"}},
		{"ip=dhcp", "booty.server=http://10.0.2.2:8080 ip=dhcp", nil,
			[]string{"dhcp lease", "applied", "devices settled", "local config"}},
		{"booty.config=", "booty.config=http://10.0.2.2:8080/c.yaml", nil,
			[]string{"dhcp lease", "applied", "devices settled"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var order []string
			note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
			leased := make(chan struct{})
			var leasedOnce sync.Once
			a, out, _, _ := testAgent(t, tt.cmdline, cfgWith(nil), nil, &fakePipeline{})
			configure := a.ConfigureNetwork
			a.ConfigureNetwork = func(ctx context.Context, o network.Options) (*network.Result, error) {
				if o.Static != nil {
					note("static")
				} else {
					note("dhcp lease")
					leasedOnce.Do(func() { close(leased) })
					if o.Gate != nil {
						if err := o.Gate(); err != nil {
							note("refused")
							return nil, err
						}
					}
				}
				note("applied")
				return configure(ctx, o)
			}
			a.WaitDevices = func(context.Context) error {
				select { // the disks take longer than the lease
				case <-leased:
				case <-time.After(10 * time.Second):
				}
				note("devices settled")
				return nil
			}
			a.LoadLocalConfig = func(context.Context, provider.Cmdline) (*config.MachineConfig, config.Provider, error) {
				note("local config")
				if tt.local == nil {
					return nil, nil, config.ErrNoConfig
				}
				return tt.local, &logSink{}, nil
			}
			if h := a.Run(context.Background()); h.Action != initsys.Poweroff {
				t.Fatalf("handoff %v, want poweroff\n%s", h.Action, out)
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(order, ",") != strings.Join(tt.want, ",") {
				t.Errorf("order %v, want %v", order, tt.want)
			}
			if n := strings.Count(out.String(), "msg=\"network up\""); n != 1 {
				t.Errorf("%d \"network up\" lines, want 1:\n%s", n, out)
			}
		})
	}
}
