package bootloader

import (
	"slices"
	"testing"
)

// The ordered list and pairs from systemd's TEST(strverscmp_improved).
func TestStrverscmpImproved(t *testing.T) {
	versions := []string{"~1", "", "ab", "abb", "abc", "0001", "002", "12", "122", "122.9", "123~rc1", "123",
		"123-a", "123-a.1", "123-a1", "123-a1.1", "123-3", "123-3.1", "123^patch1", "123^1", "123.a-1",
		"123.1-1", "123a-1", "124"}
	for i, older := range versions {
		if c := strverscmpImproved(older, older); c != 0 {
			t.Errorf("%q vs itself = %d", older, c)
		}
		for _, newer := range versions[i+1:] {
			if strverscmpImproved(older, newer) >= 0 || strverscmpImproved(newer, older) <= 0 {
				t.Errorf("%q must sort before %q", older, newer)
			}
		}
	}
	for _, p := range [][2]string{
		{"123.45-67.88", "123.45-67.89"}, {"123.45-67.89", "123.45-67.89a"}, {"123.45-67.ab", "123.45-67.89"},
		{"123.45-67.9", "123.45-67.89"}, {"123.45-67", "123.45-67.89"}, {"123.45-66.89", "123.45-67.89"},
		{"123.45-9.99", "123.45-67.89"}, {"123.42-99.99", "123.45-67.89"}, {"123-99.99", "123.45-67.89"},
		{"5.14.0-362.8.1.el9_3.x86_64", "5.14.0-427.13.1.el9_4.x86_64"},
		{"6.1.0-9-amd64", "6.1.0-18-amd64"},
	} {
		if strverscmpImproved(p[0], p[1]) >= 0 || strverscmpImproved(p[1], p[0]) <= 0 {
			t.Errorf("%q must sort before %q", p[0], p[1])
		}
	}
	for _, p := range [][2]string{{"123_aa2-67.89", "123aa+2-67.89"}, {"00123", "123"}} {
		if c := strverscmpImproved(p[0], p[1]); c != 0 {
			t.Errorf("%q vs %q = %d, want equal", p[0], p[1], c)
		}
	}
}

func TestBLSSortOrder(t *testing.T) {
	entries := []blsEntry{
		{id: "m-6.1.0"},
		{id: "m-6.10.0"},
		{id: "m-0-rescue"},
		{id: "z-sorted-old", sortKey: "fedora", machineID: "m", version: "6.1"},
		{id: "a-sorted-new", sortKey: "fedora", machineID: "m", version: "6.2"},
		{id: "b-other-key", sortKey: "arch", version: "1"},
		{id: "m-6.9.0"},
	}
	slices.SortStableFunc(entries, compareBLS)
	var got []string
	for _, e := range entries {
		got = append(got, e.id)
	}
	want := []string{"b-other-key", "a-sorted-new", "z-sorted-old", "m-6.10.0", "m-6.9.0", "m-6.1.0", "m-0-rescue"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v\nwant  %v", got, want)
	}
}

func TestParseBLS(t *testing.T) {
	e := parseBLS("x", "/boot/loader/entries/x.conf", []byte(`# comment
title   Fedora Linux (6.8.5-301.fc40.x86_64) 40 (Workstation Edition)
version	6.8.5-301.fc40.x86_64
linux /vmlinuz-6.8.5-301.fc40.x86_64
initrd /intel-ucode.img
initrd /initramfs-6.8.5-301.fc40.x86_64.img $tuned_initrd
options root=UUID=abc ro
options rhgb   quiet
grub_class fedora
`))
	if e.title != "Fedora Linux (6.8.5-301.fc40.x86_64) 40 (Workstation Edition)" || e.version != "6.8.5-301.fc40.x86_64" ||
		e.linux != "/vmlinuz-6.8.5-301.fc40.x86_64" ||
		!slices.Equal(e.initrds, []string{"/intel-ucode.img", "/initramfs-6.8.5-301.fc40.x86_64.img", "$tuned_initrd"}) ||
		!slices.Equal(e.options, []string{"root=UUID=abc ro", "rhgb   quiet"}) {
		t.Errorf("parsed %+v", e)
	}
}

func TestBLSMultipleInitrds(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"boot/loader/entries/a.conf": "title A\nlinux /boot/vmlinuz-6.8\ninitrd /boot/intel-ucode.img\ninitrd /boot/initramfs-6.8.img\noptions root=/dev/sda2\n",
		"boot/vmlinuz-6.8":           "k",
		"boot/intel-ucode.img":       "u",
		"boot/initramfs-6.8.img":     "i",
	})
	e, err := defaultEntry(root, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if e.Initrd != root+"/boot/initramfs-6.8.img" || !slices.Equal(e.Initrds, []string{root + "/boot/intel-ucode.img", root + "/boot/initramfs-6.8.img"}) ||
		e.Kernel != root+"/boot/vmlinuz-6.8" || e.Cmdline != "root=/dev/sda2" {
		t.Errorf("got %+v", e)
	}
}
