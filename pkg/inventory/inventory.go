// Package inventory collects the machine's hardware report
// (api.HardwareDetails, metal3's HardwareDetails shape): SMBIOS system and
// BIOS identity, RAM, CPUs, NICs with the LLDP neighbour each one hears,
// disks (through pkg/disk's sysfs discovery), GPUs and other PCI devices.
//
// Every file read hangs off Collector.Root, so tests run against a fake
// tree; the two things that are not files (the addresses of a link, and
// LLDP frames) are function fields.
package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/disk"
)

// DefaultLLDPWait bounds how long Collect listens for LLDP frames. Switches
// send one every 30 s by default; many racks lower that to 5 s or less. The
// wait ends early once every link with carrier heard its neighbour.
const DefaultLLDPWait = 5 * time.Second

// Collector gathers the hardware report. NewCollector sets the defaults;
// tests point Root at a fake tree and replace Addrs and LLDP.
type Collector struct {
	// Root is where sysfs (Root/sys), procfs (Root/proc), device nodes
	// (Root/dev) and pci.ids are found: "/" on a real machine.
	Root string
	// Arch is the CPU architecture as uname -m spells it; default from runtime.GOARCH.
	Arch string
	// PCIIDs are pci.ids files tried in order, relative to Root.
	PCIIDs []string
	// PXEMAC is the MAC the machine booted from; empty reads BOOTIF= from Root/proc/cmdline.
	PXEMAC string
	// Disks lists the disks; nil uses a disk.Manager over Root.
	Disks func() ([]disk.Disk, error)
	// Addrs returns a link's addresses; nil leaves NIC addresses empty.
	Addrs func(link string) ([]netip.Prefix, error)
	// LLDPWait bounds the LLDP listen; 0 disables it.
	LLDPWait time.Duration
	// LLDP listens on the named links for at most wait and returns what
	// each heard; nil disables LLDP.
	LLDP func(ctx context.Context, links []string, wait time.Duration) map[string]Neighbor
	// Neighbors, when set, is what an LLDP listener running elsewhere has
	// heard so far, by link; Collect reports it instead of listening (no
	// wait at all).
	Neighbors func() map[string]Neighbor
	Log       *slog.Logger
}

// NewCollector returns a Collector for this machine: Root "/", the real
// link addresses and an LLDP listener on raw sockets bounded by
// DefaultLLDPWait.
func NewCollector() *Collector {
	return &Collector{
		Root:     "/",
		Arch:     unameArch(runtime.GOARCH),
		PCIIDs:   DefaultPCIIDs,
		Addrs:    linkAddrs,
		LLDPWait: DefaultLLDPWait,
		LLDP:     ListenLLDP,
	}
}

// DefaultPCIIDs are where Debian and Fedora keep pci.ids.
var DefaultPCIIDs = []string{"usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids"}

func unameArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	case "arm":
		return "armv7l"
	}
	return goarch
}

func (c *Collector) path(rel ...string) string {
	root := c.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, rel...)...)
}

func (c *Collector) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default().With("component", "inventory")
}

// Collect gathers the report. A source that cannot be read leaves its
// fields empty and is logged; only failing to read the CPU or memory
// facts, or to list the disks, is an error. The LLDP listen takes at most
// LLDPWait (less when every link with carrier heard a neighbour); with
// Neighbors set there is none.
func (c *Collector) Collect(ctx context.Context) (*api.HardwareDetails, error) {
	hw := &api.HardwareDetails{NIC: []api.NIC{}, Storage: []api.Storage{}}
	sm := c.readSMBIOS()
	hw.SystemVendor, hw.Firmware.BIOS = sm.system, sm.bios

	mem, err := c.ramMebibytes(sm)
	if err != nil {
		return nil, err
	}
	hw.RAMMebibytes = mem
	if hw.CPU, err = c.CPU(); err != nil {
		return nil, err
	}
	hw.Hostname = readTrim(c.path("proc/sys/kernel/hostname"))

	pci, err := c.PCIDevices()
	if err != nil {
		c.log().Warn("cannot list PCI devices", "error", err)
	}
	hw.PCIDevices = pci
	for _, d := range pci {
		if strings.HasPrefix(d.Class, "03") {
			hw.GPUs = append(hw.GPUs, d)
		}
	}
	byAddr := map[string]api.PCIDevice{}
	for _, d := range pci {
		byAddr[d.Address] = d
	}

	nics, err := c.NICs(ctx, byAddr)
	if err != nil {
		c.log().Warn("cannot list network links", "error", err)
	}
	if nics != nil {
		hw.NIC = nics
	}

	st, err := c.Storage()
	if err != nil {
		return nil, err
	}
	hw.Storage = st
	return hw, nil
}

// Storage lists the disks pkg/disk discovers, with every root device hint
// field and metal3's type: NVME for NVMe, HDD when rotational, else SSD.
func (c *Collector) Storage() ([]api.Storage, error) {
	list := c.Disks
	if list == nil {
		m := disk.NewManager()
		m.SysRoot, m.DevRoot, m.MountsFile = c.path("sys"), c.path("dev"), c.path("proc/self/mounts")
		list = m.Disks
	}
	disks, err := list()
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	out := []api.Storage{}
	for _, d := range disks {
		s := api.Storage{
			Name:               "/dev/" + d.Name,
			Rotational:         d.Rotational,
			SizeBytes:          d.Size,
			Vendor:             d.Vendor,
			Model:              d.Model,
			SerialNumber:       d.Serial,
			WWN:                d.WWN,
			WWNVendorExtension: d.WWNVendorExtension,
			WWNWithExtension:   d.WWNWithExtension,
			HCTL:               d.HCTL,
			Type:               StorageType(d),
		}
		if d.ByPath != "" {
			s.AlternateNames = []string{d.ByPath}
		}
		out = append(out, s)
	}
	return out, nil
}

// StorageType is metal3's storage type of d: NVME, HDD or SSD.
func StorageType(d disk.Disk) string {
	switch {
	case d.Tran == "nvme":
		return api.StorageNVMe
	case d.Rotational:
		return api.StorageHDD
	}
	return api.StorageSSD
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Trim(string(b), "\x00"))
}
