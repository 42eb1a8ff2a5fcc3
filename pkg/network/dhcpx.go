package network

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/iana"
)

// newXID returns a DHCP transaction ID. It only has to tell our exchanges
// apart from other clients' (RFC 2131 4.4.1 asks for a random number, not a
// secret one), so it comes from math/rand/v2, which never blocks: the
// library's own generator reads crypto randomness and waits, up to two
// minutes, for the kernel's CRNG, which on a machine without a hardware RNG
// is not ready for minutes after boot.
func newXID() dhcpv4.TransactionID {
	var xid dhcpv4.TransactionID
	v := rand.Uint32()
	xid[0], xid[1], xid[2], xid[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return xid
}

// newPacket is dhcpv4.New without its blocking transaction ID generator:
// the same defaults, the given xid, then the modifiers in order.
func newPacket(xid dhcpv4.TransactionID, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	d := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootRequest,
		HWType:        iana.HWTypeEthernet,
		ClientHWAddr:  make(net.HardwareAddr, 6),
		TransactionID: xid,
		ClientIPAddr:  net.IPv4zero,
		YourIPAddr:    net.IPv4zero,
		ServerIPAddr:  net.IPv4zero,
		GatewayIPAddr: net.IPv4zero,
		Options:       make(dhcpv4.Options),
	}
	for _, m := range mods {
		m(d)
	}
	return d
}

// dhcpExchange runs discover/offer/request/ack as nclient4.Client.Request
// does (RFC 2131 4.4.1 tables 5, the same options and matchers), with
// packets built by newPacket: nothing in it waits for the kernel's random
// pool. mods apply to both the discover and the request. A NAK is an
// *nclient4.ErrNak.
func dhcpExchange(ctx context.Context, c *nclient4.Client, hw net.HardwareAddr, mods ...dhcpv4.Modifier) (*dhcpv4.DHCPv4, error) {
	maxSize := dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(nclient4.MaxMessageSize))
	discover := newPacket(newXID(), append([]dhcpv4.Modifier{
		maxSize,
		dhcpv4.WithHwAddr(hw),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter,
			dhcpv4.OptionDomainName, dhcpv4.OptionDomainNameServer),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
	}, mods...)...)
	offer, err := c.SendAndRead(ctx, nclient4.DefaultServers, discover, nclient4.IsMessageType(dhcpv4.MessageTypeOffer))
	if err != nil {
		return nil, fmt.Errorf("no offer to discover %s: %w", discover.TransactionID, err)
	}
	request := newPacket(offer.TransactionID, append([]dhcpv4.Modifier{
		maxSize,
		dhcpv4.WithReply(offer),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(offer.ClientIPAddr),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)),
		dhcpv4.WithOptionCopied(offer, dhcpv4.OptionServerIdentifier),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter,
			dhcpv4.OptionDomainName, dhcpv4.OptionDomainNameServer),
	}, mods...)...)
	ack, err := c.SendAndRead(ctx, nclient4.DefaultServers, request, nclient4.IsAll(
		nclient4.IsCorrectServer(offer.ServerIdentifier()),
		nclient4.IsMessageType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak)))
	if err != nil {
		return nil, fmt.Errorf("no answer to request for %s from %s: %w", offer.YourIPAddr, offer.ServerIdentifier(), err)
	}
	if ack.MessageType() == dhcpv4.MessageTypeNak {
		return nil, &nclient4.ErrNak{Offer: offer, Nak: ack}
	}
	return ack, nil
}
