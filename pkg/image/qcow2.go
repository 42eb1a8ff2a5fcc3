package image

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
)

// qcow2HeaderPeek is how many leading bytes parseQcow2Header needs (the
// version 3 header up to header_length and compression_type).
const qcow2HeaderPeek = 112

// maxQcow2Buffer bounds what the streaming qcow2 reader keeps: data
// clusters that arrive before their guest position is due or before their
// L2 table, and clusters not yet known to be metadata. A variable for tests.
var maxQcow2Buffer = 32 << 20

// qcow2 L1/L2 entry bits.
const (
	qcowOffsetMask = 0x00fffffffffffe00
	qcowCompressed = 1 << 62
	qcowZeroFlag   = 1
)

type qcow2Header struct {
	version        uint32
	clusterBits    uint32
	size           uint64
	l1Size         uint32
	l1Offset       uint64
	refTableOffset uint64
	refTableBytes  uint64
	zstdClusters   bool
}

// parseQcow2Header reads a qcow2 header and refuses what the streaming
// reader cannot do: backing files, encryption, external data files and
// extended L2 entries (all with ErrUnsupportedFormat).
func parseQcow2Header(b []byte) (qcow2Header, error) {
	be := binary.BigEndian
	if len(b) < 72 || !bytes.HasPrefix(b, []byte{'Q', 'F', 'I', 0xfb}) {
		return qcow2Header{}, fmt.Errorf("qcow2 header: too short: %w", ErrCorruptSource)
	}
	h := qcow2Header{
		version:        be.Uint32(b[4:]),
		clusterBits:    be.Uint32(b[20:]),
		size:           be.Uint64(b[24:]),
		l1Size:         be.Uint32(b[36:]),
		l1Offset:       be.Uint64(b[40:]),
		refTableOffset: be.Uint64(b[48:]),
		refTableBytes:  uint64(be.Uint32(b[56:])),
	}
	unsupported := func(what string) (qcow2Header, error) {
		return qcow2Header{}, fmt.Errorf("qcow2 image with %s cannot be streamed; convert it with qemu-img convert -O raw (then compress): %w", what, ErrUnsupportedFormat)
	}
	switch {
	case h.version != 2 && h.version != 3:
		return unsupported(fmt.Sprintf("version %d", h.version))
	case be.Uint64(b[8:]) != 0:
		return unsupported("a backing file")
	case be.Uint32(b[32:]) != 0:
		return unsupported("encryption")
	case h.clusterBits < 9 || h.clusterBits > 21:
		return qcow2Header{}, fmt.Errorf("qcow2 header: cluster_bits %d: %w", h.clusterBits, ErrCorruptSource)
	case h.size > 1<<56 || h.l1Offset%(1<<h.clusterBits) != 0 || h.refTableOffset%(1<<h.clusterBits) != 0:
		return qcow2Header{}, fmt.Errorf("qcow2 header: bad size or table offsets: %w", ErrCorruptSource)
	}
	h.refTableBytes <<= h.clusterBits
	if h.version == 3 {
		if len(b) < 104 {
			return qcow2Header{}, fmt.Errorf("qcow2 v3 header: too short: %w", ErrCorruptSource)
		}
		incompat := be.Uint64(b[72:])
		if incompat&(1<<2) != 0 {
			return unsupported("an external data file")
		}
		if incompat&(1<<4) != 0 {
			return unsupported("extended L2 entries")
		}
		if incompat&^uint64(1|1<<3) != 0 {
			return unsupported(fmt.Sprintf("incompatible features %#x", incompat))
		}
		if incompat&(1<<3) != 0 && len(b) > 104 && be.Uint32(b[100:]) > 104 && b[104] == 1 {
			h.zstdClusters = true
		}
	}
	l2Entries := uint64(1) << (h.clusterBits - 3)
	clusters := (h.size + 1<<h.clusterBits - 1) >> h.clusterBits
	if need := (clusters + l2Entries - 1) / l2Entries; uint64(h.l1Size) < need {
		return qcow2Header{}, fmt.Errorf("qcow2 header: L1 table of %d entries for %d clusters: %w", h.l1Size, clusters, ErrCorruptSource)
	}
	return h, nil
}

// guest cluster states
const (
	gUnknown = iota // its L2 table has not been read
	gZero
	gData
	gCompressed
)

// qcow2Reader turns a qcow2 file read front to back into the raw virtual
// disk, read front to back. It learns the L1 table, refcount table and L2
// tables as they pass (qemu-img convert writes them before the data they
// map) and emits guest clusters in order: unallocated and zero clusters as
// zeros, data clusters from the stream. Clusters that arrive before they
// can be placed (before their L2 table, or ahead of earlier guest
// clusters) are buffered up to maxQcow2Buffer; beyond that it fails with
// ErrUnsupportedFormat, suggesting a raw image.
type qcow2Reader struct {
	r   io.Reader
	h   qcow2Header
	log *slog.Logger
	cs  int64 // cluster size

	pos      int64 // host offset of the next cluster to read
	eof      bool
	l1       []uint64
	l1Buf    []byte
	l2Left   map[int64]int   // host offset of an unread L2 table → L1 index
	meta     map[int64]bool  // refcount blocks
	refBuf   []byte          // refcount table being read
	host     map[int64][]int // host cluster offset → guest clusters it holds
	comp     map[int64][]compExt
	state    []uint8
	pending  map[int][]byte   // guest cluster → data, waiting for its turn
	unknown  map[int64][]byte // host cluster → bytes not yet placed
	buffered int
	win      []byte         // the last clusters read (up to 3), for compressed data
	compHost map[int64]bool // host clusters holding compressed data

	next    int    // next guest cluster to emit
	out     []byte // rest of the cluster being emitted
	outZero int64  // zero bytes left to emit
	done    int64  // guest bytes emitted
}

// compExt is a compressed guest cluster ending in a host cluster.
type compExt struct {
	guest     int
	off, size int64
}

func newQcow2Reader(r io.Reader, log *slog.Logger) (*qcow2Reader, error) {
	q := &qcow2Reader{r: r, log: log}
	return q, nil
}

func (q *qcow2Reader) init(first []byte) error {
	h, err := parseQcow2Header(first)
	if err != nil {
		return err
	}
	q.h = h
	q.cs = 1 << h.clusterBits
	n := (int64(h.size) + q.cs - 1) / q.cs
	q.state = make([]uint8, n)
	q.l2Left, q.meta, q.host = map[int64]int{}, map[int64]bool{}, map[int64][]int{}
	q.comp, q.pending, q.unknown = map[int64][]compExt{}, map[int][]byte{}, map[int64][]byte{}
	q.compHost = map[int64]bool{}
	q.log.Debug("qcow2 stream", "virtual_size", h.size, "cluster_size", q.cs, "l1_size", h.l1Size, "version", h.version)
	return nil
}

func (q *qcow2Reader) Read(p []byte) (int, error) {
	for {
		if q.outZero > 0 {
			n := int(min(int64(len(p)), q.outZero))
			clear(p[:n])
			q.outZero -= int64(n)
			q.done += int64(n)
			return n, nil
		}
		if len(q.out) > 0 {
			n := copy(p, q.out)
			q.out = q.out[n:]
			q.done += int64(n)
			return n, nil
		}
		if q.state == nil {
			if err := q.step(); err != nil {
				return 0, err
			}
			continue
		}
		if q.next >= len(q.state) {
			return 0, io.EOF
		}
		clen := min(q.cs, int64(q.h.size)-int64(q.next)*q.cs)
		switch q.state[q.next] {
		case gZero:
			// Emit a run of zero clusters at once.
			j := q.next
			var n int64
			for j < len(q.state) && q.state[j] == gZero {
				n += min(q.cs, int64(q.h.size)-int64(j)*q.cs)
				j++
			}
			q.next, q.outZero = j, n
			continue
		case gData, gCompressed:
			if d, ok := q.pending[q.next]; ok {
				delete(q.pending, q.next)
				q.buffered -= len(d)
				q.out = d[:clen]
				q.next++
				continue
			}
		}
		if err := q.step(); err != nil {
			return 0, err
		}
	}
}

// step reads and classifies the next cluster of the file.
func (q *qcow2Reader) step() error {
	if q.eof {
		if q.state == nil {
			return fmt.Errorf("qcow2 stream ended in its header: %w", ErrCorruptSource)
		}
		return fmt.Errorf("qcow2 stream ended before guest offset %d was mapped: %w", int64(q.next)*q.cs, ErrCorruptSource)
	}
	size := q.cs
	if q.state == nil {
		size = 512 // cluster size unknown yet: read the header sector
	}
	buf := make([]byte, size)
	n, err := io.ReadFull(q.r, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		q.eof = true
		if n == 0 {
			return q.step()
		}
	case err != nil:
		return err
	}
	buf = buf[:n]
	off := q.pos
	if q.state == nil {
		if err := q.init(buf); err != nil {
			return err
		}
		// Skip the rest of the header cluster.
		if _, err := io.CopyN(io.Discard, q.r, q.cs-int64(n)); err != nil && !q.eof {
			return fmt.Errorf("qcow2 header cluster: %w: %w", ErrCorruptSource, err)
		}
		q.pos = q.cs
		return nil
	}
	q.pos += int64(n)
	if len(q.comp) > 0 {
		q.win = append(q.win, buf...)
		if k := len(q.win) - 3*int(q.cs); k > 0 {
			q.win = q.win[k:]
		}
	} else {
		q.win = q.win[:0]
	}
	return q.place(off, buf)
}

// place handles the cluster at host offset off.
func (q *qcow2Reader) place(off int64, buf []byte) error {
	h := q.h
	switch {
	case off >= int64(h.l1Offset) && off < int64(h.l1Offset)+int64(h.l1Size)*8 && q.l1 == nil:
		q.l1Buf = append(q.l1Buf, buf...)
		if int64(len(q.l1Buf)) >= int64(h.l1Size)*8 {
			return q.readL1()
		}
		return nil
	case off >= int64(h.refTableOffset) && off < int64(h.refTableOffset+h.refTableBytes):
		q.refBuf = append(q.refBuf, buf...)
		for i := 0; i+8 <= len(q.refBuf); i += 8 {
			if e := int64(binary.BigEndian.Uint64(q.refBuf[i:]) & qcowOffsetMask); e != 0 {
				q.meta[e] = true
				q.drop(e)
			}
		}
		return nil
	case q.meta[off]:
		return nil
	}
	if idx, ok := q.l2Left[off]; ok {
		delete(q.l2Left, off)
		return q.readL2(idx, buf)
	}
	if err := q.placeData(off, buf); err != nil {
		return err
	}
	if exts, ok := q.comp[off]; ok {
		delete(q.comp, off)
		for _, e := range exts {
			if err := q.inflate(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeData stores a data cluster for the guest clusters it holds, or
// buffers it while L1 or L2 tables that may map it are still to come.
func (q *qcow2Reader) placeData(off int64, buf []byte) error {
	if gs, ok := q.host[off]; ok {
		delete(q.host, off)
		for i, g := range gs {
			d := buf
			if i > 0 {
				d = bytes.Clone(buf)
			}
			if len(d) < int(q.cs) {
				d = append(d, make([]byte, int(q.cs)-len(d))...)
			}
			if err := q.hold(len(d)); err != nil {
				return err
			}
			q.pending[g] = d
		}
		return nil
	}
	if q.compHost[off] {
		return nil // compressed data, taken from q.win
	}
	if q.l1 != nil && len(q.l2Left) == 0 {
		return nil // unreferenced: free space or metadata
	}
	if err := q.hold(len(buf)); err != nil {
		return err
	}
	q.unknown[off] = buf
	return nil
}

func (q *qcow2Reader) hold(n int) error {
	q.buffered += n
	if q.buffered > maxQcow2Buffer {
		return fmt.Errorf("qcow2 image needs more than %d MiB of buffering to stream at host offset %d (clusters out of guest order or before their tables); convert it with qemu-img convert -O raw (then compress): %w",
			maxQcow2Buffer>>20, q.pos, ErrUnsupportedFormat)
	}
	return nil
}

func (q *qcow2Reader) drop(off int64) {
	if b, ok := q.unknown[off]; ok {
		delete(q.unknown, off)
		q.buffered -= len(b)
	}
}

func (q *qcow2Reader) readL1() error {
	n := int(q.h.l1Size)
	l2n := int(q.cs / 8)
	q.l1 = make([]uint64, n)
	for i := range n {
		e := binary.BigEndian.Uint64(q.l1Buf[8*i:]) & qcowOffsetMask
		q.l1[i] = e
		first := i * l2n
		if first >= len(q.state) {
			continue
		}
		if e == 0 {
			for g := first; g < min(first+l2n, len(q.state)); g++ {
				q.state[g] = gZero
			}
			continue
		}
		if int64(e) < q.pos {
			if b, ok := q.unknown[int64(e)]; ok {
				q.drop(int64(e))
				if err := q.readL2(i, b); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("qcow2 L2 table at %d comes before the L1 table and was not kept: %w", e, ErrUnsupportedFormat)
		}
		q.l2Left[int64(e)] = i
	}
	q.l1Buf = nil
	return q.sweep()
}

func (q *qcow2Reader) readL2(idx int, buf []byte) error {
	l2n := int(q.cs / 8)
	cbits := 62 - (q.h.clusterBits - 8)
	for j := 0; j < l2n && 8*j+8 <= len(buf); j++ {
		g := idx*l2n + j
		if g >= len(q.state) {
			break
		}
		e := binary.BigEndian.Uint64(buf[8*j:])
		switch {
		case e&qcowCompressed != 0:
			if q.h.zstdClusters {
				return fmt.Errorf("qcow2 image with zstd-compressed clusters cannot be streamed; convert it with qemu-img convert -O raw: %w", ErrUnsupportedFormat)
			}
			hostOff := int64(e & (1<<cbits - 1))
			sectors := int64(e>>cbits) & (1<<(62-cbits) - 1)
			size := (sectors+1)*512 - hostOff%512
			end := hostOff + size
			// Compressed data may run past the end of the file by the
			// sector rounding; it is complete once its last cluster passed.
			last := (end - 1) / q.cs * q.cs
			if hostOff < q.pos {
				return fmt.Errorf("qcow2 compressed cluster at %d comes before its L2 table: %w", hostOff, ErrUnsupportedFormat)
			}
			q.comp[last] = append(q.comp[last], compExt{guest: g, off: hostOff, size: size})
			for c := hostOff / q.cs * q.cs; c <= last; c += q.cs {
				q.compHost[c] = true
			}
			q.state[g] = gCompressed
		case e&qcowZeroFlag != 0 || e&qcowOffsetMask == 0:
			q.state[g] = gZero
		default:
			off := int64(e & qcowOffsetMask)
			q.state[g] = gData
			if b, ok := q.unknown[off]; ok {
				q.drop(off)
				if err := q.hold(len(b)); err != nil {
					return err
				}
				q.pending[g] = append(b, make([]byte, max(0, int(q.cs)-len(b)))...)
				continue
			}
			if off < q.pos {
				return fmt.Errorf("qcow2 data cluster at %d for guest offset %d came before its L2 table and was not kept: %w", off, int64(g)*q.cs, ErrUnsupportedFormat)
			}
			q.host[off] = append(q.host[off], g)
		}
	}
	if len(q.l2Left) == 0 {
		return q.sweep()
	}
	return nil
}

// sweep drops buffered clusters once every table that could map them has
// been read.
func (q *qcow2Reader) sweep() error {
	if q.l1 == nil || len(q.l2Left) > 0 {
		return nil
	}
	for off := range q.unknown {
		q.drop(off)
	}
	return nil
}

// inflate decompresses a compressed cluster whose bytes end in the current
// cluster (and may start in the previous one).
func (q *qcow2Reader) inflate(e compExt) error {
	start := q.pos - int64(len(q.win))
	if e.off < start {
		return fmt.Errorf("qcow2 compressed cluster at %d spans more than three clusters: %w", e.off, ErrUnsupportedFormat)
	}
	src := q.win
	lo := e.off - start
	hi := min(lo+e.size, int64(len(src)))
	fr := flate.NewReader(bytes.NewReader(src[lo:hi]))
	out := make([]byte, q.cs)
	n, err := io.ReadFull(fr, out)
	if err != nil && !(errors.Is(err, io.ErrUnexpectedEOF) && int64(e.guest+1)*q.cs > int64(q.h.size) && n > 0) {
		return fmt.Errorf("qcow2 inflate cluster at host offset %d: %w: %w", e.off, ErrCorruptSource, err)
	}
	if err := q.hold(len(out)); err != nil {
		return err
	}
	q.pending[e.guest] = out
	return nil
}
