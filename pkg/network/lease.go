package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/safego"
)

// ErrLeaseLost is passed to Options.OnLeaseLost when a DHCP lease expired
// without renewal or the server refused to renew it.
var ErrLeaseLost = errors.New("dhcp lease lost")

// Bounds of one renewal attempt (RFC 2131 4.4.5 waits half the time left
// until T2 or the lease's end, at least 60 s; short leases need less).
const (
	minRenewWait = 500 * time.Millisecond
	maxRenewWait = 60 * time.Second
)

// infiniteLease is the lease time option's "forever" (RFC 2131 3.3).
const infiniteLease = time.Duration(0xffffffff) * time.Second

// dhcpAndKeep obtains a lease on l (with retries), applies it and, when
// opts.Lifetime is set, keeps it renewed until Lifetime ends.
func dhcpAndKeep(ctx context.Context, opts Options, h *netlink.Handle, l netlink.Link) (*Result, error) {
	res, err := dhcpLink(ctx, opts, l)
	if err != nil {
		return nil, err
	}
	if err := apply(h, l, res); err != nil {
		return nil, err
	}
	opts.Logger.Info("dhcp lease", "interface", res.Interface, "address", res.Address, "lease", res.LeaseTime,
		"server", res.ServerID)
	startKeeper(opts, l, res)
	return res, nil
}

// startKeeper runs keepLease in the background when opts.Lifetime is set.
func startKeeper(opts Options, l netlink.Link, res *Result) {
	if opts.Lifetime == nil || res.Method != MethodDHCP {
		return
	}
	go func() {
		err := safego.Call("dhcp renewal on "+res.Interface, func() error {
			keepLease(opts.Lifetime, opts, l, res)
			return nil
		})
		if err != nil {
			opts.Logger.Error("dhcp renewal stopped", "interface", res.Interface, "error", err)
		}
	}()
}

// keepLease renews the lease res of link l at T1 by a request to the
// server that gave it, and from T2 by broadcast (rebinding), each attempt
// waiting half the time left to the next stage. Each renewal is logged at
// debug, a failed attempt at warn. When the lease ends without renewal or
// the server NAKs, the address is removed (as the kernel would with a
// valid lifetime), the loss is logged at error and passed to
// opts.OnLeaseLost, and a new lease is sought with backoff. It returns when
// life ends.
func keepLease(life context.Context, opts Options, l netlink.Link, res *Result) {
	log := opts.Logger.With("interface", res.Interface)
	h := opts.Handle
	if h == nil {
		var err error
		if h, err = openHandle(opts.NetNS); err != nil {
			log.Error("cannot renew the dhcp lease", "error", err)
			return
		}
		defer h.Close()
	}
	got := time.Now()
	for {
		lt := res.LeaseTime
		if lt <= 0 || lt >= infiniteLease {
			log.Debug("dhcp lease does not expire; not renewing", "lease", lt)
			return
		}
		t1, t2 := res.renewal, res.rebinding
		if t1 <= 0 || t1 >= lt {
			t1 = lt / 2
		}
		if t2 <= t1 || t2 >= lt {
			t2 = lt * 7 / 8
		}
		if !sleepUntil(life, got.Add(t1)) {
			return
		}
		next, err := renewUntil(life, opts, l, res, got, t2, lt)
		if life.Err() != nil {
			return
		}
		if err == nil {
			if next.Address != res.Address {
				_ = h.AddrDel(l, netlinkAddr(res.Address))
			}
			if err := apply(h, l, next); err != nil {
				log.Warn("dhcp lease renewed but not applied", "error", err)
			}
			log.Debug("dhcp lease renewed", "address", next.Address, "lease", next.LeaseTime, "server", next.ServerID)
			res, got = next, time.Now()
			continue
		}
		// Lost: the address goes, then a fresh lease is sought.
		if derr := h.AddrDel(l, netlinkAddr(res.Address)); derr != nil && !errors.Is(derr, unix.EADDRNOTAVAIL) {
			log.Warn("cannot remove the address of the lost dhcp lease", "address", res.Address, "error", derr)
		}
		lost := fmt.Errorf("%w on %s: address %s removed: %w", ErrLeaseLost, res.Interface, res.Address, err)
		log.Error("dhcp lease lost; address removed", "address", res.Address, "error", err)
		if opts.OnLeaseLost != nil {
			opts.OnLeaseLost(res.Interface, lost)
		}
		next, got, err = reacquire(life, opts, h, l)
		if err != nil {
			return // life ended
		}
		res = next
	}
}

// renewUntil sends renewal requests from now until the lease's end
// (got+lt): unicast to the server before got+t2, broadcast after. It
// returns the new lease, or why there is none (a NAK, or the lease ran out).
func renewUntil(life context.Context, opts Options, l netlink.Link, res *Result, got time.Time, t2, lt time.Duration) (*Result, error) {
	log := opts.Logger.With("interface", res.Interface)
	end, rebind := got.Add(lt), got.Add(t2)
	var last error
	for attempt := 1; ; attempt++ {
		now := time.Now()
		if !now.Before(end) {
			return nil, fmt.Errorf("lease of %s ended after %d renewal attempts: %w", lt, attempt-1, last)
		}
		rebinding := !now.Before(rebind)
		stage := rebind
		if rebinding {
			stage = end
		}
		wait := min(max(stage.Sub(now)/2, minRenewWait), maxRenewWait, end.Sub(now))
		next, err := renewOnce(life, opts, l, res, rebinding, wait)
		if err == nil {
			return next, nil
		}
		if life.Err() != nil {
			return nil, life.Err()
		}
		var nak *nclient4.ErrNak
		if errors.As(err, &nak) {
			return nil, err
		}
		last = err
		log.Warn("dhcp lease renewal failed", "attempt", attempt, "rebinding", rebinding,
			"lease_left", end.Sub(time.Now()).Round(time.Second), "error", err)
		// A send error returns at once: do not spin until the next stage.
		if d := time.Until(now.Add(wait)); d > 0 && !sleepUntil(life, now.Add(wait)) {
			return nil, life.Err()
		}
	}
}

// renewConn is a UDP socket on port 68 of link name (SO_BINDTODEVICE),
// allowed to broadcast, for renewing and rebinding.
func renewConn(name string) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1); serr != nil {
				return
			}
			serr = unix.BindToDevice(int(fd), name)
		})
		return errors.Join(err, serr)
	}}
	return lc.ListenPacket(context.Background(), "udp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(dhcpv4.ClientPort)))
}

// renewOnce sends one REQUEST with ciaddr set (RFC 2131 4.3.2 RENEWING and
// REBINDING: no server identifier, no requested address) and waits up to
// wait for the ACK or NAK.
func renewOnce(life context.Context, opts Options, l netlink.Link, res *Result, rebinding bool, wait time.Duration) (*Result, error) {
	name := l.Attrs().Name
	ctx, cancel := context.WithTimeout(life, wait)
	defer cancel()
	// A kernel UDP socket, now that the link has the address: requests
	// leave from it (a server's kernel drops unicast from 0.0.0.0, which a
	// raw socket would send), and unicast replies to it arrive.
	client, err := openClient(opts.NetNS, l, func() (net.PacketConn, error) { return renewConn(name) },
		nclient4.WithTimeout(wait), nclient4.WithRetry(1))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	mods := []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(nclient4.MaxMessageSize)),
		dhcpv4.WithHwAddr(l.Attrs().HardwareAddr),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(res.Address.Addr().AsSlice()),
		dhcpv4.WithRequestedOptions(dhcpRequested...),
	}
	if opts.Static != nil && opts.Static.Hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(opts.Static.Hostname)))
	}
	req := newPacket(newXID(), mods...)
	dest := nclient4.DefaultServers
	if !rebinding && res.ServerID.IsValid() {
		dest = &net.UDPAddr{IP: res.ServerID.AsSlice(), Port: dhcpv4.ServerPort}
	}
	ack, err := client.SendAndRead(ctx, dest, req, nclient4.IsMessageType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak))
	if err != nil {
		return nil, fmt.Errorf("no answer to renewal of %s (to %s): %w", res.Address, dest.IP, err)
	}
	if ack.MessageType() == dhcpv4.MessageTypeNak {
		return nil, &nclient4.ErrNak{Nak: ack}
	}
	next, err := leaseResult(name, l.Attrs().HardwareAddr, ack)
	if err != nil {
		return nil, err
	}
	if !next.ServerID.IsValid() {
		next.ServerID = res.ServerID
	}
	next.MTU = res.MTU // keep what Configure applied (opts.MTU may have overridden the lease's)
	return next, nil
}

// reacquire runs DHCP from scratch with backoff until a lease is applied
// or life ends (the error).
func reacquire(life context.Context, opts Options, h *netlink.Handle, l netlink.Link) (*Result, time.Time, error) {
	backoff := opts.Backoff
	for {
		res, err := dhcpLink(life, opts, l)
		if err == nil {
			if err = apply(h, l, res); err == nil {
				opts.Logger.Info("dhcp lease acquired again", "interface", res.Interface, "address", res.Address, "lease", res.LeaseTime)
				return res, time.Now(), nil
			}
		}
		if life.Err() != nil {
			return nil, time.Time{}, life.Err()
		}
		opts.Logger.Warn("no new dhcp lease yet", "interface", l.Attrs().Name, "error", err)
		if !sleepUntil(life, time.Now().Add(backoff)) {
			return nil, time.Time{}, life.Err()
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// sleepUntil waits until t; false means ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
