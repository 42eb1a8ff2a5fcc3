//go:build e2e

package e2e

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/inventory"
)

// vlanSwitch is an Ethernet switch in the test process, for hosts whose
// kernel has neither 8021q nor bridge VLAN filtering: guest ports are
// QEMU dgram netdevs (one unix datagram per frame) that carry one VLAN
// tagged, and the host port is a tap with an address, which carries that
// VLAN untagged. Frames from a guest port tagged with the VLAN are
// untagged to the host (the sender's MAC learned on that port); frames
// from the host are tagged and sent to the port their destination was
// learned on, or to every guest port. Untagged frames from the guests go
// nowhere (they are counted). The guests' kernels do real 802.1Q.
type vlanSwitch struct {
	t     *testing.T
	vid   uint16
	dir   string
	tap   *os.File
	ports []*net.UnixConn
	// peers are the QEMU ends of the guest ports.
	peers []*net.UnixAddr

	mu  sync.Mutex
	fdb map[[6]byte]int

	untagged atomic.Int64
	tagged   []atomic.Int64
	wg       sync.WaitGroup
}

// newVLANSwitch creates the host tap hostName with hostAddr (CIDR) and n
// guest ports, and starts forwarding until the test ends.
func newVLANSwitch(t *testing.T, hostName, hostAddr string, vid uint16, n int) *vlanSwitch {
	t.Helper()
	sw := &vlanSwitch{t: t, vid: vid, dir: t.TempDir(), fdb: map[[6]byte]int{}, tagged: make([]atomic.Int64, n)}
	tap, err := openTap(hostName)
	if err != nil {
		t.Fatalf("open tap %s (needs /dev/net/tun): %v", hostName, err)
	}
	sw.tap = tap
	l, err := netlink.LinkByName(hostName)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := netlink.ParseAddr(hostAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(l, addr); err != nil {
		t.Fatalf("add %s to %s: %v", hostAddr, hostName, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(sw.dir, "sw"+strconv.Itoa(i)), Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		sw.ports = append(sw.ports, c)
		sw.peers = append(sw.peers, &net.UnixAddr{Name: filepath.Join(sw.dir, "qemu"+strconv.Itoa(i)), Net: "unixgram"})
	}
	sw.wg.Add(1 + n)
	go sw.fromHost()
	for i := range n {
		go sw.fromGuest(i)
	}
	t.Cleanup(func() {
		sw.tap.Close()
		for _, c := range sw.ports {
			c.Close()
		}
		sw.wg.Wait()
	})
	return sw
}

// netdev is the -netdev argument connecting a QEMU NIC to guest port i.
func (sw *vlanSwitch) netdev(i int, id string) string {
	return "dgram,id=" + id + ",local.type=unix,local.path=" + sw.peers[i].Name +
		",remote.type=unix,remote.path=" + sw.ports[i].LocalAddr().String()
}

func (sw *vlanSwitch) fromGuest(i int) {
	defer sw.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, _, err := sw.ports[i].ReadFromUnix(buf)
		if err != nil {
			return
		}
		f := buf[:n]
		if len(f) < 18 {
			continue
		}
		if binary.BigEndian.Uint16(f[12:14]) != 0x8100 || binary.BigEndian.Uint16(f[14:16])&0xfff != sw.vid {
			if binary.BigEndian.Uint16(f[12:14]) != inventory.EtherTypeLLDP {
				sw.untagged.Add(1)
			}
			continue
		}
		sw.tagged[i].Add(1)
		var src [6]byte
		copy(src[:], f[6:12])
		sw.mu.Lock()
		sw.fdb[src] = i
		sw.mu.Unlock()
		out := append(append([]byte{}, f[:12]...), f[16:]...) // untag
		if _, err := sw.tap.Write(out); err != nil && !errors.Is(err, os.ErrClosed) {
			sw.t.Logf("switch: to host: %v", err)
		}
	}
}

func (sw *vlanSwitch) fromHost() {
	defer sw.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := sw.tap.Read(buf)
		if err != nil {
			return
		}
		f := buf[:n]
		if len(f) < 14 {
			continue
		}
		tag := make([]byte, 4)
		binary.BigEndian.PutUint16(tag, 0x8100)
		binary.BigEndian.PutUint16(tag[2:], sw.vid)
		out := append(append(append([]byte{}, f[:12]...), tag...), f[12:]...)
		var dst [6]byte
		copy(dst[:], f[:6])
		sw.mu.Lock()
		port, ok := sw.fdb[dst]
		sw.mu.Unlock()
		for i := range sw.ports {
			if !ok || i == port {
				sw.send(i, out)
			}
		}
	}
}

// send writes one frame to guest port i; until QEMU has bound its end
// (or after it exited) there is nobody to take it, which is fine.
func (sw *vlanSwitch) send(i int, frame []byte) {
	_, _ = sw.ports[i].WriteToUnix(frame, sw.peers[i])
}

// announceLLDP sends n's LLDP frame untagged on guest port i every
// second, as the switch port would, until the test ends.
func (sw *vlanSwitch) announceLLDP(i int, n inventory.Neighbor) {
	frame := inventory.LLDPFrame(net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, byte(0x10 + i)}, n)
	done := make(chan struct{})
	sw.wg.Add(1)
	go func() {
		defer sw.wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			sw.send(i, frame)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	sw.t.Cleanup(func() { close(done) })
}

// openTap creates a tap device name (gone when the file is closed) and
// returns it for reading and writing whole Ethernet frames.
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
