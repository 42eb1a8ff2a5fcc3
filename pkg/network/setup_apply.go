package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/vishvananda/netlink"
)

// configureSetup applies opts.Setup (see Configure) and returns the result
// of its first link with an address.
func configureSetup(ctx context.Context, opts Options, h *netlink.Handle) (*Result, error) {
	s := opts.Setup
	log := opts.Logger
	if probs := s.Check(func(kind string, i int) string { return fmt.Sprintf("%s[%d]", kind, i) }); len(probs) > 0 {
		return nil, fmt.Errorf("network setup: %v", probs)
	}
	links := map[string]netlink.Link{}
	for _, name := range s.physical() {
		l, err := h.LinkByName(name)
		if err != nil {
			return nil, fmt.Errorf("%w: link %s named by the network config: %w", ErrNoLinks, name, err)
		}
		links[name] = l
	}
	// MTU and SLAAC of physical links first: a slave takes the bond's MTU
	// once enslaved, so a bond's own MTU is set after enslaving.
	for _, name := range s.physical() {
		if err := setLinkOptions(opts, h, links[name], s.linkOf(name)); err != nil {
			return nil, err
		}
	}
	for _, b := range s.Bonds {
		bl, err := ensureBond(h, b, links)
		if err != nil {
			return nil, err
		}
		links[b.Name] = bl
		if err := setLinkOptions(opts, h, bl, s.linkOf(b.Name)); err != nil {
			return nil, err
		}
		log.Info("bond ready", "bond", b.Name, "mode", b.Mode, "interfaces", b.Interfaces, "primary", b.Primary)
	}
	for _, v := range s.VLANs {
		vl, err := ensureVLAN(h, v, links[v.Link])
		if err != nil {
			return nil, err
		}
		links[v.Name] = vl
		if err := setLinkOptions(opts, h, vl, s.linkOf(v.Name)); err != nil {
			return nil, err
		}
		log.Info("vlan ready", "vlan", v.Name, "link", v.Link, "id", v.ID)
	}
	// Raise everything, parents before children.
	order := append(s.physical(), names(s)...)
	for _, n := range order {
		if err := h.LinkSetUp(links[n]); err != nil {
			return nil, fmt.Errorf("set link %s up: %w", n, err)
		}
	}

	var l3 []netlink.Link
	for _, lc := range s.Links {
		l3 = append(l3, links[lc.Name])
	}
	if len(l3) == 0 {
		log.Info("network links created; none has addresses", "links", order)
		return &Result{Method: MethodOff}, nil
	}
	up, err := waitCarrier(ctx, h, l3, opts.CarrierTimeout, nil) // bonds and VLANs: their state is what counts
	if err != nil {
		return nil, err
	}
	log.Info("links with carrier", "links", linkNames(up))

	var res *Result
	keep := func(r *Result) {
		if res == nil {
			res = r
		}
	}
	for _, lc := range s.Links {
		l := links[lc.Name]
		if !slices.ContainsFunc(up, func(u netlink.Link) bool { return u.Attrs().Name == lc.Name }) {
			log.Warn("link has no carrier; its addresses are applied anyway", "interface", lc.Name)
		}
		for _, a := range lc.Addresses {
			if err := h.AddrReplace(l, netlinkAddr(a)); err != nil {
				return nil, fmt.Errorf("add address %s to %s: %w", a, lc.Name, err)
			}
			keep(&Result{Method: MethodStatic, Interface: lc.Name, MAC: l.Attrs().HardwareAddr.String(), Address: a})
		}
		for _, r := range lc.Routes {
			if err := addRoute(h, l, r); err != nil {
				return nil, err
			}
			if r.To.Bits() == 0 && res != nil && res.Interface == lc.Name && r.To.Addr().Is4() == res.Address.Addr().Is4() {
				res.Gateway = r.Via
			}
		}
	}
	// DHCP on every link that asks for it, in parallel; each must succeed.
	type outcome struct {
		name string
		res  *Result
		err  error
	}
	var dhcp []outcome
	ch := make(chan outcome)
	n := 0
	for _, lc := range s.Links {
		l := links[lc.Name]
		if lc.DHCP4 {
			n++
			go func() {
				r, err := dhcpAndKeep(ctx, opts, h, l)
				ch <- outcome{lc.Name, r, err}
			}()
		}
		if lc.DHCP6 {
			n++
			go func() {
				r, err := dhcp6Link(ctx, opts, h, l)
				ch <- outcome{lc.Name, r, err}
			}()
		}
	}
	var errs []error
	for range n {
		o := <-ch
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		dhcp = append(dhcp, o)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrNoLease, errors.Join(errs...))
	}
	// The first link of the config wins, IPv4 before IPv6.
	slices.SortStableFunc(dhcp, func(a, b outcome) int {
		ia := slices.IndexFunc(s.Links, func(l LinkConfig) bool { return l.Name == a.name })
		ib := slices.IndexFunc(s.Links, func(l LinkConfig) bool { return l.Name == b.name })
		if ia != ib {
			return ia - ib
		}
		if a.res.Address.Addr().Is4() != b.res.Address.Addr().Is4() {
			if a.res.Address.Addr().Is4() {
				return -1
			}
			return 1
		}
		return 0
	})
	var dns []netip.Addr
	var search []string
	for _, o := range dhcp {
		dns = appendUniqueAddr(dns, o.res.DNS...)
		search = appendUnique(search, o.res.Search...)
	}
	if len(dhcp) > 0 && (res == nil || !res.Address.Addr().Is4() && dhcp[0].res.Address.Addr().Is4()) {
		res = dhcp[0].res
	}
	if res == nil {
		res = &Result{Method: MethodOff}
	}
	res.DNS = appendUniqueAddr(slices.Clone(s.DNS), dns...)
	res.Search = appendUnique(appendUnique(slices.Clone(s.Search), search...), opts.Search...)
	if opts.ResolvConf != "-" {
		if err := WriteResolvConf(opts.ResolvConf, res.DNS, res.Search); err != nil {
			return nil, err
		}
	}
	log.Info("network configured", "method", res.Method, "interface", res.Interface, "mac", res.MAC,
		"address", res.Address, "gateway", res.Gateway, "dns", res.DNS)
	return res, nil
}

// names lists the bonds and then the VLANs of s.
func names(s *Setup) []string {
	var out []string
	for _, b := range s.Bonds {
		out = append(out, b.Name)
	}
	for _, v := range s.VLANs {
		out = append(out, v.Name)
	}
	return out
}

// ensureBond creates the bond (or replaces one of that name: a bond's mode
// cannot change once it has slaves) and enslaves its interfaces, each set
// down first as the kernel requires. booty loads the bonding module with
// max_bonds=0 (kmod.DefaultOptions), so no stray bond0 takes the name.
func ensureBond(h *netlink.Handle, b Bond, links map[string]netlink.Link) (netlink.Link, error) {
	if l, err := h.LinkByName(b.Name); err == nil {
		if _, ok := l.(*netlink.Bond); !ok {
			return nil, fmt.Errorf("create bond %s: a %s link of that name exists", b.Name, l.Type())
		}
		if err := h.LinkDel(l); err != nil {
			return nil, fmt.Errorf("replace bond %s: %w", b.Name, err)
		}
	}
	if err := addBond(h, b, links); err != nil {
		return nil, fmt.Errorf("create bond %s: %w", b.Name, err)
	}
	return enslave(h, b, links)
}

// addBond creates the bond with its mode and options.
func addBond(h *netlink.Handle, b Bond, links map[string]netlink.Link) error {
	nb := netlink.NewLinkBond(netlink.LinkAttrs{Name: b.Name})
	nb.Mode = netlink.StringToBondMode(string(b.Mode))
	nb.Miimon = b.MIIMon
	if nb.Miimon == 0 {
		nb.Miimon = DefaultMIIMon
	}
	if b.LACPRate != "" {
		nb.LacpRate = netlink.StringToBondLacpRate(b.LACPRate)
	}
	if b.XmitHashPolicy != "" {
		nb.XmitHashPolicy = netlink.StringToBondXmitHashPolicy(b.XmitHashPolicy)
	}
	if b.Primary != "" {
		// The kernel keeps the primary's name and makes it the active
		// slave once it is enslaved below.
		nb.Primary = links[b.Primary].Attrs().Index
	}
	return h.LinkAdd(nb)
}

// enslave makes the bond's interfaces its slaves.
func enslave(h *netlink.Handle, b Bond, links map[string]netlink.Link) (netlink.Link, error) {
	bl, err := h.LinkByName(b.Name)
	if err != nil {
		return nil, fmt.Errorf("find bond %s: %w", b.Name, err)
	}
	for _, n := range b.Interfaces {
		sl := links[n]
		if sl.Attrs().MasterIndex == bl.Attrs().Index {
			continue
		}
		if err := h.LinkSetDown(sl); err != nil {
			return nil, fmt.Errorf("set %s down to enslave it to %s: %w", n, b.Name, err)
		}
		if err := h.LinkSetMasterByIndex(sl, bl.Attrs().Index); err != nil {
			return nil, fmt.Errorf("enslave %s to bond %s: %w", n, b.Name, err)
		}
	}
	return h.LinkByName(b.Name)
}

// ensureVLAN creates the VLAN device on parent (or reuses one of that name).
func ensureVLAN(h *netlink.Handle, v VLAN, parent netlink.Link) (netlink.Link, error) {
	if l, err := h.LinkByName(v.Name); err == nil {
		if vl, ok := l.(*netlink.Vlan); ok && vl.VlanId == v.ID && vl.ParentIndex == parent.Attrs().Index {
			return l, nil
		}
		return nil, fmt.Errorf("create vlan %s: a different %s link of that name exists", v.Name, l.Type())
	}
	la := netlink.NewLinkAttrs()
	la.Name, la.ParentIndex = v.Name, parent.Attrs().Index
	if err := h.LinkAdd(&netlink.Vlan{LinkAttrs: la, VlanId: v.ID, VlanProtocol: netlink.VLAN_PROTOCOL_8021Q}); err != nil {
		return nil, fmt.Errorf("create vlan %s (id %d on %s): %w", v.Name, v.ID, v.Link, err)
	}
	return h.LinkByName(v.Name)
}

// setLinkOptions sets the MTU and accept_ra of lc (nil: nothing) on l.
func setLinkOptions(opts Options, h *netlink.Handle, l netlink.Link, lc *LinkConfig) error {
	if lc == nil {
		return nil
	}
	name := l.Attrs().Name
	if lc.MTU > 0 && lc.MTU != l.Attrs().MTU {
		if err := h.LinkSetMTU(l, lc.MTU); err != nil {
			return fmt.Errorf("set mtu %d on %s: %w", lc.MTU, name, err)
		}
	}
	if lc.AcceptRA != nil {
		v := "0"
		if *lc.AcceptRA {
			v = "1"
		}
		// /proc/sys/net is the namespace of the thread that opens it.
		err := inNetNS(opts.NetNS, func() error {
			return writeSysfs(filepath.Join("/proc/sys/net/ipv6/conf", name, "accept_ra"), v)
		})
		if err != nil {
			return fmt.Errorf("set accept_ra=%s on %s: %w", v, name, err)
		}
	}
	return nil
}

// writeSysfs writes v to an existing kernel file.
func writeSysfs(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// addRoute replaces the route r out of l.
func addRoute(h *netlink.Handle, l netlink.Link, r Route) error {
	route := &netlink.Route{LinkIndex: l.Attrs().Index, Priority: r.Metric,
		Dst: &net.IPNet{IP: r.To.Addr().AsSlice(), Mask: net.CIDRMask(r.To.Bits(), r.To.Addr().BitLen())}}
	if r.Via.IsValid() {
		route.Gw = r.Via.AsSlice()
	}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("add route to %s via %s on %s: %w", r.To, r.Via, l.Attrs().Name, err)
	}
	return nil
}

func netlinkAddr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
}

func appendUniqueAddr(s []netip.Addr, vs ...netip.Addr) []netip.Addr {
	for _, v := range vs {
		if v.IsValid() && !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	return s
}
