package network

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/insomniacslk/dhcp/iana"
)

// DHCPv6 on a link of a Setup: the IA_NA address is applied as a /128 and
// the server's DNS reaches the result; the 4-second lease is renewed (at
// T1, from the server) until the server goes silent, then the address
// goes and the loss is reported.
func TestConfigureSetupDHCPv6(t *testing.T) {
	n := newTestNet(t)
	n.veth(t, "s6", "c6", "10.126.0.1/24", false)
	addr := net.ParseIP("2001:db8:6::10")
	var renews atomic.Int32
	var silent atomic.Bool
	s6, err := n.srv.LinkByName("s6")
	if err != nil {
		t.Fatal(err)
	}
	handler := func(conn net.PacketConn, peer net.Addr, d dhcpv6.DHCPv6) {
		m, err := d.GetInnerMessage()
		if err != nil {
			return
		}
		if silent.Load() {
			return
		}
		ia := &dhcpv6.OptIANA{T1: time.Second, T2: 3 * time.Second}
		if cia := m.Options.OneIANA(); cia != nil {
			ia.IaId = cia.IaId
		}
		ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: addr, PreferredLifetime: 3 * time.Second, ValidLifetime: 4 * time.Second})
		mods := []dhcpv6.Modifier{
			dhcpv6.WithServerID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}}),
			dhcpv6.WithOption(ia),
			dhcpv6.WithDNS(net.ParseIP("2001:db8:6::53")),
		}
		var resp *dhcpv6.Message
		switch m.MessageType {
		case dhcpv6.MessageTypeSolicit:
			resp, err = dhcpv6.NewAdvertiseFromSolicit(m, mods...)
		case dhcpv6.MessageTypeRequest:
			resp, err = dhcpv6.NewReplyFromMessage(m, mods...)
		case dhcpv6.MessageTypeRenew:
			renews.Add(1)
			resp, err = dhcpv6.NewReplyFromMessage(m, mods...)
		default:
			return
		}
		if err != nil {
			t.Errorf("build dhcpv6 answer: %v", err)
			return
		}
		// The peer's zone was named in the test's own namespace, where
		// the index may name another link: give the server link's index.
		to := *peer.(*net.UDPAddr)
		to.Zone = strconv.Itoa(s6.Attrs().Index)
		if _, err := conn.WriteTo(resp.ToBytes(), &to); err != nil {
			// Until the server link's own link-local address has passed
			// DAD there is no source address; the client retransmits.
			t.Logf("send dhcpv6 answer: %v", err)
		}
	}
	var srv *server6.Server
	if err := inNetNS(n.srvNS, func() error {
		var err error
		srv, err = server6.NewServer("s6", nil, handler)
		return err
	}); err != nil {
		t.Fatalf("start dhcpv6 server: %v", err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })

	life, endRun := context.WithCancel(context.Background())
	defer endRun()
	lost := make(chan error, 4)
	opts := n.opts(t)
	opts.Lifetime = life
	opts.OnLeaseLost = func(_ string, err error) { lost <- err }
	opts.Setup = &Setup{Links: []LinkConfig{{Name: "c6", DHCP6: true}}}
	res, err := Configure(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Address != netip.MustParsePrefix("2001:db8:6::10/128") || res.Interface != "c6" {
		t.Errorf("result %+v, want 2001:db8:6::10/128 on c6", res)
	}
	if len(res.DNS) != 1 || res.DNS[0].String() != "2001:db8:6::53" {
		t.Errorf("dns %v, want 2001:db8:6::53", res.DNS)
	}
	if !n.hasAddr(t, "c6", "2001:db8:6::10/128") {
		t.Error("c6 lacks 2001:db8:6::10/128")
	}

	waitFor(t, 20*time.Second, "three renewals", func() bool { return renews.Load() >= 3 })
	if !n.hasAddr(t, "c6", "2001:db8:6::10/128") {
		t.Fatal("address gone while the lease was being renewed")
	}
	silent.Store(true)
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "dhcpv6") {
			t.Errorf("lost: %v, want ErrLeaseLost naming dhcpv6", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the lease was not reported lost")
	}
	if n.hasAddr(t, "c6", "2001:db8:6::10/128") {
		t.Error("address of the lost lease still there")
	}
}
