package inventory

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")

// tree writes a fake root: files and symlinks, parents created.
type tree struct {
	t    *testing.T
	root string
}

func (tr tree) file(rel, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr tree) link(rel, target string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
}

// smbiosStruct lays out one SMBIOS structure: the 4-byte header, the
// formatted area and the string set (a double NUL when empty).
func smbiosStruct(typ byte, handle uint16, formatted []byte, strs ...string) []byte {
	b := []byte{typ, byte(4 + len(formatted))}
	b = binary.LittleEndian.AppendUint16(b, handle)
	b = append(b, formatted...)
	for _, s := range strs {
		b = append(append(b, s...), 0)
	}
	if len(strs) == 0 {
		b = append(b, 0)
	}
	return append(b, 0)
}

// fakeDMI is the structure table of a server: BIOS (type 0), system
// (type 1), two 16 GiB DIMMs (type 17), end of table (type 127).
func fakeDMI() []byte {
	bios := []byte{1, 2, 0x00, 0xe8, 3, 0xff, 0x80, 0x98, 0x8b, 0x3f, 0x01, 0, 0, 0, 0x03, 0x0d, 2, 8, 0xff, 0xff}
	sys := []byte{1, 2, 3, 4}
	sys = append(sys, 0x4c, 0x4c, 0x44, 0x4d, 0x00, 0x43, 0x10, 0x36, 0x80, 0x32, 0xb3, 0xc0, 0x4f, 0x31, 0x4e, 0x32) // UUID
	sys = append(sys, 6, 5, 6)
	dimm := func(size uint16) []byte {
		b := []byte{0x00, 0x10, 0xfe, 0xff, 72, 0, 64, 0}
		b = binary.LittleEndian.AppendUint16(b, size) // MB
		return append(b, 0x09, 0, 1, 2, 0x1a, 0x80, 0x00)
	}
	var d []byte
	d = append(d, smbiosStruct(0, 0, bios, "Dell Inc.", "2.19.1", "06/13/2023")...)
	d = append(d, smbiosStruct(1, 1, sys, "Dell Inc.", "PowerEdge R650", "Not Specified", "7QX2KD3", "SKU=0A6B", "PowerEdge")...)
	d = append(d, smbiosStruct(17, 0x1100, dimm(16384), "A1", "Not Specified")...)
	d = append(d, smbiosStruct(17, 0x1101, dimm(16384), "A2", "Not Specified")...)
	d = append(d, smbiosStruct(17, 0x1102, dimm(0), "A3", "Not Specified")...) // empty slot
	return append(d, smbiosStruct(127, 0x7f00, nil)...)
}

const fakePCIIDs = `# pci.ids excerpt
8086  Intel Corporation
	1572  Ethernet Controller X710 for 10GbE SFP+
		8086 0001  Ethernet Converged Network Adapter X710-4
10de  NVIDIA Corporation
	1eb8  TU104GL [Tesla T4]
144d  Samsung Electronics Co Ltd
	a808  NVMe SSD Controller SM981/PM981/PM983
C 02  Network controller
	00  Ethernet controller
`

// fakeHost builds a server's /sys, /proc and pci.ids: two NICs (an Intel
// X710 with carrier that PXE booted and carries VLAN 300, a virtio one
// without carrier), a bond (virtual: left out), a Tesla T4, a SATA HDD and
// an NVMe SSD.
func fakeHost(t *testing.T) string {
	root := t.TempDir()
	tr := tree{t, root}
	tr.file("sys/firmware/dmi/tables/DMI", string(fakeDMI()))
	tr.file("proc/meminfo", "MemTotal:       32610776 kB\nMemFree:        30000000 kB\n")
	cpu := "processor\t: %d\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\ncpu MHz\t\t: 2000.000\nflags\t\t: fpu vme sse2 avx2 vmx\n\n"
	tr.file("proc/cpuinfo", fmt.Sprintf(cpu, 0)+fmt.Sprintf(cpu, 1))
	tr.file("sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "3200000\n")
	tr.file("sys/devices/system/cpu/cpu1/cpufreq/cpuinfo_max_freq", "3200000\n")
	tr.file("proc/sys/kernel/hostname", "node-17\n")
	tr.file("proc/cmdline", "console=ttyS0 BOOTIF=01-3c-fd-fe-aa-bb-01 booty.server=http://10.0.0.1:8080\n")
	tr.file("proc/net/vlan/config", "VLAN Dev name	 | VLAN ID\nName-Type: VLAN_NAME_TYPE_RAW_PLUS_VID_NO_PAD\neth0.300       | 300  | eth0\n")
	tr.file("usr/share/misc/pci.ids", fakePCIIDs)

	pci := map[string][3]string{ // address: vendor, device, class
		"0000:17:00.0": {"0x8086", "0x1572", "0x020000"},
		"0000:00:05.0": {"0x1af4", "0x1000", "0x020000"},
		"0000:65:00.0": {"0x10de", "0x1eb8", "0x030200"},
		"0000:00:17.0": {"0x8086", "0xa182", "0x010601"},
		"0000:b1:00.0": {"0x144d", "0xa808", "0x010802"},
	}
	for addr, ids := range pci {
		dev := "sys/devices/pci0000:00/" + addr
		tr.file(dev+"/vendor", ids[0]+"\n")
		tr.file(dev+"/device", ids[1]+"\n")
		tr.file(dev+"/class", ids[2]+"\n")
		tr.link("sys/bus/pci/devices/"+addr, "../../../devices/pci0000:00/"+addr)
	}
	tr.link("sys/devices/pci0000:00/0000:17:00.0/driver", "../../../bus/pci/drivers/i40e")

	// eth0: X710, carrier, 10 Gb/s; eth1: virtio, no carrier; bond0 and lo: no device.
	tr.file("sys/devices/pci0000:00/0000:17:00.0/net/eth0/address", "3c:fd:fe:aa:bb:01\n")
	tr.file("sys/devices/pci0000:00/0000:17:00.0/net/eth0/carrier", "1\n")
	tr.file("sys/devices/pci0000:00/0000:17:00.0/net/eth0/speed", "10000\n")
	tr.link("sys/devices/pci0000:00/0000:17:00.0/net/eth0/device", "../../../0000:17:00.0")
	tr.link("sys/class/net/eth0", "../../devices/pci0000:00/0000:17:00.0/net/eth0")
	tr.file("sys/devices/pci0000:00/0000:00:05.0/virtio1/net/eth1/address", "52:54:00:12:34:57\n")
	tr.file("sys/devices/pci0000:00/0000:00:05.0/virtio1/net/eth1/carrier", "0\n")
	tr.file("sys/devices/pci0000:00/0000:00:05.0/virtio1/net/eth1/speed", "-1\n")
	tr.link("sys/devices/pci0000:00/0000:00:05.0/virtio1/net/eth1/device", "../../../virtio1")
	tr.link("sys/class/net/eth1", "../../devices/pci0000:00/0000:00:05.0/virtio1/net/eth1")
	tr.file("sys/devices/virtual/net/bond0/address", "3c:fd:fe:aa:bb:01\n")
	tr.link("sys/class/net/bond0", "../../devices/virtual/net/bond0")
	tr.file("sys/devices/virtual/net/lo/address", "00:00:00:00:00:00\n")
	tr.link("sys/class/net/lo", "../../devices/virtual/net/lo")

	// sda: SATA HDD behind the AHCI controller; nvme0n1: NVMe SSD.
	sda := "sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0"
	tr.file(sda+"/model", "ST4000NM0035-1V4\n")
	tr.file(sda+"/vendor", "ATA     \n")
	tr.file(sda+"/wwid", "naa.5000c500a1b2c3d4\n")
	tr.file(sda+"/block/sda/size", "7814037168\n")
	tr.file(sda+"/block/sda/queue/rotational", "1\n")
	tr.file(sda+"/block/sda/removable", "0\n")
	tr.file(sda+"/block/sda/serial", "ZC1A2B3C\n")
	tr.link(sda+"/block/sda/device", "../../../0:0:0:0")
	tr.link("sys/block/sda", "../"+strings.TrimPrefix(sda, "sys/")+"/block/sda")
	nvme := "sys/devices/pci0000:00/0000:b1:00.0/nvme/nvme0"
	tr.file(nvme+"/model", "SAMSUNG MZQL2960HCJR-00A07\n")
	tr.file(nvme+"/serial", "S64FNE0R123456\n")
	tr.file(nvme+"/nvme0n1/size", "1875385008\n")
	tr.file(nvme+"/nvme0n1/queue/rotational", "0\n")
	tr.file(nvme+"/nvme0n1/wwid", "eui.36344630529034890025384500000001\n")
	tr.link(nvme+"/nvme0n1/device", "../../nvme0")
	tr.link("sys/block/nvme0n1", "../"+strings.TrimPrefix(nvme, "sys/")+"/nvme0n1")
	return root
}

// TestCollectFakeHost collects the fake server's report and compares its
// JSON, byte for byte, with testdata/fake-host.golden.json.
func TestCollectFakeHost(t *testing.T) {
	root := fakeHost(t)
	var listened []string
	c := &Collector{
		Root:     root,
		Arch:     "x86_64",
		PCIIDs:   DefaultPCIIDs,
		LLDPWait: 3 * time.Second,
		Addrs: func(link string) ([]netip.Prefix, error) {
			if link == "eth0" {
				return []netip.Prefix{netip.MustParsePrefix("fe80::3efd:feff:feaa:bb01/64"),
					netip.MustParsePrefix("2001:db8::17/64"), netip.MustParsePrefix("10.0.0.17/24")}, nil
			}
			return nil, nil
		},
		LLDP: func(_ context.Context, links []string, wait time.Duration) map[string]Neighbor {
			listened = links
			if wait != 3*time.Second {
				t.Errorf("LLDP wait %s, want the collector's 3s", wait)
			}
			return map[string]Neighbor{"eth0": {ChassisID: "aa:bb:cc:00:11:22", PortID: "Ethernet1/7",
				SystemName: "leaf-12", PVID: 100, VLANs: []api.VLAN{{ID: 100, Name: "prov"}, {ID: 300, Name: "storage"}}}}
		},
	}
	hw, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(listened, []string{"eth0"}) {
		t.Errorf("listened for LLDP on %v, want the links with carrier: [eth0]", listened)
	}
	got, err := json.MarshalIndent(hw, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := "testdata/fake-host.golden.json"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden (go test -update writes it): %v", err)
	}
	if string(got) != string(want) {
		t.Errorf("report differs from %s (go test -update rewrites it)\n--- got:\n%s", golden, got)
	}
}

// TestCollectWithoutSMBIOSTable: without the raw table the identity comes
// from /sys/class/dmi/id and the memory from MemTotal; no LLDP listener,
// no pci.ids: models fall back to IDs.
func TestCollectWithoutSMBIOSTable(t *testing.T) {
	root := fakeHost(t)
	if err := os.Remove(filepath.Join(root, "sys/firmware/dmi/tables/DMI")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "usr/share/misc/pci.ids")); err != nil {
		t.Fatal(err)
	}
	tr := tree{t, root}
	tr.file("sys/class/dmi/id/sys_vendor", "QEMU\n")
	tr.file("sys/class/dmi/id/product_name", "Standard PC (Q35 + ICH9, 2009)\n")
	tr.file("sys/class/dmi/id/bios_version", "1.16.3-debian-1.16.3-2\n")
	c := &Collector{Root: root, Arch: "x86_64", PCIIDs: DefaultPCIIDs, LLDPWait: time.Second}
	hw, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hw.SystemVendor != (api.HardwareSystemVendor{Manufacturer: "QEMU", ProductName: "Standard PC (Q35 + ICH9, 2009)"}) ||
		hw.Firmware.BIOS != (api.BIOS{Version: "1.16.3-debian-1.16.3-2"}) {
		t.Errorf("identity from /sys/class/dmi/id: %+v %+v", hw.SystemVendor, hw.Firmware)
	}
	if hw.RAMMebibytes != 31847 { // 32610776 kB rounded up to MiB
		t.Errorf("ramMebibytes %d, want 31847 from MemTotal", hw.RAMMebibytes)
	}
	if len(hw.NIC) != 2 || hw.NIC[0].Model != "0x8086 0x1572" || hw.NIC[0].LLDP != nil || hw.NIC[0].IP != "" {
		t.Errorf("nics without pci.ids, addresses or LLDP: %+v", hw.NIC)
	}
}

// TestCollectKnownNeighbors: with Neighbors set, Collect reports what a
// listener elsewhere heard, without listening itself.
func TestCollectKnownNeighbors(t *testing.T) {
	c := &Collector{Root: fakeHost(t), Arch: "x86_64", PCIIDs: DefaultPCIIDs, LLDPWait: time.Minute,
		LLDP: func(context.Context, []string, time.Duration) map[string]Neighbor {
			t.Error("Collect listened for LLDP although Neighbors is set")
			return nil
		},
		Neighbors: func() map[string]Neighbor {
			return map[string]Neighbor{"eth1": {ChassisID: "aa:bb:cc:00:11:22", PortID: "swp3", SystemName: "leaf-2", PVID: 7}}
		},
	}
	hw, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]api.NIC{}
	for _, n := range hw.NIC {
		byName[n.Name] = n
	}
	want := api.LLDP{SwitchID: "aa:bb:cc:00:11:22", PortID: "swp3", SwitchSystemName: "leaf-2"}
	if n := byName["eth1"]; n.LLDP == nil || *n.LLDP != want || n.VLANID != 7 {
		t.Errorf("eth1 %+v, want lldp %+v and vlanId 7", n, want)
	}
	if n := byName["eth0"]; n.LLDP != nil {
		t.Errorf("eth0 reports lldp %+v; nothing was heard on it", n.LLDP)
	}
}

func TestBootIF(t *testing.T) {
	for in, want := range map[string]string{
		"BOOTIF=01-3C-FD-FE-AA-BB-01":      "3c:fd:fe:aa:bb:01",
		"quiet BOOTIF=3c:fd:fe:aa:bb:01 x": "3c:fd:fe:aa:bb:01",
		"BOOTIF=01-3c-fd":                  "",
		"ip=dhcp":                          "",
	} {
		if got := BootIF(in); got != want {
			t.Errorf("BootIF(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCPUFailsWithoutProcessors: a cpuinfo without processors is an error
// naming the file, not a report of zero CPUs.
func TestCPUFailsWithoutProcessors(t *testing.T) {
	root := t.TempDir()
	tree{t, root}.file("proc/cpuinfo", "garbage\n")
	if _, err := (&Collector{Root: root}).CPU(); err == nil {
		t.Fatal("no error")
	}
}
