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

// A setup's slaves are listened on (not the bond); each neighbour heard is
// logged with switch, port and name, a silent link says so.
func TestStartLLDP(t *testing.T) {
	plan := netPlan{Setup: &network.Setup{
		Bonds: []network.Bond{{Name: "bond0", Mode: network.BondActiveBackup, Interfaces: []string{"eth0", "eth1"}}},
		VLANs: []network.VLAN{{Name: "bond0.5", Link: "bond0", ID: 5}},
		Links: []network.LinkConfig{{Name: "bond0.5", DHCP4: true}},
	}}
	links := lldpLinks(plan, &network.Result{Interface: "bond0.5"})
	if !slices.Equal(links, []string{"eth0", "eth1"}) {
		t.Fatalf("links %v, want the bond's slaves", links)
	}
	if got := lldpLinks(netPlan{}, &network.Result{Interface: "eno1"}); !slices.Equal(got, []string{"eno1"}) {
		t.Errorf("links without a setup %v, want the DHCP link", got)
	}

	prev := listenLLDP
	t.Cleanup(func() { listenLLDP = prev })
	var asked []string
	var wait time.Duration
	listenLLDP = func(ctx context.Context, links []string, w time.Duration) map[string]inventory.Neighbor {
		asked, wait = links, w
		return map[string]inventory.Neighbor{"eth0": {ChassisID: "aa:bb:cc:dd:ee:ff", PortID: "swp7", SystemName: "leaf-1"}}
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	select {
	case <-startLLDP(context.Background(), log, links):
	case <-time.After(10 * time.Second):
		t.Fatal("listen did not end")
	}
	if !slices.Equal(asked, links) || wait != LLDPWait {
		t.Errorf("listened on %v for %s, want %v for %s", asked, wait, links, LLDPWait)
	}
	out := buf.String()
	for _, want := range []string{`msg="lldp neighbour" interface=eth0 switch=aa:bb:cc:dd:ee:ff port=swp7 system=leaf-1`,
		`msg="no lldp neighbour heard" interface=eth1`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
