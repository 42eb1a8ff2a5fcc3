// Command probe is the /init of the harness's network and disk test. It
// loads the kernel modules listed in /modules/order, configures eth0 the
// way QEMU user networking expects (10.0.2.15/24, gateway 10.0.2.2),
// fetches the URL given as probe.url= on the kernel command line, reads
// sector 1 of every virtio disk, prints one line per finding, and powers off.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func main() {
	defer poweroff()
	for _, m := range []struct{ src, dst, typ string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.typ, 0, ""); err != nil {
			fmt.Printf("probe: mount %s: %v\n", m.dst, err)
		}
	}
	loadModules()
	network()
	disks()
}

func loadModules() {
	order, err := os.ReadFile("/modules/order")
	if err != nil {
		fmt.Printf("probe: read module order: %v\n", err)
		return
	}
	for _, name := range strings.Fields(string(order)) {
		f, err := os.Open(filepath.Join("/modules", name))
		if err != nil {
			fmt.Printf("probe: open module %s: %v\n", name, err)
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && err != unix.EEXIST {
			fmt.Printf("probe: load module %s: %v\n", name, err)
		}
		f.Close()
	}
}

func cmdlineParam(name string) string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

func network() {
	var link netlink.Link
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if link, err = netlink.LinkByName("eth0"); err == nil {
			break
		}
	}
	if err != nil {
		fmt.Printf("probe: no eth0: %v\n", err)
		return
	}
	fmt.Printf("probe: mac %s\n", link.Attrs().HardwareAddr)
	addr, _ := netlink.ParseAddr("10.0.2.15/24")
	if err := netlink.AddrAdd(link, addr); err != nil {
		fmt.Printf("probe: add address: %v\n", err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		fmt.Printf("probe: link up: %v\n", err)
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		netlink.LinkSetUp(lo)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IPv4(10, 0, 2, 2)}); err != nil {
		fmt.Printf("probe: default route: %v\n", err)
	}
	url := cmdlineParam("probe.url")
	client := &http.Client{Timeout: 5 * time.Second}
	for try := 1; try <= 10; try++ {
		resp, err := client.Get(url)
		if err != nil {
			fmt.Printf("probe: get %s (try %d): %v\n", url, try, err)
			time.Sleep(time.Second)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		fmt.Printf("http: %d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
		return
	}
}

func disks() {
	var names []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		names, _ = filepath.Glob("/sys/block/vd*")
		if len(names) >= 2 {
			break
		}
	}
	for _, sys := range names {
		name := filepath.Base(sys)
		serial, _ := os.ReadFile(filepath.Join(sys, "serial"))
		ro, _ := os.ReadFile(filepath.Join(sys, "ro"))
		f, err := os.Open("/dev/" + name)
		if err != nil {
			fmt.Printf("disk %s serial=%s error: %v\n", name, serial, err)
			continue
		}
		buf := make([]byte, 8)
		_, err = f.ReadAt(buf, 512)
		f.Close()
		if err != nil {
			fmt.Printf("disk %s serial=%s ro=%s error: %v\n", name, serial, strings.TrimSpace(string(ro)), err)
			continue
		}
		fmt.Printf("disk %s serial=%s ro=%s sector1=%q\n", name, serial, strings.TrimSpace(string(ro)), buf)
	}
}

func poweroff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}
