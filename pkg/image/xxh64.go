package image

import "github.com/cespare/xxhash/v2"

// xxh64 is XXH64 with seed 0, the hash whose low 32 bits end a zstd frame
// (its content checksum), from github.com/cespare/xxhash (what
// klauspost/compress's zstd uses inside, assembly on amd64 and arm64). It
// is here because zstdZeroSkip takes zero runs past the decoder, which
// then cannot check the frame checksum itself: Write checks it over the
// image instead, in the hash stage, off the decoder's goroutine.
type xxh64 struct{ d *xxhash.Digest }

func newXXH64() *xxh64 { return &xxh64{xxhash.New()} }

func (h *xxh64) reset()         { h.d.Reset() }
func (h *xxh64) write(b []byte) { h.d.Write(b) }
func (h *xxh64) sum64() uint64  { return h.d.Sum64() }

// zeros adds n zero bytes, read from the shared zero buffer (it stays in
// the cache).
func (h *xxh64) zeros(n int64) {
	for n > 0 {
		k := min(n, int64(len(zeroRun)))
		h.d.Write(zeroRun[:k])
		n -= k
	}
}

// zeroRun is what zeros hashes: small enough to stay in the L1 cache.
var zeroRun = make([]byte, 16<<10)
