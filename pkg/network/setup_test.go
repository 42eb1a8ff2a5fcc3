package network

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// bridged puts a bridge br0 in the server namespace with the server ends
// of veth pairs srv<i>/cli (cli left down in the client namespace), and a
// VLAN br0.vlan (id vid) on it with 10.124.0.1/24 where the DHCP server
// listens; vid 0 puts the address on br0 itself.
func (n *testNet) bridged(t *testing.T, vid int, cli ...string) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = "br0"
	if err := n.srv.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
		t.Fatalf("add bridge: %v", err)
	}
	br, err := n.srv.LinkByName("br0")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cli {
		la := netlink.NewLinkAttrs()
		la.Name = "srv" + string(rune('0'+i))
		if err := n.srv.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: c, PeerNamespace: netlink.NsFd(int(n.cliNS))}); err != nil {
			t.Fatalf("add veth %s/%s: %v", la.Name, c, err)
		}
		l, err := n.srv.LinkByName(la.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.srv.LinkSetMaster(l, br); err != nil {
			t.Fatal(err)
		}
		if err := n.srv.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.srv.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	vl := br
	if vid > 0 {
		vla := netlink.NewLinkAttrs()
		vla.Name, vla.ParentIndex = "br0.vlan", br.Attrs().Index
		if err := n.srv.LinkAdd(&netlink.Vlan{LinkAttrs: vla, VlanId: vid}); err != nil {
			t.Fatalf("add vlan: %v", err)
		}
		if vl, err = n.srv.LinkByName("br0.vlan"); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := netlink.ParseAddr("10.124.0.1/24")
	if err := n.srv.AddrAdd(vl, addr); err != nil {
		t.Fatal(err)
	}
	if err := n.srv.LinkSetUp(vl); err != nil {
		t.Fatal(err)
	}
}

// leaseServer is a DHCPv4 server with short leases that counts renewals
// (requests with ciaddr set, from that address) and can be silenced.
type leaseServer struct {
	lease    time.Duration
	renewals atomic.Int32
	silent   atomic.Bool
}

func (n *testNet) leaseServer(t *testing.T, ifname string, lease time.Duration) *leaseServer {
	t.Helper()
	ls := &leaseServer{lease: lease}
	handler := func(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
		if ls.silent.Load() {
			return
		}
		var mt dhcpv4.MessageType
		switch m.MessageType() {
		case dhcpv4.MessageTypeDiscover:
			mt = dhcpv4.MessageTypeOffer
		case dhcpv4.MessageTypeRequest:
			mt = dhcpv4.MessageTypeAck
			// A renewal comes from the leased address (a kernel drops
			// unicast from 0.0.0.0 before the server sees it).
			if p, ok := peer.(*net.UDPAddr); ok && !m.ClientIPAddr.IsUnspecified() && p.IP.Equal(m.ClientIPAddr) {
				ls.renewals.Add(1)
			}
		default:
			return
		}
		resp := newPacket(m.TransactionID,
			dhcpv4.WithReply(m),
			dhcpv4.WithMessageType(mt),
			dhcpv4.WithYourIP(net.IPv4(10, 124, 0, 10)),
			dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
			dhcpv4.WithRouter(net.IPv4(10, 124, 0, 1)),
			dhcpv4.WithDNS(net.IPv4(10, 124, 0, 53)),
			dhcpv4.WithLeaseTime(uint32(ls.lease/time.Second)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 124, 0, 1))),
		)
		// RFC 2131 4.1: to ciaddr when the client has one, else broadcast.
		to := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
		if !m.ClientIPAddr.IsUnspecified() {
			to.IP = m.ClientIPAddr
		}
		if _, err := conn.WriteTo(resp.ToBytes(), to); err != nil {
			t.Logf("send dhcp reply: %v", err)
		}
	}
	n.serveDHCP(t, ifname, handler)
	return ls
}

// hasAddr reports whether ifname in the client namespace has prefix.
func (n *testNet) hasAddr(t *testing.T, ifname, prefix string) bool {
	t.Helper()
	return slices.Contains(n.addrs(t, ifname), prefix)
}

// waitFor polls cond every 100ms until it holds or bound passed.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", bound, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requireLinkKinds fails (in CI) or skips (elsewhere) when the kernel
// cannot create links of these kinds ("bond", "vlan"): bonding and 8021q
// are modules that some test hosts' kernels lack. It probes in the client
// namespace and removes what it made.
func requireLinkKinds(t *testing.T, n *testNet, kinds ...string) {
	t.Helper()
	for _, k := range kinds {
		var err error
		switch k {
		case "bond":
			la := netlink.NewLinkAttrs()
			la.Name = "probebond"
			if err = n.cli.LinkAdd(netlink.NewLinkBond(la)); err == nil {
				err = n.cli.LinkDel(netlink.NewLinkBond(la))
			}
		case "vlan":
			// On a veth: the loopback refuses VLANs whatever the kernel.
			la := netlink.NewLinkAttrs()
			la.Name = "probe0"
			veth := &netlink.Veth{LinkAttrs: la, PeerName: "probe1"}
			if err = n.cli.LinkAdd(veth); err != nil {
				t.Fatal(err)
			}
			p, _ := n.cli.LinkByName("probe0")
			vla := netlink.NewLinkAttrs()
			vla.Name, vla.ParentIndex = "probe0.2", p.Attrs().Index
			err = n.cli.LinkAdd(&netlink.Vlan{LinkAttrs: vla, VlanId: 2})
			if derr := n.cli.LinkDel(p); derr != nil {
				t.Fatal(derr)
			}
		default:
			t.Fatalf("requireLinkKinds: unknown kind %q", k)
		}
		if errors.Is(err, unix.EOPNOTSUPP) {
			// The host kernel of this project's machines (and CI's) has no
			// bonding or 8021q and cannot load modules: the guest kernel
			// of the e2e test TestBondVLANLeaseRenewalFailover proves bonds
			// and VLANs instead. Say so loudly.
			t.Skipf("SKIPPED: the host kernel cannot create %s links (%v); TestBondVLANLeaseRenewalFailover (e2e, in QEMU) covers them", k, err)
		}
		if err != nil {
			t.Fatalf("probe %s links: %v", k, err)
		}
	}
}

// A 4-second lease on a link of a Setup is renewed again and again, is
// lost (address removed, OnLeaseLost called) once the server is silent,
// comes back when it answers again, and renewals stop when the run ends.
func TestConfigureSetupRenewal(t *testing.T) {
	n := newTestNet(t)
	n.bridged(t, 0, "e0")
	ls := n.leaseServer(t, "br0", 4*time.Second)

	life, endRun := context.WithCancel(context.Background())
	defer endRun()
	var mu sync.Mutex
	var lost []error
	opts := n.opts(t)
	opts.Lifetime = life
	opts.OnLeaseLost = func(link string, err error) {
		mu.Lock()
		defer mu.Unlock()
		lost = append(lost, err)
	}
	opts.Setup = &Setup{
		Links: []LinkConfig{{Name: "e0", MTU: 1400, DHCP4: true}},
		DNS:   []netip.Addr{netip.MustParseAddr("192.0.2.53")},
	}
	res, err := Configure(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interface != "e0" || res.Address.String() != "10.124.0.10/24" || res.Gateway.String() != "10.124.0.1" {
		t.Errorf("result %+v, want e0 10.124.0.10/24 via 10.124.0.1", res)
	}
	if got := res.DNS; len(got) != 2 || got[0].String() != "192.0.2.53" || got[1].String() != "10.124.0.53" {
		t.Errorf("dns %v, want the config's then the lease's", got)
	}
	if l, _ := n.cli.LinkByName("e0"); l.Attrs().MTU != 1400 {
		t.Errorf("mtu %d, want 1400", l.Attrs().MTU)
	}

	// T1 is 2 s: three renewals (in 6 s, beyond the 4-second lease) keep the address.
	waitFor(t, 20*time.Second, "three renewals", func() bool { return ls.renewals.Load() >= 3 })
	if !n.hasAddr(t, "e0", "10.124.0.10/24") {
		t.Fatal("address gone while the lease was being renewed")
	}

	// The server goes silent: the lease ends, the address goes.
	ls.silent.Store(true)
	waitFor(t, 15*time.Second, "the address of the lost lease removed", func() bool { return !n.hasAddr(t, "e0", "10.124.0.10/24") })
	waitFor(t, 5*time.Second, "OnLeaseLost called", func() bool { mu.Lock(); defer mu.Unlock(); return len(lost) > 0 })
	mu.Lock()
	if !errors.Is(lost[0], ErrLeaseLost) || !strings.Contains(lost[0].Error(), "e0") {
		t.Errorf("lost error %v, want ErrLeaseLost naming e0", lost[0])
	}
	mu.Unlock()

	// It answers again: a new lease; then the run ends and renewals stop.
	ls.silent.Store(false)
	waitFor(t, 30*time.Second, "the address back", func() bool { return n.hasAddr(t, "e0", "10.124.0.10/24") })
	endRun()
	time.Sleep(500 * time.Millisecond)
	after := ls.renewals.Load()
	time.Sleep(5 * time.Second)
	if ls.renewals.Load() != after {
		t.Error("renewals went on after the run ended")
	}
}

// An active-backup bond over two links with a VLAN on it gets its lease
// from a server on the bridge's VLAN and keeps renewing it after the
// active slave goes down.
func TestConfigureSetupBondVLAN(t *testing.T) {
	n := newTestNet(t)
	requireLinkKinds(t, n, "bond", "vlan")
	n.bridged(t, 100, "e0", "e1")
	ls := n.leaseServer(t, "br0.vlan", 4*time.Second)
	life, endRun := context.WithCancel(context.Background())
	defer endRun()
	opts := n.opts(t)
	opts.Lifetime = life
	opts.Setup = &Setup{
		Bonds: []Bond{{Name: "bond0", Mode: BondActiveBackup, Interfaces: []string{"e0", "e1"}, Primary: "e1", MIIMon: 50}},
		VLANs: []VLAN{{Name: "bond0.100", Link: "bond0", ID: 100}},
		Links: []LinkConfig{{Name: "bond0", MTU: 1400}, {Name: "bond0.100", DHCP4: true}},
	}
	res, err := Configure(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interface != "bond0.100" || res.Address.String() != "10.124.0.10/24" {
		t.Errorf("result %+v, want bond0.100 10.124.0.10/24", res)
	}
	bl, err := n.cli.LinkByName("bond0")
	if err != nil {
		t.Fatal(err)
	}
	b, ok := bl.(*netlink.Bond)
	if !ok || b.Mode != netlink.BOND_MODE_ACTIVE_BACKUP || b.Miimon != 50 || b.MTU != 1400 {
		t.Fatalf("bond0 = %T %+v, want active-backup, miimon 50, mtu 1400", bl, bl)
	}
	e1, _ := n.cli.LinkByName("e1")
	if b.ActiveSlave != e1.Attrs().Index {
		t.Errorf("active slave index %d, want the primary e1 (%d)", b.ActiveSlave, e1.Attrs().Index)
	}
	for _, s := range []string{"e0", "e1"} {
		l, _ := n.cli.LinkByName(s)
		if l.Attrs().MasterIndex != bl.Attrs().Index {
			t.Errorf("%s is not enslaved to bond0", s)
		}
	}
	vl, err := n.cli.LinkByName("bond0.100")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := vl.(*netlink.Vlan); !ok || v.VlanId != 100 || v.ParentIndex != bl.Attrs().Index {
		t.Errorf("bond0.100 = %+v, want VLAN 100 on bond0", vl)
	}
	waitFor(t, 20*time.Second, "a renewal", func() bool { return ls.renewals.Load() >= 1 })
	if err := n.cli.LinkSetDown(e1); err != nil {
		t.Fatal(err)
	}
	before := ls.renewals.Load()
	waitFor(t, 20*time.Second, "two renewals after failover", func() bool { return ls.renewals.Load() >= before+2 })
	if !n.hasAddr(t, "bond0.100", "10.124.0.10/24") {
		t.Error("address gone after failover")
	}
}

// Static IPv4 and IPv6 addresses, routes with metrics, MTU and accept_ra
// on a plain link.
func TestConfigureSetupStatic(t *testing.T) {
	n := newTestNet(t)
	n.veth(t, "s0", "c0", "10.125.0.1/24", false)
	off := false
	opts := n.opts(t)
	opts.Setup = &Setup{
		Links: []LinkConfig{{
			Name: "c0", MTU: 1280, AcceptRA: &off,
			Addresses: []netip.Prefix{netip.MustParsePrefix("10.125.0.5/24"), netip.MustParsePrefix("2001:db8::5/64")},
			Routes: []Route{
				{To: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("10.125.0.1"), Metric: 50},
				{To: netip.MustParsePrefix("198.51.100.0/24"), Via: netip.MustParseAddr("10.125.0.254")},
				{To: netip.MustParsePrefix("2001:db8:1::/48"), Via: netip.MustParseAddr("2001:db8::1")},
			},
		}},
	}
	res, err := Configure(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interface != "c0" || res.Address.String() != "10.125.0.5/24" || res.Gateway.String() != "10.125.0.1" {
		t.Errorf("result %+v", res)
	}
	for _, p := range []string{"10.125.0.5/24", "2001:db8::5/64"} {
		if !n.hasAddr(t, "c0", p) {
			t.Errorf("c0 lacks %s", p)
		}
	}
	l, _ := n.cli.LinkByName("c0")
	if l.Attrs().MTU != 1280 {
		t.Errorf("mtu %d, want 1280", l.Attrs().MTU)
	}
	routes, err := n.cli.RouteList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range routes {
		dst := "default"
		if r.Dst != nil && !(r.Dst.IP.IsUnspecified() && r.Dst.Mask != nil) {
			dst = r.Dst.String()
		}
		if r.Gw != nil {
			got = append(got, dst+" via "+r.Gw.String()+" metric "+strconv.Itoa(r.Priority))
		}
	}
	for _, want := range []string{"default via 10.125.0.1 metric 50", "198.51.100.0/24 via 10.125.0.254 metric 0", "2001:db8:1::/48 via 2001:db8::1 metric 1024"} {
		if !slices.Contains(got, want) {
			t.Errorf("routes %v lack %q", got, want)
		}
	}
	var ra string
	if err := inNetNS(n.cliNS, func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/c0/accept_ra")
		ra = strings.TrimSpace(string(b))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ra != "0" {
		t.Errorf("accept_ra %q, want 0", ra)
	}
}

// A setup naming a link that does not exist fails with ErrNoLinks and
// creates nothing.
func TestConfigureSetupMissingLink(t *testing.T) {
	n := newTestNet(t)
	opts := n.opts(t)
	opts.Setup = &Setup{Bonds: []Bond{{Name: "bond0", Mode: Bond8023AD, Interfaces: []string{"nope0"}}}}
	_, err := Configure(context.Background(), opts)
	if !errors.Is(err, ErrNoLinks) || !strings.Contains(err.Error(), "nope0") {
		t.Fatalf("err %v, want ErrNoLinks naming nope0", err)
	}
	if _, err := n.cli.LinkByName("bond0"); err == nil {
		t.Error("bond0 created although a slave is missing")
	}
}

// An 802.3ad bond gets its LACP rate, transmit hash policy and link
// monitoring interval (the default when the config gives none), and a
// static address; run twice, the second run replaces the bond.
func TestConfigureSetupLACP(t *testing.T) {
	n := newTestNet(t)
	requireLinkKinds(t, n, "bond")
	n.veth(t, "s0", "l0", "10.127.0.1/24", false)
	n.veth(t, "s1", "l1", "10.127.1.1/24", false)
	opts := n.opts(t)
	opts.Setup = &Setup{
		Bonds: []Bond{{Name: "bond7", Mode: Bond8023AD, Interfaces: []string{"l0", "l1"}, LACPRate: "fast", XmitHashPolicy: "layer3+4"}},
		Links: []LinkConfig{{Name: "bond7", Addresses: []netip.Prefix{netip.MustParsePrefix("10.127.0.5/24")}}},
	}
	for run := 1; run <= 2; run++ {
		if _, err := Configure(context.Background(), opts); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		bl, err := n.cli.LinkByName("bond7")
		if err != nil {
			t.Fatal(err)
		}
		b, ok := bl.(*netlink.Bond)
		if !ok || b.Mode != netlink.BOND_MODE_802_3AD || b.LacpRate != netlink.BOND_LACP_RATE_FAST ||
			b.XmitHashPolicy != netlink.BOND_XMIT_HASH_POLICY_LAYER3_4 || b.Miimon != DefaultMIIMon {
			t.Errorf("run %d: bond7 = %T %+v, want 802.3ad, fast, layer3+4, miimon %d", run, bl, bl, DefaultMIIMon)
		}
		if !n.hasAddr(t, "bond7", "10.127.0.5/24") {
			t.Errorf("run %d: bond7 lacks 10.127.0.5/24", run)
		}
	}
}
