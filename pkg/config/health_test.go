package config

import (
	"reflect"
	"testing"

	"github.com/booty-dev/booty/pkg/health"
)

// TestHealthOptions: the section becomes the checks' options, sizes in MiB.
func TestHealthOptions(t *testing.T) {
	cfg, err := Parse([]byte(`apiVersion: booty.dev/v1
image: {url: "file:///os.img", checksum: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
disk: {device: /dev/vda}
health:
  minMemory: 1.5G
  minCPUs: 8
  disks: {maxPercentageUsed: 80, maxMediaErrors: 4}
  maxUncorrectableMemoryErrors: 1
  bootInterface: eno1
  reportOnly: [edac, disk]
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.Health.HealthOptions()
	if err != nil {
		t.Fatal(err)
	}
	want := health.Options{MinMemoryMiB: 1536, MinCPUs: 8, MaxPercentageUsed: 80, MaxMediaErrors: 4,
		MaxUncorrectable: 1, BootNIC: "eno1", ReportOnly: []string{"edac", "disk"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n got %+v\nwant %+v", got, want)
	}
	// No section: no checks; Clone copies the section.
	if c, _ := Parse([]byte("apiVersion: booty.dev/v1\nmode: deprovision\n")); c.Health != nil {
		t.Errorf("health set without a section: %+v", c.Health)
	}
	cl := cfg.Clone()
	cl.Health.ReportOnly[0] = "changed"
	cl.Health.MinCPUs = 1
	if cfg.Health.ReportOnly[0] != "edac" || cfg.Health.MinCPUs != 8 {
		t.Errorf("Clone shares the health section: %+v", cfg.Health)
	}
}
