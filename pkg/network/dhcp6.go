package network

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// newXID6 returns a DHCPv6 transaction ID from math/rand/v2, for the
// reason newXID gives: dhcpv6.NewMessage reads crypto randomness and waits
// for the kernel's CRNG.
func newXID6() dhcpv6.TransactionID {
	v := rand.Uint32()
	return dhcpv6.TransactionID{byte(v >> 16), byte(v >> 8), byte(v)}
}

// newMessage6 is a DHCPv6 client message of type t with our transaction
// ID, the client's DUID-LL from hw and an elapsed time of zero, then mods.
func newMessage6(t dhcpv6.MessageType, hw net.HardwareAddr, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	m := &dhcpv6.Message{MessageType: t, TransactionID: newXID6()}
	m.AddOption(dhcpv6.OptClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: hw}))
	m.AddOption(dhcpv6.OptElapsedTime(0))
	m.AddOption(dhcpv6.OptRequestedOption(dhcpv6.OptionDNSRecursiveNameServer, dhcpv6.OptionDomainSearchList))
	for _, mod := range mods {
		mod(m)
	}
	return m
}

// lease6 is a DHCPv6 lease (IA_NA) of link l.
type lease6 struct {
	opts     Options
	l        netlink.Link
	res      *Result
	serverID dhcpv6.DUID
	ia       *dhcpv6.OptIANA
	addr     *dhcpv6.OptIAAddress
}

// dhcp6Link runs DHCPv6 (solicit, advertise, request, reply) on l with
// retries and backoff as dhcpLink does, and applies the IA_NA address as a
// /128 with the lease's lifetimes, so the kernel removes it when its valid
// lifetime ends; with opts.Lifetime the lease is renewed (keepLease). The
// on-link prefix and routes come from router advertisements (accept_ra),
// as DHCPv6 carries none.
func dhcp6Link(ctx context.Context, opts Options, h *netlink.Handle, l netlink.Link) (*Result, error) {
	k := &lease6{opts: opts, l: l}
	if err := k.obtain(ctx, h); err != nil {
		return nil, err
	}
	startKeeper(opts, k)
	return k.res, nil
}

// obtain runs up to opts.DHCPAttempts exchanges with backoff.
func (k *lease6) obtain(ctx context.Context, h *netlink.Handle) error {
	name := k.l.Attrs().Name
	backoff := k.opts.Backoff
	var last error
	for attempt := 1; attempt <= k.opts.DHCPAttempts; attempt++ {
		err := k.exchange(ctx, h, dhcpv6.MessageTypeSolicit, k.opts.DHCPTimeout)
		if err == nil {
			return nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		k.opts.Logger.Info("dhcpv6 attempt failed", "interface", name, "attempt", attempt, "of", k.opts.DHCPAttempts, "err", err)
		if attempt < k.opts.DHCPAttempts && !sleepUntil(ctx, time.Now().Add(backoff)) {
			break
		}
		backoff = min(backoff*2, maxBackoff)
	}
	return fmt.Errorf("dhcpv6 on %s: %w", name, last)
}

// exchange runs one exchange bounded by timeout: a solicit, advertise,
// request and reply (MessageTypeSolicit), or a renew (to the lease's
// server) or rebind (to any) and its reply; the reply's address is
// applied and kept.
func (k *lease6) exchange(ctx context.Context, h *netlink.Handle, first dhcpv6.MessageType, timeout time.Duration) error {
	name, hw := k.l.Attrs().Name, k.l.Attrs().HardwareAddr
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ll, err := linkLocal(ctx, h, k.l)
	if err != nil {
		return err
	}
	var client *nclient6.Client
	err = inNetNS(k.opts.NetNS, func() error {
		conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: ll.AsSlice(), Port: dhcpv6.DefaultClientPort, Zone: name})
		if err != nil {
			return fmt.Errorf("open dhcpv6 socket on %s: %w", name, err)
		}
		client, err = nclient6.NewWithConn(conn, hw, nclient6.WithTimeout(max(timeout/4, 250*time.Millisecond)), nclient6.WithRetry(4))
		if err != nil {
			conn.Close()
			return fmt.Errorf("create dhcpv6 client on %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer client.Close()
	all := nclient6.AllDHCPRelayAgentsAndServers
	isReply := nclient6.IsMessageType(dhcpv6.MessageTypeReply)
	var req *dhcpv6.Message
	switch first {
	case dhcpv6.MessageTypeSolicit:
		var iaid [4]byte
		copy(iaid[:], hw[len(hw)-4:])
		sol := newMessage6(dhcpv6.MessageTypeSolicit, hw, dhcpv6.WithIAID(iaid))
		adv, err := client.SendAndRead(ctx, all, sol, nclient6.IsMessageType(dhcpv6.MessageTypeAdvertise))
		if err != nil {
			return fmt.Errorf("no advertise to solicit %s: %w", sol.TransactionID, err)
		}
		ia, sid := adv.Options.OneIANA(), adv.Options.ServerID()
		if ia == nil || sid == nil {
			return fmt.Errorf("dhcpv6 advertise on %s has no address (IA_NA) or no server ID", name)
		}
		req = newMessage6(dhcpv6.MessageTypeRequest, hw, dhcpv6.WithServerID(sid), dhcpv6.WithOption(ia))
	case dhcpv6.MessageTypeRenew:
		req = newMessage6(first, hw, dhcpv6.WithServerID(k.serverID), dhcpv6.WithOption(k.ia))
	default:
		req = newMessage6(first, hw, dhcpv6.WithOption(k.ia))
	}
	reply, err := client.SendAndRead(ctx, all, req, isReply)
	if err != nil {
		return fmt.Errorf("no reply to %s %s: %w", req.MessageType, req.TransactionID, err)
	}
	if st := reply.Options.Status(); st != nil && st.StatusCode != iana.StatusSuccess {
		return fmt.Errorf("%w: dhcpv6 on %s: %s", errRefused, name, st)
	}
	ria := reply.Options.OneIANA()
	if ria == nil || ria.Options.OneAddress() == nil {
		return fmt.Errorf("dhcpv6 reply on %s has no address", name)
	}
	if st := ria.Options.Status(); st != nil && st.StatusCode != iana.StatusSuccess {
		return fmt.Errorf("%w: dhcpv6 on %s: %s", errRefused, name, st)
	}
	ad := ria.Options.OneAddress()
	ip, ok := netip.AddrFromSlice(ad.IPv6Addr.To16())
	if !ok {
		return fmt.Errorf("dhcpv6 reply on %s has a bad address %v", name, ad.IPv6Addr)
	}
	addr := netlinkAddr(netip.PrefixFrom(ip, 128))
	if ad.ValidLifetime > 0 && ad.ValidLifetime < infiniteLease {
		addr.ValidLft, addr.PreferedLft = int(ad.ValidLifetime/time.Second), int(ad.PreferredLifetime/time.Second)
	}
	if k.res != nil && k.res.Address.Addr() != ip {
		_ = k.drop(h)
	}
	if err := h.AddrReplace(k.l, addr); err != nil {
		return fmt.Errorf("add dhcpv6 address %s to %s: %w", ip, name, err)
	}
	res := &Result{Method: MethodDHCP, Interface: name, MAC: hw.String(), Address: netip.PrefixFrom(ip, 128), LeaseTime: ad.ValidLifetime}
	for _, d := range reply.Options.DNS() {
		if a, ok := netip.AddrFromSlice(d.To16()); ok {
			res.DNS = append(res.DNS, a)
		}
	}
	if ds := reply.Options.DomainSearchList(); ds != nil {
		res.Search = appendUnique(res.Search, ds.Labels...)
	}
	if sid := reply.Options.ServerID(); sid != nil {
		k.serverID = sid
	}
	k.res, k.ia, k.addr = res, ria, ad
	if first == dhcpv6.MessageTypeSolicit {
		k.opts.Logger.Info("dhcpv6 lease", "interface", name, "address", ip, "valid", ad.ValidLifetime)
	}
	return nil
}

// times are the IA_NA's T1 and T2 and the address's valid lifetime; a
// server leaving T1/T2 to the client gets RFC 8415 21.4's 0.5 and 0.8 of
// the preferred lifetime.
func (k *lease6) times() (time.Duration, time.Duration, time.Duration) {
	t1, t2 := k.ia.T1, k.ia.T2
	if t1 <= 0 {
		t1 = k.addr.PreferredLifetime / 2
	}
	if t2 <= 0 {
		t2 = k.addr.PreferredLifetime * 4 / 5
	}
	return t1, t2, k.addr.ValidLifetime
}

func (k *lease6) describe() (string, netip.Prefix, string) {
	return k.l.Attrs().Name, k.res.Address, "dhcpv6"
}

func (k *lease6) drop(h *netlink.Handle) error { return h.AddrDel(k.l, netlinkAddr(k.res.Address)) }

func (k *lease6) renew(ctx context.Context, h *netlink.Handle, rebinding bool, wait time.Duration) error {
	t := dhcpv6.MessageTypeRenew
	if rebinding {
		t = dhcpv6.MessageTypeRebind
	}
	return k.exchange(ctx, h, t, wait)
}

func (k *lease6) acquire(ctx context.Context, h *netlink.Handle) error {
	return untilAcquired(ctx, k.opts, k.l.Attrs().Name, "dhcpv6", func() error { return k.obtain(ctx, h) })
}

// linkLocal waits (until ctx ends) for l's IPv6 link-local address to
// finish duplicate address detection, and returns it.
func linkLocal(ctx context.Context, h *netlink.Handle, l netlink.Link) (netip.Addr, error) {
	for {
		addrs, err := h.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
		}
		for _, a := range addrs {
			ip, _ := netip.AddrFromSlice(a.IP)
			if ip.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return ip.WithZone(l.Attrs().Name), nil
			}
		}
		if !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
			return netip.Addr{}, fmt.Errorf("no usable IPv6 link-local address on %s: %w", l.Attrs().Name, ctx.Err())
		}
	}
}
