package image

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

// checksum is a parsed "ALGO:HEX" expectation.
type checksum struct {
	algo string // "sha256" or "sha512"
	sum  []byte
}

func (c checksum) String() string { return c.algo + ":" + hex.EncodeToString(c.sum) }

// newHash returns a fresh hash for algo ("sha256" or "sha512").
func newHash(algo string) hash.Hash {
	if algo == "sha512" {
		return sha512.New()
	}
	return sha256.New()
}

// CheckChecksum says why s is not a checksum Write accepts ("sha256:HEX" or
// "sha512:HEX"), or nil: config validation asks it, and Write parses the
// same text with the same function.
func CheckChecksum(s string) error {
	if s == "" {
		return fmt.Errorf("parse checksum: empty: %w", ErrBadChecksum)
	}
	_, err := parseChecksum(s)
	return err
}

// parseChecksum parses "sha256:HEX" or "sha512:HEX" (case-insensitive hex).
// An empty string yields the zero checksum and no error.
func parseChecksum(s string) (checksum, error) {
	if s == "" {
		return checksum{}, nil
	}
	algo, hx, ok := strings.Cut(s, ":")
	if !ok {
		return checksum{}, fmt.Errorf("parse checksum %q: want ALGO:HEX, e.g. sha256:…: %w", s, ErrBadChecksum)
	}
	algo = strings.ToLower(algo)
	var size int
	switch algo {
	case "sha256":
		size = sha256.Size
	case "sha512":
		size = sha512.Size
	default:
		return checksum{}, fmt.Errorf("parse checksum %q: algorithm %q is not sha256 or sha512: %w", s, algo, ErrBadChecksum)
	}
	sum, err := hex.DecodeString(hx)
	if err != nil || len(sum) != size {
		return checksum{}, fmt.Errorf("parse checksum %q: want %d hex digits for %s: %w", s, 2*size, algo, ErrBadChecksum)
	}
	return checksum{algo: algo, sum: sum}, nil
}

// digestString formats a finished hash as "ALGO:HEX".
func digestString(algo string, h hash.Hash) string {
	return algo + ":" + hex.EncodeToString(h.Sum(nil))
}
