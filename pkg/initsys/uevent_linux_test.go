package initsys

import (
	"strings"
	"testing"
)

// parseUevent keeps the kernel's additions of devices with a modalias and
// of network interfaces, nothing else.
func TestParseUevent(t *testing.T) {
	msg := func(fields ...string) []byte { return []byte(strings.Join(fields, "\x00") + "\x00") }
	for _, tt := range []struct {
		name string
		msg  []byte
		want Device
		ok   bool
	}{
		{"device with a modalias",
			msg("add@/devices/pci0000:00/0000:00:02.0/virtio0", "ACTION=add", "DEVPATH=/devices/pci0000:00/0000:00:02.0/virtio0", "SUBSYSTEM=virtio", "MODALIAS=virtio:d00000001v00001AF4", "SEQNUM=812"),
			Device{Path: "/devices/pci0000:00/0000:00:02.0/virtio0", Modalias: "virtio:d00000001v00001AF4"}, true},
		{"network interface",
			msg("add@/devices/pci0000:00/0000:00:02.0/virtio0/net/eth0", "ACTION=add", "DEVPATH=/devices/pci0000:00/0000:00:02.0/virtio0/net/eth0", "SUBSYSTEM=net", "INTERFACE=eth0", "IFINDEX=2", "SEQNUM=830"),
			Device{Path: "/devices/pci0000:00/0000:00:02.0/virtio0/net/eth0", Interface: true}, true},
		{"module whose init finished", msg("add@/module/virtio_net", "ACTION=add", "DEVPATH=/module/virtio_net", "SUBSYSTEM=module", "SEQNUM=831"),
			Device{Module: "virtio_net"}, true},
		{"removal", msg("remove@/devices/pci0000:00/0000:00:02.0/virtio0/net/eth0", "ACTION=remove", "DEVPATH=/devices/pci0000:00/0000:00:02.0/virtio0/net/eth0", "SUBSYSTEM=net"), Device{}, false},
		{"udev's own format", msg("libudev", "ACTION=add", "DEVPATH=/devices/x", "SUBSYSTEM=net"), Device{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseUevent(tt.msg)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("parseUevent = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
