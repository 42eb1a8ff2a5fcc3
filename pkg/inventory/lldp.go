package inventory

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"unicode"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/booty-dev/booty/pkg/api"
)

// EtherTypeLLDP is the Ethernet type of LLDP frames.
const EtherTypeLLDP = 0x88cc

// LLDPMulticast is the nearest-bridge group address switches send LLDP to.
var LLDPMulticast = net.HardwareAddr{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e}

// Neighbor is what one LLDP frame announced about the switch port.
type Neighbor struct {
	// ChassisID identifies the switch: a MAC address (aa:bb:...), an IP
	// address, or the switch's own string.
	ChassisID string
	// PortID identifies the switch port: usually its name ("Ethernet1/12").
	PortID          string
	SystemName      string
	PortDescription string
	// PVID is the port's untagged VLAN (802.1 port VLAN ID TLV); 0 when absent.
	PVID int
	// VLANs are the 802.1 VLAN name TLVs.
	VLANs []api.VLAN
}

// ErrNotLLDP is returned by DecodeLLDP for a frame without an LLDP PDU.
var ErrNotLLDP = errors.New("not an LLDP frame")

// DecodeLLDP decodes an Ethernet frame carrying LLDP with gopacket's
// layers: chassis and port ID (formatted by subtype), system name, port
// description and the IEEE 802.1 port VLAN and VLAN name TLVs. Strings
// lose the NUL padding some switches add. It fails when the frame holds
// no LLDP PDU or its mandatory TLVs do not decode.
func DecodeLLDP(frame []byte) (Neighbor, error) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: false, NoCopy: true})
	l, ok := p.Layer(layers.LayerTypeLinkLayerDiscovery).(*layers.LinkLayerDiscovery)
	if !ok {
		if e := p.ErrorLayer(); e != nil {
			return Neighbor{}, fmt.Errorf("decode lldp: %w: %v", ErrNotLLDP, e.Error())
		}
		return Neighbor{}, ErrNotLLDP
	}
	n := Neighbor{
		ChassisID: chassisID(l.ChassisID),
		PortID:    portID(l.PortID),
	}
	info, ok := p.Layer(layers.LayerTypeLinkLayerDiscoveryInfo).(*layers.LinkLayerDiscoveryInfo)
	if !ok {
		return n, nil
	}
	n.SystemName = cleanString(info.SysName)
	n.PortDescription = cleanString(info.PortDescription)
	if d, err := info.Decode8021(); err == nil {
		n.PVID = int(d.PVID)
		for _, v := range d.VLANNames {
			n.VLANs = append(n.VLANs, api.VLAN{ID: int(v.ID), Name: cleanString(v.Name)})
		}
	}
	return n, nil
}

func chassisID(c layers.LLDPChassisID) string {
	return formatID(c.ID, c.Subtype == layers.LLDPChassisIDSubTypeMACAddr, c.Subtype == layers.LLDPChassisIDSubTypeNetworkAddr)
}

func portID(p layers.LLDPPortID) string {
	return formatID(p.ID, p.Subtype == layers.LLDPPortIDSubtypeMACAddr, p.Subtype == layers.LLDPPortIDSubtypeNetworkAddr)
}

// formatID spells a chassis or port ID by its subtype: a MAC address as
// aa:bb:..., a network address as an IP, anything else as text.
func formatID(id []byte, isMAC, isNetAddr bool) string {
	switch {
	case isMAC && len(id) == 6:
		return net.HardwareAddr(id).String()
	case isNetAddr:
		if s := networkAddr(id); s != "" {
			return s
		}
	}
	return idString(id)
}

// networkAddr decodes an IANA address family byte and an address.
func networkAddr(b []byte) string {
	if len(b) < 1 {
		return ""
	}
	if a, ok := netip.AddrFromSlice(b[1:]); ok && (b[0] == 1 && a.Is4() || b[0] == 2 && a.Is6()) {
		return a.String()
	}
	return ""
}

// idString is the ID as text when it is printable, else its hex bytes.
func idString(b []byte) string {
	s := cleanString(string(b))
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("%x", b)
		}
	}
	return s
}

func cleanString(s string) string {
	return strings.TrimSpace(strings.TrimRight(s, "\x00"))
}
