package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/api"
)

// TestInventoryJSONFromTree: --json prints a HardwareDetails document read
// from the --root tree, with metal3's field names.
func TestInventoryJSONFromTree(t *testing.T) {
	root := t.TempDir()
	for rel, content := range map[string]string{
		"proc/cpuinfo":                "processor\t: 0\nmodel name\t: Test CPU\nflags\t: fpu sse2\n\nprocessor\t: 1\nmodel name\t: Test CPU\n",
		"proc/meminfo":                "MemTotal:        4194304 kB\n",
		"proc/sys/kernel/hostname":    "box\n",
		"sys/class/dmi/id/sys_vendor": "Acme\n",
	} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"sys/block", "sys/class/net", "sys/bus/pci/devices"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if rc := runInventory([]string{"--json", "--lldp-wait", "0", "--root", root}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errb.String())
	}
	for _, key := range []string{`"systemVendor"`, `"ramMebibytes": 4096`, `"nics": []`, `"storage": []`} {
		if !strings.Contains(out.String(), key) {
			t.Errorf("output lacks %s:\n%s", key, out.String())
		}
	}
	var hw api.HardwareDetails
	if err := json.Unmarshal(out.Bytes(), &hw); err != nil {
		t.Fatal(err)
	}
	if hw.CPU.Count != 2 || hw.CPU.Model != "Test CPU" || hw.Hostname != "box" || hw.SystemVendor.Manufacturer != "Acme" {
		t.Errorf("report %+v", hw)
	}
}

func TestInventoryRejectsNegativeWait(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runInventory([]string{"--lldp-wait", "-1s"}, &out, &errb); rc != 2 || !strings.Contains(errb.String(), "--lldp-wait") {
		t.Errorf("exit %d, stderr %q: want 2 naming --lldp-wait", rc, errb.String())
	}
}
