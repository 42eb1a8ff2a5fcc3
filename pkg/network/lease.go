package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
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
	startKeeper(opts, &lease4{opts: opts, l: l, res: res})
	return res, nil
}

// lease is a DHCP lease kept renewed by keepLease: DHCPv4 (lease4) or
// DHCPv6 (lease6).
type lease interface {
	// times are T1, T2 and the lease's length (0: it does not expire).
	times() (t1, t2, length time.Duration)
	// renew sends one renewal (rebinding: to any server) and waits up to
	// wait for the answer; on success the lease is updated and applied.
	// A refusal wraps errRefused.
	renew(ctx context.Context, h *netlink.Handle, rebinding bool, wait time.Duration) error
	// drop removes the lease's address from the link.
	drop(h *netlink.Handle) error
	// acquire gets and applies a fresh lease, retrying with backoff
	// until it has one or ctx ends.
	acquire(ctx context.Context, h *netlink.Handle) error
	// describe is the link, address and protocol, for logs and errors.
	describe() (link string, addr netip.Prefix, proto string)
}

// errRefused marks a server's refusal to renew (a DHCPv4 NAK, a DHCPv6
// status other than success): the lease is lost at once.
var errRefused = errors.New("refused by the server")

// startKeeper runs keepLease for k in the background when opts.Lifetime
// is set.
func startKeeper(opts Options, k lease) {
	if opts.Lifetime == nil {
		return
	}
	link, _, proto := k.describe()
	go func() {
		err := safego.Call(proto+" renewal on "+link, func() error {
			keepLease(opts.Lifetime, opts, k)
			return nil
		})
		if err != nil {
			opts.Logger.Error(proto+" renewal stopped", "interface", link, "error", err)
		}
	}()
}

// keepLease renews k at T1 from the server that gave it, and from T2 from
// any server (rebinding), each attempt waiting half the time left to the
// next stage. Each renewal is logged at debug, a failed attempt at warn.
// When the lease ends without renewal or the server refuses, the address
// is removed (as the kernel would with a valid lifetime), the loss is
// logged at error and passed to opts.OnLeaseLost, and a new lease is
// sought with backoff. It returns when life ends.
func keepLease(life context.Context, opts Options, k lease) {
	link, _, proto := k.describe()
	log := opts.Logger.With("interface", link)
	h := opts.Handle
	if h == nil {
		var err error
		if h, err = openHandle(opts.NetNS); err != nil {
			log.Error("cannot renew the "+proto+" lease", "error", err)
			return
		}
		defer h.Close()
	}
	got := time.Now()
	for {
		t1, t2, lt := k.times()
		if lt <= 0 || lt >= infiniteLease {
			log.Debug(proto+" lease does not expire; not renewing", "lease", lt)
			return
		}
		if t1 <= 0 || t1 >= lt {
			t1 = lt / 2
		}
		if t2 <= t1 || t2 >= lt {
			t2 = lt * 7 / 8
		}
		if !sleepUntil(life, got.Add(t1)) {
			return
		}
		_, addr, _ := k.describe()
		err := renewUntil(life, log, h, k, got, t2, lt)
		if life.Err() != nil {
			return
		}
		if err == nil {
			_, next, _ := k.describe()
			t1, _, lt := k.times()
			log.Debug(proto+" lease renewed", "address", next, "lease", lt, "t1", t1)
			got = time.Now()
			continue
		}
		// Lost: the address goes, then a fresh lease is sought.
		if derr := k.drop(h); derr != nil && !errors.Is(derr, unix.EADDRNOTAVAIL) {
			log.Warn("cannot remove the address of the lost "+proto+" lease", "address", addr, "error", derr)
		}
		lost := fmt.Errorf("%w on %s: %s address %s removed: %w", ErrLeaseLost, link, proto, addr, err)
		log.Error(proto+" lease lost; address removed", "address", addr, "error", err)
		if opts.OnLeaseLost != nil {
			opts.OnLeaseLost(link, lost)
		}
		if err := k.acquire(life, h); err != nil {
			return // life ended
		}
		_, next, _ := k.describe()
		log.Info(proto+" lease acquired again", "address", next)
		got = time.Now()
	}
}

// renewUntil renews k from now until the lease's end (got+lt), from the
// server before got+t2 and from any server after. It returns nil once
// renewed, or why not (a refusal, or the lease ran out).
func renewUntil(life context.Context, log *slog.Logger, h *netlink.Handle, k lease, got time.Time, t2, lt time.Duration) error {
	_, _, proto := k.describe()
	end, rebind := got.Add(lt), got.Add(t2)
	var last error
	for attempt := 1; ; attempt++ {
		now := time.Now()
		if !now.Before(end) {
			return fmt.Errorf("lease of %s ended after %d renewal attempts: %w", lt, attempt-1, last)
		}
		rebinding := !now.Before(rebind)
		stage := rebind
		if rebinding {
			stage = end
		}
		wait := min(max(stage.Sub(now)/2, minRenewWait), maxRenewWait, end.Sub(now))
		err := k.renew(life, h, rebinding, wait)
		if err == nil {
			return nil
		}
		if life.Err() != nil {
			return life.Err()
		}
		if errors.Is(err, errRefused) {
			return err
		}
		last = err
		log.Warn(proto+" lease renewal failed", "attempt", attempt, "rebinding", rebinding,
			"lease_left", end.Sub(time.Now()).Round(time.Second), "error", err)
		// A send error returns at once: do not spin until the next stage.
		if !sleepUntil(life, now.Add(wait)) {
			return life.Err()
		}
	}
}

// lease4 is a DHCPv4 lease of link l.
type lease4 struct {
	opts Options
	l    netlink.Link
	res  *Result
}

func (k *lease4) times() (time.Duration, time.Duration, time.Duration) {
	return k.res.renewal, k.res.rebinding, k.res.LeaseTime
}

func (k *lease4) describe() (string, netip.Prefix, string) {
	return k.res.Interface, k.res.Address, "dhcp"
}

func (k *lease4) drop(h *netlink.Handle) error { return h.AddrDel(k.l, netlinkAddr(k.res.Address)) }

func (k *lease4) renew(ctx context.Context, h *netlink.Handle, rebinding bool, wait time.Duration) error {
	next, err := renewOnce(ctx, k.opts, k.l, k.res, rebinding, wait)
	if err != nil {
		var nak *nclient4.ErrNak
		if errors.As(err, &nak) {
			return fmt.Errorf("%w: %w", errRefused, err)
		}
		return err
	}
	if next.Address != k.res.Address {
		_ = h.AddrDel(k.l, netlinkAddr(k.res.Address))
	}
	k.res = next
	if err := apply(h, k.l, next); err != nil {
		k.opts.Logger.Warn("dhcp lease renewed but not applied", "interface", next.Interface, "error", err)
	}
	return nil
}

func (k *lease4) acquire(ctx context.Context, h *netlink.Handle) error {
	return untilAcquired(ctx, k.opts, k.l.Attrs().Name, "dhcp", func() error {
		res, err := dhcpLink(ctx, k.opts, k.l)
		if err != nil {
			return err
		}
		if err := apply(h, k.l, res); err != nil {
			return err
		}
		k.res = res
		return nil
	})
}

// untilAcquired calls get, pausing with backoff after each failure (logged
// at warn), until it succeeds or ctx ends (its error).
func untilAcquired(ctx context.Context, opts Options, link, proto string, get func() error) error {
	backoff := opts.Backoff
	for {
		err := get()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		opts.Logger.Warn("no new "+proto+" lease yet", "interface", link, "error", err)
		if !sleepUntil(ctx, time.Now().Add(backoff)) {
			return ctx.Err()
		}
		backoff = min(backoff*2, maxBackoff)
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
