package inventory

import (
	"encoding/binary"
	"net"
)

// LLDPFrame builds the Ethernet frame a switch port would send announcing
// n from src, to the nearest-bridge group address: chassis ID (a MAC
// address when ChassisID parses as one, else locally assigned), port ID
// (interface name), TTL 120, port description and system name when set,
// and the 802.1 port VLAN ID and VLAN name TLVs. Test senders use it to
// play the switch; DecodeLLDP reads it back as n.
func LLDPFrame(src net.HardwareAddr, n Neighbor) []byte {
	f := append([]byte{}, LLDPMulticast...)
	f = append(f, src...)
	f = binary.BigEndian.AppendUint16(f, EtherTypeLLDP)
	tlv := func(typ int, v []byte) {
		f = binary.BigEndian.AppendUint16(f, uint16(typ)<<9|uint16(len(v)))
		f = append(f, v...)
	}
	if mac, err := net.ParseMAC(n.ChassisID); err == nil && len(mac) == 6 {
		tlv(1, append([]byte{4}, mac...))
	} else {
		tlv(1, append([]byte{7}, n.ChassisID...))
	}
	tlv(2, append([]byte{5}, n.PortID...))
	tlv(3, []byte{0, 120})
	if n.PortDescription != "" {
		tlv(4, []byte(n.PortDescription))
	}
	if n.SystemName != "" {
		tlv(5, []byte(n.SystemName))
	}
	if n.PVID != 0 {
		tlv(tlvOrgSpecific, binary.BigEndian.AppendUint16(append(oui8021[:], dot1SubtypePVID), uint16(n.PVID)))
	}
	for _, v := range n.VLANs {
		b := binary.BigEndian.AppendUint16(append(oui8021[:], dot1SubtypeVLANName), uint16(v.ID))
		b = append(b, byte(len(v.Name)))
		tlv(tlvOrgSpecific, append(b, v.Name...))
	}
	tlv(0, nil)
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f
}
