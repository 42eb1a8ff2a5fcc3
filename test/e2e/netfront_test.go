//go:build e2e

package e2e

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
)

// newTap creates a persistent tap device named name in the test's network
// namespace with hostAddr (CIDR; "" for none) on it, up, for QEMU to attach with
// -nic tap,ifname=NAME,script=no,downscript=no. Nothing serves DHCP on it.
// A cleanup deletes it.
func newTap(t *testing.T, name, hostAddr string) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	tap := &netlink.Tuntap{LinkAttrs: la, Mode: netlink.TUNTAP_MODE_TAP}
	if err := netlink.LinkAdd(tap); err != nil {
		t.Fatalf("create tap %s (needs /dev/net/tun): %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if hostAddr != "" {
		addr, err := netlink.ParseAddr(hostAddr)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.AddrAdd(l, addr); err != nil {
			t.Fatalf("add %s to %s: %v", hostAddr, name, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
}

// forwardTCP accepts on listen and copies each connection to and from a
// new connection to target, so a guest that reaches the host on another
// address than the loopback (a tap) or over TLS (tlsConf set: TLS ends
// here) reaches the lab's bootyd on 127.0.0.1. A cleanup closes the
// listener and every connection. It returns the listening address.
func forwardTCP(t *testing.T, listen, target string, tlsConf *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("forward %s to %s: %v", listen, target, err)
	}
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	conns = []net.Conn{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Logf("forward %s: accept: %v", listen, err)
				}
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				t.Logf("forward %s: dial %s: %v", listen, target, err)
				c.Close()
				continue
			}
			if !track(c) || !track(d) {
				c.Close()
				d.Close()
				return
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(d, c); d.Close() }()
			go func() { defer wg.Done(); io.Copy(c, d); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
