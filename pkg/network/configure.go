package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/safego"
)

// Sentinels of Configure, checked with errors.Is.
var (
	ErrNoLinks   = errors.New("no usable network links")
	ErrNoCarrier = errors.New("no link has carrier")
	ErrNoLease   = errors.New("no DHCP lease")
)

// Defaults of Options.
const (
	DefaultTimeout        = 2 * time.Minute
	DefaultCarrierTimeout = 15 * time.Second
	DefaultDHCPTimeout    = 10 * time.Second
	DefaultDHCPAttempts   = 5
	DefaultBackoff        = time.Second
	maxBackoff            = 15 * time.Second
	DefaultResolvConf     = "/etc/resolv.conf"
)

// Options of Configure. The zero value runs DHCP on every link with carrier
// in the current network namespace and writes /etc/resolv.conf.
type Options struct {
	// Interfaces limits configuration to these link names; empty means
	// every non-loopback Ethernet link.
	Interfaces []string
	// Static, when non-nil with Method MethodStatic, is applied instead of
	// DHCP; MethodOff only raises the links. Static.Device narrows Interfaces.
	Static *StaticConfig
	// Setup, when non-nil, is applied instead of Interfaces, Static and
	// MTU: its bonds and VLANs are created, every link's MTU, SLAAC,
	// static addresses and routes set, and DHCPv4/DHCPv6 run where it asks.
	Setup *Setup
	// Lifetime, when set, keeps DHCPv4 and DHCPv6 leases renewed until it
	// ends (see keepLease); nil lets them lapse.
	Lifetime context.Context
	// Gate, when set, is called once DHCPv4 won a lease and before any of
	// it is applied: the lease is applied when Gate returns nil, and
	// Configure returns Gate's error, with nothing applied (the links stay
	// up), otherwise. It may block for as long as it needs (Timeout does
	// not end its wait; a lease is good for far longer). The agent gets a
	// lease while it waits for its disks, before a config drive may name
	// another network. Not called for Static or Setup.
	Gate func() error
	// OnLeaseLost is called (from the renewal goroutine) when a lease ends
	// without renewal; the error wraps ErrLeaseLost. nil: only logged.
	OnLeaseLost func(link string, err error)
	// MTU to set on the configured link; 0 uses the lease's interface MTU
	// option (26) if any, else leaves it alone.
	MTU int
	// Search domains appended to those of the lease or static config.
	Search []string

	// Timeout bounds the whole of Configure (DefaultTimeout).
	Timeout time.Duration
	// CarrierTimeout bounds the wait for carrier after raising links
	// (DefaultCarrierTimeout).
	CarrierTimeout time.Duration
	// DHCPTimeout bounds one DHCP attempt, discover to ack (DefaultDHCPTimeout).
	DHCPTimeout time.Duration
	// DHCPAttempts bounds the attempts per link (DefaultDHCPAttempts).
	DHCPAttempts int
	// Backoff is the pause after the first failed attempt, doubled after each
	// further one up to 15s (DefaultBackoff).
	Backoff time.Duration

	// ResolvConf is the file that receives nameservers and search domains
	// (DefaultResolvConf); "-" skips writing it.
	ResolvConf string
	// Logger receives progress; nil discards it.
	Logger *slog.Logger

	// Handle is the netlink handle used for links, addresses and routes;
	// nil opens one in NetNS (or the current namespace).
	Handle *netlink.Handle
	// NetNS is the network namespace DHCP sockets are opened in; 0 means
	// the current one. Tests run Configure against a namespace they created.
	NetNS netns.NsHandle
}

// Result is what Configure applied.
type Result struct {
	Method    Method       `json:"method"`
	Interface string       `json:"interface"`
	MAC       string       `json:"mac"`
	Address   netip.Prefix `json:"address"`
	Gateway   netip.Addr   `json:"gateway,omitzero"`
	DNS       []netip.Addr `json:"dns,omitempty"`
	Search    []string     `json:"search,omitempty"`
	MTU       int          `json:"mtu,omitempty"`
	// From the DHCP lease, when present.
	Hostname   string        `json:"hostname,omitempty"`
	NextServer netip.Addr    `json:"nextServer,omitzero"`
	BootFile   string        `json:"bootFile,omitempty"`
	ServerID   netip.Addr    `json:"serverID,omitzero"`
	LeaseTime  time.Duration `json:"leaseTime,omitempty"`
	// renewal and rebinding are the lease's T1 and T2 options (0: absent).
	renewal, rebinding time.Duration
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.CarrierTimeout <= 0 {
		o.CarrierTimeout = DefaultCarrierTimeout
	}
	if o.DHCPTimeout <= 0 {
		o.DHCPTimeout = DefaultDHCPTimeout
	}
	if o.DHCPAttempts <= 0 {
		o.DHCPAttempts = DefaultDHCPAttempts
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.ResolvConf == "" {
		o.ResolvConf = DefaultResolvConf
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Configure brings the agent's network up, in this order: list the
// candidate links (non-loopback, with an Ethernet MAC, filtered by
// Interfaces or Static.Device), set them up, wait up to CarrierTimeout for
// carrier, then either apply Static to the first link with carrier (by name)
// or run DHCPv4 on every link with carrier in parallel, where the first
// lease wins and the other attempts are cancelled. The winner gets the
// address, the default route via the gateway/router option and the MTU, and
// ResolvConf gets its nameservers and search domains. Nothing is applied to
// losing links. Every wait is bounded by Timeout, each DHCP attempt by
// DHCPTimeout, with at most DHCPAttempts per link and exponential backoff.
// With Gate set, a won lease is applied only when Gate agrees.
// Errors wrap ErrNoLinks, ErrNoCarrier or ErrNoLease, or name the netlink
// operation that failed; a failure after an address was applied leaves it.
//
// With Setup set, that is applied instead: every link it names must exist;
// bonds are created (an existing bond of the name is replaced) and their
// interfaces enslaved, VLANs created, MTU and accept_ra set, everything
// raised, carrier awaited on the configured links, static addresses and
// routes applied, and DHCPv4/DHCPv6 run on the links that ask for it (each
// must get a lease). The result is the first configured link's first
// address, a DHCPv4 lease ahead of a static IPv6 one.
//
// With Lifetime set, every DHCPv4 and DHCPv6 lease is renewed in the
// background until Lifetime ends (see keepLease).
func Configure(ctx context.Context, opts Options) (*Result, error) {
	opts.defaults()
	log := opts.Logger
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	h := opts.Handle
	if h == nil {
		var err error
		if h, err = openHandle(opts.NetNS); err != nil {
			return nil, err
		}
		defer h.Close()
	}

	if opts.Setup != nil {
		return configureSetup(ctx, opts, h)
	}
	filter := opts.Interfaces
	if opts.Static != nil && opts.Static.Device != "" {
		filter = []string{opts.Static.Device}
	}
	links, err := candidateLinks(h, filter)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if err := h.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set link %s up: %w", l.Attrs().Name, err)
		}
	}
	if opts.Static != nil && opts.Static.Method == MethodOff {
		log.Info("network autoconfiguration off", "links", linkNames(links))
		return &Result{Method: MethodOff}, nil
	}
	up, err := waitCarrier(ctx, h, links, opts.CarrierTimeout, activeAtRaise(h, links))
	if err != nil {
		return nil, err
	}
	log.Info("links with carrier", "links", linkNames(up))

	var res *Result
	if opts.Static != nil && opts.Static.Method == MethodStatic {
		res = staticResult(up[0], opts.Static)
	} else {
		res, err = dhcpAny(ctx, opts, up)
		if err != nil {
			// Name every link tried: those without carrier were left out of DHCP.
			if down := slices.DeleteFunc(slices.Clone(links), func(l netlink.Link) bool {
				return slices.Contains(linkNames(up), l.Attrs().Name)
			}); len(down) > 0 {
				err = fmt.Errorf("%w; no carrier within %s on %v", err, opts.CarrierTimeout, linkNames(down))
			}
			return nil, err
		}
	}
	if opts.Gate != nil && res.Method == MethodDHCP {
		if err := opts.Gate(); err != nil {
			log.Info("DHCP lease not applied", "interface", res.Interface, "address", res.Address, "reason", err)
			return nil, err
		}
	}
	if opts.MTU > 0 {
		res.MTU = opts.MTU
	}
	res.Search = appendUnique(res.Search, opts.Search...)
	link := up[slices.IndexFunc(up, func(l netlink.Link) bool { return l.Attrs().Name == res.Interface })]
	if err := apply(h, link, res); err != nil {
		return nil, err
	}
	if opts.ResolvConf != "-" {
		if err := WriteResolvConf(opts.ResolvConf, res.DNS, res.Search); err != nil {
			return nil, err
		}
	}
	log.Info("network configured", "method", res.Method, "interface", res.Interface, "mac", res.MAC,
		"address", res.Address, "gateway", res.Gateway, "dns", res.DNS)
	if res.Method == MethodDHCP {
		startKeeper(opts, &lease4{opts: opts, l: link, res: res})
	}
	return res, nil
}

// openHandle opens a netlink handle in ns (0: the current namespace).
// Only NETLINK_ROUTE: asking for every family also opens XFRM sockets,
// which fail with EPROTONOSUPPORT on kernels where xfrm_user is a module
// that is not loaded (Debian's, in the initramfs).
func openHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	var err error
	if ns > 0 {
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("open netlink handle: %w", err)
	}
	return h, nil
}

// candidateLinks lists links worth configuring, sorted by name.
func candidateLinks(h *netlink.Handle, filter []string) ([]netlink.Link, error) {
	all, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []netlink.Link
	var seen []string
	for _, l := range all {
		a := l.Attrs()
		seen = append(seen, a.Name)
		if a.Flags&net.FlagLoopback != 0 || len(a.HardwareAddr) != 6 {
			continue
		}
		if len(filter) > 0 && !slices.Contains(filter, a.Name) {
			continue
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		if len(filter) > 0 {
			return nil, fmt.Errorf("%w: none of %v among links %v", ErrNoLinks, filter, seen)
		}
		return nil, fmt.Errorf("%w: links %v", ErrNoLinks, seen)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Attrs().Name < out[j].Attrs().Name })
	return out, nil
}

// activeAtRaise returns the indexes of the links that have carrier
// (IFF_LOWER_UP) right after they were set up. The kernel activates a
// link's transmit queue as it opens it when the carrier is already there,
// so these can send at once, while their operational state waits for the
// kernel's link watcher: that runs at most once a second, and the
// driver's own carrier event at probe time (virtio_net's) has just used
// it up, so waiting for "up" there costs up to a second for nothing. A
// link whose carrier comes later is activated by an urgent run of the
// watcher, which waitCarrier waits for.
func activeAtRaise(h *netlink.Handle, links []netlink.Link) map[int]bool {
	out := map[int]bool{}
	for _, l := range links {
		if cur, err := h.LinkByIndex(l.Attrs().Index); err == nil && cur.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
			out[l.Attrs().Index] = true
		}
	}
	return out
}

// carrierPoll is how often waitCarrier looks.
const carrierPoll = 20 * time.Millisecond

// waitCarrier polls until every link has carrier or timeout passed, and
// returns those with carrier (sorted by name); none is ErrNoCarrier. A link
// in active (see activeAtRaise) counts once it has carrier; any other one
// once the kernel also set its operational state.
func waitCarrier(ctx context.Context, h *netlink.Handle, links []netlink.Link, timeout time.Duration, active map[int]bool) ([]netlink.Link, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(carrierPoll)
	defer tick.Stop()
	for {
		var up []netlink.Link
		for _, l := range links {
			cur, err := h.LinkByIndex(l.Attrs().Index)
			if err != nil {
				continue // the link vanished; ignore it
			}
			// IFF_LOWER_UP is set the moment the driver sees carrier, but the
			// kernel only starts transmitting once linkwatch has run and set
			// the operational state: wait for that too, or the first DHCP
			// discover is dropped.
			a := cur.Attrs()
			if a.RawFlags&unix.IFF_LOWER_UP != 0 && (active[a.Index] || a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown) {
				up = append(up, cur)
			}
		}
		if len(up) == len(links) {
			return up, nil
		}
		select {
		case <-ctx.Done():
			if len(up) > 0 {
				return up, nil
			}
			return nil, fmt.Errorf("%w after %s: links %v", ErrNoCarrier, timeout, linkNames(links))
		case <-tick.C:
		}
	}
}

func staticResult(l netlink.Link, s *StaticConfig) *Result {
	return &Result{
		Method:    MethodStatic,
		Interface: l.Attrs().Name,
		MAC:       l.Attrs().HardwareAddr.String(),
		Address:   s.Address,
		Gateway:   s.Gateway,
		DNS:       slices.Clone(s.DNS),
		Search:    slices.Clone(s.Search),
		MTU:       s.MTU,
		Hostname:  s.Hostname,
	}
}

// dhcpAny runs DHCP on every link at once; the first lease wins.
func dhcpAny(ctx context.Context, opts Options, links []netlink.Link) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res *Result
		err error
	}
	ch := make(chan outcome, len(links))
	for _, l := range links {
		go func() {
			err := safego.Call("dhcp on "+l.Attrs().Name, func() error {
				res, err := dhcpLink(ctx, opts, l)
				if err == nil {
					ch <- outcome{res, nil}
				}
				return err
			})
			if err != nil {
				ch <- outcome{nil, err}
			}
		}()
	}
	var errs []error
	var win *Result
	for range links {
		o := <-ch
		switch {
		case o.err != nil:
			errs = append(errs, o.err)
		case win == nil:
			win = o.res
			cancel() // the others give up; we still wait for them to close their sockets
		}
	}
	if win != nil {
		return win, nil
	}
	return nil, fmt.Errorf("%w on %v: %w", ErrNoLease, linkNames(links), errors.Join(errs...))
}

// dhcpLink retries one-attempt DHCP on a link with backoff.
func dhcpLink(ctx context.Context, opts Options, l netlink.Link) (*Result, error) {
	name := l.Attrs().Name
	log := opts.Logger.With("interface", name)
	backoff := opts.Backoff
	var last error
	for attempt := 1; attempt <= opts.DHCPAttempts; attempt++ {
		res, err := dhcpOnce(ctx, opts, l)
		if err == nil {
			return res, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		log.Info("dhcp attempt failed", "attempt", attempt, "of", opts.DHCPAttempts, "err", err)
		if attempt == opts.DHCPAttempts {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
	return nil, fmt.Errorf("dhcp on %s: %w", name, last)
}

// dhcpRequested are the options asked for in the parameter request list.
var dhcpRequested = []dhcpv4.OptionCode{
	dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
	dhcpv4.OptionDomainName, dhcpv4.OptionDNSDomainSearchList, dhcpv4.OptionHostName,
	dhcpv4.OptionInterfaceMTU, dhcpv4.OptionNTPServers, dhcpv4.OptionTFTPServerName,
	dhcpv4.OptionBootfileName,
}

// dhcpOnce runs one discover/offer/request/ack exchange bounded by DHCPTimeout.
func dhcpOnce(ctx context.Context, opts Options, l netlink.Link) (*Result, error) {
	name := l.Attrs().Name
	ctx, cancel := context.WithTimeout(ctx, opts.DHCPTimeout)
	defer cancel()
	// Retransmit within the attempt: a lost packet costs a quarter of it.
	client, err := openClient(opts.NetNS, l, func() (net.PacketConn, error) {
		return nclient4.NewRawUDPConn(name, dhcpv4.ClientPort)
	}, nclient4.WithTimeout(max(opts.DHCPTimeout/4, 250*time.Millisecond)), nclient4.WithRetry(4))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	mods := []dhcpv4.Modifier{dhcpv4.WithRequestedOptions(dhcpRequested...)}
	if opts.Static != nil && opts.Static.Hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(opts.Static.Hostname)))
	}
	ack, err := dhcpExchange(ctx, client, l.Attrs().HardwareAddr, mods...)
	if err != nil {
		return nil, err
	}
	return leaseResult(name, l.Attrs().HardwareAddr, ack)
}

// openClient opens a DHCPv4 client on link l over the socket open makes,
// both in network namespace ns (0: the current one).
func openClient(ns netns.NsHandle, l netlink.Link, open func() (net.PacketConn, error), copts ...nclient4.ClientOpt) (*nclient4.Client, error) {
	name := l.Attrs().Name
	var client *nclient4.Client
	err := inNetNS(ns, func() error {
		conn, err := open()
		if err != nil {
			return fmt.Errorf("open dhcp socket on %s: %w", name, err)
		}
		client, err = nclient4.NewWithConn(conn, l.Attrs().HardwareAddr, copts...)
		if err != nil {
			conn.Close()
			return fmt.Errorf("create dhcp client on %s: %w", name, err)
		}
		return nil
	})
	return client, err
}

// leaseResult turns an ACK into a Result; an ACK without an address or
// netmask is an error.
func leaseResult(name string, mac net.HardwareAddr, ack *dhcpv4.DHCPv4) (*Result, error) {
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok || ip.IsUnspecified() {
		return nil, fmt.Errorf("dhcp ack on %s has no address", name)
	}
	mask := ack.SubnetMask()
	if mask == nil {
		return nil, fmt.Errorf("dhcp ack on %s for %s has no subnet mask", name, ip)
	}
	bits, _ := mask.Size()
	res := &Result{
		Method:    MethodDHCP,
		Interface: name,
		MAC:       mac.String(),
		Address:   netip.PrefixFrom(ip, bits),
		Hostname:  ack.HostName(),
		BootFile:  ack.BootFileNameOption(),
		LeaseTime: ack.IPAddressLeaseTime(0),
		renewal:   ack.IPAddressRenewalTime(0),
		rebinding: ack.IPAddressRebindingTime(0),
	}
	if res.BootFile == "" {
		res.BootFile = strings.TrimRight(ack.BootFileName, "\x00")
	}
	if r := ack.Router(); len(r) > 0 {
		res.Gateway, _ = netip.AddrFromSlice(r[0].To4())
	}
	for _, d := range ack.DNS() {
		if a, ok := netip.AddrFromSlice(d.To4()); ok {
			res.DNS = append(res.DNS, a)
		}
	}
	if ds := ack.DomainSearch(); ds != nil {
		res.Search = appendUnique(res.Search, ds.Labels...)
	}
	if dn := ack.DomainName(); dn != "" {
		res.Search = appendUnique(res.Search, dn)
	}
	if ack.ServerIPAddr != nil && !ack.ServerIPAddr.IsUnspecified() {
		res.NextServer, _ = netip.AddrFromSlice(ack.ServerIPAddr.To4())
	}
	if sid := ack.ServerIdentifier(); sid != nil {
		res.ServerID, _ = netip.AddrFromSlice(sid.To4())
	}
	if v := ack.Options.Get(dhcpv4.OptionInterfaceMTU); len(v) == 2 {
		res.MTU = int(v[0])<<8 | int(v[1])
	}
	return res, nil
}

// apply sets MTU, address and default route of res on the link.
func apply(h *netlink.Handle, l netlink.Link, res *Result) error {
	name := l.Attrs().Name
	if res.MTU > 0 && res.MTU != l.Attrs().MTU {
		if err := h.LinkSetMTU(l, res.MTU); err != nil {
			return fmt.Errorf("set mtu %d on %s: %w", res.MTU, name, err)
		}
	}
	if !res.Address.IsValid() {
		return fmt.Errorf("apply address on %s: no address", name)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   res.Address.Addr().AsSlice(),
		Mask: net.CIDRMask(res.Address.Bits(), res.Address.Addr().BitLen()),
	}}
	if err := h.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("add address %s to %s: %w", res.Address, name, err)
	}
	if res.Gateway.IsValid() {
		route := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: res.Gateway.AsSlice(),
			Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}
		if !res.Address.Masked().Contains(res.Gateway) {
			route.Flags = int(netlink.FLAG_ONLINK)
		}
		if err := h.RouteReplace(route); err != nil {
			return fmt.Errorf("add default route via %s on %s: %w", res.Gateway, name, err)
		}
	}
	return nil
}

// WriteResolvConf replaces path with nameserver and search lines, through a
// temporary file and rename. Nothing to write leaves path untouched.
func WriteResolvConf(path string, dns []netip.Addr, search []string) error {
	if len(dns) == 0 && len(search) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("# written by booty\n")
	for _, d := range dns {
		fmt.Fprintf(&b, "nameserver %s\n", d)
	}
	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write resolv.conf %s: %w", path, err)
	}
	tmp := path + ".booty-tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write resolv.conf %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write resolv.conf %s: %w", path, err)
	}
	return nil
}

// inNetNS runs f on an OS thread switched into ns (0: the current
// namespace), so sockets f opens belong to ns. If switching back fails the
// thread stays locked and dies with the goroutine instead of leaking ns.
func inNetNS(ns netns.NsHandle, f func() error) error {
	if ns <= 0 {
		return f()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace: %w", err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("return to network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

func linkNames(links []netlink.Link) []string {
	out := make([]string, len(links))
	for i, l := range links {
		out[i] = l.Attrs().Name
	}
	return out
}

func appendUnique(s []string, vs ...string) []string {
	for _, v := range vs {
		if v != "" && !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	return s
}
