package provision

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/config"
)

func persistedNetwork() *config.MachineConfig {
	return &config.MachineConfig{Network: config.NetworkSpec{
		Persist: true,
		DNS:     []string{"192.0.2.53"},
		Bonds:   []config.BondSpec{{Name: "bond0", Mode: "active-backup", Interfaces: []string{"eth0", "eth1"}, Primary: "eth0"}},
		VLANs:   []config.VLANSpec{{Link: "bond0", ID: 100}},
		Links:   []config.LinkSpec{{Name: "bond0.100", DHCP4: true, Addresses: []string{"2001:db8::10/64"}}},
	}}
}

// fakeMACs knows eth0 only.
func fakeMACs(names []string) (map[string]string, []string) {
	macs := map[string]string{}
	var missing []string
	for _, n := range names {
		if n == "eth0" {
			macs[n] = "52:54:00:12:34:56"
		} else {
			missing = append(missing, n)
		}
	}
	return macs, missing
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// An image without /etc/netplan gets systemd-networkd files: the bond and
// VLAN netdevs, the slaves matched by permanent MAC (or by name when the
// agent does not know the link), the VLAN's addresses.
func TestConfigureNetworkNetworkd(t *testing.T) {
	c, _ := newTestConfigurator(t)
	c.linkMACs = fakeMACs
	if err := c.ConfigureNetwork(persistedNetwork()); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.rootDir, NetworkdDir)
	want := []string{"10-booty-bond0.100.netdev", "10-booty-bond0.netdev", "20-booty-bond0.100.network", "20-booty-bond0.network",
		"20-booty-eth0.network", "20-booty-eth1.network"}
	if got := listDir(t, dir); !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for file, wants := range map[string][]string{
		"10-booty-bond0.netdev":      {"Kind=bond", "Mode=active-backup", "MIIMonitorSec=100ms"},
		"20-booty-eth0.network":      {"PermanentMACAddress=52:54:00:12:34:56", "Bond=bond0", "PrimarySlave=true"},
		"20-booty-eth1.network":      {"Name=eth1", "Bond=bond0"},
		"20-booty-bond0.network":     {"VLAN=bond0.100"},
		"20-booty-bond0.100.network": {"DHCP=ipv4", "Address=2001:db8::10/64", "DNS=192.0.2.53"},
	} {
		got := read(file)
		for _, w := range wants {
			if !strings.Contains(got, w+"\n") {
				t.Errorf("%s lacks %q:\n%s", file, w, got)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(c.rootDir, NetplanFile)); err == nil {
		t.Error("netplan file written to an image without /etc/netplan")
	}
}

// An image with /etc/netplan gets one netplan file instead, not readable
// by others.
func TestConfigureNetworkNetplan(t *testing.T) {
	c, _ := newTestConfigurator(t)
	c.linkMACs = fakeMACs
	if err := os.MkdirAll(filepath.Join(c.rootDir, NetplanDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigureNetwork(persistedNetwork()); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(c.rootDir, NetplanFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"bonds:", "bond0:", "mode: active-backup", "primary: eth0", "macaddress: \"52:54:00:12:34:56\"", "vlans:", "bond0.100:", "id: 100", "link: bond0", "dhcp4: true"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("netplan file lacks %q:\n%s", w, b)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if got := listDir(t, filepath.Join(c.rootDir, NetworkdDir)); len(got) > 0 {
		t.Errorf("networkd files %v written next to netplan", got)
	}
}

// Without persist nothing is written; a broken section is an error and
// nothing is written.
func TestConfigureNetworkNothingOrBroken(t *testing.T) {
	c, _ := newTestConfigurator(t)
	c.linkMACs = fakeMACs
	cfg := persistedNetwork()
	cfg.Network.Persist = false
	if err := c.ConfigureNetwork(cfg); err != nil {
		t.Fatal(err)
	}
	cfg = persistedNetwork()
	cfg.Network.Bonds[0].Mode = "broadcast"
	err := c.ConfigureNetwork(cfg)
	if err == nil || !strings.Contains(err.Error(), "network.bonds[0].mode") {
		t.Errorf("err %v, want one naming network.bonds[0].mode", err)
	}
	if got := listDir(t, filepath.Join(c.rootDir, NetworkdDir)); len(got) > 0 {
		t.Errorf("files %v written", got)
	}
}
