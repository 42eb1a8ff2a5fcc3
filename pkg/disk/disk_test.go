package disk

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDisksFromSysfs(t *testing.T) {
	m := writeFakeSys(t, standardDisks())
	disks, err := m.Disks()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]Disk{}
	for _, d := range disks {
		names = append(names, d.Name)
		byName[d.Name] = d
	}
	if want := []string{"nvme0n1", "sda", "sdb", "sdc", "vda"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("disks = %v, want %v (loop0 skipped)", names, want)
	}
	want := map[string]Disk{
		"vda": {Name: "vda", Path: filepath.Join(m.DevRoot, "vda"), Size: 20 << 30, LogicalBlockSize: 512, PhysicalBlockSize: 4096,
			Serial: "VIRTIO-SERIAL-1", Tran: "virtio", ByPath: "/dev/disk/by-path/pci-0000:00:04.0", Partitions: []string{"vda1", "vda2"}},
		"nvme0n1": {Name: "nvme0n1", Path: filepath.Join(m.DevRoot, "nvme0n1"), Size: 100 << 30, LogicalBlockSize: 512, PhysicalBlockSize: 4096,
			Model: "Samsung SSD 980 PRO 1TB", Serial: "S5GXNX0T123456", WWN: "eui.0025388b91b2c3d4", WWNWithExtension: "eui.0025388b91b2c3d4",
			Tran: "nvme", ByPath: "/dev/disk/by-path/pci-0000:00:05.0-nvme-1"},
		"sda": {Name: "sda", Path: filepath.Join(m.DevRoot, "sda"), Size: 500 << 30, LogicalBlockSize: 512, PhysicalBlockSize: 4096, Rotational: true,
			Model: "ST500DM009-2F110A", Vendor: "ATA", Serial: "ZA1B2C3D", WWN: "0x5000c500a1b2c3d4", WWNWithExtension: "0x5000c500a1b2c3d4",
			HCTL: "0:0:0:0", Tran: "sata", ByPath: "/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0"},
		"sdb": {Name: "sdb", Path: filepath.Join(m.DevRoot, "sdb"), Size: 16 << 30, LogicalBlockSize: 512, PhysicalBlockSize: 4096, Removable: true,
			Model: "Cruzer Blade", Vendor: "SanDisk", Serial: "4C530001", HCTL: "1:0:0:0", Tran: "usb"},
		"sdc": {Name: "sdc", Path: filepath.Join(m.DevRoot, "sdc"), Size: 50 << 30, LogicalBlockSize: 512, PhysicalBlockSize: 4096, ReadOnly: true,
			Model: "PX05SMB040", Vendor: "TOSHIBA", Serial: "X5T0A00ZTBE8", WWN: "0x600508b1001c4d5e",
			WWNWithExtension: "0x600508b1001c4d5e6f708192a3b4c5d6", WWNVendorExtension: "0x6f708192a3b4c5d6", HCTL: "2:0:0:0", Tran: "sas"},
	}
	for name, w := range want {
		if got := byName[name]; !reflect.DeepEqual(got, w) {
			t.Errorf("disk %s:\n got %+v\nwant %+v", name, got, w)
		}
	}
}

func TestDisksSkipsHiddenEmptyAndSpecial(t *testing.T) {
	m := writeFakeSys(t, []fakeDisk{
		{name: "vda", devPath: "pci0000:00/0000:00:04.0/virtio1/block/vda", gib: 1},
		{name: "nvme0c0n1", devPath: "pci0000:00/0000:00:05.0/nvme/nvme0/nvme0c0n1", gib: 1, attrs: map[string]string{"hidden": "1"}},
		{name: "sr0", devPath: "pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sr0", gib: 1},
		{name: "mmcblk0boot0", devPath: "platform/mmc/mmcblk0/mmcblk0boot0", gib: 1},
		{name: "sdd", devPath: "pci0000:00/0000:00:14.0/usb1/1-2/host3/target3:0:0/3:0:0:0/block/sdd", gib: 0},
		{name: "dm-0", devPath: "virtual/block/dm-0", gib: 1},
	})
	disks, err := m.Disks()
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 1 || disks[0].Name != "vda" {
		t.Fatalf("disks = %+v, want only vda", disks)
	}
	// A test can opt loop devices back in.
	m.SkipPrefixes = []string{"sr"}
	disks, err = m.Disks()
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 2 || disks[0].Name != "dm-0" {
		t.Fatalf("with SkipPrefixes=[sr]: %+v, want dm-0 and vda", disks)
	}
}

func TestDisksMissingSysfs(t *testing.T) {
	m := NewManager()
	m.SysRoot = filepath.Join(t.TempDir(), "nope")
	if _, err := m.Disks(); err == nil || !strings.Contains(err.Error(), "list block devices") {
		t.Fatalf("err = %v, want list block devices error", err)
	}
}

func TestBootMedium(t *testing.T) {
	m := writeFakeSys(t, standardDisks())
	// vda2 is mounted (a config drive), nvme0n1 is named as boot device.
	if err := os.WriteFile(m.MountsFile, []byte("proc /proc proc rw 0 0\n/dev/vda2 /mnt/config iso9660 ro 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.BootDevices = []string{"/dev/nvme0n1"}
	disks, err := m.Disks()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range disks {
		got[d.Name] = d.BootMedium
	}
	want := map[string]bool{"vda": true, "nvme0n1": true, "sda": false, "sdb": false, "sdc": false}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("boot medium = %v, want %v", got, want)
	}
	_, err = m.Select(Spec{Device: "vda"}, 0)
	if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "boot medium") {
		t.Fatalf("select mounted disk: err = %v, want ErrNoMatch naming boot medium", err)
	}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		raw     map[string]any // hints as a config holds them, parsed with ParseHints
		minSize int64
		want    string // disk name, or "" for an error
		errIs   error
		errHas  []string
	}{
		// Ironic's documented examples, adapted to the fake machine.
		{name: "wwn", raw: hints(`wwn`, "0x5000c500a1b2c3d4"), want: "sda"},
		{name: "wwn with extension", raw: hints(`wwn_with_extension`, "0x600508b1001c4d5e6f708192a3b4c5d6"), errIs: ErrNoMatch, errHas: []string{"read-only"}},
		{name: "size >= 60 and not rotational", raw: hints("size", ">= 60", "rotational", false), want: "nvme0n1"},
		{name: "vendor or", raw: hints("vendor", "<or> samsung <or> ata"), want: "sda"},
		{name: "model in, case-insensitive", raw: hints("model", "<in> samsung ssd"), want: "nvme0n1"},
		{name: "name path", raw: hints("name", "/dev/sda"), want: "sda"},
		{name: "name bare", raw: hints("name", "vda"), want: "vda"},
		{name: "hctl", raw: hints("hctl", "0:0:0:0"), want: "sda"},
		{name: "by_path", raw: hints("by_path", "/dev/disk/by-path/pci-0000:00:04.0"), want: "vda"},
		{name: "serial s==", raw: hints("serial", "s== S5GXNX0T123456"), want: "nvme0n1"},
		{name: "serial plain", raw: hints("serial", "za1b2c3d"), want: "sda"},
		{name: "serial s!= picks smallest other", raw: hints("serial", "s!= VIRTIO-SERIAL-1"), want: "nvme0n1"},
		{name: "size exact JSON number", raw: hints("size", float64(20)), want: "vda"},
		{name: "size json.Number", raw: hints("size", json.Number("100")), want: "nvme0n1"},
		{name: "size legacy =", raw: hints("size", "= 100"), want: "nvme0n1"},
		{name: "size < 30", raw: hints("size", "< 30"), want: "vda"},
		{name: "size or", raw: hints("size", "<or> 100 <or> 500"), want: "nvme0n1"},
		{name: "tran", raw: hints("tran", "nvme"), want: "nvme0n1"},
		{name: "rotational string", raw: hints("rotational", "yes"), want: "sda"},
		{name: "several matches: smallest", raw: hints("rotational", false), want: "vda"},
		{name: "minSize skips small", raw: hints("rotational", false), minSize: 50 << 30, want: "nvme0n1"},
		{name: "device path", spec: Spec{Device: "/dev/nvme0n1"}, want: "nvme0n1"},
		{name: "device bare", spec: Spec{Device: "sda"}, want: "sda"},
		{name: "device by-path without udev", spec: Spec{Device: "/dev/disk/by-path/pci-0000:00:05.0-nvme-1"}, want: "nvme0n1"},
		{name: "device and hints both apply", spec: Spec{Device: "sda"}, raw: hints("tran", "nvme"), errIs: ErrNoMatch},
		{name: "removable never", spec: Spec{Device: "sdb"}, errIs: ErrNoMatch, errHas: []string{"sdb", "removable"}},
		{name: "read-only never", raw: hints("model", "PX05SMB040"), errIs: ErrNoMatch, errHas: []string{"sdc", "read-only"}},
		{name: "too small", spec: Spec{Device: "vda"}, minSize: 30 << 30, errIs: ErrNoMatch, errHas: []string{"smaller than required 30 GiB"}},
		{name: "no match lists every disk", raw: hints("serial", "nope"),
			errIs: ErrNoMatch, errHas: []string{"vda", "nvme0n1", "sda", "sdb", "sdc", `serial "ZA1B2C3D" does not match serial="s== nope"`, "Samsung SSD 980 PRO"}},
		{name: "empty attribute never matches s!=", raw: hints("wwn", "s!= x", "tran", "virtio"), errIs: ErrNoMatch, errHas: []string{"has no wwn"}},
		{name: "empty spec", spec: Spec{}, errIs: ErrNoDiskSpec},
		{name: "unknown hint", raw: hints("colour", "red"), errIs: ErrInvalidHints, errHas: []string{`hint "colour": unknown root device hint`, "by_path"}},
		{name: "size not integer", raw: hints("size", ">= big"), errIs: ErrInvalidHints, errHas: []string{`hint "size"`, `"big"`}},
		{name: "size not positive", raw: hints("size", float64(-1)), errIs: ErrInvalidHints, errHas: []string{"positive"}},
		{name: "size string op", raw: hints("size", "s== 10"), errIs: ErrInvalidHints, errHas: []string{"s=="}},
		{name: "rotational not bool", raw: hints("rotational", "maybe"), errIs: ErrInvalidHints, errHas: []string{"rotational", "maybe"}},
		{name: "serial not string", raw: hints("serial", float64(12345)), errIs: ErrInvalidHints, errHas: []string{"not a string"}},
		{name: "numeric op on string", raw: hints("model", ">= 10"), errIs: ErrInvalidHints, errHas: []string{`operator ">="`}},
		{name: "all-in unsupported", raw: hints("model", "<all-in> a b"), errIs: ErrInvalidHints, errHas: []string{"<all-in>"}},
		{name: "empty expression", raw: hints("model", "  "), errIs: ErrInvalidHints, errHas: []string{"empty"}},
		{name: "operator without value", raw: hints("model", "<in>"), errIs: ErrInvalidHints, errHas: []string{"no value"}},
	}
	m := writeFakeSys(t, standardDisks())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			var d *Disk
			h, err := ParseHints(tt.raw)
			if err == nil {
				spec.Hints = h
				d, err = m.Select(spec, tt.minSize)
			}
			if tt.want != "" {
				if err != nil {
					t.Fatalf("Select: %v", err)
				}
				if d.Name != tt.want {
					t.Fatalf("Select = %s, want %s", d.Name, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Select = %s, want error", d.Name)
			}
			if tt.errIs != nil && !errors.Is(err, tt.errIs) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.errIs)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %v\nwant it to contain %q", err, s)
				}
			}
		})
	}
}

func TestSelectDeviceSymlink(t *testing.T) {
	m := writeFakeSys(t, standardDisks())
	byID := filepath.Join(m.DevRoot, "disk", "by-id")
	if err := os.MkdirAll(byID, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../sda", filepath.Join(byID, "ata-ST500DM009_ZA1B2C3D")); err != nil {
		t.Fatal(err)
	}
	d, err := m.Select(Spec{Device: "/dev/disk/by-id/ata-ST500DM009_ZA1B2C3D"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "sda" {
		t.Fatalf("Select = %s, want sda", d.Name)
	}
}

func TestByPathFromUdevLinks(t *testing.T) {
	m := writeFakeSys(t, standardDisks())
	dir := filepath.Join(m.DevRoot, "disk", "by-path")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../sdc", filepath.Join(dir, "pci-0000:03:00.0-sas-phy0-lun-0")); err != nil {
		t.Fatal(err)
	}
	disks, err := m.Disks()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range disks {
		if d.Name == "sdc" && d.ByPath != "/dev/disk/by-path/pci-0000:03:00.0-sas-phy0-lun-0" {
			t.Fatalf("sdc ByPath = %q, want the udev link", d.ByPath)
		}
	}
}

func TestEvaluateExplainsEveryDisk(t *testing.T) {
	m := writeFakeSys(t, standardDisks())
	h, err := ParseHints(hints("rotational", false))
	if err != nil {
		t.Fatal(err)
	}
	cands, err := m.Evaluate(Spec{Hints: h}, 0)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, c := range cands {
		reasons[c.Disk.Name] = strings.Join(c.Reasons, "; ")
	}
	want := map[string]string{
		"vda": "", "nvme0n1": "",
		"sda": "rotational is true, hint wants false",
		"sdb": "removable",
		"sdc": "read-only",
	}
	if !reflect.DeepEqual(reasons, want) {
		t.Fatalf("reasons = %q, want %q", reasons, want)
	}
	if d := Choose(cands); d == nil || d.Name != "vda" {
		t.Fatalf("Choose = %+v, want vda", d)
	}
}

func TestParseWWID(t *testing.T) {
	tests := []struct{ in, wwn, ext, vendor string }{
		{"naa.5000C500A1B2C3D4", "0x5000c500a1b2c3d4", "0x5000c500a1b2c3d4", ""},
		{"naa.600508b1001c4d5e6f708192a3b4c5d6", "0x600508b1001c4d5e", "0x600508b1001c4d5e6f708192a3b4c5d6", "0x6f708192a3b4c5d6"},
		{"eui.0025388b91b2c3d4", "eui.0025388b91b2c3d4", "eui.0025388b91b2c3d4", ""},
		{"t10.ATA     QEMU HARDDISK    QM00001", "", "", ""},
		{"", "", "", ""},
	}
	for _, tt := range tests {
		w, e, v := parseWWID(tt.in)
		if w != tt.wwn || e != tt.ext || v != tt.vendor {
			t.Errorf("parseWWID(%q) = %q, %q, %q; want %q, %q, %q", tt.in, w, e, v, tt.wwn, tt.ext, tt.vendor)
		}
	}
}

func TestHumanSize(t *testing.T) {
	tests := map[int64]string{0: "0 B", 512: "512 B", 20 << 30: "20 GiB", 3 << 29: "1.5 GiB", 2 << 40: "2 TiB", 1000 << 30: "1000 GiB", 10<<40 + 1<<39: "10.5 TiB"}
	for in, want := range tests {
		if got := HumanSize(in); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", in, got, want)
		}
	}
}

// hints builds raw hints, as a config holds them, from key, value pairs.
func hints(kv ...any) map[string]any {
	h := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		h[kv[i].(string)] = kv[i+1]
	}
	return h
}
