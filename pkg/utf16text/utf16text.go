// Package utf16text converts the UTF-16 strings of on-disk and firmware
// formats: GPT partition names and UEFI load option descriptions
// (little-endian, NUL-terminated) and Joliet volume labels (big-endian).
package utf16text

import (
	"encoding/binary"
	"unicode/utf16"
)

// Decode decodes UTF-16 in the given byte order up to the first NUL code
// unit or the end of b (an odd last byte is ignored). Unpaired surrogates
// become U+FFFD.
func Decode(b []byte, order binary.ByteOrder) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := order.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

// EncodeLE returns s as NUL-terminated UTF-16LE.
func EncodeLE(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 0, 2*len(u)+2)
	for _, c := range u {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return append(b, 0, 0)
}
