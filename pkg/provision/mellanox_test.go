package provision

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/command"
)

func TestParseMstconfigQuery(t *testing.T) {
	out := `
Device #1:
----------

Device type:    ConnectX3Pro
Device:         /dev/mst/mt4103_pciconf0

Configurations:                                      Next Boot
         SRIOV_EN                                    True(1)
         NUM_OF_VFS                                  16
*        LINK_TYPE_P1                                VPI(3)
         SWITCH_COMPT_FEATURE_MASK                   0x10(16)
         PCI_DOWNSTREAM_PORT_OWNER                   Array[0..15]
`
	got := parseMstconfigQuery(out)
	want := map[string]mstValue{
		"SRIOV_EN":                  {Raw: "True(1)", Num: 1, IsNum: true},
		"NUM_OF_VFS":                {Raw: "16", Num: 16, IsNum: true},
		"LINK_TYPE_P1":              {Raw: "VPI(3)", Num: 3, IsNum: true},
		"SWITCH_COMPT_FEATURE_MASK": {Raw: "0x10(16)", Num: 16, IsNum: true},
		"PCI_DOWNSTREAM_PORT_OWNER": {Raw: "Array[0..15]"},
	}
	if len(got) != len(want) {
		t.Errorf("parsed %d parameters, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %+v, want %+v", k, got[k], w)
		}
	}
	// -e output: Default, Current, Next Boot; the last column counts.
	ext := "Configurations:          Default   Current   Next Boot\n        NUM_OF_VFS      0      0      8\n"
	if v := parseMstconfigQuery(ext)["NUM_OF_VFS"]; v.Num != 8 {
		t.Errorf("-e output NUM_OF_VFS = %+v, want 8", v)
	}
}

// mellanoxSetup gives a configurator a sysfs with two ConnectX physical
// functions, one of their virtual functions and an Intel NIC, and a fake
// mstconfig whose per-device state is given ("SRIOV_EN NUM_OF_VFS").
func mellanoxSetup(t *testing.T, state map[string]string) (*Configurator, string) {
	t.Helper()
	c, _ := newTestConfigurator(t)
	c.SetRunner(command.Exec{Log: testLogger(t)})
	devs := map[string]string{"0000:3b:00.0": "0x15b3", "0000:3b:00.1": "0x15b3", "0000:3b:00.2": "0x15b3", "0000:00:19.0": "0x8086"}
	for addr, vendor := range devs {
		d := filepath.Join(c.sysfsDir, "bus", "pci", "devices", addr)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "vendor"), []byte(vendor+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../0000:3b:00.0", filepath.Join(c.sysfsDir, "bus/pci/devices/0000:3b:00.2/physfn")); err != nil {
		t.Fatal(err)
	}
	tool := t.TempDir()
	b, err := os.ReadFile("testdata/configurator/mstconfig")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tool, "mstconfig"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(tool, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	for addr, s := range state {
		if err := os.WriteFile(filepath.Join(tool, "state", addr), []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.mstconfig = filepath.Join(tool, "mstconfig")
	c.pciVendorCheck = func(id string) (bool, error) { return id == MellanoxVendorID, nil }
	return c, tool
}

func readCalls(t *testing.T, tool string) []string {
	b, err := os.ReadFile(filepath.Join(tool, "calls"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return slices.DeleteFunc(strings.Split(string(b), "\n"), func(s string) bool { return s == "" })
}

func TestSetupMellanox(t *testing.T) {
	tests := []struct {
		name        string
		state       map[string]string
		numVFs      int
		wantChanged bool
		wantCalls   []string
		wantState   map[string]string
	}{
		{
			name:        "both ports need SR-IOV",
			state:       map[string]string{"0000:3b:00.0": "0 0", "0000:3b:00.1": "0 0"},
			numVFs:      8,
			wantChanged: true,
			wantCalls: []string{
				"-d 0000:3b:00.0 query", "-y -d 0000:3b:00.0 set SRIOV_EN=1 NUM_OF_VFS=8",
				"-d 0000:3b:00.1 query", "-y -d 0000:3b:00.1 set SRIOV_EN=1 NUM_OF_VFS=8",
			},
			wantState: map[string]string{"0000:3b:00.0": "1 8", "0000:3b:00.1": "1 8"},
		},
		{
			name:      "already configured",
			state:     map[string]string{"0000:3b:00.0": "1 8", "0000:3b:00.1": "1 8"},
			numVFs:    8,
			wantCalls: []string{"-d 0000:3b:00.0 query", "-d 0000:3b:00.1 query"},
			wantState: map[string]string{"0000:3b:00.0": "1 8", "0000:3b:00.1": "1 8"},
		},
		{
			name:        "only the VF count differs on one port",
			state:       map[string]string{"0000:3b:00.0": "1 8", "0000:3b:00.1": "1 4"},
			numVFs:      8,
			wantChanged: true,
			wantCalls:   []string{"-d 0000:3b:00.0 query", "-d 0000:3b:00.1 query", "-y -d 0000:3b:00.1 set SRIOV_EN=1 NUM_OF_VFS=8"},
			wantState:   map[string]string{"0000:3b:00.0": "1 8", "0000:3b:00.1": "1 8"},
		},
		{
			name:   "zero VFs does nothing",
			state:  map[string]string{"0000:3b:00.0": "0 0", "0000:3b:00.1": "0 0"},
			numVFs: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, tool := mellanoxSetup(t, tt.state)
			changed, err := c.SetupMellanox(t.Context(), tt.numVFs)
			if err != nil {
				t.Fatalf("SetupMellanox: %v", err)
			}
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if got := readCalls(t, tool); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("mstconfig calls:\n got %q\nwant %q", got, tt.wantCalls)
			}
			for addr, want := range tt.wantState {
				b, _ := os.ReadFile(filepath.Join(tool, "state", addr))
				if strings.TrimSpace(string(b)) != want {
					t.Errorf("%s firmware state = %q, want %q", addr, b, want)
				}
			}
		})
	}
}

func TestSetupMellanoxFailures(t *testing.T) {
	t.Run("no Mellanox device", func(t *testing.T) {
		c, tool := mellanoxSetup(t, nil)
		c.pciVendorCheck = func(string) (bool, error) { return false, nil }
		changed, err := c.SetupMellanox(t.Context(), 8)
		if err != nil || changed || len(readCalls(t, tool)) != 0 {
			t.Errorf("got changed=%v err=%v calls=%v; want nothing done", changed, err, readCalls(t, tool))
		}
	})
	t.Run("vendor check fails", func(t *testing.T) {
		c, _ := mellanoxSetup(t, nil)
		c.pciVendorCheck = func(string) (bool, error) { return false, errors.New("sysfs not available") }
		if _, err := c.SetupMellanox(t.Context(), 8); err == nil || !strings.Contains(err.Error(), "sysfs not available") {
			t.Errorf("err = %v, want the vendor check's error", err)
		}
	})
	t.Run("mstconfig cannot open the second port", func(t *testing.T) {
		c, _ := mellanoxSetup(t, map[string]string{"0000:3b:00.0": "0 0"})
		changed, err := c.SetupMellanox(t.Context(), 4)
		if err == nil || !strings.Contains(err.Error(), "0000:3b:00.1") || !strings.Contains(err.Error(), "Failed to open device") {
			t.Errorf("err = %v, want one naming 0000:3b:00.1 and mstconfig's stderr", err)
		}
		if !changed {
			t.Error("changed = false, but the first port was set before the failure")
		}
	})
	t.Run("negative VFs", func(t *testing.T) {
		c, _ := mellanoxSetup(t, nil)
		if _, err := c.SetupMellanox(t.Context(), -1); err == nil {
			t.Error("no error for -1 VFs")
		}
	})
}

// SetPCIVendorCheckFunc (the seed's API) sets the check of Configurators
// created afterwards and its restore function puts the old one back.
func TestSetPCIVendorCheckFunc(t *testing.T) {
	restore := SetPCIVendorCheckFunc(func(id string) (bool, error) { return id == "abcd", nil })
	c := NewConfigurator(nil)
	if ok, err := c.pciVendorCheck("abcd"); !ok || err != nil {
		t.Errorf("check = %v, %v; want the function set", ok, err)
	}
	restore()
	if ok, _ := c.pciVendorCheck("abcd"); ok {
		t.Error("restore left the test's check in place")
	}
}
