package bmc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Protocol is the wire protocol a driver speaks.
type Protocol string

// Protocols.
const (
	ProtocolIPMI    Protocol = "ipmi"
	ProtocolRedfish Protocol = "redfish"
)

// DefaultIPMIPort is the RMCP port of an ipmi:// address without one.
const DefaultIPMIPort = 623

// ErrBadAddress is wrapped by every error of ParseAddress.
var ErrBadAddress = errors.New("invalid bmc address")

// Address is a parsed BMC address as metal3 writes it in a BareMetalHost.
type Address struct {
	// Raw is the address as given.
	Raw string
	// Scheme is the address's scheme, lower case: ipmi, redfish,
	// redfish-virtualmedia, idrac-redfish, redfish+http...
	Scheme string
	// Protocol is what the scheme maps to.
	Protocol Protocol
	// Host is the host name or IP, without brackets.
	Host string
	// Port is the port; for Redfish 0 means the scheme's default (443, or 80
	// over plain http).
	Port int
	// HTTP is true for a Redfish address that asks for plain http
	// ("redfish+http://", "http" in the scheme); Redfish is https otherwise.
	HTTP bool
	// SystemPath is the path of the ComputerSystem resource of a Redfish
	// address ("/redfish/v1/Systems/1"); empty when the address names none,
	// then the driver picks the only member of /redfish/v1/Systems.
	SystemPath string
	// VirtualMedia is true for the virtual media variants
	// (redfish-virtualmedia, idrac-virtualmedia, ilo5-virtualmedia...).
	VirtualMedia bool
}

// HostPort returns host:port, with brackets around an IPv6 host and the
// default port filled in.
func (a Address) HostPort() string {
	port := a.Port
	if port == 0 {
		switch {
		case a.Protocol == ProtocolIPMI:
			port = DefaultIPMIPort
		case a.HTTP:
			port = 80
		default:
			port = 443
		}
	}
	return net.JoinHostPort(a.Host, strconv.Itoa(port))
}

// BaseURL returns the Redfish service's origin: https://host[:port] or
// http://host[:port]. It is empty for IPMI.
func (a Address) BaseURL() string {
	if a.Protocol != ProtocolRedfish {
		return ""
	}
	scheme := "https"
	if a.HTTP {
		scheme = "http"
	}
	host := a.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if a.Port != 0 {
		host = net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
	}
	return scheme + "://" + host
}

// String returns the address as given.
func (a Address) String() string { return a.Raw }

// redfishSchemes are the Redfish scheme names metal3 knows (before an
// optional "+http" or "+https" suffix), and whether they mean virtual media.
var redfishSchemes = map[string]bool{
	"redfish":              false,
	"redfish-virtualmedia": true,
	"redfish-uefihttp":     false,
	"idrac-redfish":        false,
	"idrac-virtualmedia":   true,
	"ilo5-redfish":         false,
	"ilo5-virtualmedia":    true,
	"ilo6-redfish":         false,
}

// ParseAddress parses a BMC address:
//
//	ipmi://host[:port]                  IPMI 2.0 over lanplus, port 623 by default
//	redfish://host[:port][/redfish/v1/Systems/ID]
//	redfish-virtualmedia://…, redfish-uefihttp://…, idrac-redfish://…,
//	idrac-virtualmedia://…, ilo5-redfish://…, ilo5-virtualmedia://…, ilo6-redfish://…
//
// A Redfish scheme may end in "+https" (the default) or "+http" (plain
// http, for tests). A bare "host" or "host:port" is taken as IPMI, as
// metal3 does. An address with user info, a query or a fragment, an
// unknown scheme, an IPMI address with a path, or a Redfish path outside
// /redfish/v1/Systems/ is rejected with an error wrapping ErrBadAddress;
// errors never quote user info.
func ParseAddress(s string) (Address, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return Address{}, fmt.Errorf("%w: empty", ErrBadAddress)
	}
	if !strings.Contains(raw, "://") {
		raw = "ipmi://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's errors quote the whole address, which may carry a password.
		return Address{}, fmt.Errorf("%w: %q does not parse as a URL", ErrBadAddress, redactAddress(s))
	}
	if u.User != nil {
		return Address{}, fmt.Errorf("%w: %q carries user info; pass credentials separately", ErrBadAddress, redactAddress(s))
	}
	a := Address{Raw: s, Scheme: strings.ToLower(u.Scheme)}
	if u.RawQuery != "" || u.Fragment != "" {
		return Address{}, fmt.Errorf("%w: %q has a query or fragment", ErrBadAddress, s)
	}
	a.Host = u.Hostname()
	if a.Host == "" {
		return Address{}, fmt.Errorf("%w: %q has no host", ErrBadAddress, s)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Address{}, fmt.Errorf("%w: %q: port %q is not in 1-65535", ErrBadAddress, s, p)
		}
		a.Port = n
	}

	base, transport, _ := strings.Cut(a.Scheme, "+")
	switch {
	case base == "ipmi":
		if transport != "" {
			return Address{}, fmt.Errorf("%w: %q: scheme %q takes no transport", ErrBadAddress, s, u.Scheme)
		}
		if u.Path != "" && u.Path != "/" {
			return Address{}, fmt.Errorf("%w: %q: an ipmi address has no path", ErrBadAddress, s)
		}
		a.Protocol = ProtocolIPMI
		return a, nil
	default:
		vm, ok := redfishSchemes[base]
		if !ok {
			return Address{}, fmt.Errorf("%w: %q: unknown scheme %q (want ipmi, redfish, redfish-virtualmedia, redfish-uefihttp, idrac-redfish, idrac-virtualmedia, ilo5-redfish, ilo5-virtualmedia, ilo6-redfish, with +http or +https for redfish)", ErrBadAddress, s, u.Scheme)
		}
		switch transport {
		case "", "https":
		case "http":
			a.HTTP = true
		default:
			return Address{}, fmt.Errorf("%w: %q: transport %q, want http or https", ErrBadAddress, s, transport)
		}
		a.Protocol = ProtocolRedfish
		a.VirtualMedia = vm
	}

	p := strings.TrimRight(u.Path, "/")
	if p != "" {
		const prefix = "/redfish/v1/Systems/"
		id, ok := strings.CutPrefix(p, prefix)
		if !ok || id == "" || strings.Contains(id, "/") {
			return Address{}, fmt.Errorf("%w: %q: path %q, want %sID", ErrBadAddress, s, u.Path, prefix)
		}
		a.SystemPath = p
	}
	return a, nil
}

// redactAddress returns s with anything between "://" and the last "@"
// before the host replaced, for error messages.
func redactAddress(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		rest = "REDACTED@" + rest[at+1:]
	}
	if ok {
		return scheme + "://" + rest
	}
	return rest
}
