package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Setup is a full network description: bonds and VLANs to create, and the
// MTU and layer-3 configuration of any link (physical, bond or VLAN). It is
// what the MachineConfig's network: section describes; the agent applies it
// with Configure (Options.Setup) and the installed OS receives it as
// systemd-networkd or netplan files (RenderNetworkd, RenderNetplan). Every
// value is parsed by the Parse* functions of this package, which the
// config's validation calls too.
type Setup struct {
	Bonds []Bond
	VLANs []VLAN
	Links []LinkConfig
	// DNS resolvers and search domains, for the agent and the installed OS.
	DNS    []netip.Addr
	Search []string
}

// BondMode is a bonding mode this package configures.
type BondMode string

// Bond modes.
const (
	BondActiveBackup BondMode = "active-backup"
	Bond8023AD       BondMode = "802.3ad"
)

// Bond is a bonding device over Interfaces.
type Bond struct {
	Name       string
	Mode       BondMode
	Interfaces []string
	// MIIMon is the link monitoring interval in milliseconds (DefaultMIIMon when 0).
	MIIMon int
	// LACPRate ("slow", "fast") and XmitHashPolicy apply to 802.3ad; empty
	// leaves the kernel's default.
	LACPRate       string
	XmitHashPolicy string
	// Primary is the preferred slave of active-backup; empty means none.
	Primary string
}

// DefaultMIIMon is the link monitoring interval of a bond whose config
// gives none: without monitoring the kernel never fails over.
const DefaultMIIMon = 100

// VLAN is an 802.1Q VLAN device on Link (a physical link or a bond).
type VLAN struct {
	Name string
	Link string
	ID   int
}

// LinkConfig is the MTU and addressing of one link.
type LinkConfig struct {
	Name string
	// MTU to set; 0 leaves it alone.
	MTU   int
	DHCP4 bool
	DHCP6 bool
	// AcceptRA sets the link's IPv6 router advertisement handling (SLAAC);
	// nil leaves the kernel's default.
	AcceptRA  *bool
	Addresses []netip.Prefix
	Routes    []Route
}

// Route is a static route out of a link.
type Route struct {
	// To is the destination; 0.0.0.0/0 or ::/0 is the default route.
	To netip.Prefix
	// Via is the gateway; invalid means the destination is on the link.
	Via    netip.Addr
	Metric int
}

// ParseBondMode parses a bonding mode: "active-backup" or "802.3ad".
func ParseBondMode(s string) (BondMode, error) {
	switch m := BondMode(s); m {
	case BondActiveBackup, Bond8023AD:
		return m, nil
	}
	return "", fmt.Errorf("want a bond mode %q or %q, got %q", BondActiveBackup, Bond8023AD, s)
}

// lacpRates and xmitHashPolicies are the spellings the kernel (and
// systemd-networkd, netplan) accept.
var (
	lacpRates        = []string{"slow", "fast"}
	xmitHashPolicies = []string{"layer2", "layer3+4", "layer2+3", "encap2+3", "encap3+4"}
)

// ParseLACPRate checks an 802.3ad LACP rate: "slow" or "fast".
func ParseLACPRate(s string) (string, error) {
	if !slices.Contains(lacpRates, s) {
		return "", fmt.Errorf("want a LACP rate %s, got %q", strings.Join(lacpRates, " or "), s)
	}
	return s, nil
}

// ParseXmitHashPolicy checks a bond transmit hash policy (layer2,
// layer2+3, layer3+4, encap2+3, encap3+4).
func ParseXmitHashPolicy(s string) (string, error) {
	if !slices.Contains(xmitHashPolicies, s) {
		return "", fmt.Errorf("want a transmit hash policy (%s), got %q", strings.Join(xmitHashPolicies, ", "), s)
	}
	return s, nil
}

// CheckMIIMon checks a bond's link monitoring interval in milliseconds.
func CheckMIIMon(ms int) error {
	if ms < 0 || ms > 60000 {
		return fmt.Errorf("want a link monitoring interval between 0 and 60000 ms, got %d", ms)
	}
	return nil
}

// CheckVLANID checks an 802.1Q VLAN ID (1 to 4094).
func CheckVLANID(id int) error {
	if id < 1 || id > 4094 {
		return fmt.Errorf("want a VLAN ID between 1 and 4094, got %d", id)
	}
	return nil
}

// VLANName is the name of a VLAN device whose config gives none: link.id.
func VLANName(link string, id int) string { return link + "." + strconv.Itoa(id) }

// CheckMTU checks a link MTU: 68 (the IPv4 minimum) to 65535.
func CheckMTU(mtu int) error {
	if mtu < 68 || mtu > 65535 {
		return fmt.Errorf("want an MTU between 68 and 65535, got %d", mtu)
	}
	return nil
}

// ParseAddress parses a host address with its prefix length, IPv4 or IPv6,
// such as "192.0.2.10/24" or "2001:db8::10/64". The address must be usable
// by a host: not the network's zero address of an IPv4 prefix shorter than
// /31, not multicast, not unspecified.
func ParseAddress(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("want an address in CIDR form like \"192.0.2.10/24\" or \"2001:db8::10/64\", got %q", s)
	}
	a := p.Addr()
	switch {
	case a.Zone() != "":
		return netip.Prefix{}, fmt.Errorf("%q: an address with a zone cannot be configured", s)
	case a.IsUnspecified(), a.IsMulticast(), a.Is4() && a == netip.IPv4Unspecified():
		return netip.Prefix{}, fmt.Errorf("%q is not a host address", s)
	case a.Is4() && p.Bits() < 31 && p.Masked().Addr() == a:
		return netip.Prefix{}, fmt.Errorf("%q is the network's own address, not a host's", s)
	}
	return p, nil
}

// ParseRouteTo parses a route destination: "default" (with the family of
// via), or a prefix in CIDR form whose host bits are zero.
func ParseRouteTo(s string, via netip.Addr) (netip.Prefix, error) {
	if s == "default" {
		switch {
		case via.Is4():
			return netip.PrefixFrom(netip.IPv4Unspecified(), 0), nil
		case via.Is6():
			return netip.PrefixFrom(netip.IPv6Unspecified(), 0), nil
		}
		return netip.Prefix{}, fmt.Errorf("\"default\" needs a gateway (via) to tell its address family")
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("want \"default\" or a prefix in CIDR form like \"198.51.100.0/24\", got %q", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
	}
	if via.IsValid() && via.Is4() != p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%s and its gateway %s are of different address families", p, via)
	}
	return p, nil
}

// ParseGateway parses a route's gateway (via), IPv4 or IPv6.
func ParseGateway(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.IsUnspecified() || a.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("want a gateway IP address, got %q", s)
	}
	return a, nil
}

// CheckMetric checks a route metric.
func CheckMetric(m int) error {
	if m < 0 || int64(m) > 0xffffffff {
		return fmt.Errorf("want a route metric between 0 and 4294967295, got %d", m)
	}
	return nil
}

// bondOf returns the bond named name, or nil.
func (s *Setup) bondOf(name string) *Bond {
	for i := range s.Bonds {
		if s.Bonds[i].Name == name {
			return &s.Bonds[i]
		}
	}
	return nil
}

// vlanOf returns the VLAN named name, or nil.
func (s *Setup) vlanOf(name string) *VLAN {
	for i := range s.VLANs {
		if s.VLANs[i].Name == name {
			return &s.VLANs[i]
		}
	}
	return nil
}

// linkOf returns the link config of name, or nil.
func (s *Setup) linkOf(name string) *LinkConfig {
	for i := range s.Links {
		if s.Links[i].Name == name {
			return &s.Links[i]
		}
	}
	return nil
}

// physical lists the links the setup uses but does not create (bond
// slaves, VLAN parents and configured links that are neither a bond nor a
// VLAN), in order of first mention.
func (s *Setup) physical() []string {
	var out []string
	add := func(n string) {
		if s.bondOf(n) == nil && s.vlanOf(n) == nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, b := range s.Bonds {
		for _, i := range b.Interfaces {
			add(i)
		}
	}
	for _, v := range s.VLANs {
		add(v.Link)
	}
	for _, l := range s.Links {
		add(l.Name)
	}
	return out
}

// slaveOf returns the bond that enslaves name, or nil.
func (s *Setup) slaveOf(name string) *Bond {
	for i := range s.Bonds {
		if slices.Contains(s.Bonds[i].Interfaces, name) {
			return &s.Bonds[i]
		}
	}
	return nil
}

// Check returns the problems of the setup as a whole, each naming what is
// wrong: duplicate names, a bond slave that is also a VLAN parent or has
// addresses, a primary that is not a slave, 802.3ad options on another
// mode, a VLAN on a VLAN or on a bond slave, a link configured twice.
// Values are assumed parsed by the Parse* functions. path(kind, i) names
// an element for the messages (e.g. "network.bonds[0]").
func (s *Setup) Check(path func(kind string, i int) string) []string {
	var probs []string
	add := func(where, format string, args ...any) {
		probs = append(probs, where+": "+fmt.Sprintf(format, args...))
	}
	names := map[string]string{}
	claim := func(name, where string) {
		if prev, ok := names[name]; ok {
			add(where, "name %q is already used by %s", name, prev)
			return
		}
		names[name] = where
	}
	slaves := map[string]string{}
	for i, b := range s.Bonds {
		w := path("bonds", i)
		claim(b.Name, w)
		if len(b.Interfaces) == 0 {
			add(w+".interfaces", "a bond needs at least one interface")
		}
		for _, n := range b.Interfaces {
			if prev, ok := slaves[n]; ok {
				add(w+".interfaces", "%q is already a slave of %s", n, prev)
			}
			slaves[n] = w
			if s.bondOf(n) != nil || s.vlanOf(n) != nil {
				add(w+".interfaces", "%q is a bond or VLAN; bond slaves must be physical links", n)
			}
			if l := s.linkOf(n); l != nil && (l.DHCP4 || l.DHCP6 || len(l.Addresses) > 0 || len(l.Routes) > 0) {
				add(w+".interfaces", "%q has addresses or DHCP under links; configure the bond %s instead", n, b.Name)
			}
		}
		if b.Primary != "" && !slices.Contains(b.Interfaces, b.Primary) {
			add(w+".primary", "%q is not one of the bond's interfaces %v", b.Primary, b.Interfaces)
		}
		if b.Primary != "" && b.Mode != BondActiveBackup {
			add(w+".primary", "only applies to mode %s", BondActiveBackup)
		}
		if b.Mode != Bond8023AD && (b.LACPRate != "" || b.XmitHashPolicy != "") {
			add(w, "lacpRate and xmitHashPolicy only apply to mode %s", Bond8023AD)
		}
	}
	for i, v := range s.VLANs {
		w := path("vlans", i)
		claim(v.Name, w)
		if s.vlanOf(v.Link) != nil {
			add(w+".link", "%q is a VLAN; VLANs go on a physical link or a bond", v.Link)
		}
		if _, ok := slaves[v.Link]; ok {
			add(w+".link", "%q is a bond slave; put the VLAN on the bond", v.Link)
		}
		if vc, pc := s.linkOf(v.Name), s.linkOf(v.Link); vc != nil && pc != nil && vc.MTU > 0 && pc.MTU > 0 && vc.MTU > pc.MTU {
			add(w, "the VLAN's MTU %d is larger than the MTU %d of its link %s", vc.MTU, pc.MTU, v.Link)
		}
	}
	seen := map[string]bool{}
	for i, l := range s.Links {
		w := path("links", i)
		if seen[l.Name] {
			add(w+".name", "%q is configured twice", l.Name)
		}
		seen[l.Name] = true
	}
	return probs
}
