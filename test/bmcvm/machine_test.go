package bmcvm

import (
	"slices"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/test/vm"
)

// TestConfigBootDevice: under SeaBIOS the boot device is -boot order; under
// UEFI (OVMF ignores -boot order) it is bootindex: the NIC first and the
// disk second for pxe, the disk first for disk; the Machine's own Config
// is not changed.
func TestConfigBootDevice(t *testing.T) {
	disks := []vm.Disk{{Path: "/d/os.raw"}, {Path: "/d/cd.iso", CDROM: true}}
	bios := &Machine{Config: vm.Config{Disks: disks}, Dir: t.TempDir()}
	c, err := bios.config(1, bmc.DevicePXE)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(c.ExtraArgs, " "), "-boot order=n") {
		t.Errorf("SeaBIOS pxe: args %v, want -boot order=n", c.ExtraArgs)
	}
	uefi := &Machine{Config: vm.Config{UEFI: true, Disks: disks}, Dir: t.TempDir()}
	for _, tt := range []struct {
		dev     bmc.Device
		global  bool
		indexes []int
	}{
		{bmc.DevicePXE, true, []int{2, 0}},
		{bmc.DeviceDisk, false, []int{1, 0}},
		{bmc.DeviceCDROM, false, []int{0, 1}},
		{"", false, []int{0, 0}},
	} {
		c, err := uefi.config(1, tt.dev)
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Join(c.ExtraArgs, " ")
		if strings.Contains(args, "-boot") || strings.Contains(args, "virtio-net-pci.bootindex=1") != tt.global {
			t.Errorf("UEFI %q: args %v", tt.dev, c.ExtraArgs)
		}
		got := []int{c.Disks[0].BootIndex, c.Disks[1].BootIndex}
		if !slices.Equal(got, tt.indexes) {
			t.Errorf("UEFI %q: disk boot indexes %v, want %v", tt.dev, got, tt.indexes)
		}
	}
	if disks[0].BootIndex != 0 || uefi.Config.Disks[0].BootIndex != 0 {
		t.Error("config changed the machine's disks")
	}
}
