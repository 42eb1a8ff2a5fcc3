package image

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/booty-dev/booty/internal/testenv"
)

// bmapFor makes img sparse on disk (cp --sparse=always) and runs the real
// bmaptool create on it.
func bmapFor(t *testing.T, img []byte) string {
	t.Helper()
	testenv.NeedTools(t, "bmaptool")
	dense := writeFile(t, "dense.img", img)
	sparse := filepath.Join(t.TempDir(), "sparse.img")
	run(t, "cp", "--sparse=always", dense, sparse)
	return string(run(t, "bmaptool", "create", sparse))
}

// bmapV13 renders a format 1.3 bmap (SHA-1 everywhere) for img with
// blocks of 4096, mapping every block that is not all zeros.
func bmapV13(img []byte) string {
	const bs = 4096
	var ranges strings.Builder
	var mapped int
	blocks := (len(img) + bs - 1) / bs
	for i := 0; i < blocks; {
		if isZero(img[i*bs : min((i+1)*bs, len(img))]) {
			i++
			continue
		}
		j := i
		for j+1 < blocks && !isZero(img[(j+1)*bs:min((j+2)*bs, len(img))]) {
			j++
		}
		s := sha1.Sum(img[i*bs : min((j+1)*bs, len(img))])
		fmt.Fprintf(&ranges, "    <Range sha1=\"%x\"> %d-%d </Range>\n", s, i, j)
		mapped += j - i + 1
		i = j + 1
	}
	zero := strings.Repeat("0", 40)
	doc := fmt.Sprintf("<?xml version=\"1.0\" ?>\n<bmap version=\"1.3\">\n<ImageSize> %d </ImageSize>\n<BlockSize> %d </BlockSize>\n"+
		"<BlocksCount> %d </BlocksCount>\n<MappedBlocksCount> %d </MappedBlocksCount>\n<BmapFileSHA1> %s </BmapFileSHA1>\n<BlockMap>\n%s</BlockMap>\n</bmap>\n",
		len(img), bs, blocks, mapped, zero, ranges.String())
	s := sha1.Sum([]byte(doc))
	return strings.Replace(doc, zero, hex.EncodeToString(s[:]), 1)
}

func TestWriteBmap(t *testing.T) {
	img := gptImage(t, 24*mib, false, 40)
	v2 := bmapFor(t, img)
	if !strings.Contains(v2, `version="2.0"`) || !strings.Contains(v2, "sha256") {
		t.Fatalf("bmaptool did not write a 2.0 sha256 bmap:\n%s", v2)
	}
	zst := compress(t, FormatZstd, img)
	// A mapped block changed after the bmap was made: data at 9 MiB is in
	// the first 4 KiB of a 1.5 MiB stride of gptImage's sparse layout.
	bad := bytes.Clone(img)
	bad[9*mib+100] ^= 0xff
	// Unmapped junk: the bmap says the range holds nothing, so it would
	// not be written, and the disk would differ from the verified image.
	junk := bytes.Clone(img)
	copy(junk[20*mib+8192:], "junk in an unmapped range")

	tests := []struct {
		name    string
		src     []byte
		bmap    string
		fresh   bool
		want    []byte // target content, nil: failure
		wantErr error
		inMsg   string
	}{
		{"2.0 sha256 from bmaptool", zst, v2, false, img, nil, ""},
		{"2.0 on a fresh target", zst, v2, true, img, nil, ""},
		{"1.3 sha1", img, bmapV13(img), false, img, nil, ""},
		{"unmapped junk is refused", junk, v2, true, nil, ErrChecksumMismatch, fmt.Sprintf("byte %d of the image is not zero but the bmap leaves it unmapped", 20*mib+8192)},
		{"range mismatch", compress(t, FormatGzip, bad), v2, false, nil, ErrChecksumMismatch, "bmap range"},
		{"bmap file corrupt", zst, strings.Replace(v2, "<BlockSize> 4096", "<BlockSize> 4096 ", 1), false, nil, ErrBadBmap, "corrupt"},
		{"image longer than the bmap", append(bytes.Clone(img), make([]byte, 4096)...), v2, false, nil, ErrBadBmap, "describes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := gptImage(t, 32*mib, true, 41)
			fill := byte(0xaa)
			if tt.fresh {
				fill = 0
			}
			mem := &memTarget{buf: bytes.Repeat([]byte{fill}, 32*mib)}
			copy(mem.buf, old[:mib])
			copy(mem.buf[31*mib:], old[31*mib:])
			_, err := Write(context.Background(), Options{
				Source: writeFile(t, "src", tt.src), Bmap: writeFile(t, "img.bmap", []byte(tt.bmap)), AllowUnverified: true,
				Target: "mem", TargetWriter: mem, FreshTarget: tt.fresh, ChunkSize: mib, Log: testLog(t),
			})
			if tt.want != nil {
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if !bytes.Equal(mem.buf[:len(img)], img) {
					t.Fatal("target does not hold the image")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.inMsg) {
				t.Fatalf("Write = %v, want %v mentioning %q", err, tt.wantErr, tt.inMsg)
			}
			t.Logf("error: %v", err)
			if errors.Is(err, ErrBadBmap) && tt.inMsg == "corrupt" {
				if len(mem.log) != 0 {
					t.Errorf("target touched although the bmap was refused: %v", mem.log[:1])
				}
				return
			}
			assertInvalidated(t, mem.buf, int64(len(img)))
		})
	}
}

func TestParseBmapErrors(t *testing.T) {
	img := make([]byte, 64<<10)
	copy(img, "data")
	good := bmapV13(img)
	// edit changes the document and signs it again, so only the edit
	// can make it bad.
	edit := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("%q not in the bmap", old)
		}
		doc := strings.Replace(good, old, new, 1)
		i := strings.Index(doc, "<BmapFileSHA1> ") + len("<BmapFileSHA1> ")
		doc = doc[:i] + strings.Repeat("0", 40) + doc[i+40:]
		s := sha1.Sum([]byte(doc))
		return doc[:i] + hex.EncodeToString(s[:]) + doc[i+40:]
	}
	if _, err := parseBmap([]byte(edit("<ImageSize> 65536", "<ImageSize>  65536"))); err != nil {
		t.Fatalf("re-signed bmap with a harmless edit: %v", err)
	}
	for name, doc := range map[string]string{
		"not xml":         "garbage",
		"version 3":       edit(`version="1.3"`, `version="3.0"`),
		"blocks count":    edit("<BlocksCount> 16 ", "<BlocksCount> 17 "),
		"mapped count":    edit("<MappedBlocksCount> 1 ", "<MappedBlocksCount> 2 "),
		"range past end":  edit("> 0-0 <", "> 0-16 <"),
		"file sha1 wrong": strings.Replace(good, "<ImageSize> 65536", "<ImageSize>  65536", 1),
	} {
		_, err := parseBmap([]byte(doc))
		if !errors.Is(err, ErrBadBmap) {
			t.Errorf("%s: parseBmap = %v, want ErrBadBmap", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := parseBmap([]byte(good)); err != nil {
		t.Errorf("good 1.3 bmap: %v", err)
	}
}

// A bmap that maps only the first 4 MiB of an 8 MiB image, with both
// checksums given and passing: the old writer zeroed the rest and exited 0,
// so the disk differed from the verified image from byte 4194304 on.
func TestWriteBmapUnmappedMustBeZero(t *testing.T) {
	img := make([]byte, 8*mib)
	fillData(rand.New(rand.NewPCG(5, 6)), img)
	bm := fmt.Sprintf(`<?xml version="1.0" ?>
<bmap version="1.2">
    <ImageSize> %d </ImageSize>
    <BlockSize> 4096 </BlockSize>
    <BlocksCount> %d </BlocksCount>
    <MappedBlocksCount> 1024 </MappedBlocksCount>
    <BlockMap>
        <Range> 0-1023 </Range>
    </BlockMap>
</bmap>
`, len(img), len(img)/4096)
	bmapFile := writeFile(t, "img.bmap", []byte(bm))
	src := writeFile(t, "img", img)
	dst := filepath.Join(t.TempDir(), "target")
	_, err := Write(context.Background(), Options{Source: src, Checksum: sha(img), ImageChecksum: sha(img), Bmap: bmapFile, Target: dst, Log: testLog(t)})
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "byte 4194304 ") {
		t.Fatalf("Write = %v, want a mismatch naming byte 4194304", err)
	}

	// The bmap file pinned by its checksum: another file is refused before writing.
	sum := sha256.Sum256([]byte(bm))
	pinned := "sha256:" + hex.EncodeToString(sum[:])
	other := writeFile(t, "other.bmap", []byte(strings.Replace(bm, "0-1023", "0-2047", 1)))
	mem := newMemTarget(16*mib, 0xee)
	_, err = Write(context.Background(), Options{Source: src, ImageChecksum: sha(img), Bmap: other, BmapChecksum: pinned, Target: "mem", TargetWriter: mem, Log: testLog(t)})
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "verify bmap") {
		t.Fatalf("Write with another bmap = %v, want its checksum refused", err)
	}
	if len(mem.log) != 0 {
		t.Errorf("target touched although the bmap was refused: %v", mem.log[:1])
	}
}
