package utf16text

import (
	"encoding/binary"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, s := range []string{"", "EFI System", "debian", "Ünïcödé 😀", "root-a"} {
		b := EncodeLE(s)
		if len(b)%2 != 0 || b[len(b)-1] != 0 || b[len(b)-2] != 0 {
			t.Errorf("EncodeLE(%q) = %x: not NUL-terminated UTF-16LE", s, b)
		}
		if got := Decode(b, binary.LittleEndian); got != s {
			t.Errorf("Decode(EncodeLE(%q)) = %q", s, got)
		}
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		b     []byte
		order binary.ByteOrder
		want  string
	}{
		{[]byte{'a', 0, 'b', 0, 0, 0, 'c', 0}, binary.LittleEndian, "ab"},              // stops at NUL
		{[]byte{0, 'B', 0, 'O', 0, 'O', 0, 'T', 0, 0, 0, 0}, binary.BigEndian, "BOOT"}, // Joliet, padded
		{[]byte{'x', 0, 'y'}, binary.LittleEndian, "x"},                                // odd byte ignored
		{[]byte{0x00, 0xd8, 'a', 0}, binary.LittleEndian, "\ufffda"},                   // lone surrogate
	}
	for _, tt := range tests {
		if got := Decode(tt.b, tt.order); got != tt.want {
			t.Errorf("Decode(%x) = %q, want %q", tt.b, got, tt.want)
		}
	}
}
