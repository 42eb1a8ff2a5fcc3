package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/initsys"
	"github.com/booty-dev/booty/pkg/network"
	"github.com/booty-dev/booty/pkg/provider"
)

func TestPlanNetwork(t *testing.T) {
	static := cfgWith(func(c *config.MachineConfig) {
		c.Network = config.NetworkSpec{Interface: "eth1", Address: "192.0.2.10/24", Gateway: "192.0.2.1", DNS: []string{"192.0.2.53"}}
	})
	ifaceOnly := cfgWith(func(c *config.MachineConfig) { c.Network = config.NetworkSpec{Interface: "eth1"} })
	v6 := cfgWith(func(c *config.MachineConfig) { c.Network = config.NetworkSpec{Address: "2001:db8::10/64"} })
	tests := []struct {
		name       string
		cmdline    string
		local      *config.MachineConfig
		source     string
		off        bool
		address    string // of Static, "" for DHCP
		gateway    string
		device     string
		dns        []string
		interfaces []string
		err        bool
	}{
		{name: "nothing: dhcp everywhere", source: netFromDHCP},
		{name: "local config without network: dhcp", local: cfgWith(nil), source: netFromDHCP},
		{name: "local static applied without dhcp", local: static, source: netFromConfig,
			address: "192.0.2.10/24", gateway: "192.0.2.1", device: "eth1", dns: []string{"192.0.2.53"}},
		{name: "local interface limits dhcp", local: ifaceOnly, source: netFromConfig, interfaces: []string{"eth1"}},
		{name: "kernel static beats local static", cmdline: "ip=10.0.0.5::10.0.0.1:255.255.255.0::eth0:off", local: static,
			source: netFromCmdline, address: "10.0.0.5/24", gateway: "10.0.0.1", device: "eth0"},
		{name: "kernel dhcp beats local static", cmdline: "ip=dhcp", local: static, source: netFromCmdline},
		{name: "kernel off", cmdline: "ip=off", local: static, source: netFromCmdline, off: true},
		{name: "bad ip=", cmdline: "ip=rarp", err: true},
		{name: "local address that cannot be applied", local: v6, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := planNetwork(provider.ParseCmdline(tt.cmdline), tt.local)
			if tt.err {
				if err == nil {
					t.Fatalf("plan = %+v, want an error", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Source != tt.source || p.Off != tt.off || !slices.Equal(p.Interfaces, tt.interfaces) {
				t.Errorf("plan = %+v, want source %q off %v interfaces %v", p, tt.source, tt.off, tt.interfaces)
			}
			if tt.address == "" {
				if p.Static != nil {
					t.Errorf("Static = %+v, want DHCP", p.Static)
				}
				return
			}
			if p.Static == nil {
				t.Fatalf("Static = nil, want %s", tt.address)
			}
			s := p.Static
			var dns []string
			for _, d := range s.DNS {
				dns = append(dns, d.String())
			}
			if s.Method != network.MethodStatic || s.Address.String() != tt.address || s.Gateway.String() != tt.gateway ||
				s.Device != tt.device || !slices.Equal(dns, tt.dns) {
				t.Errorf("Static = %+v, want %s via %s on %q dns %v", s, tt.address, tt.gateway, tt.device, tt.dns)
			}
		})
	}
}

// A config drive's static network comes up before anything is fetched, the
// DHCP lease won while the disks were found is not applied, and the local
// config is the one used (the chain is not asked).
func TestRunAppliesLocalStaticNetwork(t *testing.T) {
	local := cfgWith(func(c *config.MachineConfig) {
		c.Network = config.NetworkSpec{Address: "192.0.2.10/24", Gateway: "192.0.2.1", DNS: []string{"192.0.2.53"}}
	})
	tests := []struct {
		name       string
		cmdline    string
		localErr   error
		wantStatic bool
		wantChain  bool
	}{
		{name: "config drive static", wantStatic: true},
		{name: "booty.config= comes first: not asked", cmdline: "booty.config=https://cfg.example/m.yaml", wantChain: true},
		{name: "no local config", localErr: config.ErrNoConfig, wantChain: true},
		{name: "broken local config left to the chain", localErr: errors.New("config drive: bad yaml"), wantChain: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakePipeline{}
			a, _, _, _ := testAgent(t, tt.cmdline, cfgWith(nil), nil, r)
			var got []network.Options
			refused := 0
			a.ConfigureNetwork = func(_ context.Context, o network.Options) (*network.Result, error) {
				if o.Static == nil && o.Gate != nil {
					// DHCP won a lease while the disks were found; the
					// agent decides at the gate whether it is applied.
					if err := o.Gate(); err != nil {
						refused++
						return nil, err
					}
				}
				got = append(got, o)
				if o.Static == nil {
					return nil, errors.New("dhcp on eth0: no offer")
				}
				return &network.Result{Method: network.MethodStatic, Interface: "eth0", MAC: "52:54:00:12:34:56", Address: o.Static.Address}, nil
			}
			localAsked, chainAsked := false, false
			a.LoadLocalConfig = func(context.Context, provider.Cmdline) (*config.MachineConfig, config.Provider, error) {
				localAsked = true
				if tt.localErr != nil {
					return nil, nil, tt.localErr
				}
				return local, &logSink{}, nil
			}
			load := a.LoadConfig
			a.LoadConfig = func(ctx context.Context, cl provider.Cmdline) (*config.MachineConfig, config.Provider, error) {
				chainAsked = true
				return load(ctx, cl)
			}
			h := a.Run(context.Background())
			if h.Action != initsys.Poweroff || r.ran != "provision" {
				t.Fatalf("handoff %s, ran %q; want poweroff after provision", h.Action, r.ran)
			}
			if len(got) != 1 {
				t.Fatalf("network configured %d times, want once", len(got))
			}
			if wantRefused := map[bool]int{true: 1}[tt.wantStatic]; refused != wantRefused {
				t.Errorf("DHCP leases refused at the gate: %d, want %d", refused, wantRefused)
			}
			if tt.wantStatic != (got[0].Static != nil) {
				t.Fatalf("Static = %+v, want static %v", got[0].Static, tt.wantStatic)
			}
			if tt.wantStatic {
				s := got[0].Static
				if s.Address != netip.MustParsePrefix("192.0.2.10/24") || s.Gateway != netip.MustParseAddr("192.0.2.1") ||
					!slices.Equal(s.DNS, []netip.Addr{netip.MustParseAddr("192.0.2.53")}) {
					t.Errorf("Static = %+v, want 192.0.2.10/24 via 192.0.2.1, dns 192.0.2.53", s)
				}
			}
			if chainAsked != tt.wantChain {
				t.Errorf("chain asked = %v, want %v", chainAsked, tt.wantChain)
			}
			if wantLocal := tt.cmdline == ""; localAsked != wantLocal {
				t.Errorf("local providers asked = %v, want %v", localAsked, wantLocal)
			}
		})
	}
}

// BOOTy's /deploy/vars STATIC_* variables, read by the real local
// providers before the network, plan a static network.
func TestPlanNetworkFromDeployVars(t *testing.T) {
	deploy := t.TempDir()
	vars := `export IMAGE="http://10.0.0.1/os.img"
export IMAGE_CHECKSUM="0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
export DISK_DEVICE="/dev/sda"
export STATIC_IP="10.1.2.3/24"
export STATIC_GATEWAY="10.1.2.1"
export STATIC_IFACE="eno1"
`
	if err := os.WriteFile(filepath.Join(deploy, "vars"), []byte(vars), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, p, err := provider.LoadChain(t.Context(), nil,
		provider.LocalProviders(provider.WithDeployDir(deploy), provider.WithSysRoot(t.TempDir()))...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.Name(), "deploy dir") {
		t.Fatalf("config from %s, want the deploy dir", p.Name())
	}
	plan, err := planNetwork(provider.ParseCmdline("console=ttyS0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Source != netFromConfig || plan.Static == nil || plan.Static.Address != netip.MustParsePrefix("10.1.2.3/24") ||
		plan.Static.Gateway != netip.MustParseAddr("10.1.2.1") || plan.Static.Device != "eno1" {
		t.Fatalf("plan = %+v (static %+v), want 10.1.2.3/24 via 10.1.2.1 on eno1", plan, plan.Static)
	}
}

// A local config's bonds, VLANs and links become the plan's Setup, which
// reaches Configure with the run's context for lease renewal; a broken one
// is an error naming the field.
func TestPlanNetworkSetup(t *testing.T) {
	bonded := cfgWith(func(c *config.MachineConfig) {
		c.Network = config.NetworkSpec{
			Bonds: []config.BondSpec{{Name: "bond0", Mode: "active-backup", Interfaces: []string{"eth0", "eth1"}}},
			VLANs: []config.VLANSpec{{Link: "bond0", ID: 42}},
			Links: []config.LinkSpec{{Name: "bond0.42", DHCP4: true}},
		}
	})
	p, err := planNetwork(provider.ParseCmdline(""), bonded)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != netFromConfig || p.Setup == nil || p.Static != nil ||
		len(p.Setup.Bonds) != 1 || p.Setup.VLANs[0].Name != "bond0.42" || !p.Setup.Links[0].DHCP4 {
		t.Fatalf("plan = %+v, setup %+v", p, p.Setup)
	}
	run, cancel := context.WithCancel(context.Background())
	defer cancel()
	var lostLink string
	opts := p.options(run, slog.New(slog.DiscardHandler), func(link string, _ error) { lostLink = link })
	if opts.Setup != p.Setup || opts.Lifetime != run || opts.OnLeaseLost == nil {
		t.Fatalf("options %+v: want the plan's setup, the run's context and a loss handler", opts)
	}
	if opts.OnLeaseLost("bond0.42", network.ErrLeaseLost); lostLink != "bond0.42" {
		t.Errorf("the loss of bond0.42's lease reached the agent as %q", lostLink)
	}

	// The kernel's ip= still wins over a setup.
	if p, err := planNetwork(provider.ParseCmdline("ip=dhcp"), bonded); err != nil || p.Setup != nil {
		t.Errorf("with ip=dhcp: plan %+v, %v; want no setup", p, err)
	}

	broken := bonded.Clone()
	broken.Network.Bonds[0].Mode = "round-robin"
	if _, err := planNetwork(provider.ParseCmdline(""), broken); err == nil || !strings.Contains(err.Error(), "network.bonds[0].mode") {
		t.Errorf("broken bond: err %v, want one naming network.bonds[0].mode", err)
	}
}
