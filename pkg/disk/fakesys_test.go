package disk

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fakeDisk describes one block device of a fake sysfs tree.
type fakeDisk struct {
	name string
	// devPath is the disk's directory below sys/devices, as the kernel lays it out.
	devPath string
	// deviceLink is the target of <disk>/device, relative to the disk directory; empty: none.
	deviceLink string
	gib        int64
	attrs      map[string]string // files in the disk directory (queue/rotational, ro, serial, wwid, ...)
	devAttrs   map[string]string // files in the device directory (model, vendor, serial, wwid, vpd_pg80)
	partitions []string
}

// writeFakeSys builds root/sys (block/ links into devices/) and root/dev
// holding the given disks, and returns the Manager that reads them.
func writeFakeSys(t *testing.T, disks []fakeDisk) *Manager {
	t.Helper()
	root := t.TempDir()
	sys := filepath.Join(root, "sys")
	dev := filepath.Join(root, "dev")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(dir, rel, val string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, []byte(val+"\n"), 0o644))
	}
	must(os.MkdirAll(filepath.Join(sys, "block"), 0o755))
	must(os.MkdirAll(dev, 0o755))
	for _, d := range disks {
		dir := filepath.Join(sys, "devices", d.devPath)
		must(os.MkdirAll(dir, 0o755))
		write(dir, "size", strconv.FormatInt(d.gib<<30/512, 10))
		defaults := map[string]string{"ro": "0", "removable": "0", "queue/rotational": "0",
			"queue/logical_block_size": "512", "queue/physical_block_size": "4096"}
		for k, v := range defaults {
			write(dir, k, v)
		}
		for k, v := range d.attrs {
			write(dir, k, v)
		}
		if d.deviceLink != "" {
			devDir := filepath.Join(dir, d.deviceLink)
			must(os.MkdirAll(devDir, 0o755))
			must(os.Symlink(d.deviceLink, filepath.Join(dir, "device")))
			for k, v := range d.devAttrs {
				write(devDir, k, v)
			}
		}
		for _, p := range d.partitions {
			write(dir, filepath.Join(p, "partition"), "1")
			write(dir, filepath.Join(p, "size"), "2048")
		}
		rel, err := filepath.Rel(filepath.Join(sys, "block"), dir)
		must(err)
		must(os.Symlink(rel, filepath.Join(sys, "block", d.name)))
		must(os.WriteFile(filepath.Join(dev, d.name), nil, 0o644))
	}
	m := NewManager()
	m.SysRoot, m.DevRoot, m.MountsFile = sys, dev, filepath.Join(root, "mounts")
	return m
}

// vpdPage80 encodes a unit serial number VPD page.
func vpdPage80(serial string) string {
	return string([]byte{0, 0x80, 0, byte(len(serial))}) + serial
}

// standardDisks is the machine most tests use: a virtio disk, an NVMe disk,
// a SATA HDD, a removable USB stick, a read-only SAS disk and a loop device.
func standardDisks() []fakeDisk {
	return []fakeDisk{
		{name: "vda", devPath: "pci0000:00/0000:00:04.0/virtio1/block/vda", deviceLink: "../../../virtio1", gib: 20,
			attrs: map[string]string{"serial": "VIRTIO-SERIAL-1"}, partitions: []string{"vda1", "vda2"}},
		{name: "nvme0n1", devPath: "pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1", deviceLink: "../../nvme0", gib: 100,
			attrs:    map[string]string{"wwid": "eui.0025388b91b2c3d4"},
			devAttrs: map[string]string{"model": "Samsung SSD 980 PRO 1TB                 ", "serial": "S5GXNX0T123456   "}},
		{name: "sda", devPath: "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda", deviceLink: "../../../0:0:0:0", gib: 500,
			attrs: map[string]string{"queue/rotational": "1"},
			devAttrs: map[string]string{"model": "ST500DM009-2F110A", "vendor": "ATA     ", "wwid": "naa.5000c500a1b2c3d4",
				"vpd_pg80": vpdPage80("    ZA1B2C3D")}},
		{name: "sdb", devPath: "pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/host1/target1:0:0/1:0:0:0/block/sdb", deviceLink: "../../../1:0:0:0", gib: 16,
			attrs:    map[string]string{"removable": "1"},
			devAttrs: map[string]string{"model": "Cruzer Blade", "vendor": "SanDisk", "vpd_pg80": vpdPage80("4C530001")}},
		{name: "sdc", devPath: "pci0000:00/0000:00:02.0/0000:03:00.0/host2/port-2:0/end_device-2:0/target2:0:0/2:0:0:0/block/sdc", deviceLink: "../../../2:0:0:0", gib: 50,
			attrs: map[string]string{"ro": "1"},
			devAttrs: map[string]string{"model": "PX05SMB040", "vendor": "TOSHIBA", "wwid": "naa.600508b1001c4d5e6f708192a3b4c5d6",
				"vpd_pg80": vpdPage80("X5T0A00ZTBE8")}},
		{name: "loop0", devPath: "virtual/block/loop0", gib: 1},
	}
}
