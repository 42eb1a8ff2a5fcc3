// Package network brings up the agent's own network inside the initramfs:
// it parses the kernel's ip= parameter, raises links, waits for carrier,
// runs DHCPv4 on every candidate link in parallel or applies a static
// configuration, and writes resolv.conf.
package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode"
)

// Method is how a link gets its address.
type Method string

// Methods of StaticConfig.
const (
	MethodDHCP   Method = "dhcp"
	MethodStatic Method = "static"
	// MethodOff raises no address: the kernel command line said ip=off.
	MethodOff Method = "off"
)

// ErrInvalidIPParam is wrapped by every ParseIPParam error.
var ErrInvalidIPParam = errors.New("invalid ip= parameter")

// StaticConfig is a network configuration asked for by the kernel's ip=
// parameter or the MachineConfig. With Method MethodStatic the Address,
// Gateway and DNS fields apply; with MethodDHCP only Device (and Hostname,
// sent to the server) matter.
type StaticConfig struct {
	Method Method
	// Address is the client address with its prefix length.
	Address netip.Prefix
	// Server is the NFS/boot server (ip= field 2); informational.
	Server  netip.Addr
	Gateway netip.Addr
	// Hostname is the client's name (ip= field 5).
	Hostname string
	// Device limits configuration to one link; empty means any link with carrier.
	Device string
	DNS    []netip.Addr
	NTP    []netip.Addr
	// Search domains written to resolv.conf (not expressible in ip=).
	Search []string
	// MTU to set on the link; 0 leaves it alone.
	MTU int
}

// ipFieldNames are the colon-separated fields of ip=, in order
// (Documentation/admin-guide/nfs/nfsroot.rst).
var ipFieldNames = []string{"client-ip", "server-ip", "gw-ip", "netmask", "hostname", "device", "autoconf", "dns0-ip", "dns1-ip", "ntp0-ip"}

// ParseIPParam parses the value of the kernel's ip= parameter (without
// "ip="):
//
//	<client-ip>:<server-ip>:<gw-ip>:<netmask>:<hostname>:<device>:<autoconf>:<dns0-ip>:<dns1-ip>:<ntp0-ip>
//
// or one of the short forms off/none, on/any/dhcp/bootp/both, and dracut's
// <device>:dhcp. client-ip may carry a prefix length ("10.0.0.5/24") instead
// of a netmask; without either the classful mask applies, as in the kernel.
// A client-ip with autoconf empty, off or none is MethodStatic; no client-ip
// with off/none is MethodOff; everything else is MethodDHCP (rarp is not
// supported). Errors wrap ErrInvalidIPParam and name the bad field.
func ParseIPParam(s string) (*StaticConfig, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty value", ErrInvalidIPParam)
	}
	if !strings.Contains(s, ":") && !looksLikeIPv4(s) {
		m, err := autoconfMethod(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrInvalidIPParam, s, err)
		}
		return &StaticConfig{Method: m}, nil
	}
	fields := strings.Split(s, ":")
	if len(fields) > len(ipFieldNames) {
		return nil, fmt.Errorf("%w: %q has %d fields, at most %d (IPv6 addresses are not supported)", ErrInvalidIPParam, s, len(fields), len(ipFieldNames))
	}
	// dracut's "<device>:dhcp" form.
	if len(fields) == 2 && !looksLikeIPv4(fields[0]) {
		m, err := autoconfMethod(fields[1])
		if err != nil || m == MethodStatic {
			return nil, fmt.Errorf("%w: %q: expected <device>:<autoconf>", ErrInvalidIPParam, s)
		}
		if err := checkDevice(fields[0]); err != nil {
			return nil, fmt.Errorf("%w: device %q: %w", ErrInvalidIPParam, fields[0], err)
		}
		return &StaticConfig{Method: m, Device: fields[0]}, nil
	}
	for len(fields) < len(ipFieldNames) {
		fields = append(fields, "")
	}
	bad := func(i int, err error) error {
		return fmt.Errorf("%w: field %d (%s) %q: %w", ErrInvalidIPParam, i+1, ipFieldNames[i], fields[i], err)
	}
	addr := func(i int) (netip.Addr, error) {
		if fields[i] == "" {
			return netip.Addr{}, nil
		}
		a, err := netip.ParseAddr(fields[i])
		if err != nil || !a.Is4() {
			return netip.Addr{}, bad(i, errors.New("not an IPv4 address"))
		}
		return a, nil
	}
	c := &StaticConfig{Hostname: fields[4], Device: fields[5]}
	var client netip.Addr
	bits := -1
	if f := fields[0]; f != "" {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() {
			client, bits = p.Addr(), p.Bits()
		} else if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
			client = a
		} else {
			return nil, bad(0, errors.New("not an IPv4 address or CIDR"))
		}
	}
	var err error
	if c.Server, err = addr(1); err != nil {
		return nil, err
	}
	if c.Gateway, err = addr(2); err != nil {
		return nil, err
	}
	if fields[3] != "" {
		mask, err := addr(3)
		if err != nil {
			return nil, err
		}
		n, ok := maskBits(mask)
		if !ok {
			return nil, bad(3, errors.New("not a contiguous netmask"))
		}
		if bits >= 0 && bits != n {
			return nil, bad(3, fmt.Errorf("contradicts prefix length /%d of client-ip", bits))
		}
		bits = n
	}
	if len(c.Hostname) > 64 {
		return nil, bad(4, errors.New("longer than 64 characters"))
	}
	if c.Device != "" {
		if err := checkDevice(c.Device); err != nil {
			return nil, bad(5, err)
		}
	}
	auto := Method("")
	if fields[6] != "" {
		if auto, err = autoconfMethod(fields[6]); err != nil {
			return nil, bad(6, err)
		}
	}
	for _, i := range []int{7, 8} {
		a, err := addr(i)
		if err != nil {
			return nil, err
		}
		if a.IsValid() {
			c.DNS = append(c.DNS, a)
		}
	}
	ntp, err := addr(9)
	if err != nil {
		return nil, err
	}
	if ntp.IsValid() {
		c.NTP = append(c.NTP, ntp)
	}

	switch {
	case client.IsValid() && (auto == "" || auto == MethodOff):
		c.Method = MethodStatic
		if bits < 0 {
			bits = classfulBits(client)
		}
		c.Address = netip.PrefixFrom(client, bits)
		if c.Gateway.IsValid() && c.Gateway == client {
			return nil, bad(2, errors.New("equals the client address"))
		}
	case auto == MethodOff:
		c.Method = MethodOff
	default:
		c.Method = MethodDHCP
		if client.IsValid() {
			if bits < 0 {
				bits = classfulBits(client)
			}
			c.Address = netip.PrefixFrom(client, bits)
		}
	}
	return c, nil
}

// autoconfMethod maps an ip= autoconf value to a Method. Static here means
// "off" with an address; the caller decides.
func autoconfMethod(v string) (Method, error) {
	switch strings.ToLower(v) {
	case "off", "none":
		return MethodOff, nil
	case "on", "any", "dhcp", "bootp", "both":
		return MethodDHCP, nil
	case "rarp":
		return "", errors.New("rarp autoconfiguration is not supported, use dhcp")
	}
	return "", fmt.Errorf("unknown autoconf %q (want off, none, on, any, dhcp, bootp or both)", v)
}

func checkDevice(name string) error { return CheckLinkName(name) }

// CheckLinkName checks a network interface name as the kernel's
// dev_valid_name does: 1-15 bytes, not "." or "..", no '/', ':', whitespace
// or control characters (a NUL would cut the name short in netlink). It is
// the one grammar of a link name: config.Validate, ip= and the static
// network configuration all call it.
func CheckLinkName(name string) error {
	switch {
	case name == "":
		return errors.New("interface name is empty")
	case len(name) > 15:
		return errors.New("interface names are at most 15 characters")
	case name == "." || name == "..":
		return fmt.Errorf("%q is not an interface name", name)
	}
	for _, r := range name {
		if r == '/' || r == ':' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("interface name contains %q (no '/', ':', whitespace or control characters)", r)
		}
	}
	return nil
}

func looksLikeIPv4(s string) bool {
	if s == "" {
		return true // an empty client-ip field
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Is4()
	}
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}

// maskBits returns the prefix length of a dotted netmask.
func maskBits(mask netip.Addr) (int, bool) {
	b := mask.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n := 0
	for v&0x80000000 != 0 {
		n++
		v <<= 1
	}
	return n, v == 0
}

// classfulBits is the kernel's default netmask for an address without one.
func classfulBits(a netip.Addr) int {
	switch b := a.As4()[0]; {
	case b < 128:
		return 8
	case b < 192:
		return 16
	default:
		return 24
	}
}

// ParseStatic builds a MethodStatic config from the MachineConfig's network
// fields (config.NetworkSpec: Interface, Address in CIDR form, Gateway, DNS).
// Errors wrap ErrInvalidIPParam and name the bad field.
func ParseStatic(device, address, gateway string, dns []string) (*StaticConfig, error) {
	c := &StaticConfig{Method: MethodStatic, Device: device}
	p, err := netip.ParsePrefix(address)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("%w: address %q: not an IPv4 address in CIDR form", ErrInvalidIPParam, address)
	}
	c.Address = p
	if gateway != "" {
		if c.Gateway, err = netip.ParseAddr(gateway); err != nil || !c.Gateway.Is4() {
			return nil, fmt.Errorf("%w: gateway %q: not an IPv4 address", ErrInvalidIPParam, gateway)
		}
	}
	for _, d := range dns {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return nil, fmt.Errorf("%w: dns %q: not an IP address", ErrInvalidIPParam, d)
		}
		c.DNS = append(c.DNS, a)
	}
	if device != "" {
		if err := checkDevice(device); err != nil {
			return nil, fmt.Errorf("%w: interface %q: %w", ErrInvalidIPParam, device, err)
		}
	}
	return c, nil
}
