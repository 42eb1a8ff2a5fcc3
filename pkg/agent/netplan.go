package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/network"
	"github.com/booty-dev/booty/pkg/provider"
)

// Sources of a netPlan, as logged.
const (
	netFromCmdline = "kernel ip="
	netFromConfig  = "config network:"
	netFromDHCP    = "dhcp"
)

// netPlan is how the agent brings its own network up.
type netPlan struct {
	// Off: ip=off asked for no network at all.
	Off bool
	// Static, when set, is applied instead of DHCP.
	Static *network.StaticConfig
	// Interfaces limits DHCP to these links; empty means every link.
	Interfaces []string
	// Setup, when set, is the config's bonds, VLANs and links, applied
	// instead of Static and Interfaces.
	Setup *network.Setup
	// Source is where the plan came from: netFromCmdline, netFromConfig or netFromDHCP.
	Source string
}

// planNetwork decides how the network comes up, in this order:
//  1. the kernel's ip= when given: off, a static address, or DHCP;
//  2. else the network: section of a config a local provider (config
//     drive, /deploy) holds (local, nil when there is none): a static
//     address is applied with its gateway and DNS and no DHCP at all; an
//     interface alone limits DHCP to that link; bonds, VLANs and links
//     are created and configured as network.Setup;
//  3. else DHCP on every link with carrier.
//
// A bad ip= or network: is an error naming it, and no plan.
func planNetwork(cl provider.Cmdline, local *config.MachineConfig) (netPlan, error) {
	if v, ok := cl.Get(provider.CmdlineIP); ok {
		sc, err := network.ParseIPParam(v)
		if err != nil {
			return netPlan{}, fmt.Errorf("kernel parameter ip=%s: %w", v, err)
		}
		p := netPlan{Source: netFromCmdline, Off: sc.Method == network.MethodOff}
		if sc.Method == network.MethodStatic {
			p.Static = sc
		}
		return p, nil
	}
	if local != nil {
		n := local.Network
		if n.HasSetup() {
			s, err := n.Setup()
			if err != nil {
				return netPlan{}, fmt.Errorf("config network: %w", err)
			}
			return netPlan{Source: netFromConfig, Setup: s}, nil
		}
		switch {
		case n.Address != "":
			sc, err := network.ParseStatic(n.Interface, n.Address, n.Gateway, n.DNS)
			if err != nil {
				return netPlan{}, fmt.Errorf("config network: %w", err)
			}
			return netPlan{Source: netFromConfig, Static: sc}, nil
		case n.Interface != "":
			return netPlan{Source: netFromConfig, Interfaces: []string{n.Interface}}, nil
		}
	}
	return netPlan{Source: netFromDHCP}, nil
}

// options are the network.Options of the plan. DHCPv4 leases are renewed
// until run ends (the agent's Run); a lease lost anyway is logged as an
// error on log and passed to lost when it is not nil.
func (p netPlan) options(run context.Context, log *slog.Logger, lost func(link string, err error)) network.Options {
	return network.Options{
		Logger: log, Timeout: NetworkTimeout, Static: p.Static, Interfaces: p.Interfaces, Setup: p.Setup,
		Lifetime: run,
		OnLeaseLost: func(link string, err error) {
			log.Error("network lost: the DHCP lease ran out; fetches on this link fail until a new lease", "interface", link, "error", err)
			if lost != nil {
				lost(link, err)
			}
		},
	}
}

// localConfig asks the local providers (config drive, /deploy) for the
// config before the network is up, unless booty.config= names a config
// URL, which comes first in the chain. It returns nil when they have none
// or when LoadLocalConfig is not set; a broken local config is logged and
// left for the full chain to report after the network is up.
func (a *Agent) localConfig(ctx context.Context) (*config.MachineConfig, config.Provider) {
	if a.LoadLocalConfig == nil {
		return nil, nil
	}
	if src, ok := a.Cmdline.Get(provider.CmdlineConfig); ok && src != "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ConfigTimeout)
	defer cancel()
	cfg, p, err := a.LoadLocalConfig(ctx, a.Cmdline)
	if err != nil {
		if !errors.Is(err, config.ErrNoConfig) {
			a.Log.Warn("local config unusable before the network is up; asking every provider after it", "error", err)
		}
		return nil, nil
	}
	return cfg, p
}
