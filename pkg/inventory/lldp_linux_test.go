package inventory

import (
	"context"
	"net"
	"os"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/booty-dev/booty/pkg/api"
)

// inNetNS runs f on a locked thread inside a network namespace the test
// creates; sockets f opens stay in that namespace after it returns.
func inNetNS(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root for a network namespace; skipped in -short")
		}
		t.Fatal("needs root for a network namespace (run as root, or with -short to skip)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		// The thread is left locked: it ends with this goroutine, so the
		// namespace never leaks into another goroutine.
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		f()
	}()
	<-done
}

// TestListenLLDPOverVeth: a sender plays the switch on one end of a veth
// pair, ListenLLDP on the other end reports its neighbour and stops early;
// a link that hears nothing ends the listen at the bound.
func TestListenLLDPOverVeth(t *testing.T) {
	want := Neighbor{ChassisID: "aa:bb:cc:00:11:22", PortID: "Ethernet1/7", SystemName: "leaf-12",
		PVID: 100, VLANs: []api.VLAN{{ID: 100, Name: "prov"}}}
	inNetNS(t, func() {
		for _, pair := range [][2]string{{"sw0", "nic0"}, {"sw1", "nic1"}} {
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: pair[0]}, PeerName: pair[1]}
			if err := netlink.LinkAdd(veth); err != nil {
				t.Fatalf("add veth: %v", err)
			}
			for _, n := range pair {
				l, err := netlink.LinkByName(n)
				if err != nil {
					t.Fatal(err)
				}
				if err := netlink.LinkSetUp(l); err != nil {
					t.Fatal(err)
				}
			}
		}
		sw, err := net.InterfaceByName("sw0")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := packet.Listen(sw, packet.Raw, EtherTypeLLDP, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		frame := LLDPFrame(sw.HardwareAddr, want)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { // announce every 100 ms, as a switch with a short interval
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				_, _ = conn.WriteTo(frame, &packet.Addr{HardwareAddr: LLDPMulticast})
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()

		got := ListenLLDP(ctx, []string{"nic0"}, 20*time.Second)
		if !reflect.DeepEqual(got, map[string]Neighbor{"nic0": want}) {
			t.Errorf("heard %+v, want nic0: %+v", got, want)
		}

		// nic1's peer announces nothing: the listen ends at its bound with
		// what nic0 heard; an unknown link is skipped. WatchLLDP tells of
		// nic0's neighbour as it comes, once.
		start := time.Now()
		var mu sync.Mutex
		told := map[string][]Neighbor{}
		got = WatchLLDP(ctx, []string{"nic0", "nic1", "nope0"}, 1500*time.Millisecond, func(link string, n Neighbor) {
			mu.Lock()
			defer mu.Unlock()
			told[link] = append(told[link], n)
		})
		if _, ok := got["nic1"]; ok || got["nic0"].SystemName != "leaf-12" {
			t.Errorf("heard %+v, want nic0 only", got)
		}
		mu.Lock()
		if !reflect.DeepEqual(told, map[string][]Neighbor{"nic0": {want}}) {
			t.Errorf("told of %+v, want nic0's neighbour once", told)
		}
		mu.Unlock()
		if el := time.Since(start); el > 15*time.Second {
			t.Errorf("listen took %s, bound was 1.5s", el)
		}
	})
}
