package image

import (
	"bytes"
	"errors"
	"testing"
)

func TestDetectFormat(t *testing.T) {
	tests := []struct {
		name string
		head []byte
		want Format
	}{
		{"empty", nil, FormatRaw},
		{"one byte of gzip magic", []byte{0x1f}, FormatRaw},
		{"gzip", []byte{0x1f, 0x8b, 0x08, 0x00}, FormatGzip},
		{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd, 0x04}, FormatZstd},
		{"zstd magic cut short", []byte{0x28, 0xb5, 0x2f}, FormatRaw},
		{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0x00, 0x00}, FormatXz},
		{"xz without NUL", []byte{0xfd, '7', 'z', 'X', 'Z', 0x01}, FormatRaw},
		{"bzip2", []byte("BZh91AY&SY"), FormatBzip2},
		{"bzip2 bad level", []byte("BZh0"), FormatRaw},
		{"bzip2 too short", []byte("BZh"), FormatRaw},
		{"lz4 frame", []byte{0x04, 0x22, 0x4d, 0x18, 0x64}, FormatLz4},
		{"lz4 legacy", []byte{0x02, 0x21, 0x4c, 0x18}, FormatLz4},
		{"qcow2", []byte{'Q', 'F', 'I', 0xfb, 0, 0, 0, 3}, FormatQcow2},
		{"vmdk", []byte("KDMV\x01\x00"), FormatVMDK},
		{"vhdx", []byte("vhdxfile"), FormatVHDX},
		{"MBR boot code", append([]byte{0xeb, 0x63, 0x90}, make([]byte, 29)...), FormatRaw},
		{"zeros", make([]byte, 32), FormatRaw},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectFormat(tt.head); got != tt.want {
				t.Errorf("DetectFormat(% x) = %s, want %s", tt.head, got, tt.want)
			}
		})
	}
}

// TestDetectFormatRealTools checks detection on the output of the real
// compressors, so the table above matches what the tools write.
func TestDetectFormatRealTools(t *testing.T) {
	data := bytes.Repeat([]byte("booty image "), 1000)
	for _, f := range []Format{FormatGzip, FormatZstd, FormatXz, FormatBzip2, FormatLz4} {
		if got := DetectFormat(compress(t, f, data)); got != f {
			t.Errorf("DetectFormat(%s output) = %s", f, got)
		}
	}
}

func TestSizeHints(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 300000) // 4.8 MB
	n := int64(len(data))
	tests := []struct {
		name string
		f    Format
		comp []byte
		want int64
	}{
		{"zstd frame content size", FormatZstd, compress(t, FormatZstd, data), n},
		{"lz4 with --content-size", FormatLz4, compress(t, FormatLz4, data, "--content-size"), n},
		{"lz4 without content size", FormatLz4, compress(t, FormatLz4, data, "--no-content-size"), 0},
		{"gzip ISIZE", FormatGzip, compress(t, FormatGzip, data), n},
		{"xz index", FormatXz, compress(t, FormatXz, data), n},
		{"xz multi-block index", FormatXz, compress(t, FormatXz, data, "--block-size=1MiB"), n},
		{"bzip2 declares nothing", FormatBzip2, compress(t, FormatBzip2, data), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sizeHintFromHeader(tt.f, tt.comp[:min(len(tt.comp), magicLen)])
			if got == 0 {
				got = sizeHintFromTail(tt.f, tt.comp[max(0, int64(len(tt.comp))-tailLen(tt.f)):])
			}
			if got != tt.want {
				t.Errorf("size hint = %d, want %d", got, tt.want)
			}
		})
	}
	t.Run("garbage tails give no hint", func(t *testing.T) {
		if got := sizeHintFromTail(FormatXz, []byte("not an xz footer at all")); got != 0 {
			t.Errorf("xz hint of garbage = %d", got)
		}
		if got := sizeHintFromTail(FormatXz, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 'Y', 'Z'}); got != 0 {
			t.Errorf("xz hint with index outside tail = %d", got)
		}
		if got := sizeHintFromHeader(FormatZstd, []byte{0x28, 0xb5}); got != 0 {
			t.Errorf("zstd hint of short header = %d", got)
		}
	})
}

func TestParseChecksum(t *testing.T) {
	hex64 := "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	tests := []struct {
		in      string
		algo    string
		wantErr bool
	}{
		{"", "", false},
		{"sha256:" + hex64, "sha256", false},
		{"SHA256:" + bytes.NewBufferString(hex64).String(), "sha256", false},
		{"sha512:" + hex64 + hex64, "sha512", false},
		{"sha256:" + hex64[:60], "", true},
		{"sha512:" + hex64, "", true},
		{"md5:d41d8cd98f00b204e9800998ecf8427e", "", true},
		{hex64, "", true},
		{"sha256:" + hex64[:63] + "g", "", true},
	}
	for _, tt := range tests {
		c, err := parseChecksum(tt.in)
		if (err != nil) != tt.wantErr || c.algo != tt.algo {
			t.Errorf("parseChecksum(%q) = %q, %v; want algo %q, error %v", tt.in, c.algo, err, tt.algo, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrBadChecksum) {
			t.Errorf("parseChecksum(%q) error %v is not ErrBadChecksum", tt.in, err)
		}
	}
}
