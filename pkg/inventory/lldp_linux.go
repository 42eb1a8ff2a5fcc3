package inventory

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/safego"
)

// ListenLLDP listens for LLDP frames on the named links for at most wait
// and returns the first neighbour each link heard; see WatchLLDP.
func ListenLLDP(ctx context.Context, links []string, wait time.Duration) map[string]Neighbor {
	return WatchLLDP(ctx, links, wait, nil)
}

// WatchLLDP listens for LLDP frames on the named links for at most wait,
// calls heard (when not nil) with each link's first neighbour as its frame
// arrives (from that link's listener goroutine), and returns what every
// link heard. It opens one AF_PACKET socket per link for ethertype 0x88cc
// (in the calling thread's network namespace, before it returns to
// waiting) and joins the LLDP multicast group so the NIC's filter lets the
// frames through. A link that cannot be opened is logged and left out; the
// listen ends when every link heard a frame, wait passed, or ctx ended.
func WatchLLDP(ctx context.Context, links []string, wait time.Duration, heard func(link string, n Neighbor)) map[string]Neighbor {
	log := slog.Default().With("component", "inventory")
	out := map[string]Neighbor{}
	if wait <= 0 || len(links) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	deadline, _ := ctx.Deadline()

	type listener struct {
		link string
		conn *packet.Conn
	}
	var ls []listener
	for _, name := range links {
		c, err := openLLDP(name)
		if err != nil {
			log.Warn("cannot listen for LLDP", "link", name, "error", err)
			continue
		}
		defer c.Close()
		ls = append(ls, listener{name, c})
	}
	if len(ls) == 0 {
		return out
	}
	// A ctx that ends before the deadline (the caller gave up) wakes the readers.
	stop := context.AfterFunc(ctx, func() {
		for _, l := range ls {
			_ = l.conn.SetReadDeadline(time.Unix(1, 0))
		}
	})
	defer stop()

	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, l := range ls {
		_ = l.conn.SetReadDeadline(deadline)
		safego.Go(&wg, "lldp listener "+l.link, func(err error) { log.Error("lldp listener", "link", l.link, "error", err) }, func() {
			buf := make([]byte, 9216)
			for {
				n, _, err := l.conn.ReadFrom(buf)
				if err != nil {
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() {
						log.Warn("lldp read failed", "link", l.link, "error", err)
					}
					return
				}
				nb, err := DecodeLLDP(buf[:n])
				if err != nil {
					log.Debug("ignored a frame that is not LLDP", "link", l.link, "error", err)
					continue
				}
				log.Info("lldp neighbour", "link", l.link, "switch", nb.ChassisID, "port", nb.PortID, "name", nb.SystemName)
				mu.Lock()
				out[l.link] = nb
				all := len(out) == len(ls)
				mu.Unlock()
				if heard != nil {
					heard(l.link, nb)
				}
				if all {
					cancel()
				}
				return
			}
		})
	}
	wg.Wait()
	return out
}

// openLLDP opens a raw packet socket on link for ethertype 0x88cc and
// joins the LLDP multicast address on it.
func openLLDP(link string) (*packet.Conn, error) {
	ifi, err := net.InterfaceByName(link)
	if err != nil {
		return nil, err
	}
	c, err := packet.Listen(ifi, packet.Raw, EtherTypeLLDP, nil)
	if err != nil {
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	mreq := unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_MULTICAST, Alen: 6}
	copy(mreq.Address[:], LLDPMulticast)
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptPacketMreq(int(fd), unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq)
	}); err != nil {
		serr = err
	}
	if serr != nil {
		c.Close()
		return nil, os.NewSyscallError("join lldp multicast on "+link, serr)
	}
	return c, nil
}
