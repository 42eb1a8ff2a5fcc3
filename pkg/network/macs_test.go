package network

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestPhysicalMACs(t *testing.T) {
	sys := t.TempDir()
	link := func(name, addr string, physical bool) {
		d := filepath.Join(sys, "class", "net", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "address"), []byte(addr+"\n"), 0o644)
		if physical {
			os.Mkdir(filepath.Join(d, "device"), 0o755)
		}
	}
	link("lo", "00:00:00:00:00:00", false)
	link("eno2", "52:54:00:AA:BB:02", true)
	link("eno1", "52:54:00:aa:bb:01", true)
	link("br0", "52:54:00:aa:bb:09", false)
	link("ib0", "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0f:1a:2b", true)
	link("eno3", "00:00:00:00:00:00", true)
	link("bond-slave", "52:54:00:aa:bb:01", true)
	got, err := PhysicalMACs(sys)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"52:54:00:aa:bb:01", "52:54:00:aa:bb:02"}; !reflect.DeepEqual(got, want) {
		t.Errorf("PhysicalMACs = %v, want %v", got, want)
	}
	if _, err := PhysicalMACs(filepath.Join(sys, "nope")); err == nil {
		t.Error("want an error for a missing sysfs")
	}
}
