package agent

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/inventory"
	"github.com/booty-dev/booty/pkg/network"
)

// A setup's slaves are listened on (not the bond), then the other links
// with carrier; each neighbour heard is logged with switch, port and name
// and recorded for the hardware reports, a silent link says so.
func TestStartLLDP(t *testing.T) {
	plan := netPlan{Setup: &network.Setup{
		Bonds: []network.Bond{{Name: "bond0", Mode: network.BondActiveBackup, Interfaces: []string{"eth0", "eth1"}}},
		VLANs: []network.VLAN{{Name: "bond0.5", Link: "bond0", ID: 5}},
		Links: []network.LinkConfig{{Name: "bond0.5", DHCP4: true}},
	}}
	links := lldpLinks(plan, &network.Result{Interface: "bond0.5"}, []string{"eth1", "eth2"})
	if !slices.Equal(links, []string{"eth0", "eth1", "eth2"}) {
		t.Fatalf("links %v, want the bond's slaves, then eth2 with carrier", links)
	}
	if got := lldpLinks(netPlan{}, &network.Result{Interface: "eno1"}, nil); !slices.Equal(got, []string{"eno1"}) {
		t.Errorf("links without a setup %v, want the DHCP link", got)
	}

	var asked []string
	var wait time.Duration
	want := inventory.Neighbor{ChassisID: "aa:bb:cc:dd:ee:ff", PortID: "swp7", SystemName: "leaf-1"}
	a := &Agent{ListenLLDP: func(ctx context.Context, links []string, w time.Duration, heard func(string, inventory.Neighbor)) map[string]inventory.Neighbor {
		asked, wait = links, w
		heard("eth0", want)
		return map[string]inventory.Neighbor{"eth0": want}
	}}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a.outbox = newOutbox(log, &a.neighbours, nil)
	told := 0
	select {
	case <-a.startLLDP(context.Background(), log, links, func() { told++ }):
	case <-time.After(10 * time.Second):
		t.Fatal("listen did not end")
	}
	if !slices.Equal(asked, links) || wait != LLDPWait {
		t.Errorf("listened on %v for %s, want %v for %s", asked, wait, links, LLDPWait)
	}
	if heard, v := a.neighbours.snapshot(); v != 1 || len(heard) != 1 || heard["eth0"].PortID != "swp7" || told != 1 {
		t.Errorf("recorded %+v (version %d, told %d times), want eth0's neighbour once", heard, v, told)
	}
	// The neighbour waits in the outbox for bootyd, as a log line.
	a.outbox.mu.Lock()
	queued := a.outbox.lines
	a.outbox.mu.Unlock()
	if len(queued) != 1 || queued[0].line.Message != "lldp neighbour interface=eth0 switch=aa:bb:cc:dd:ee:ff port=swp7 system=leaf-1 pvid=0" {
		t.Errorf("outbox holds %+v, want eth0's neighbour as one line", queued)
	}
	out := buf.String()
	for _, want := range []string{`msg="lldp neighbour" interface=eth0 switch=aa:bb:cc:dd:ee:ff port=swp7 system=leaf-1`,
		`msg="no lldp neighbour heard" interface=eth1`, `msg="no lldp neighbour heard" interface=eth2`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
