package inventory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"unicode"

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

// LLDP TLV types and subtypes (IEEE 802.1AB) DecodeLLDP reads.
const (
	tlvEnd             = 0
	tlvChassisID       = 1
	tlvPortID          = 2
	tlvTTL             = 3
	tlvPortDescription = 4
	tlvSystemName      = 5
	tlvOrgSpecific     = 127

	chassisSubtypeMAC     = 4
	chassisSubtypeNetAddr = 5
	portSubtypeMAC        = 3
	portSubtypeNetAddr    = 4

	dot1SubtypePVID     = 1
	dot1SubtypeVLANName = 3
)

// oui8021 is IEEE 802.1's organizationally unique identifier.
var oui8021 = [3]byte{0x00, 0x80, 0xc2}

// DecodeLLDP decodes an Ethernet frame (optionally 802.1Q tagged) carrying
// LLDP: chassis and port ID (formatted by subtype), system name, port
// description and the IEEE 802.1 port VLAN and VLAN name TLVs. Strings
// lose the NUL padding some switches add. It fails with ErrNotLLDP when
// the frame is not LLDP, and with an error naming the TLV when a TLV runs
// past the frame or the mandatory chassis ID, port ID and TTL are missing.
//
// It is a few lines of TLV walking rather than gopacket's layers: linking
// those costs every run of the binary about 8 MB of tables built at start.
func DecodeLLDP(frame []byte) (Neighbor, error) {
	if len(frame) < 14 {
		return Neighbor{}, fmt.Errorf("decode lldp: %d-byte frame: %w", len(frame), ErrNotLLDP)
	}
	et, pdu := binary.BigEndian.Uint16(frame[12:]), frame[14:]
	if et == 0x8100 && len(frame) >= 18 {
		et, pdu = binary.BigEndian.Uint16(frame[16:]), frame[18:]
	}
	if et != EtherTypeLLDP {
		return Neighbor{}, fmt.Errorf("decode lldp: ethertype %#04x: %w", et, ErrNotLLDP)
	}
	var n Neighbor
	var seen [4]bool
	for len(pdu) >= 2 {
		h := binary.BigEndian.Uint16(pdu)
		typ, l := int(h>>9), int(h&0x1ff)
		if len(pdu) < 2+l {
			return Neighbor{}, fmt.Errorf("decode lldp: TLV type %d of %d bytes runs past the frame: %w", typ, l, ErrNotLLDP)
		}
		v := pdu[2 : 2+l]
		pdu = pdu[2+l:]
		if typ == tlvEnd {
			break
		}
		if typ < len(seen) {
			seen[typ] = true
		}
		switch {
		case typ == tlvChassisID && l >= 2:
			n.ChassisID = formatID(v[1:], v[0] == chassisSubtypeMAC, v[0] == chassisSubtypeNetAddr)
		case typ == tlvPortID && l >= 2:
			n.PortID = formatID(v[1:], v[0] == portSubtypeMAC, v[0] == portSubtypeNetAddr)
		case typ == tlvPortDescription:
			n.PortDescription = cleanString(string(v))
		case typ == tlvSystemName:
			n.SystemName = cleanString(string(v))
		case typ == tlvOrgSpecific && l >= 4 && [3]byte(v[:3]) == oui8021:
			decodeDot1(&n, v[3], v[4:])
		}
	}
	if !seen[tlvChassisID] || !seen[tlvPortID] || !seen[tlvTTL] {
		return Neighbor{}, fmt.Errorf("decode lldp: chassis ID, port ID or TTL missing: %w", ErrNotLLDP)
	}
	return n, nil
}

// decodeDot1 reads the IEEE 802.1 port VLAN ID and VLAN name TLVs.
func decodeDot1(n *Neighbor, subtype byte, v []byte) {
	switch {
	case subtype == dot1SubtypePVID && len(v) >= 2:
		n.PVID = int(binary.BigEndian.Uint16(v))
	case subtype == dot1SubtypeVLANName && len(v) >= 3 && len(v) >= 3+int(v[2]):
		n.VLANs = append(n.VLANs, api.VLAN{ID: int(binary.BigEndian.Uint16(v)), Name: cleanString(string(v[3 : 3+int(v[2])]))})
	}
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
