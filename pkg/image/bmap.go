package image

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/redact"
)

// maxBmapSize bounds the bmap file Write reads.
const maxBmapSize = 64 << 20

// bmap is a parsed bmaptool block map (formats 1.0 to 2.0) with the
// state of its streaming verification.
type bmap struct {
	Version      string
	ImageSize    int64
	BlockSize    int64
	BlocksCount  int64
	MappedBlocks int64
	ChecksumType string // "" for formats before 1.3 (no checksums)
	Ranges       []bmapRange

	newHash func() hash.Hash
	// verification state
	ri   int       // index of the range being hashed
	h    hash.Hash // hash of ranges[ri] so far, nil when not inside
	seen int64     // image bytes checked so far
}

// bmapRange is an inclusive block range with the checksum of its bytes.
type bmapRange struct {
	First, Last int64
	Sum         string // lowercase hex, "" when absent
}

func (r bmapRange) String() string {
	if r.First == r.Last {
		return strconv.FormatInt(r.First, 10)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// firstNonZero returns the index of the first non-zero byte of b, or -1.
func firstNonZero(b []byte) int {
	if isZero(b) {
		return -1
	}
	return slices.IndexFunc(b, func(c byte) bool { return c != 0 })
}

// loadBmap reads o.Bmap (URL or path), checks it against o.BmapChecksum
// when given, and parses it with parseBmap.
func loadBmap(ctx context.Context, o *Options) (*bmap, error) {
	data, err := fetchSmall(ctx, o, o.Bmap, maxBmapSize)
	if err != nil {
		return nil, fmt.Errorf("read bmap %s: %w: %w", redact.URL(o.Bmap), ErrBadBmap, err)
	}
	if o.BmapChecksum != "" {
		want, err := parseChecksum(o.BmapChecksum)
		if err != nil {
			return nil, fmt.Errorf("bmap checksum: %w", err)
		}
		h := newHash(want.algo)
		h.Write(data)
		if got := h.Sum(nil); !bytes.Equal(got, want.sum) {
			return nil, fmt.Errorf("verify bmap %s: it has %s:%x, want %s: %w", redact.URL(o.Bmap), want.algo, got, o.BmapChecksum, ErrChecksumMismatch)
		}
	}
	b, err := parseBmap(data)
	if err != nil {
		return nil, fmt.Errorf("parse bmap %s: %w", redact.URL(o.Bmap), err)
	}
	o.Log.Info("bmap loaded", "bmap", redact.URL(o.Bmap), "version", b.Version, "image_size", b.ImageSize,
		"mapped_bytes", b.MappedBlocks*b.BlockSize, "ranges", len(b.Ranges), "checksum", b.ChecksumType)
	return b, nil
}

// fetchSmall reads a whole small file from an http(s) or file URL or a
// path, at most limit bytes. An http(s) fetch is checked against
// o.AllowHTTP, bounded by o.IdleTimeout on every read and retried as
// fetch does.
func fetchSmall(ctx context.Context, o *Options, src string, limit int64) ([]byte, error) {
	u, err := url.Parse(src)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if err := httpfetch.CheckURL(src, o.AllowHTTP); err != nil {
			return nil, err
		}
		c, err := httpClient(o)
		if err != nil {
			return nil, err
		}
		resp, err := o.fetch(ctx, c, "fetch "+redact.URL(src), httpfetch.Request{URL: src, Limit: limit}, nil)
		if err != nil {
			return nil, err
		}
		return resp.Body, nil
	}
	path := src
	if err == nil && u.Scheme == "file" {
		path = u.Path
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, limit)
}

// fetch is httpfetch.Fetch with o's retry bounds (a small document starts
// over at each attempt: no progress rule) and o.IdleTimeout on every read.
func (o *Options) fetch(ctx context.Context, c *http.Client, op string, r httpfetch.Request, accept func(code int) bool) (*httpfetch.Response, error) {
	r.Idle = o.IdleTimeout
	return httpfetch.Fetch(ctx, c, o.retries(false), o.Log, op, r, accept)
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

type bmapXML struct {
	XMLName           xml.Name `xml:"bmap"`
	Version           string   `xml:"version,attr"`
	ImageSize         string   `xml:"ImageSize"`
	BlockSize         string   `xml:"BlockSize"`
	BlocksCount       string   `xml:"BlocksCount"`
	MappedBlocksCount string   `xml:"MappedBlocksCount"`
	ChecksumType      string   `xml:"ChecksumType"`
	BmapFileChecksum  string   `xml:"BmapFileChecksum"`
	BmapFileSHA1      string   `xml:"BmapFileSHA1"`
	Ranges            []struct {
		Text   string `xml:",chardata"`
		Chksum string `xml:"chksum,attr"`
		SHA1   string `xml:"sha1,attr"`
	} `xml:"BlockMap>Range"`
}

// parseBmap parses and checks a bmap file: formats 1.0–1.3 (SHA-1 range
// checksums in "sha1" attributes and BmapFileSHA1 from 1.3 on), 1.4 and 2.0
// (ChecksumType sha1, sha256 or sha512, "chksum" attributes,
// BmapFileChecksum). The file's own checksum is verified as bmaptool does:
// over the file with the checksum's text replaced by "0"s. Ranges must be
// sorted, disjoint, inside BlocksCount and add up to MappedBlocksCount.
// Every error wraps ErrBadBmap.
func parseBmap(data []byte) (*bmap, error) {
	var x bmapXML
	if err := xml.Unmarshal(data, &x); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadBmap, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadBmap}, a...)...)
	}
	majS, minS, _ := strings.Cut(strings.TrimSpace(x.Version), ".")
	major, err1 := strconv.Atoi(majS)
	minor, err2 := strconv.Atoi(minS)
	if err1 != nil || err2 != nil {
		return nil, bad("version %q is not MAJOR.MINOR", x.Version)
	}
	if major > 2 || major < 1 {
		return nil, bad("format version %s not supported (1.x, 2.0)", x.Version)
	}
	b := &bmap{Version: x.Version}
	num := func(name, s string) (int64, error) {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || v < 0 {
			return 0, bad("%s %q is not a number", name, strings.TrimSpace(s))
		}
		return v, nil
	}
	var err error
	if b.ImageSize, err = num("ImageSize", x.ImageSize); err != nil {
		return nil, err
	}
	if b.BlockSize, err = num("BlockSize", x.BlockSize); err != nil {
		return nil, err
	}
	if b.BlocksCount, err = num("BlocksCount", x.BlocksCount); err != nil {
		return nil, err
	}
	if b.MappedBlocks, err = num("MappedBlocksCount", x.MappedBlocksCount); err != nil {
		return nil, err
	}
	if b.BlockSize <= 0 || b.BlockSize%512 != 0 {
		return nil, bad("BlockSize %d is not a positive multiple of 512", b.BlockSize)
	}
	if want := (b.ImageSize + b.BlockSize - 1) / b.BlockSize; want != b.BlocksCount {
		return nil, bad("BlocksCount %d does not match ImageSize %d in blocks of %d", b.BlocksCount, b.ImageSize, b.BlockSize)
	}

	var fileSum string
	useSHA1Attr := false
	switch {
	case major == 2 || (major == 1 && minor >= 4):
		b.ChecksumType = strings.ToLower(strings.TrimSpace(x.ChecksumType))
		fileSum = x.BmapFileChecksum
	case minor == 3:
		b.ChecksumType, fileSum, useSHA1Attr = "sha1", x.BmapFileSHA1, true
	default:
		useSHA1Attr = true // 1.0–1.2: no file checksum; ranges may carry sha1
	}
	switch b.ChecksumType {
	case "sha256":
		b.newHash = sha256.New
	case "sha1":
		b.newHash = sha1.New
	case "sha512":
		b.newHash = sha512.New
	case "":
		if major == 2 || minor >= 4 {
			return nil, bad("ChecksumType missing")
		}
		b.newHash = sha1.New
	default:
		return nil, bad("ChecksumType %q not supported (sha1, sha256, sha512)", b.ChecksumType)
	}
	if b.ChecksumType != "" {
		fileSum = strings.ToLower(strings.TrimSpace(fileSum))
		if fileSum == "" {
			return nil, bad("no bmap file checksum in format %s", x.Version)
		}
		i := bytes.Index(bytes.ToLower(data), []byte(fileSum))
		if i < 0 {
			return nil, bad("bmap file checksum text not found")
		}
		zeroed := bytes.Clone(data)
		copy(zeroed[i:], bytes.Repeat([]byte("0"), len(fileSum)))
		h := b.newHash()
		h.Write(zeroed)
		if got := hex.EncodeToString(h.Sum(nil)); got != fileSum {
			return nil, bad("bmap file has %s %s, it names %s: the file is corrupt", b.ChecksumType, got, fileSum)
		}
	}

	var mapped int64
	for _, r := range x.Ranges {
		first, last, ok := strings.Cut(strings.TrimSpace(r.Text), "-")
		f, err := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
		if err != nil {
			return nil, bad("range %q", r.Text)
		}
		l := f
		if ok {
			if l, err = strconv.ParseInt(strings.TrimSpace(last), 10, 64); err != nil {
				return nil, bad("range %q", r.Text)
			}
		}
		sum := r.Chksum
		if useSHA1Attr {
			sum = r.SHA1
		}
		br := bmapRange{First: f, Last: l, Sum: strings.ToLower(strings.TrimSpace(sum))}
		if f < 0 || l < f || l >= b.BlocksCount {
			return nil, bad("range %s outside blocks 0-%d", br, b.BlocksCount-1)
		}
		if n := len(b.Ranges); n > 0 && b.Ranges[n-1].Last >= f {
			return nil, bad("range %s overlaps or precedes range %s", br, b.Ranges[n-1])
		}
		if br.Sum != "" && len(br.Sum) != 2*b.newHash().Size() {
			return nil, bad("range %s checksum %q is not %s", br, br.Sum, b.ChecksumType)
		}
		mapped += l - f + 1
		b.Ranges = append(b.Ranges, br)
	}
	if mapped != b.MappedBlocks {
		return nil, bad("ranges map %d blocks, MappedBlocksCount says %d", mapped, b.MappedBlocks)
	}
	return b, nil
}

// summed reports whether every range has a checksum, so that check
// verifies every byte of the image (unmapped ones must be zero).
func (b *bmap) summed() bool {
	for _, r := range b.Ranges {
		if r.Sum == "" {
			return false
		}
	}
	return true
}

// span returns the image bytes [start, end) of range r.
func (b *bmap) span(r bmapRange) (int64, int64) {
	return r.First * b.BlockSize, min((r.Last+1)*b.BlockSize, b.ImageSize)
}

// check hashes image bytes data at off (called in image order, without
// gaps) into the checksums of the ranges they fall in and fails with
// ErrChecksumMismatch, naming the range, when a completed range differs.
func (b *bmap) check(off int64, data []byte) error {
	end := off + int64(len(data))
	b.seen = end
	// Unmapped bytes are not written (the target reads zeros there): the
	// image must hold zeros there too, or the disk would differ from the
	// image that the checksums verified.
	if err := b.mapped(off, end, func(from, to int64, mapped bool) error {
		if mapped {
			return nil
		}
		if i := firstNonZero(data[from-off : to-off]); i >= 0 {
			return fmt.Errorf("byte %d of the image is not zero but the bmap leaves it unmapped (it would not be written): %w", from+int64(i), ErrChecksumMismatch)
		}
		return nil
	}); err != nil {
		return err
	}
	for b.ri < len(b.Ranges) {
		r := b.Ranges[b.ri]
		rs, re := b.span(r)
		if rs >= end {
			return nil
		}
		if r.Sum == "" {
			if re > end {
				return nil
			}
			b.ri++
			continue
		}
		if b.h == nil {
			b.h = b.newHash()
		}
		from, to := max(rs, off), min(re, end)
		b.h.Write(data[from-off : to-off])
		if re > end {
			return nil
		}
		got := hex.EncodeToString(b.h.Sum(nil))
		b.h = nil
		b.ri++
		if got != r.Sum {
			return fmt.Errorf("bmap range %s (bytes %d-%d) has %s %s, want %s: %w", r, rs, re-1, b.ChecksumType, got, r.Sum, ErrChecksumMismatch)
		}
	}
	return nil
}

// done checks that the image ended where the bmap says.
func (b *bmap) done() error {
	if b.seen != b.ImageSize {
		return fmt.Errorf("image is %d bytes, the bmap describes %d: %w", b.seen, b.ImageSize, ErrBadBmap)
	}
	return nil
}

// mapped calls fn for each part of [off, end) that is mapped and each
// that is not, in order.
func (b *bmap) mapped(off, end int64, fn func(from, to int64, mapped bool) error) error {
	i := sort.Search(len(b.Ranges), func(i int) bool {
		_, re := b.span(b.Ranges[i])
		return re > off
	})
	for off < end {
		if i >= len(b.Ranges) {
			return fn(off, end, false)
		}
		rs, re := b.span(b.Ranges[i])
		if rs > off {
			to := min(rs, end)
			if err := fn(off, to, false); err != nil {
				return err
			}
			off = to
			continue
		}
		to := min(re, end)
		if err := fn(off, to, true); err != nil {
			return err
		}
		off = to
		i++
	}
	return nil
}
