package agent

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/booty-dev/booty/pkg/inventory"
	"github.com/booty-dev/booty/pkg/network"
	"github.com/booty-dev/booty/pkg/safego"
)

// LLDPWait bounds the agent's LLDP listen: a switch's default announce
// interval (30 s) and a margin. The listen runs in the background while
// the config loads and the image is written, so it adds nothing to a
// boot; it ends early once every link heard its switch, and with the run.
const LLDPWait = 35 * time.Second

// listenLLDP is inventory.ListenLLDP; tests replace it.
var listenLLDP = inventory.ListenLLDP

// lldpLinks are the links cabled to a switch: a setup's physical links
// (bond slaves, VLAN parents), else the link that got the address.
func lldpLinks(plan netPlan, res *network.Result) []string {
	if plan.Setup != nil {
		return network.PhysicalLinks(plan.Setup)
	}
	if res != nil && res.Interface != "" {
		return []string{res.Interface}
	}
	return nil
}

// startLLDP listens in the background (bounded by LLDPWait and ctx) for
// the switch each link is cabled to and logs each neighbour (switch
// chassis ID, port, system name) or that a link heard none. It returns a
// channel closed when the listen is over.
func startLLDP(ctx context.Context, log *slog.Logger, links []string) <-chan struct{} {
	done := make(chan struct{})
	if len(links) == 0 {
		close(done)
		return done
	}
	links = slices.Clone(links)
	go func() {
		defer close(done)
		err := safego.Call("lldp listen", func() error {
			heard := listenLLDP(ctx, links, LLDPWait)
			for _, l := range links {
				n, ok := heard[l]
				if !ok {
					log.Info("no lldp neighbour heard", "interface", l, "within", LLDPWait)
					continue
				}
				log.Info("lldp neighbour", "interface", l, "switch", n.ChassisID, "port", n.PortID,
					"system", n.SystemName, "pvid", n.PVID)
			}
			return nil
		})
		if err != nil {
			log.Warn("lldp listen failed", "error", err)
		}
	}()
	return done
}
