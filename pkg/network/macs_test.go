package network

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestMACs(t *testing.T) {
	root := t.TempDir()
	links := []struct{ name, devPath, mac string }{
		{"lo", "virtual/net/lo", "00:00:00:00:00:00"},
		{"eth1", "pci0000:00/0000:00:04.0/virtio2/net/eth1", "52:54:00:12:34:57"},
		{"eth0", "pci0000:00/0000:00:03.0/virtio1/net/eth0", "52:54:00:12:34:56"},
		{"enp1s0f0", "pci0000:00/0000:00:1c.0/0000:01:00.0/net/enp1s0f0", "0C:42:A1:00:00:01"},
		{"br0", "virtual/net/br0", "52:54:00:aa:bb:cc"},
		{"veth1", "virtual/net/veth1", "aa:bb:cc:dd:ee:ff"},
		{"ib0", "pci0000:00/0000:00:1d.0/net/ib0", ""},
		{"wwan0", "pci0000:00/0000:00:1e.0/net/wwan0", "00:00:00:00:00:00"},
	}
	classNet := filepath.Join(root, "class", "net")
	if err := os.MkdirAll(classNet, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		dir := filepath.Join(root, "devices", l.devPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "address"), []byte(l.mac+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("../../devices", l.devPath), filepath.Join(classNet, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := MACs(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0c:42:a1:00:00:01", "52:54:00:12:34:56", "52:54:00:12:34:57"} // enp1s0f0, eth0, eth1
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("MACs = %v, want %v", got, want)
	}
	if _, err := MACs(filepath.Join(root, "missing")); err == nil {
		t.Fatal("MACs of a missing tree: want error")
	}
}
