package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/booty-dev/booty/pkg/network"
)

// BondSpec is a bonding device of the network: section.
type BondSpec struct {
	Name string `json:"name"`
	// Mode is "active-backup" or "802.3ad".
	Mode string `json:"mode"`
	// Interfaces are the links enslaved, by the name the agent sees.
	Interfaces []string `json:"interfaces"`
	// MIIMon is the link monitoring interval in ms (default 100).
	MIIMon int `json:"miimon,omitempty"`
	// LACPRate ("slow", "fast") and XmitHashPolicy (layer2, layer2+3,
	// layer3+4, encap2+3, encap3+4) apply to 802.3ad.
	LACPRate       string `json:"lacpRate,omitempty"`
	XmitHashPolicy string `json:"xmitHashPolicy,omitempty"`
	// Primary is the preferred interface of active-backup.
	Primary string `json:"primary,omitempty"`
}

// VLANSpec is an 802.1Q VLAN on a link or bond.
type VLANSpec struct {
	// Name defaults to link.id, e.g. "bond0.100".
	Name string `json:"name,omitempty"`
	Link string `json:"link"`
	ID   int    `json:"id"`
}

// LinkSpec is the MTU and addressing of one link (physical, bond or VLAN).
type LinkSpec struct {
	Name  string `json:"name"`
	MTU   int    `json:"mtu,omitempty"`
	DHCP4 bool   `json:"dhcp4,omitempty"`
	DHCP6 bool   `json:"dhcp6,omitempty"`
	// AcceptRA turns IPv6 router advertisements (SLAAC) on or off; unset
	// keeps the kernel's default.
	AcceptRA *bool `json:"acceptRA,omitempty"`
	// Addresses are static addresses in CIDR form, IPv4 or IPv6.
	Addresses []string    `json:"addresses,omitempty"`
	Routes    []RouteSpec `json:"routes,omitempty"`
}

// RouteSpec is a static route out of a link.
type RouteSpec struct {
	// To is "default" or a prefix in CIDR form.
	To     string `json:"to"`
	Via    string `json:"via,omitempty"`
	Metric int    `json:"metric,omitempty"`
}

// HasSetup reports whether the section describes bonds, VLANs or links,
// which replace interface/address/gateway.
func (n NetworkSpec) HasSetup() bool {
	return len(n.Bonds) > 0 || len(n.VLANs) > 0 || len(n.Links) > 0
}

// Setup parses the bonds, VLANs and links of the section (with dns) into
// what the network package applies and renders; nil when HasSetup is
// false. Every value goes through the network package's parsers, the
// same ones validation uses; an error lists every problem.
func (n NetworkSpec) Setup() (*network.Setup, error) {
	var probs []string
	s := n.setup(func(field, format string, args ...any) {
		probs = append(probs, field+": "+fmt.Sprintf(format, args...))
	})
	if len(probs) > 0 {
		return nil, errors.New(strings.Join(probs, "; "))
	}
	return s, nil
}

// setup converts the section, calling add for each bad value (with its
// field path) and each problem of the whole (network.Setup.Check).
func (n NetworkSpec) setup(add func(field, format string, args ...any)) *network.Setup {
	if !n.HasSetup() {
		return nil
	}
	s := &network.Setup{}
	name := func(field, v string) {
		if err := network.CheckLinkName(v); err != nil {
			add(field, "%q: %v", v, err)
		}
	}
	if n.Interface != "" || n.Address != "" || n.Gateway != "" {
		add("network", "interface, address and gateway cannot be combined with bonds, vlans or links; give addresses and routes under links")
	}
	for i, b := range n.Bonds {
		f := fmt.Sprintf("network.bonds[%d]", i)
		name(f+".name", b.Name)
		mode, err := network.ParseBondMode(b.Mode)
		if err != nil {
			add(f+".mode", "%v", err)
		}
		for j, in := range b.Interfaces {
			name(fmt.Sprintf("%s.interfaces[%d]", f, j), in)
		}
		if err := network.CheckMIIMon(b.MIIMon); err != nil {
			add(f+".miimon", "%v", err)
		}
		nb := network.Bond{Name: b.Name, Mode: mode, Interfaces: slices.Clone(b.Interfaces), MIIMon: b.MIIMon, Primary: b.Primary}
		if b.LACPRate != "" {
			if nb.LACPRate, err = network.ParseLACPRate(b.LACPRate); err != nil {
				add(f+".lacpRate", "%v", err)
			}
		}
		if b.XmitHashPolicy != "" {
			if nb.XmitHashPolicy, err = network.ParseXmitHashPolicy(b.XmitHashPolicy); err != nil {
				add(f+".xmitHashPolicy", "%v", err)
			}
		}
		s.Bonds = append(s.Bonds, nb)
	}
	for i, v := range n.VLANs {
		f := fmt.Sprintf("network.vlans[%d]", i)
		name(f+".link", v.Link)
		if err := network.CheckVLANID(v.ID); err != nil {
			add(f+".id", "%v", err)
		}
		nv := network.VLAN{Name: v.Name, Link: v.Link, ID: v.ID}
		if nv.Name == "" {
			nv.Name = network.VLANName(v.Link, v.ID)
			if err := network.CheckLinkName(nv.Name); err != nil {
				add(f+".name", "the default name %q: %v; give a shorter name", nv.Name, err)
			}
		} else {
			name(f+".name", v.Name)
		}
		s.VLANs = append(s.VLANs, nv)
	}
	for i, l := range n.Links {
		f := fmt.Sprintf("network.links[%d]", i)
		name(f+".name", l.Name)
		nl := network.LinkConfig{Name: l.Name, MTU: l.MTU, DHCP4: l.DHCP4, DHCP6: l.DHCP6, AcceptRA: l.AcceptRA}
		if l.MTU != 0 {
			if err := network.CheckMTU(l.MTU); err != nil {
				add(f+".mtu", "%v", err)
			}
		}
		for j, a := range l.Addresses {
			p, err := network.ParseAddress(a)
			if err != nil {
				add(fmt.Sprintf("%s.addresses[%d]", f, j), "%v", err)
				continue
			}
			nl.Addresses = append(nl.Addresses, p)
		}
		for j, r := range l.Routes {
			rf := fmt.Sprintf("%s.routes[%d]", f, j)
			var nr network.Route
			var err error
			if r.Via != "" {
				if nr.Via, err = network.ParseGateway(r.Via); err != nil {
					add(rf+".via", "%v", err)
					continue
				}
			}
			if nr.To, err = network.ParseRouteTo(r.To, nr.Via); err != nil {
				add(rf+".to", "%v", err)
				continue
			}
			if err := network.CheckMetric(r.Metric); err != nil {
				add(rf+".metric", "%v", err)
			}
			nr.Metric = r.Metric
			if nr.Via.Is4() && !l.DHCP4 && !slices.ContainsFunc(nl.Addresses, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
				add(rf+".via", "IPv4 gateway %s but the link has no IPv4 address or dhcp4", nr.Via)
			}
			nl.Routes = append(nl.Routes, nr)
		}
		s.Links = append(s.Links, nl)
	}
	for _, d := range n.DNS {
		if a, err := netip.ParseAddr(d); err == nil {
			s.DNS = append(s.DNS, a) // bad ones are reported by validate
		}
	}
	s.Search = slices.Clone(n.Search)
	for _, p := range s.Check(func(kind string, i int) string { return fmt.Sprintf("network.%s[%d]", kind, i) }) {
		field, msg, _ := strings.Cut(p, ": ")
		add(field, "%s", msg)
	}
	return s
}

// clone returns a deep copy of n.
func (n NetworkSpec) clone() NetworkSpec {
	r := n
	r.DNS = slices.Clone(n.DNS)
	r.Bonds = nil
	for _, b := range n.Bonds {
		b.Interfaces = slices.Clone(b.Interfaces)
		r.Bonds = append(r.Bonds, b)
	}
	r.VLANs = slices.Clone(n.VLANs)
	r.Links = nil
	for _, l := range n.Links {
		l.Addresses = slices.Clone(l.Addresses)
		l.Routes = slices.Clone(l.Routes)
		if l.AcceptRA != nil {
			v := *l.AcceptRA
			l.AcceptRA = &v
		}
		r.Links = append(r.Links, l)
	}
	return r
}
