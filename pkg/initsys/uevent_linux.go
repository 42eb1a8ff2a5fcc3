package initsys

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ueventSocket is the kernel's uevent multicast (NETLINK_KOBJECT_UEVENT,
// group 1), read without blocking: the devices it announces with an
// "add" and a MODALIAS are what coldplug loads drivers for, the network
// interfaces it adds what tells it the NICs are there.
type ueventSocket struct {
	fd  int
	buf []byte
}

// openUevents opens and binds the uevent socket, with a receive buffer of
// 4 MiB so a burst of events at boot is not dropped (a drop is noticed
// and answered with a scan of /sys).
func openUevents() (deviceSource, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("open uevent socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind uevent socket: %w", err)
	}
	return &ueventSocket{fd: fd, buf: make([]byte, 64<<10)}, nil
}

// Drain reads every queued event and returns the added devices with a
// modalias; lost is true when the kernel dropped events (ENOBUFS).
func (u *ueventSocket) Drain() ([]Device, bool, error) {
	var out []Device
	lost := false
	for {
		n, _, err := unix.Recvfrom(u.fd, u.buf, 0)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return out, lost, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			lost = true
			continue
		case err != nil:
			return out, lost, fmt.Errorf("read uevent socket: %w", err)
		}
		if d, ok := parseUevent(u.buf[:n]); ok {
			out = append(out, d)
		}
	}
}

// Wait polls the socket for at most bound.
func (u *ueventSocket) Wait(bound time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(u.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(bound/time.Millisecond))
	return err == nil && n > 0
}

func (u *ueventSocket) Close() error { return unix.Close(u.fd) }

// parseUevent reads a kernel uevent ("add@/devices/...\0ACTION=add\0
// DEVPATH=...\0MODALIAS=...\0...") and returns its device when it is an
// addition with a modalias, of a network interface (SUBSYSTEM=net), or of
// a module whose init finished (SUBSYSTEM=module).
func parseUevent(msg []byte) (Device, bool) {
	var d Device
	add, module := false, false
	for i, f := range bytes.Split(msg, []byte{0}) {
		s := string(f)
		if i == 0 {
			if !strings.Contains(s, "@") {
				return Device{}, false // not from the kernel (udev's own format)
			}
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			continue
		}
		switch k {
		case "ACTION":
			add = v == "add"
		case "DEVPATH":
			d.Path = v
		case "MODALIAS":
			d.Modalias = v
		case "SUBSYSTEM":
			d.Interface = v == "net"
			module = v == "module"
		}
	}
	if module && strings.HasPrefix(d.Path, "/module/") {
		return Device{Module: strings.TrimPrefix(d.Path, "/module/")}, add
	}
	if d.Interface {
		d.Modalias = ""
	}
	return d, add && (d.Modalias != "" || d.Interface) && d.Path != ""
}
