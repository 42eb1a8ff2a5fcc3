package bootloader

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/utf16text"
)

// unhex decodes hex written with spaces, newlines and "|" separators.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "\n", "", "\t", "", "|", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex in test: %v", err)
	}
	return b
}

// debianOption is a hard-drive entry as efibootmgr would create it for
// `-c -d /dev/sda -p 1 -L debian -l \EFI\debian\shimx64.efi`, laid out by
// hand from UEFI 2.10 sections 3.1.3 and 10.3.5.1/10.3.5.4:
//
//	attributes            01 00 00 00                 LOAD_OPTION_ACTIVE
//	FilePathListLength    62 00                       42 + 52 + 4 = 98
//	Description           "debian\0" UTF-16LE         14 bytes
//	HARDDRIVE node        04 01 2a00                  type media, subtype 1, length 42
//	  PartitionNumber     01000000
//	  PartitionStart      0008000000000000            LBA 2048
//	  PartitionSize       0000100000000000            0x100000 blocks (512 MiB)
//	  Signature           3a1c7b6f 4d2e 8f4b 9a1c 0d2e3f405162
//	                      = 6f7b1c3a-2e4d-4b8f-9a1c-0d2e3f405162, mixed endian
//	  MBRType             02 (GPT)   SignatureType 02 (GUID)
//	FILE_PATH node        04 04 3400                  length 4 + 24 UTF-16 units*2
//	  PathName            "\EFI\debian\shimx64.efi\0"
//	END_ENTIRE            7f ff 0400
const debianOptionHex = `
01000000 | 6200 |
6400 6500 6200 6900 6100 6e00 0000 |
0401 2a00 | 01000000 | 0008000000000000 | 0000100000000000 |
3a1c7b6f 4d2e 8f4b 9a1c 0d2e3f405162 | 02 | 02 |
0404 3400 |
5c00 4500 4600 4900 5c00 6400 6500 6200 6900 6100 6e00 5c00
7300 6800 6900 6d00 7800 3600 3400 2e00 6500 6600 6900 0000 |
7fff 0400`

var debianPart = PartitionInfo{Number: 1, StartLBA: 2048, SizeLBA: 0x100000, PartUUID: "6f7b1c3a-2e4d-4b8f-9a1c-0d2e3f405162"}

func debianLoadOption(t *testing.T) LoadOption {
	t.Helper()
	hd, err := hardDriveNode(debianPart)
	if err != nil {
		t.Fatal(err)
	}
	return LoadOption{
		Attributes:  LoadOptionActive,
		Description: "debian",
		FilePath:    DevicePath{hd, filePathNode(`\EFI\debian\shimx64.efi`)},
	}
}

func TestLoadOptionEncodeKnownBytes(t *testing.T) {
	want := unhex(t, debianOptionHex)
	got, err := debianLoadOption(t).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding differs\n got %x\nwant %x", got, want)
	}
}

func TestLoadOptionDecodeHardDrive(t *testing.T) {
	o, err := ParseLoadOption(unhex(t, debianOptionHex))
	if err != nil {
		t.Fatal(err)
	}
	if o.Description != "debian" || !o.Active() || len(o.OptionalData) != 0 {
		t.Errorf("got %+v", o)
	}
	p, ok := o.Partition()
	if !ok || p != debianPart {
		t.Errorf("Partition() = %+v, %v; want %+v", p, ok, debianPart)
	}
	if l, ok := o.Loader(); !ok || l != `\EFI\debian\shimx64.efi` {
		t.Errorf("Loader() = %q, %v", l, ok)
	}
	wantStr := `HD(1,GPT,6f7b1c3a-2e4d-4b8f-9a1c-0d2e3f405162,0x800,0x100000)/File(\EFI\debian\shimx64.efi)`
	if s := o.FilePath.String(); s != wantStr {
		t.Errorf("String() = %s\nwant %s", s, wantStr)
	}
	// Round trip back to the same bytes.
	b, err := o.MarshalBinary()
	if err != nil || !bytes.Equal(b, unhex(t, debianOptionHex)) {
		t.Errorf("round trip: %x, %v", b, err)
	}
}

// uiAppOptionHex is OVMF's Boot0000 as BmRegisterBootManagerMenu creates
// it: attributes LOAD_OPTION_CATEGORY_APP|HIDDEN|ACTIVE (0x109),
// description "UiApp", device path
// FvVol(7cb8bdc9-f8eb-4f34-aaea-3ee4af6516a1)/FvFile(462caa21-7614-4503-836e-8ab6f4662331)
// (MEDIA_PIWG_FW_VOL 04/07 and MEDIA_PIWG_FW_FILE 04/06, 20 bytes each),
// END; FilePathListLength 20+20+4 = 44. Written here by hand from the PI
// and UEFI specs, byte by byte.
const uiAppOptionHex = `
09010000 | 2c00 |
5500 6900 4100 7000 7000 0000 |
0407 1400 | c9bdb87c ebf8 344f aaea 3ee4af6516a1 |
0406 1400 | 21aa2c46 1476 0345 836e 8ab6f4662331 |
7fff 0400`

func TestLoadOptionDecodeFvFile(t *testing.T) {
	o, err := ParseLoadOption(unhex(t, uiAppOptionHex))
	if err != nil {
		t.Fatal(err)
	}
	if o.Description != "UiApp" || o.Attributes != LoadOptionCategoryApp|LoadOptionHidden|LoadOptionActive {
		t.Errorf("got %q attrs %#x", o.Description, o.Attributes)
	}
	want := "FvVol(7cb8bdc9-f8eb-4f34-aaea-3ee4af6516a1)/FvFile(462caa21-7614-4503-836e-8ab6f4662331)"
	if s := o.FilePath.String(); s != want {
		t.Errorf("String() = %s\nwant %s", s, want)
	}
	if _, ok := o.Partition(); ok {
		t.Error("Partition() found a hard drive in an FvFile entry")
	}
	if _, ok := o.Loader(); ok {
		t.Error("Loader() found a file path in an FvFile entry")
	}
}

func TestLoadOptionOptionalData(t *testing.T) {
	o := debianLoadOption(t)
	o.OptionalData = utf16text.EncodeLE(`\EFI\debian\grubx64.efi`)
	b, err := o.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseLoadOption(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.OptionalData, o.OptionalData) || got.FilePath.String() != o.FilePath.String() {
		t.Errorf("optional data round trip: %x", got.OptionalData)
	}
}

func TestParseLoadOptionErrors(t *testing.T) {
	good := unhex(t, debianOptionHex)
	badLen := bytes.Clone(good)
	badLen[4] = 0xff // FilePathListLength past the end
	badNode := bytes.Clone(good)
	badNode[6+14+2] = 0x02 // HARDDRIVE node length 2 < header
	tests := map[string][]byte{
		"short":              good[:5],
		"unterminated desc":  unhex(t, "01000000 0000 4100 4200"),
		"path list too long": badLen,
		"node length":        badNode,
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseLoadOption(b); !errors.Is(err, ErrBadLoadOption) {
				t.Errorf("err = %v, want ErrBadLoadOption", err)
			}
		})
	}
}

// TestHardDriveNodeGUID: the partition GUID goes into the node in the
// mixed-endian order (pkg/guid tests the conversion itself) and comes back in
// lower case; text that is not a GUID is a malformed load option.
func TestHardDriveNodeGUID(t *testing.T) {
	tests := []struct {
		in      string
		want    string // hex of the signature bytes in the node
		wantErr bool
	}{
		{in: "0FC63DAF-8483-4772-8E79-3D69D8477DE4", want: "af3dc60f83847247" + "8e793d69d8477de4"},
		{in: "{c12a7328-f81f-11d2-ba4b-00a0c93ec93b}", want: "28732ac11ff8d211ba4b00a0c93ec93b"},
		{in: "c12a7328f81f11d2ba4b00a0c93ec93b", wantErr: true},
		{in: "c12a7328-f81f-11d2-ba4b-00a0c93ec93z", wantErr: true},
	}
	for _, tt := range tests {
		n, err := hardDriveNode(PartitionInfo{Number: 1, StartLBA: 2048, SizeLBA: 8, PartUUID: tt.in})
		if tt.wantErr {
			if !errors.Is(err, ErrBadLoadOption) {
				t.Errorf("hardDriveNode(%q) = %v, want ErrBadLoadOption", tt.in, err)
			}
			continue
		}
		if err != nil || hex.EncodeToString(n.Data[20:36]) != tt.want {
			t.Errorf("hardDriveNode(%q) signature = %x, %v; want %s", tt.in, n.Data[20:36], err, tt.want)
		}
		norm := strings.ToLower(strings.Trim(tt.in, "{}"))
		if p, ok := n.HardDrive(); !ok || p.PartUUID != norm {
			t.Errorf("HardDrive() = %+v, %v; want PartUUID %s", p, ok, norm)
		}
	}
}

func TestFilePathNodeNormalises(t *testing.T) {
	for _, in := range []string{"EFI/debian/shimx64.efi", `\EFI\debian\shimx64.efi`, `/EFI/debian/shimx64.efi`} {
		if got := utf16text.Decode(filePathNode(in).Data, binary.LittleEndian); got != `\EFI\debian\shimx64.efi` {
			t.Errorf("FilePathNode(%q) = %q", in, got)
		}
	}
}
