package network

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/osconfig from the current output")

// rackSetup is an 802.3ad bond with a tagged VLAN carrying static IPv4 and
// IPv6, DHCPv6 and SLAAC, and an active-backup bond with DHCPv4.
func rackSetup() *Setup {
	on := true
	return &Setup{
		Bonds: []Bond{
			{Name: "bond0", Mode: Bond8023AD, Interfaces: []string{"eth0", "eth1"}, MIIMon: 100, LACPRate: "fast", XmitHashPolicy: "layer3+4"},
			{Name: "bond1", Mode: BondActiveBackup, Interfaces: []string{"eth2", "eth3"}, Primary: "eth2"},
		},
		VLANs: []VLAN{{Name: "bond0.100", Link: "bond0", ID: 100}},
		Links: []LinkConfig{
			{Name: "bond0", MTU: 9000},
			{Name: "bond0.100", MTU: 9000, DHCP6: true, AcceptRA: &on,
				Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")},
				Routes: []Route{
					{To: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("192.0.2.1"), Metric: 100},
					{To: netip.MustParsePrefix("198.51.100.0/24"), Via: netip.MustParseAddr("192.0.2.254")},
				}},
			{Name: "bond1", DHCP4: true},
		},
		DNS:    []netip.Addr{netip.MustParseAddr("192.0.2.53")},
		Search: []string{"rack.example"},
	}
}

var rackMACs = map[string]string{"eth0": "52:54:00:00:00:01", "eth1": "52:54:00:00:00:02", "eth2": "52:54:00:00:00:03"}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", "osconfig", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestRenderNetworkd(t *testing.T) {
	var all strings.Builder
	for _, f := range RenderNetworkd(rackSetup(), rackMACs) {
		all.WriteString("=== " + f.Name + "\n" + f.Content)
	}
	golden(t, "networkd.golden", all.String())
	// eth3 has no known MAC: matched by name.
	if !strings.Contains(all.String(), "=== 20-booty-eth3.network\n"+header+"[Match]\nName=eth3\n") {
		t.Error("eth3 without a MAC is not matched by name")
	}
}

func TestRenderNetplan(t *testing.T) {
	b, err := RenderNetplan(rackSetup(), rackMACs)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "netplan.golden", string(b))
}
