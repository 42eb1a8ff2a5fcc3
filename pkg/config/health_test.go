package config

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"

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

// TestServerProviderReportsHealth: the results reach bootyd's health route
// with the machine token, in their wire form.
func TestServerProviderReportsHealth(t *testing.T) {
	srv := newRecorder(t, nil)
	r, err := NewServerReporter(ServerSpec{URL: srv.URL, Token: "tok"}, "52:54:00:aa:bb:01", true)
	if err != nil {
		t.Fatal(err)
	}
	results := []health.CheckResult{
		{Name: "cpu", Status: health.StatusPass, Message: "4 logical CPUs", Duration: 3 * time.Millisecond, Figures: map[string]int64{"count": 4}},
		{Name: "disk:nvme0n1", Status: health.StatusFail, Message: "critical warning 0x04: reliability degraded", Blocking: true},
	}
	if err := r.ReportHealthChecks(context.Background(), results); err != nil {
		t.Fatal(err)
	}
	got := srv.requests()
	if len(got) != 1 || got[0].Path != "/v1/machines/52:54:00:aa:bb:01/health" || got[0].Auth != "Bearer tok" {
		t.Fatalf("requests %+v", got)
	}
	var body api.HealthReport
	if err := json.Unmarshal([]byte(got[0].Body), &body); err != nil {
		t.Fatal(err)
	}
	want := []api.HealthCheck{
		{Name: "cpu", Status: "pass", Message: "4 logical CPUs", DurationMS: 3, Figures: map[string]int64{"count": 4}},
		{Name: "disk:nvme0n1", Status: "fail", Message: "critical warning 0x04: reliability degraded", Blocking: true},
	}
	if !reflect.DeepEqual(body.Checks, want) || body.Time.IsZero() {
		t.Errorf("body %+v", body)
	}
}
