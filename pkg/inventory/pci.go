package inventory

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/booty-dev/booty/pkg/api"
)

var pciAddrRe = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// PCIDevices lists Root/sys/bus/pci/devices, sorted by address: vendor,
// device and class IDs, the bound driver, and names from the first pci.ids
// of PCIIDs that exists. It fails only when the directory cannot be listed.
func (c *Collector) PCIDevices() ([]api.PCIDevice, error) {
	dir := c.path("sys/bus/pci/devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list pci devices in %s: %w", dir, err)
	}
	var out []api.PCIDevice
	for _, e := range entries {
		addr := e.Name()
		if !pciAddrRe.MatchString(addr) {
			continue
		}
		d := filepath.Join(dir, addr)
		dev := api.PCIDevice{
			Address:  addr,
			VendorID: hexID(readTrim(filepath.Join(d, "vendor")), 4),
			DeviceID: hexID(readTrim(filepath.Join(d, "device")), 4),
			Class:    hexID(readTrim(filepath.Join(d, "class")), 6),
		}
		if t, err := os.Readlink(filepath.Join(d, "driver")); err == nil {
			dev.Driver = filepath.Base(t)
		}
		out = append(out, dev)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	c.namePCI(out)
	return out, nil
}

// hexID turns sysfs's "0x8086" into "8086", padded to width digits.
func hexID(s string, width int) string {
	s = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"))
	if s == "" {
		return ""
	}
	for len(s) < width {
		s = "0" + s
	}
	return s
}

// namePCI fills vendor and device names from pci.ids: lines "vvvv  Name"
// start a vendor, "\tdddd  Name" are its devices, deeper lines are
// subsystems; the class list ("C ...") ends the vendor section.
func (c *Collector) namePCI(devs []api.PCIDevice) {
	if len(devs) == 0 {
		return
	}
	var f *os.File
	for _, p := range c.PCIIDs {
		var err error
		if f, err = os.Open(c.path(p)); err == nil {
			break
		}
	}
	if f == nil {
		return
	}
	defer f.Close()
	want := map[string]bool{}
	for _, d := range devs {
		want[d.VendorID] = true
	}
	vendors, devices := map[string]string{}, map[string]string{}
	vendor := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.HasPrefix(line, "C ") {
			break
		}
		if line[0] != '\t' {
			id, name, ok := strings.Cut(line, "  ")
			vendor = ""
			if ok && want[id] {
				vendor = id
				vendors[id] = strings.TrimSpace(name)
			}
			continue
		}
		if vendor == "" || strings.HasPrefix(line, "\t\t") {
			continue
		}
		id, name, ok := strings.Cut(line[1:], "  ")
		if ok {
			devices[vendor+":"+id] = strings.TrimSpace(name)
		}
	}
	for i := range devs {
		devs[i].VendorName = vendors[devs[i].VendorID]
		devs[i].DeviceName = devices[devs[i].VendorID+":"+devs[i].DeviceID]
	}
}

// pciAddressOf returns the PCI function closest to a sysfs device path:
// the last path element that is a PCI address.
func pciAddressOf(devPath string) string {
	addr := ""
	for _, part := range strings.Split(devPath, "/") {
		if pciAddrRe.MatchString(part) {
			addr = part
		}
	}
	return addr
}
