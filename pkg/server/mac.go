package server

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadMAC is returned by NormalizeMAC for anything that is not a 6-byte MAC.
var ErrBadMAC = errors.New("not a MAC address of the form aa:bb:cc:dd:ee:ff or aa-bb-cc-dd-ee-ff")

// NormalizeMAC turns a 6-byte MAC spelled with colons or dashes, in any case,
// into its canonical lower-case, colon-separated form (aa:bb:cc:dd:ee:ff).
// Anything else, including mixed separators, fails with ErrBadMAC.
func NormalizeMAC(s string) (string, error) {
	if len(s) != 17 {
		return "", fmt.Errorf("parse MAC %q: %w", s, ErrBadMAC)
	}
	sep := s[2]
	if sep != ':' && sep != '-' {
		return "", fmt.Errorf("parse MAC %q: %w", s, ErrBadMAC)
	}
	var b strings.Builder
	b.Grow(17)
	for i := 0; i < 17; i++ {
		c := s[i]
		if i%3 == 2 {
			if c != sep {
				return "", fmt.Errorf("parse MAC %q: %w", s, ErrBadMAC)
			}
			b.WriteByte(':')
			continue
		}
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", fmt.Errorf("parse MAC %q: %w", s, ErrBadMAC)
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// macFileName is the canonical MAC with dashes, safe as a file name anywhere.
func macFileName(mac string) string { return strings.ReplaceAll(mac, ":", "-") }
