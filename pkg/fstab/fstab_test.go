package fstab

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	data := []byte(`# /etc/fstab: static file system information.
UUID=aaaa-bbbb /               ext4    errors=remount-ro 0       1
PARTUUID=1234  /boot/efi/      vfat    umask=0077,nofail      0       1
/dev/vda3 /srv/my\040data xfs defaults 0 2
/swapfile none swap sw 0 0

LABEL=x
/dev/sdb1 /mnt
/dev/vda4 / btrfs subvol=@,compress=zstd 0 0
`)
	want := []Entry{
		{Spec: "UUID=aaaa-bbbb", File: "/", Type: "ext4", Options: []string{"errors=remount-ro"}},
		{Spec: "PARTUUID=1234", File: "/boot/efi", Type: "vfat", Options: []string{"umask=0077", "nofail"}},
		{Spec: "/dev/vda3", File: "/srv/my data", Type: "xfs", Options: []string{"defaults"}},
		{Spec: "/swapfile", File: "none", Type: "swap", Options: []string{"sw"}},
		{Spec: "/dev/sdb1", File: "/mnt"},
		{Spec: "/dev/vda4", File: "/", Type: "btrfs", Options: []string{"subvol=@", "compress=zstd"}},
	}
	got := Parse(data)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse =\n%+v\nwant\n%+v", got, want)
	}
	if v, ok := got[5].Option("subvol"); !ok || v != "@" {
		t.Errorf("Option(subvol) = %q, %v", v, ok)
	}
	if !got[1].Has("nofail") || got[0].Has("nofail") {
		t.Error("Has(nofail) wrong")
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:           "plain",
		`a\040b`:          "a b",
		`tab\011x`:        "tab\tx",
		`back\134slash`:   `back\slash`,
		`short\04`:        `short\04`,
		`not\089octal`:    `not\089octal`,
		`big\777`:         `big\777`,
		`end\`:            `end\`,
		`\040lead\040end`: " lead end",
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
