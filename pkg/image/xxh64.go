package image

import (
	"encoding/binary"
	"math/bits"
)

// xxh64 is XXH64 with seed 0, the hash whose low 32 bits end a zstd frame
// (its content checksum). It is here because zstdZeroSkip takes zero runs
// past the decoder, which then cannot check the frame checksum itself:
// Write checks it over the image instead, in the hash stage, off the
// decoder's goroutine. zeros adds n zero bytes without reading memory, so
// the zero runs of a sparse image cost a few rotates and multiplies per
// 32 bytes.
type xxh64 struct {
	v     [4]uint64
	total uint64
	mem   [32]byte
	n     int // bytes in mem
}

const (
	xxP1 uint64 = 0x9E3779B185EBCA87
	xxP2 uint64 = 0xC2B2AE3D27D4EB4F
	xxP3 uint64 = 0x165667B19E3779F9
	xxP4 uint64 = 0x85EBCA77C2B2AE63
	xxP5 uint64 = 0x27D4EB2F165667C5
)

func newXXH64() *xxh64 {
	h := &xxh64{}
	h.reset()
	return h
}

func (h *xxh64) reset() {
	p1, p2 := xxP1, xxP2 // wrapping arithmetic, as the algorithm wants
	h.v = [4]uint64{p1 + p2, p2, 0, -p1}
	h.total, h.n = 0, 0
}

func xxRound(acc, in uint64) uint64 {
	return bits.RotateLeft64(acc+in*xxP2, 31) * xxP1
}

func xxMerge(acc, v uint64) uint64 {
	return (acc^xxRound(0, v))*xxP1 + xxP4
}

func (h *xxh64) stripe(b []byte) {
	h.v[0] = xxRound(h.v[0], binary.LittleEndian.Uint64(b))
	h.v[1] = xxRound(h.v[1], binary.LittleEndian.Uint64(b[8:]))
	h.v[2] = xxRound(h.v[2], binary.LittleEndian.Uint64(b[16:]))
	h.v[3] = xxRound(h.v[3], binary.LittleEndian.Uint64(b[24:]))
}

// write adds b.
func (h *xxh64) write(b []byte) {
	h.total += uint64(len(b))
	if h.n > 0 {
		k := copy(h.mem[h.n:], b)
		h.n += k
		b = b[k:]
		if h.n < 32 {
			return
		}
		h.stripe(h.mem[:])
		h.n = 0
	}
	for len(b) >= 32 {
		h.stripe(b)
		b = b[32:]
	}
	h.n = copy(h.mem[:], b)
}

// zeros adds n zero bytes.
func (h *xxh64) zeros(n int64) {
	if h.n > 0 {
		k := min(int64(32-h.n), n)
		h.write(make([]byte, k))
		n -= k
		if n == 0 {
			return
		}
	}
	h.total += uint64(n)
	v0, v1, v2, v3 := h.v[0], h.v[1], h.v[2], h.v[3]
	for ; n >= 32; n -= 32 {
		v0 = bits.RotateLeft64(v0, 31) * xxP1
		v1 = bits.RotateLeft64(v1, 31) * xxP1
		v2 = bits.RotateLeft64(v2, 31) * xxP1
		v3 = bits.RotateLeft64(v3, 31) * xxP1
	}
	h.v = [4]uint64{v0, v1, v2, v3}
	clear(h.mem[:n])
	h.n = int(n)
}

// sum64 returns the hash of what was added.
func (h *xxh64) sum64() uint64 {
	var s uint64
	if h.total >= 32 {
		v := h.v
		s = bits.RotateLeft64(v[0], 1) + bits.RotateLeft64(v[1], 7) + bits.RotateLeft64(v[2], 12) + bits.RotateLeft64(v[3], 18)
		for _, x := range v {
			s = xxMerge(s, x)
		}
	} else {
		s = xxP5
	}
	s += h.total
	b := h.mem[:h.n]
	for ; len(b) >= 8; b = b[8:] {
		s ^= xxRound(0, binary.LittleEndian.Uint64(b))
		s = bits.RotateLeft64(s, 27)*xxP1 + xxP4
	}
	if len(b) >= 4 {
		s ^= uint64(binary.LittleEndian.Uint32(b)) * xxP1
		s = bits.RotateLeft64(s, 23)*xxP2 + xxP3
		b = b[4:]
	}
	for _, c := range b {
		s ^= uint64(c) * xxP5
		s = bits.RotateLeft64(s, 11) * xxP1
	}
	s ^= s >> 33
	s *= xxP2
	s ^= s >> 29
	s *= xxP3
	s ^= s >> 32
	return s
}
