// Package guid converts GUIDs between their text form
// ("c12a7328-f81f-11d2-ba4b-00a0c93ec93b") and the mixed-endian byte order
// GPT entries and UEFI device paths store: the first three fields
// little-endian, the last two as written.
package guid

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrSyntax is wrapped by Parse when the text is not a GUID.
var ErrSyntax = errors.New("not a GUID")

// Format renders the 16 mixed-endian bytes at the start of b in lower case,
// as blkid, sgdisk and efibootmgr print them. It panics when b is shorter
// than 16 bytes.
func Format(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x", le.Uint32(b[0:4]), le.Uint16(b[4:6]), le.Uint16(b[6:8]), b[8:10], b[10:16])
}

// Parse reads "8-4-4-4-12" hex digits in either case, optionally in braces,
// into the mixed-endian byte order. Anything else wraps ErrSyntax.
func Parse(s string) ([16]byte, error) {
	var g [16]byte
	t := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "{"), "}")
	f := strings.Split(t, "-")
	if len(f) != 5 || len(f[0]) != 8 || len(f[1]) != 4 || len(f[2]) != 4 || len(f[3]) != 4 || len(f[4]) != 12 {
		return g, fmt.Errorf("parse GUID %q: want 8-4-4-4-12 hex digits: %w", s, ErrSyntax)
	}
	raw, err := hex.DecodeString(strings.Join(f, ""))
	if err != nil {
		return g, fmt.Errorf("parse GUID %q: %w", s, ErrSyntax)
	}
	g[0], g[1], g[2], g[3] = raw[3], raw[2], raw[1], raw[0]
	g[4], g[5] = raw[5], raw[4]
	g[6], g[7] = raw[7], raw[6]
	copy(g[8:], raw[8:])
	return g, nil
}
