package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/inventory"
	"github.com/booty-dev/booty/pkg/network"
	"github.com/booty-dev/booty/pkg/safego"
)

// LLDPWait bounds the agent's LLDP listen: a switch's default announce
// interval (30 s) and a margin. The listen runs in the background while
// the agent enrolls, waits for its command and writes the image, so it
// adds nothing to a boot; it ends early once every link heard its switch,
// and with the run.
const LLDPWait = 35 * time.Second

// lldpLinks are the links cabled to a switch: a setup's physical links
// (bond slaves, VLAN parents), else the link that got the address, then
// the other links with carrier (carrier), each once.
func lldpLinks(plan netPlan, res *network.Result, carrier []string) []string {
	var links []string
	switch {
	case plan.Setup != nil:
		links = network.PhysicalLinks(plan.Setup)
	case res != nil && res.Interface != "":
		links = []string{res.Interface}
	}
	for _, l := range carrier {
		if !slices.Contains(links, l) {
			links = append(links, l)
		}
	}
	return links
}

// neighbours is what the agent's background LLDP listen heard so far, by
// link. Its version counts the neighbours heard, so a report can tell
// whether it holds the latest ones.
type neighbours struct {
	mu      sync.Mutex
	heard   map[string]inventory.Neighbor
	version int
}

// add records link's neighbour and returns the new version.
func (n *neighbours) add(link string, nb inventory.Neighbor) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.heard == nil {
		n.heard = map[string]inventory.Neighbor{}
	}
	n.heard[link] = nb
	n.version++
	return n.version
}

// snapshot returns a copy of what was heard and its version.
func (n *neighbours) snapshot() (map[string]inventory.Neighbor, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.heard), n.version
}

// known is snapshot without the version: inventory.Collector.Neighbors.
func (n *neighbours) known() map[string]inventory.Neighbor {
	h, _ := n.snapshot()
	return h
}

// startLLDP listens in the background (bounded by LLDPWait and ctx),
// through a.ListenLLDP, for the switch each link is cabled to. Each
// neighbour, as it is heard, is logged (switch chassis ID, port, system
// name), recorded in a.neighbours (which the hardware reports read) and
// passed to heard when not nil; a link that heard none within the bound
// is logged. It returns a channel closed when the listen is over.
func (a *Agent) startLLDP(ctx context.Context, log *slog.Logger, links []string, heard func()) <-chan struct{} {
	done := make(chan struct{})
	if len(links) == 0 || a.ListenLLDP == nil {
		close(done)
		return done
	}
	links = slices.Clone(links)
	go func() {
		defer close(done)
		err := safego.Call("lldp listen", func() error {
			got := a.ListenLLDP(ctx, links, LLDPWait, func(l string, n inventory.Neighbor) {
				log.Info("lldp neighbour", "interface", l, "switch", n.ChassisID, "port", n.PortID,
					"system", n.SystemName, "pvid", n.PVID)
				if a.outbox != nil {
					// bootyd hears it too, as a log line of the machine,
					// whatever the flow (an agent with a config and a
					// token sends no hardware report).
					a.outbox.add(api.LogLine{Time: time.Now(), Level: slog.LevelInfo.String(),
						Message: fmt.Sprintf("lldp neighbour interface=%s switch=%s port=%s system=%s pvid=%d",
							l, n.ChassisID, n.PortID, n.SystemName, n.PVID)})
				}
				a.neighbours.add(l, n)
				if heard != nil {
					heard()
				}
			})
			for _, l := range links {
				if _, ok := got[l]; !ok {
					log.Info("no lldp neighbour heard", "interface", l, "within", LLDPWait)
				}
			}
			return nil
		})
		if err != nil {
			log.Warn("lldp listen failed", "error", err)
		}
	}()
	return done
}
