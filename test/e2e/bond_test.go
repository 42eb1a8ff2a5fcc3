//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/inventory"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// Bond e2e parameters.
const (
	bondVLAN      = 100
	bondLease     = 30 * time.Second
	bondGuestIP   = "10.0.2.15"
	bondWriteTime = 50 * time.Second // the throttled image download; outlasts the lease
)

// A machine with two NICs on a switch: its config drive asks for an
// active-backup bond over both with VLAN 100 on it and DHCP there. The
// switch (vlanSwitch, in the test process) carries VLAN 100 tagged on the
// NICs' ports and untagged to a tap on the host, where the test's DHCP
// server (30-second leases), bootyd's forwarder and a file server listen;
// untagged frames from the guest reach nothing. It announces itself by
// LLDP on each NIC's port. The image comes throttled so the write outlasts
// the lease. Mid-write the active NIC's link is cut (QMP set_link off):
// the bond fails over, the lease keeps being renewed (never lost) and the
// write completes with the image on the disk. The agent logs both LLDP
// neighbours.
func TestBondVLANLeaseRenewalFailover(t *testing.T) {
	start := time.Now()
	lab := newLab(t)
	sw := newVLANSwitch(t, "bondhost0", harness.GuestHost+"/24", bondVLAN, 2)
	for i := range 2 {
		sw.announceLLDP(i, inventory.Neighbor{ChassisID: "02:00:5e:00:53:01", PortID: "swp" + strconv.Itoa(i+1), SystemName: "tor-e2e"})
	}
	dhcp := newLeaseServer(t, "bondhost0", bondLease)
	port := strconv.Itoa(lab.Port())
	forwardTCP(t, net.JoinHostPort(harness.GuestHost, port), net.JoinHostPort("127.0.0.1", port), nil)
	img := serveThrottled(t, net.JoinHostPort(harness.GuestHost, "0"), lab.FilePath(harness.DemoImageZst), bondWriteTime)

	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Image.URL = img.url
	cfg.Server.URL = lab.GuestURL()
	cfg.Server.Token = "bond-network-token"
	cfg.Network = config.NetworkSpec{
		Bonds: []config.BondSpec{{Name: "bond0", Mode: "active-backup", Interfaces: []string{"eth0", "eth1"}, Primary: "eth0", MIIMon: 100}},
		VLANs: []config.VLANSpec{{Link: "bond0", ID: bondVLAN}},
		Links: []config.LinkSpec{{Name: "bond0.100", DHCP4: true}},
	}
	drive := makeConfigDrive(t, cfg)
	var qmp string
	var macs [2]string
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, Token: cfg.Server.Token,
		VMConfig: func(c *vm.Config) {
			qmp = filepath.Join(c.StateDir, "qmp.sock")
			macs = [2]string{c.MAC, secondMAC(c.MAC)}
			c.Disks = append(c.Disks, configDriveDisk(drive))
			c.Net = false
			for i := range 2 {
				// Fixed slots after the disks: nic0 is eth0, nic1 eth1.
				c.ExtraArgs = append(c.ExtraArgs,
					"-netdev", sw.netdev(i, "n"+strconv.Itoa(i)),
					"-device", fmt.Sprintf("virtio-net-pci,netdev=n%d,id=nic%d,mac=%s,addr=0x%x", i, i, macs[i], 0x10+i))
			}
			c.ExtraArgs = append(c.ExtraArgs, "-qmp", "unix:"+qmp+",server=on,wait=off")
			c.Append = "console=ttyS0,115200 panic=-1 booty.insecure-http=1"
		}})
	if err != nil {
		t.Fatal(err)
	}

	// Cut the active NIC (eth0, the primary) once 40% of the image is served.
	cut := make(chan error, 1)
	var cutAt atomic.Int64
	go func() {
		select {
		case <-img.reached(0.4):
		case <-time.After(4 * time.Minute):
			cut <- fmt.Errorf("the image download never reached 40%%")
			return
		}
		cutAt.Store(img.served.Load())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cut <- vm.QMP(ctx, qmp, "set_link", map[string]any{"name": "nic0", "up": false})
	}()
	bootToProvisioned(t, lab, m)
	select {
	case err := <-cut:
		if err != nil {
			t.Fatalf("cut nic0: %v", err)
		}
	default:
		t.Fatal("the image was written before nic0's link was cut")
	}
	if c := cutAt.Load(); c >= img.size {
		t.Errorf("nic0 was cut after the whole image (%d bytes) was served", img.size)
	}

	first, last := img.window()
	renewals := dhcp.renewalsBetween(first, last)
	t.Logf("image served in %s, %d lease renewals meanwhile (lease %s), nic0 cut at %d of %d bytes",
		last.Sub(first).Round(time.Second), renewals, bondLease, cutAt.Load(), img.size)
	if last.Sub(first) <= bondLease {
		t.Errorf("the write took %s, not longer than the %s lease", last.Sub(first), bondLease)
	}
	if renewals < 2 {
		t.Errorf("%d renewals during the write, want at least 2", renewals)
	}
	if mac := dhcp.clientMAC(); mac != macs[0] {
		t.Errorf("DHCP client MAC %s, want eth0's %s (the bond's)", mac, macs[0])
	}
	console := m.VM().ConsoleText()
	for _, want := range []string{
		`msg="bond ready" bond=bond0 mode=active-backup`,
		`msg="vlan ready" vlan=bond0.100 link=bond0 id=100`,
		`msg="network up" interface=bond0.100`, `address=` + bondGuestIP + `/24`,
		`msg="lldp neighbour" interface=eth0 switch=02:00:5e:00:53:01 port=swp1 system=tor-e2e`,
		`msg="lldp neighbour" interface=eth1 switch=02:00:5e:00:53:01 port=swp2 system=tor-e2e`,
	} {
		if !strings.Contains(console, want) {
			t.Errorf("console does not say %s", want)
		}
	}
	// The agent reports what the switch announced: the neighbour lines
	// reach bootyd, which stores them with the machine's logs.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := lab.DB().MachineByMAC(ctx, macs[0])
	if err != nil {
		t.Fatalf("bootyd has no machine %s: %v", macs[0], err)
	}
	lines, err := lab.DB().Logs(ctx, rec.ID, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"swp1", "swp2"} {
		found := false
		for _, l := range lines {
			if strings.Contains(l.Message, "lldp neighbour") && strings.Contains(l.Message, "port="+port) &&
				strings.Contains(l.Message, "switch=02:00:5e:00:53:01") && strings.Contains(l.Message, "system=tor-e2e") {
				found = true
			}
		}
		if !found {
			t.Errorf("bootyd's logs of %s hold no lldp neighbour line for %s (%d lines)", macs[0], port, len(lines))
		}
	}
	if !regexp.MustCompile(`bond0: \(slave eth1\): making interface the new active one`).MatchString(console) {
		t.Error("console does not show the bond failing over to eth1")
	}
	if strings.Contains(console, "dhcp lease lost") {
		t.Error("the lease was lost during the run")
	}
	if n := sw.untagged.Load(); n > 0 {
		t.Logf("%d untagged frames from the guest (other than LLDP) were dropped", n)
	}
	if sw.tagged[1].Load() == 0 {
		t.Error("no VLAN 100 frame came through eth1 after the failover")
	}
	t.Logf("test took %s", time.Since(start).Round(time.Second))
}

// secondMAC is mac with its last byte changed.
func secondMAC(mac string) string {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return "52:54:00:00:00:02"
	}
	hw[5] ^= 0x01
	return hw.String()
}

// leaseServer is a DHCPv4 server in the test process handing out
// bondGuestIP with short leases and recording each renewal (a request
// with the client address set, sent from it).
type leaseServer struct {
	mu       sync.Mutex
	renewals []time.Time
	mac      string
}

func newLeaseServer(t *testing.T, ifname string, lease time.Duration) *leaseServer {
	t.Helper()
	ls := &leaseServer{}
	serverIP := net.ParseIP(harness.GuestHost).To4()
	handler := func(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
		var mt dhcpv4.MessageType
		switch m.MessageType() {
		case dhcpv4.MessageTypeDiscover:
			mt = dhcpv4.MessageTypeOffer
		case dhcpv4.MessageTypeRequest:
			mt = dhcpv4.MessageTypeAck
			ls.mu.Lock()
			ls.mac = m.ClientHWAddr.String()
			if p, ok := peer.(*net.UDPAddr); ok && !m.ClientIPAddr.IsUnspecified() && p.IP.Equal(m.ClientIPAddr) {
				ls.renewals = append(ls.renewals, time.Now())
			}
			ls.mu.Unlock()
		default:
			return
		}
		resp, err := dhcpv4.New(dhcpv4.WithTransactionID(m.TransactionID),
			dhcpv4.WithReply(m),
			dhcpv4.WithMessageType(mt),
			dhcpv4.WithYourIP(net.ParseIP(bondGuestIP)),
			dhcpv4.WithServerIP(serverIP),
			dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
			dhcpv4.WithRouter(serverIP),
			dhcpv4.WithLeaseTime(uint32(lease/time.Second)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)),
		)
		if err != nil {
			t.Errorf("build dhcp reply: %v", err)
			return
		}
		// RFC 2131 4.1: to ciaddr when the client has one, else broadcast.
		to := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
		if !m.ClientIPAddr.IsUnspecified() {
			to.IP = m.ClientIPAddr
		}
		if _, err := conn.WriteTo(resp.ToBytes(), to); err != nil {
			t.Logf("send dhcp reply: %v", err)
		}
	}
	srv, err := server4.NewServer(ifname, nil, handler)
	if err != nil {
		t.Fatalf("start dhcp server on %s: %v", ifname, err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return ls
}

func (ls *leaseServer) renewalsBetween(from, to time.Time) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	for _, r := range ls.renewals {
		if !r.Before(from) && !r.After(to) {
			n++
		}
	}
	return n
}

func (ls *leaseServer) clientMAC() string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.mac
}

// throttled serves one file at a rate that makes a full download last
// about d, and records when the first and last bytes went out.
type throttled struct {
	url    string
	size   int64
	served atomic.Int64

	mu          sync.Mutex
	first, last time.Time
	waiters     []waiter
}

type waiter struct {
	at int64
	ch chan struct{}
}

// serveThrottled serves path at http://listen/<base name> (listen's port 0
// picks one), paced so the whole file takes about d. Range requests are
// honoured (http.ServeContent), so a resumed download is paced too.
func serveThrottled(t *testing.T, listen, path string, d time.Duration) *throttled {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("listen %s: %v", listen, err)
	}
	th := &throttled{url: "http://" + ln.Addr().String() + "/" + filepath.Base(path), size: fi.Size()}
	rate := float64(fi.Size()) / d.Seconds() // bytes per second
	mux := http.NewServeMux()
	mux.HandleFunc("/"+filepath.Base(path), func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(&pacedWriter{ResponseWriter: w, th: th, rate: rate}, r, fi.Name(), fi.ModTime(), f)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return th
}

// reached returns a channel closed once fraction of the file was served.
func (th *throttled) reached(fraction float64) <-chan struct{} {
	w := waiter{at: int64(fraction * float64(th.size)), ch: make(chan struct{})}
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.served.Load() >= w.at {
		close(w.ch)
	} else {
		th.waiters = append(th.waiters, w)
	}
	return w.ch
}

func (th *throttled) window() (time.Time, time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.first, th.last
}

func (th *throttled) add(n int) {
	now := time.Now()
	total := th.served.Add(int64(n))
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.first.IsZero() {
		th.first = now
	}
	th.last = now
	kept := th.waiters[:0]
	for _, w := range th.waiters {
		if total >= w.at {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	th.waiters = kept
}

// pacedWriter writes in 8 KiB pieces, sleeping so the body goes out at rate.
type pacedWriter struct {
	http.ResponseWriter
	th   *throttled
	rate float64
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(len(b), 8<<10)
		time.Sleep(time.Duration(float64(n) / p.rate * float64(time.Second)))
		m, err := p.ResponseWriter.Write(b[:n])
		written += m
		p.th.add(m)
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}
