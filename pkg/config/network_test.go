package config

import (
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/booty-dev/booty/pkg/network"
)

// The valid example converts to the Setup the agent applies: default VLAN
// names, "default" routes in the gateway's family, DNS and search.
func TestNetworkSpecSetup(t *testing.T) {
	b, err := os.ReadFile("testdata/valid/network-bond.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cfg.Network.Setup()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bonds) != 2 || s.Bonds[0].Mode != network.Bond8023AD || s.Bonds[0].LACPRate != "fast" || s.Bonds[1].Primary != "eno3" {
		t.Errorf("bonds %+v", s.Bonds)
	}
	if len(s.VLANs) != 2 || s.VLANs[0].Name != "bond0.100" || s.VLANs[1].Name != "storage" || s.VLANs[1].ID != 200 {
		t.Errorf("vlans %+v", s.VLANs)
	}
	l := s.Links[1]
	if l.Name != "bond0.100" || l.MTU != 9000 || !l.DHCP6 || l.AcceptRA == nil || !*l.AcceptRA ||
		!slices.Equal(l.Addresses, []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")}) {
		t.Errorf("link %+v", l)
	}
	want := []network.Route{
		{To: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("192.0.2.1"), Metric: 100},
		{To: netip.MustParsePrefix("198.51.100.0/24"), Via: netip.MustParseAddr("192.0.2.254")},
		{To: netip.MustParsePrefix("::/0"), Via: netip.MustParseAddr("2001:db8::1")},
	}
	if !slices.Equal(l.Routes, want) {
		t.Errorf("routes %+v, want %+v", l.Routes, want)
	}
	if len(s.DNS) != 2 || !slices.Equal(s.Search, []string{"rack.example"}) {
		t.Errorf("dns %v search %v", s.DNS, s.Search)
	}

	// The clone is deep: changing it leaves the original alone.
	c := cfg.Clone()
	c.Network.Bonds[0].Interfaces[0] = "x"
	c.Network.Links[1].Routes[0].Via = "x"
	*c.Network.Links[1].AcceptRA = false
	if cfg.Network.Bonds[0].Interfaces[0] != "eno1" || cfg.Network.Links[1].Routes[0].Via != "192.0.2.1" || !*cfg.Network.Links[1].AcceptRA {
		t.Error("Clone shares the network section with the original")
	}

	// Without bonds, VLANs or links there is no setup.
	if s, err := (NetworkSpec{Address: "192.0.2.10/24"}).Setup(); s != nil || err != nil {
		t.Errorf("Setup of the simple form = %v, %v; want nil, nil", s, err)
	}
}
