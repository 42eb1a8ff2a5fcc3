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

// dhcp6Link runs DHCPv6 (solicit, advertise, request, reply) on l with
// retries and backoff as dhcpLink does, and applies the IA_NA address as a
// /128 with the lease's lifetimes, so the kernel removes it when its valid
// lifetime ends. The on-link prefix and routes come from router
// advertisements (accept_ra), as DHCPv6 carries none.
func dhcp6Link(ctx context.Context, opts Options, h *netlink.Handle, l netlink.Link) (*Result, error) {
	name := l.Attrs().Name
	backoff := opts.Backoff
	var last error
	for attempt := 1; attempt <= opts.DHCPAttempts; attempt++ {
		res, err := dhcp6Once(ctx, opts, h, l)
		if err == nil {
			return res, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		opts.Logger.Info("dhcpv6 attempt failed", "interface", name, "attempt", attempt, "of", opts.DHCPAttempts, "err", err)
		if attempt < opts.DHCPAttempts && !sleepUntil(ctx, time.Now().Add(backoff)) {
			break
		}
		backoff = min(backoff*2, maxBackoff)
	}
	return nil, fmt.Errorf("dhcpv6 on %s: %w", name, last)
}

func dhcp6Once(ctx context.Context, opts Options, h *netlink.Handle, l netlink.Link) (*Result, error) {
	name, hw := l.Attrs().Name, l.Attrs().HardwareAddr
	ctx, cancel := context.WithTimeout(ctx, opts.DHCPTimeout)
	defer cancel()
	ll, err := linkLocal(ctx, h, l)
	if err != nil {
		return nil, err
	}
	var client *nclient6.Client
	err = inNetNS(opts.NetNS, func() error {
		conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: ll.AsSlice(), Port: dhcpv6.DefaultClientPort, Zone: name})
		if err != nil {
			return fmt.Errorf("open dhcpv6 socket on %s: %w", name, err)
		}
		client, err = nclient6.NewWithConn(conn, hw, nclient6.WithTimeout(max(opts.DHCPTimeout/4, 250*time.Millisecond)), nclient6.WithRetry(4))
		if err != nil {
			conn.Close()
			return fmt.Errorf("create dhcpv6 client on %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	var iaid [4]byte
	copy(iaid[:], hw[len(hw)-4:])
	sol := newMessage6(dhcpv6.MessageTypeSolicit, hw, dhcpv6.WithIAID(iaid))
	adv, err := client.SendAndRead(ctx, nclient6.AllDHCPRelayAgentsAndServers, sol, nclient6.IsMessageType(dhcpv6.MessageTypeAdvertise))
	if err != nil {
		return nil, fmt.Errorf("no advertise to solicit %s: %w", sol.TransactionID, err)
	}
	ia := adv.Options.OneIANA()
	sid := adv.Options.ServerID()
	if ia == nil || sid == nil {
		return nil, fmt.Errorf("dhcpv6 advertise on %s has no address (IA_NA) or no server ID", name)
	}
	req := newMessage6(dhcpv6.MessageTypeRequest, hw, dhcpv6.WithServerID(sid), dhcpv6.WithOption(ia))
	reply, err := client.SendAndRead(ctx, nclient6.AllDHCPRelayAgentsAndServers, req, nclient6.IsMessageType(dhcpv6.MessageTypeReply))
	if err != nil {
		return nil, fmt.Errorf("no reply to request %s: %w", req.TransactionID, err)
	}
	if st := reply.Options.Status(); st != nil && st.StatusCode != iana.StatusSuccess {
		return nil, fmt.Errorf("dhcpv6 server refused on %s: %s", name, st)
	}
	ria := reply.Options.OneIANA()
	if ria == nil || ria.Options.OneAddress() == nil {
		return nil, fmt.Errorf("dhcpv6 reply on %s has no address", name)
	}
	ad := ria.Options.OneAddress()
	ip, ok := netip.AddrFromSlice(ad.IPv6Addr.To16())
	if !ok {
		return nil, fmt.Errorf("dhcpv6 reply on %s has a bad address %v", name, ad.IPv6Addr)
	}
	addr := netlinkAddr(netip.PrefixFrom(ip, 128))
	if ad.ValidLifetime > 0 && ad.ValidLifetime < infiniteLease {
		addr.ValidLft, addr.PreferedLft = int(ad.ValidLifetime/time.Second), int(ad.PreferredLifetime/time.Second)
	}
	if err := h.AddrReplace(l, addr); err != nil {
		return nil, fmt.Errorf("add dhcpv6 address %s to %s: %w", ip, name, err)
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
	opts.Logger.Info("dhcpv6 lease", "interface", name, "address", ip, "valid", ad.ValidLifetime)
	return res, nil
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
