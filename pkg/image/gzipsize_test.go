package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestGzipLowerBound(t *testing.T) {
	hdr := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}
	named := append(append([]byte{0x1f, 0x8b, 8, 0x08, 0, 0, 0, 0, 0, 0xff}, "disk.img"...), 0)
	tests := []struct {
		name              string
		isize, compressed int64
		peek              []byte
		want              int64
	}{
		{"small stream: ISIZE is the size", 10 << 20, 3 << 20, hdr, 10 << 20},
		{"5 GiB stream that wrapped once", 1 << 30, 5 << 30, hdr, 1<<30 + 1<<32},
		{"a name in the header", 1 << 30, 5 << 30, named, 1<<30 + 1<<32},
		{"just under 4 GiB compressed, ISIZE small", 100, 4<<30 - 1<<20, hdr, 100 + 1<<32},
		{"header not measurable", 1 << 30, 5 << 30, hdr[:5], 1 << 30},
		{"compressed size unknown", 1 << 30, -1, hdr, 1 << 30},
	}
	for _, tt := range tests {
		if got := gzipLowerBound(tt.isize, tt.compressed, tt.peek); got != tt.want {
			t.Errorf("%s: gzipLowerBound(%d, %d) = %d, want %d", tt.name, tt.isize, tt.compressed, got, tt.want)
		}
	}
}

// A gzip file of more than 4 GiB whose ISIZE wrapped to a small number is
// refused before writing when the target cannot hold what the compressed
// length proves: the old check trusted ISIZE and wrote into the disk.
func TestWriteGzipOver4GiBRefusedBeforeWriting(t *testing.T) {
	var head bytes.Buffer
	zw := gzip.NewWriter(&head)
	zw.Write(bytes.Repeat([]byte("booty"), 1000))
	zw.Flush() // a member without its end: the rest of the file follows
	src := filepath.Join(t.TempDir(), "big.img.gz")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	const size = 4<<30 + 512<<20 // 4.5 GiB, sparse
	if _, err := f.Write(head.Bytes()); err != nil {
		t.Fatal(err)
	}
	var tail [8]byte
	binary.LittleEndian.PutUint32(tail[4:], 1<<20) // ISIZE: 1 MiB, modulo 4 GiB
	if _, err := f.WriteAt(tail[:], size-8); err != nil {
		t.Fatal(err)
	}
	f.Close()
	old := gptImage(t, 64*mib, false, 97)
	dst := writeFile(t, "target.img", old)
	_, err = Write(context.Background(), Options{
		Source: src, ImageChecksum: "sha256:" + string(bytes.Repeat([]byte("0"), 64)), Target: dst, TargetSize: int64(len(old)), Log: testLog(t),
	})
	if !errors.Is(err, ErrTargetTooSmall) {
		t.Fatalf("Write = %v, want ErrTargetTooSmall before writing", err)
	}
	t.Logf("error: %v", err)
	if !bytes.Equal(readFile(t, dst), old) {
		t.Fatal("target changed although the compressed length proves the image cannot fit")
	}
}
