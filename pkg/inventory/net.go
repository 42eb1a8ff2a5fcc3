package inventory

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/booty-dev/booty/pkg/api"
)

// Link is one physical network link as sysfs describes it.
type Link struct {
	Name    string
	MAC     string
	Carrier bool
	// SpeedMbps is the negotiated speed; 0 when unknown or down.
	SpeedMbps int
	// DevPath is the resolved sysfs path of the link's device.
	DevPath string
}

// Links lists the physical Ethernet links in Root/sys/class/net, sorted by
// name: those with a device entry (bridges, bonds, VLANs, veth have none)
// and a 6-byte non-zero address, lo excluded.
func (c *Collector) Links() ([]Link, error) {
	dir := c.path("sys/class/net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list network links in %s: %w", dir, err)
	}
	var out []Link
	for _, e := range entries {
		name := e.Name()
		if name == "lo" {
			continue
		}
		d := filepath.Join(dir, name)
		dev, err := filepath.EvalSymlinks(filepath.Join(d, "device"))
		if err != nil {
			continue
		}
		hw, err := net.ParseMAC(readTrim(filepath.Join(d, "address")))
		if err != nil || len(hw) != 6 || string(hw) == "\x00\x00\x00\x00\x00\x00" {
			continue
		}
		l := Link{Name: name, MAC: hw.String(), DevPath: dev, Carrier: readTrim(filepath.Join(d, "carrier")) == "1"}
		if s, err := strconv.Atoi(readTrim(filepath.Join(d, "speed"))); err == nil && s > 0 {
			l.SpeedMbps = s
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// NICs describes every physical link: its PCI function and model (names
// from pci.ids, else "0xVVVV 0xDDDD" as metal3 writes them), addresses
// (IPv4 first), speed, the VLAN links configured on it
// (Root/proc/net/vlan/config), whether it is the PXE NIC, and the LLDP
// neighbour heard on it: what Neighbors knows when it is set, else what
// a listen of LLDPWait on the links with carrier hears.
func (c *Collector) NICs(ctx context.Context, pci map[string]api.PCIDevice) ([]api.NIC, error) {
	links, err := c.Links()
	if err != nil {
		return nil, err
	}
	pxe := strings.ToLower(c.PXEMAC)
	if pxe == "" {
		pxe = BootIF(readTrim(c.path("proc/cmdline")))
	}
	vlans := c.localVLANs()
	var listen []string
	for _, l := range links {
		if l.Carrier {
			listen = append(listen, l.Name)
		}
	}
	var heard map[string]Neighbor
	if c.Neighbors != nil {
		heard = c.Neighbors()
	} else if c.LLDP != nil && c.LLDPWait > 0 && len(listen) > 0 {
		heard = c.LLDP(ctx, listen, c.LLDPWait)
	}
	out := []api.NIC{}
	for _, l := range links {
		n := api.NIC{Name: l.Name, MAC: l.MAC, SpeedGbps: l.SpeedMbps / 1000, PXE: pxe != "" && pxe == l.MAC}
		n.PCIAddress = pciAddressOf(l.DevPath)
		if d, ok := pci[n.PCIAddress]; ok {
			n.Model = pciModel(d)
		}
		if c.Addrs != nil {
			ps, err := c.Addrs(l.Name)
			if err != nil {
				c.log().Warn("cannot read link addresses", "link", l.Name, "error", err)
			}
			n.IPs = sortAddrs(ps)
			if len(n.IPs) > 0 {
				n.IP = n.IPs[0]
			}
		}
		seen := map[int]bool{}
		if nb, ok := heard[l.Name]; ok {
			n.LLDP = &api.LLDP{SwitchID: nb.ChassisID, PortID: nb.PortID, SwitchSystemName: nb.SystemName}
			n.VLANID = nb.PVID
			for _, v := range nb.VLANs {
				seen[v.ID] = true
				n.VLANs = append(n.VLANs, v)
			}
		}
		for _, v := range vlans[l.Name] {
			if !seen[v.ID] {
				seen[v.ID] = true
				n.VLANs = append(n.VLANs, v)
			}
		}
		sort.Slice(n.VLANs, func(i, j int) bool { return n.VLANs[i].ID < n.VLANs[j].ID })
		out = append(out, n)
	}
	return out, nil
}

func pciModel(d api.PCIDevice) string {
	if d.VendorName != "" && d.DeviceName != "" {
		return d.VendorName + " " + d.DeviceName
	}
	return "0x" + d.VendorID + " 0x" + d.DeviceID
}

// sortAddrs returns the addresses without prefix length, IPv4 first, each
// family in the order given; link-local IPv6 addresses come last.
func sortAddrs(ps []netip.Prefix) []string {
	rank := func(a netip.Addr) int {
		switch {
		case a.Is4():
			return 0
		case a.IsLinkLocalUnicast():
			return 2
		}
		return 1
	}
	sorted := append([]netip.Prefix(nil), ps...)
	sort.SliceStable(sorted, func(i, j int) bool { return rank(sorted[i].Addr()) < rank(sorted[j].Addr()) })
	var out []string
	for _, p := range sorted {
		out = append(out, p.Addr().String())
	}
	return out
}

// BootIF returns the MAC of pxelinux's/iPXE's BOOTIF=01-aa-bb-cc-dd-ee-ff
// on a kernel command line, lower case with colons, or "".
func BootIF(cmdline string) string {
	for _, f := range strings.Fields(cmdline) {
		v, ok := strings.CutPrefix(f, "BOOTIF=")
		if !ok {
			continue
		}
		v = strings.ReplaceAll(v, "-", ":")
		if len(v) == len("01:aa:bb:cc:dd:ee:ff") && strings.HasPrefix(v, "01:") {
			v = v[3:]
		}
		if hw, err := net.ParseMAC(v); err == nil && len(hw) == 6 {
			return hw.String()
		}
	}
	return ""
}

// localVLANs reads Root/proc/net/vlan/config ("eth0.100 | 100 | eth0"
// lines after two header lines) into VLANs by parent link.
func (c *Collector) localVLANs() map[string][]api.VLAN {
	f, err := os.Open(c.path("proc/net/vlan/config"))
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string][]api.VLAN{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "|")
		if len(parts) != 3 {
			continue
		}
		id, err := strconv.Atoi(strings.TrimSpace(parts[1]))
		if err != nil {
			continue // header
		}
		parent := strings.TrimSpace(parts[2])
		out[parent] = append(out[parent], api.VLAN{ID: id, Name: strings.TrimSpace(parts[0])})
	}
	return out
}

// linkAddrs returns the addresses of the named link in this network namespace.
func linkAddrs(name string) ([]netip.Prefix, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", name, err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				ones, _ := ipn.Mask.Size()
				out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
			}
		}
	}
	return out, nil
}
