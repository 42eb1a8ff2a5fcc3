package network

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/rfc1035label"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// testNet is a pair of network namespaces the test created: "server" holds
// the DHCP servers' ends of veth pairs, "client" the ends Configure works on.
// Both disappear when the test closes its handles.
type testNet struct {
	srvNS, cliNS netns.NsHandle
	srv, cli     *netlink.Handle
}

// requireRoot fails the test without root (it needs namespaces), unless -short.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root for network namespaces; skipped in -short")
		}
		t.Fatal("needs root for network namespaces (run as root, or with -short to skip)")
	}
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	requireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	newNS := func() netns.NsHandle {
		t.Helper()
		ns, err := netns.New() // also switches this thread into it
		if err != nil {
			t.Fatal(err)
		}
		if err := netns.Set(orig); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		return ns
	}
	n := &testNet{srvNS: newNS(), cliNS: newNS()}
	if n.srv, err = netlink.NewHandleAt(n.srvNS, unix.NETLINK_ROUTE); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.srv.Close)
	if n.cli, err = netlink.NewHandleAt(n.cliNS, unix.NETLINK_ROUTE); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.cli.Close)
	return n
}

// veth creates srvName (server namespace, address srvAddr, up unless down)
// paired with cliName in the client namespace, left down for Configure.
func (n *testNet) veth(t *testing.T, srvName, cliName, srvAddr string, down bool) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = srvName
	if err := n.srv.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: cliName, PeerNamespace: netlink.NsFd(int(n.cliNS))}); err != nil {
		t.Fatalf("add veth %s/%s: %v", srvName, cliName, err)
	}
	l, err := n.srv.LinkByName(srvName)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := netlink.ParseAddr(srvAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.srv.AddrAdd(l, addr); err != nil {
		t.Fatal(err)
	}
	if !down {
		if err := n.srv.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
}

// dhcpServer serves one fixed lease on ifname in the server namespace:
// 10.123.0.10/24, router 10.123.0.1, DNS 10.123.0.53.
func (n *testNet) dhcpServer(t *testing.T, ifname string) {
	t.Helper()
	handler := func(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
		var mt dhcpv4.MessageType
		switch m.MessageType() {
		case dhcpv4.MessageTypeDiscover:
			mt = dhcpv4.MessageTypeOffer
		case dhcpv4.MessageTypeRequest:
			mt = dhcpv4.MessageTypeAck
		default:
			return
		}
		// Built without dhcpv4.NewReplyFromRequest, whose random
		// transaction ID would block under TestConfigureDHCPWithoutRandomness.
		resp := newPacket(m.TransactionID,
			dhcpv4.WithReply(m),
			dhcpv4.WithGatewayIP(m.GatewayIPAddr),
			dhcpv4.WithMessageType(mt),
			dhcpv4.WithYourIP(net.IPv4(10, 123, 0, 10)),
			dhcpv4.WithServerIP(net.IPv4(10, 123, 0, 1)),
			dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
			dhcpv4.WithRouter(net.IPv4(10, 123, 0, 1)),
			dhcpv4.WithDNS(net.IPv4(10, 123, 0, 53)),
			dhcpv4.WithLeaseTime(3600),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 123, 0, 1))),
			dhcpv4.WithOption(dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: []string{"lab.example", "example"}})),
			dhcpv4.WithOption(dhcpv4.OptHostName("node-1")),
			dhcpv4.WithOption(dhcpv4.OptBootFileName("booty.efi")),
		)
		// The client has no address yet: answer by broadcast on the bound interface.
		if _, err := conn.WriteTo(resp.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}); err != nil {
			t.Errorf("send dhcp reply: %v", err)
		}
	}
	n.serveDHCP(t, ifname, handler)
}

// serveDHCP runs a DHCPv4 server with handler on ifname in the server
// namespace until the test ends.
func (n *testNet) serveDHCP(t *testing.T, ifname string, handler server4.Handler) {
	t.Helper()
	var srv *server4.Server
	err := inNetNS(n.srvNS, func() error {
		var err error
		srv, err = server4.NewServer(ifname, nil, handler)
		return err
	})
	if err != nil {
		t.Fatalf("start dhcp server on %s: %v", ifname, err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
}

func (n *testNet) opts(t *testing.T) Options {
	return Options{
		NetNS:          n.cliNS,
		ResolvConf:     filepath.Join(t.TempDir(), "etc", "resolv.conf"),
		Logger:         slog.New(slog.NewTextHandler(t.Output(), nil)),
		Timeout:        30 * time.Second,
		CarrierTimeout: 5 * time.Second,
		DHCPTimeout:    3 * time.Second,
		DHCPAttempts:   3,
		Backoff:        100 * time.Millisecond,
	}
}

// addrs lists the addresses (CIDR) of ifname in the client namespace.
func (n *testNet) addrs(t *testing.T, ifname string) []string {
	t.Helper()
	l, err := n.cli.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := n.cli.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		got = append(got, a.IPNet.String())
	}
	return got
}

// assertApplied checks the address and default route on the client link.
func (n *testNet) assertApplied(t *testing.T, ifname, prefix, gw string) {
	t.Helper()
	if got := n.addrs(t, ifname); !slices.Contains(got, prefix) {
		t.Errorf("addresses on %s = %v, want %s", ifname, got, prefix)
	}
	l, err := n.cli.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := n.cli.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.String() == gw {
			found = true
		}
	}
	if !found {
		t.Errorf("routes on %s = %v, want default via %s", ifname, routes, gw)
	}
}

func assertFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("%s =\n%s\nwant\n%s", path, b, want)
	}
}

func TestConfigureDHCP(t *testing.T) {
	n := newTestNet(t)
	n.veth(t, "srv0", "cli0", "10.123.0.1/24", false)
	n.dhcpServer(t, "srv0")
	opts := n.opts(t)
	res, err := Configure(t.Context(), opts)
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	l, _ := n.cli.LinkByName("cli0")
	want := &Result{
		Method: MethodDHCP, Interface: "cli0", MAC: l.Attrs().HardwareAddr.String(),
		Address: netip.MustParsePrefix("10.123.0.10/24"), Gateway: netip.MustParseAddr("10.123.0.1"),
		DNS: []netip.Addr{netip.MustParseAddr("10.123.0.53")}, Search: []string{"lab.example", "example"},
		Hostname: "node-1", NextServer: netip.MustParseAddr("10.123.0.1"), BootFile: "booty.efi",
		ServerID: netip.MustParseAddr("10.123.0.1"), LeaseTime: time.Hour,
	}
	if !resultEqual(res, want) {
		t.Errorf("Result\n got %+v\nwant %+v", res, want)
	}
	n.assertApplied(t, "cli0", "10.123.0.10/24", "10.123.0.1")
	assertFile(t, opts.ResolvConf, "# written by booty\nnameserver 10.123.0.53\nsearch lab.example example\n")
}

// TestConfigureGate: the lease is won before Gate is asked; it is applied
// only when Gate says so, and a refusal applies nothing and is returned.
func TestConfigureGate(t *testing.T) {
	n := newTestNet(t)
	n.veth(t, "srv0", "cli0", "10.123.0.1/24", false)
	n.dhcpServer(t, "srv0")

	t.Run("refused", func(t *testing.T) {
		opts := n.opts(t)
		refuse := errors.New("the local config names the network")
		asked := 0
		opts.Gate = func() error {
			asked++
			if got := n.addrs(t, "cli0"); slices.Contains(got, "10.123.0.10/24") {
				t.Errorf("Gate asked after the lease was applied: %v", got)
			}
			return refuse
		}
		res, err := Configure(t.Context(), opts)
		if !errors.Is(err, refuse) || res != nil {
			t.Fatalf("Configure = %v, %v; want Gate's error", res, err)
		}
		if asked != 1 {
			t.Errorf("Gate asked %d times, want 1", asked)
		}
		if got := n.addrs(t, "cli0"); slices.Contains(got, "10.123.0.10/24") {
			t.Errorf("refused lease applied anyway: %v", got)
		}
		if _, err := os.Stat(opts.ResolvConf); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refused lease wrote %s (%v)", opts.ResolvConf, err)
		}
	})
	t.Run("waits, then applies", func(t *testing.T) {
		opts := n.opts(t)
		opts.Timeout = time.Second // the wait at the gate outlasts it
		release := make(chan struct{})
		opts.Gate = func() error { <-release; return nil }
		done := make(chan error, 1)
		go func() { _, err := Configure(t.Context(), opts); done <- err }()
		select {
		case err := <-done:
			t.Fatalf("Configure returned before the gate opened: %v", err)
		case <-time.After(2 * time.Second):
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Configure: %v", err)
		}
		n.assertApplied(t, "cli0", "10.123.0.10/24", "10.123.0.1")
	})
}

func TestConfigureDHCPFirstAnswerWins(t *testing.T) {
	n := newTestNet(t)
	// cli0 sorts first but nobody answers there; cli1 has the server.
	n.veth(t, "srv0", "cli0", "10.124.0.1/24", false)
	n.veth(t, "srv1", "cli1", "10.123.0.1/24", false)
	n.dhcpServer(t, "srv1")
	opts := n.opts(t)
	start := time.Now()
	res, err := Configure(t.Context(), opts)
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if res.Interface != "cli1" {
		t.Fatalf("Interface = %s, want cli1 (the link with a DHCP server)", res.Interface)
	}
	// The silent link's attempts were cancelled instead of running out.
	if d := time.Since(start); d >= opts.DHCPTimeout {
		t.Errorf("Configure took %s: losing link was not cancelled", d)
	}
	n.assertApplied(t, "cli1", "10.123.0.10/24", "10.123.0.1")
	l0, _ := n.cli.LinkByName("cli0")
	if addrs, _ := n.cli.AddrList(l0, netlink.FAMILY_V4); len(addrs) != 0 {
		t.Errorf("losing link cli0 got addresses %v", addrs)
	}
}

func TestConfigureStatic(t *testing.T) {
	n := newTestNet(t)
	n.veth(t, "srv0", "cli0", "10.123.0.1/24", false)
	n.veth(t, "srv1", "cli1", "10.125.0.1/24", false)
	opts := n.opts(t)
	static, err := ParseIPParam("10.125.0.20:10.125.0.2:10.125.0.1:255.255.255.0:node-2:cli1:off:10.125.0.53")
	if err != nil {
		t.Fatal(err)
	}
	static.Search = []string{"static.example"}
	opts.Static = static
	opts.MTU = 1400
	res, err := Configure(t.Context(), opts)
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if res.Method != MethodStatic || res.Interface != "cli1" || res.Address.String() != "10.125.0.20/24" {
		t.Errorf("Result = %+v, want static 10.125.0.20/24 on cli1", res)
	}
	n.assertApplied(t, "cli1", "10.125.0.20/24", "10.125.0.1")
	l, _ := n.cli.LinkByName("cli1")
	if l.Attrs().MTU != 1400 {
		t.Errorf("MTU of cli1 = %d, want 1400", l.Attrs().MTU)
	}
	l0, _ := n.cli.LinkByName("cli0")
	if addrs, _ := n.cli.AddrList(l0, netlink.FAMILY_V4); len(addrs) != 0 {
		t.Errorf("cli0 (not the static device) got addresses %v", addrs)
	}
	assertFile(t, opts.ResolvConf, "# written by booty\nnameserver 10.125.0.53\nsearch static.example\n")
}

func TestConfigureTimeouts(t *testing.T) {
	t.Run("no carrier", func(t *testing.T) {
		n := newTestNet(t)
		n.veth(t, "srv0", "cli0", "10.123.0.1/24", true) // peer down: no carrier
		opts := n.opts(t)
		opts.CarrierTimeout = 500 * time.Millisecond
		start := time.Now()
		_, err := Configure(t.Context(), opts)
		if !errors.Is(err, ErrNoCarrier) {
			t.Fatalf("err = %v, want ErrNoCarrier", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("gave up after %s, want about 500ms", d)
		}
	})
	t.Run("no lease", func(t *testing.T) {
		n := newTestNet(t)
		n.veth(t, "srv0", "cli0", "10.123.0.1/24", false) // nobody serves DHCP
		n.veth(t, "srv1", "cli1", "10.124.0.1/24", true)  // no carrier
		opts := n.opts(t)
		opts.DHCPTimeout, opts.DHCPAttempts = 300*time.Millisecond, 2
		opts.CarrierTimeout = 500 * time.Millisecond
		start := time.Now()
		_, err := Configure(t.Context(), opts)
		if !errors.Is(err, ErrNoLease) {
			t.Fatalf("err = %v, want ErrNoLease", err)
		}
		// Every link tried is named with why it failed.
		for _, want := range []string{"dhcp on cli0: no offer", "no carrier within 500ms on [cli1]"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want it to say %q", err, want)
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("gave up after %s, want about 2x300ms plus backoff", d)
		}
		if _, err := os.Stat(opts.ResolvConf); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("resolv.conf written without a lease (stat err %v)", err)
		}
	})
	t.Run("no such interface", func(t *testing.T) {
		n := newTestNet(t)
		n.veth(t, "srv0", "cli0", "10.123.0.1/24", false)
		opts := n.opts(t)
		opts.Interfaces = []string{"eth9"}
		if _, err := Configure(t.Context(), opts); !errors.Is(err, ErrNoLinks) {
			t.Fatalf("err = %v, want ErrNoLinks", err)
		}
	})
}

func resultEqual(a, b *Result) bool {
	return a.Method == b.Method && a.Interface == b.Interface && a.MAC == b.MAC && a.Address == b.Address &&
		a.Gateway == b.Gateway && slices.Equal(a.DNS, b.DNS) && slices.Equal(a.Search, b.Search) && a.MTU == b.MTU &&
		a.Hostname == b.Hostname && a.NextServer == b.NextServer && a.BootFile == b.BootFile &&
		a.ServerID == b.ServerID && a.LeaseTime == b.LeaseTime
}
