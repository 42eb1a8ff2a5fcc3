package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"
)

// NetworkdFile is one systemd-networkd file: its name under
// /etc/systemd/network and its content.
type NetworkdFile struct {
	Name    string
	Content string
}

// RenderNetworkd returns the systemd-networkd .netdev and .network files
// that bring the installed OS up on the same bonds, VLANs and addresses as
// s: a .netdev per bond and VLAN, a .network per physical link (enslaving
// it, or carrying its VLANs and addresses) and per bond and VLAN. macs maps
// a physical link's name (as the agent saw it) to its permanent MAC: the
// installed OS names links differently, so those are matched by
// PermanentMACAddress (a bond changes its slaves' current MAC); a link
// without one is matched by name.
func RenderNetworkd(s *Setup, macs map[string]string) []NetworkdFile {
	var files []NetworkdFile
	for _, b := range s.Bonds {
		var c strings.Builder
		fmt.Fprintf(&c, "[NetDev]\nName=%s\nKind=bond\n", b.Name)
		if lc := s.linkOf(b.Name); lc != nil && lc.MTU > 0 {
			fmt.Fprintf(&c, "MTUBytes=%d\n", lc.MTU)
		}
		fmt.Fprintf(&c, "\n[Bond]\nMode=%s\n", b.Mode)
		fmt.Fprintf(&c, "MIIMonitorSec=%dms\n", cmp0(b.MIIMon, DefaultMIIMon))
		if b.LACPRate != "" {
			fmt.Fprintf(&c, "LACPTransmitRate=%s\n", b.LACPRate)
		}
		if b.XmitHashPolicy != "" {
			fmt.Fprintf(&c, "TransmitHashPolicy=%s\n", b.XmitHashPolicy)
		}
		files = append(files, NetworkdFile{"10-booty-" + b.Name + ".netdev", header + c.String()})
	}
	for _, v := range s.VLANs {
		var c strings.Builder
		fmt.Fprintf(&c, "[NetDev]\nName=%s\nKind=vlan\n", v.Name)
		if lc := s.linkOf(v.Name); lc != nil && lc.MTU > 0 {
			fmt.Fprintf(&c, "MTUBytes=%d\n", lc.MTU)
		}
		fmt.Fprintf(&c, "\n[VLAN]\nId=%d\n", v.ID)
		files = append(files, NetworkdFile{"10-booty-" + v.Name + ".netdev", header + c.String()})
	}
	for _, name := range append(s.physical(), names(s)...) {
		var c strings.Builder
		c.WriteString("[Match]\n")
		if mac := macs[name]; mac != "" && s.bondOf(name) == nil && s.vlanOf(name) == nil {
			fmt.Fprintf(&c, "PermanentMACAddress=%s\n", mac)
		} else {
			fmt.Fprintf(&c, "Name=%s\n", name)
		}
		lc := s.linkOf(name)
		if lc != nil && lc.MTU > 0 && s.bondOf(name) == nil && s.vlanOf(name) == nil {
			fmt.Fprintf(&c, "\n[Link]\nMTUBytes=%d\n", lc.MTU)
		}
		c.WriteString("\n[Network]\n")
		if b := s.slaveOf(name); b != nil {
			fmt.Fprintf(&c, "Bond=%s\n", b.Name)
			if b.Primary == name {
				c.WriteString("PrimarySlave=true\n")
			}
		}
		for _, v := range s.VLANs {
			if v.Link == name {
				fmt.Fprintf(&c, "VLAN=%s\n", v.Name)
			}
		}
		if lc != nil {
			fmt.Fprintf(&c, "DHCP=%s\n", dhcpMode(lc.DHCP4, lc.DHCP6))
			if lc.AcceptRA != nil {
				fmt.Fprintf(&c, "IPv6AcceptRA=%s\n", yesNo(*lc.AcceptRA))
			}
			for _, a := range lc.Addresses {
				fmt.Fprintf(&c, "Address=%s\n", a)
			}
			if len(lc.Addresses) > 0 || lc.DHCP4 || lc.DHCP6 {
				for _, d := range s.DNS {
					fmt.Fprintf(&c, "DNS=%s\n", d)
				}
				if len(s.Search) > 0 {
					fmt.Fprintf(&c, "Domains=%s\n", strings.Join(s.Search, " "))
				}
			}
			for _, r := range lc.Routes {
				fmt.Fprintf(&c, "\n[Route]\nDestination=%s\n", r.To)
				if r.Via.IsValid() {
					fmt.Fprintf(&c, "Gateway=%s\n", r.Via)
				}
				if r.Metric > 0 {
					fmt.Fprintf(&c, "Metric=%d\n", r.Metric)
				}
			}
		} else if s.slaveOf(name) == nil {
			// A VLAN parent without addresses of its own.
			c.WriteString("LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
		}
		files = append(files, NetworkdFile{"20-booty-" + name + ".network", header + c.String()})
	}
	return files
}

const header = "# Written by booty from the MachineConfig's network: section.\n"

func dhcpMode(v4, v6 bool) string {
	switch {
	case v4 && v6:
		return "yes"
	case v4:
		return "ipv4"
	case v6:
		return "ipv6"
	}
	return "no"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// netplan's YAML (https://netplan.readthedocs.io/en/stable/netplan-yaml/).
type (
	netplanDoc struct {
		Network netplanNetwork `json:"network"`
	}
	netplanNetwork struct {
		Version   int                     `json:"version"`
		Renderer  string                  `json:"renderer,omitempty"`
		Ethernets map[string]netplanIface `json:"ethernets,omitempty"`
		Bonds     map[string]netplanIface `json:"bonds,omitempty"`
		VLANs     map[string]netplanIface `json:"vlans,omitempty"`
	}
	netplanIface struct {
		Match       *netplanMatch      `json:"match,omitempty"`
		Interfaces  []string           `json:"interfaces,omitempty"`
		Parameters  *netplanBondParams `json:"parameters,omitempty"`
		ID          *int               `json:"id,omitempty"`
		Link        string             `json:"link,omitempty"`
		MTU         int                `json:"mtu,omitempty"`
		DHCP4       *bool              `json:"dhcp4,omitempty"`
		DHCP6       *bool              `json:"dhcp6,omitempty"`
		AcceptRA    *bool              `json:"accept-ra,omitempty"`
		Addresses   []string           `json:"addresses,omitempty"`
		Routes      []netplanRoute     `json:"routes,omitempty"`
		Nameservers *netplanNS         `json:"nameservers,omitempty"`
	}
	netplanMatch struct {
		MACAddress string `json:"macaddress"`
	}
	netplanBondParams struct {
		Mode               string `json:"mode"`
		MIIMonitorInterval int    `json:"mii-monitor-interval"`
		LACPRate           string `json:"lacp-rate,omitempty"`
		TransmitHashPolicy string `json:"transmit-hash-policy,omitempty"`
		Primary            string `json:"primary,omitempty"`
	}
	netplanRoute struct {
		To     string `json:"to"`
		Via    string `json:"via,omitempty"`
		Metric int    `json:"metric,omitempty"`
	}
	netplanNS struct {
		Addresses []string `json:"addresses,omitempty"`
		Search    []string `json:"search,omitempty"`
	}
)

// RenderNetplan returns a netplan file (for /etc/netplan) describing s,
// rendered by systemd-networkd; macs is as for RenderNetworkd (netplan
// matches physical links by MAC, keeping the agent's names as their IDs).
func RenderNetplan(s *Setup, macs map[string]string) ([]byte, error) {
	n := netplanNetwork{Version: 2, Renderer: "networkd"}
	put := func(m *map[string]netplanIface, name string, v netplanIface) {
		if *m == nil {
			*m = map[string]netplanIface{}
		}
		(*m)[name] = v
	}
	layer3 := func(v *netplanIface, name string) {
		lc := s.linkOf(name)
		if lc == nil {
			return
		}
		v.MTU = lc.MTU
		v.DHCP4, v.DHCP6, v.AcceptRA = ptr(lc.DHCP4), ptr(lc.DHCP6), lc.AcceptRA
		for _, a := range lc.Addresses {
			v.Addresses = append(v.Addresses, a.String())
		}
		for _, r := range lc.Routes {
			nr := netplanRoute{To: r.To.String(), Metric: r.Metric}
			if r.Via.IsValid() {
				nr.Via = r.Via.String()
			}
			v.Routes = append(v.Routes, nr)
		}
		if (len(lc.Addresses) > 0 || lc.DHCP4 || lc.DHCP6) && (len(s.DNS) > 0 || len(s.Search) > 0) {
			v.Nameservers = &netplanNS{Addresses: addrStrings(s.DNS), Search: slices.Clone(s.Search)}
		}
	}
	for _, name := range s.physical() {
		var v netplanIface
		if mac := macs[name]; mac != "" {
			v.Match = &netplanMatch{MACAddress: mac}
		}
		layer3(&v, name)
		if s.slaveOf(name) == nil && s.linkOf(name) == nil {
			v.DHCP4, v.DHCP6, v.AcceptRA = ptr(false), ptr(false), ptr(false)
		}
		put(&n.Ethernets, name, v)
	}
	for _, b := range s.Bonds {
		v := netplanIface{Interfaces: slices.Clone(b.Interfaces), Parameters: &netplanBondParams{
			Mode: string(b.Mode), MIIMonitorInterval: cmp0(b.MIIMon, DefaultMIIMon),
			LACPRate: b.LACPRate, TransmitHashPolicy: b.XmitHashPolicy, Primary: b.Primary,
		}}
		layer3(&v, b.Name)
		put(&n.Bonds, b.Name, v)
	}
	for _, vl := range s.VLANs {
		v := netplanIface{ID: ptr(vl.ID), Link: vl.Link}
		layer3(&v, vl.Name)
		put(&n.VLANs, vl.Name, v)
	}
	b, err := yaml.Marshal(netplanDoc{Network: n})
	if err != nil {
		return nil, fmt.Errorf("render netplan: %w", err)
	}
	return append([]byte(header), b...), nil
}

func ptr[T any](v T) *T { return &v }

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// PhysicalLinks lists the links s uses but does not create: bond slaves,
// VLAN parents and configured physical links.
func PhysicalLinks(s *Setup) []string { return s.physical() }

// PermanentMACs returns the permanent MAC address of each named link of
// this network namespace (its current one when the driver reports none),
// and the names not found.
func PermanentMACs(names []string) (map[string]string, []string) {
	macs := map[string]string{}
	var missing []string
	for _, n := range names {
		l, err := netlink.LinkByName(n)
		if err != nil {
			missing = append(missing, n)
			continue
		}
		mac := l.Attrs().PermHWAddr
		if len(mac) != 6 || slices.Equal(mac, make([]byte, 6)) {
			mac = l.Attrs().HardwareAddr
		}
		if len(mac) != 6 {
			missing = append(missing, n)
			continue
		}
		macs[n] = mac.String()
	}
	return macs, missing
}
