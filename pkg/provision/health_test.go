package provision

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/health"
	"github.com/booty-dev/booty/pkg/image"
	"github.com/booty-dev/booty/pkg/provider"
)

// healthProvider is a recordingProvider that is also a HealthReporter.
type healthProvider struct {
	recordingProvider
	hmu    sync.Mutex
	health [][]health.CheckResult
}

func (p *healthProvider) ReportHealthChecks(_ context.Context, rs []health.CheckResult) error {
	p.hmu.Lock()
	defer p.hmu.Unlock()
	p.health = append(p.health, rs)
	return nil
}

// healthHost is a fake /proc and /sys of a 2-CPU, 2 GiB machine without
// disks, NICs or EDAC, for the real checker.
func healthHost(t *testing.T) string {
	root := t.TempDir()
	for rel, content := range map[string]string{
		"proc/cpuinfo": "processor\t: 0\n\nprocessor\t: 1\n",
		"proc/meminfo": "MemTotal:        2097152 kB\n",
	} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "sys/class/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// healthOrchestrator runs the real checker over healthHost; the target
// disk is a file holding a known pattern, written by the real image.Write.
func healthOrchestrator(t *testing.T, cfg *config.MachineConfig, p *healthProvider) (o *Orchestrator, target string, selected *int) {
	t.Helper()
	o, _ = newTestOrchestrator(t, cfg, p)
	root := healthHost(t)
	o.healthChecks = func(ctx context.Context, opts health.Options) []health.CheckResult {
		c := &health.Checker{Root: root, Disks: func() ([]disk.Disk, error) { return nil, nil }}
		return c.Run(ctx, opts)
	}
	target = filepath.Join(t.TempDir(), "vda")
	if err := os.WriteFile(target, bytes.Repeat([]byte("untouched"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	selected = new(int)
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) {
		*selected++
		return &disk.Disk{Name: "vda", Path: target, Size: 9000}, nil
	}
	o.writeImage = image.Write
	o.dumpDebugState = func(string) {}
	return o, target, selected
}

// TestFailingHealthCheckWritesNothing: a blocking failure (2 CPUs, 4
// required) stops the run in health-check: no disk is selected, the target
// keeps every byte, the results reach the HealthReporter and the failure
// names the check.
func TestFailingHealthCheckWritesNothing(t *testing.T) {
	cfg := keepConfig()
	cfg.Image.URL = "file:///nonexistent/os.img"
	cfg.Health = &config.HealthSpec{MinCPUs: 4, MinMemory: "1G"}
	p := &healthProvider{}
	o, target, selected := healthOrchestrator(t, cfg, p)

	err := o.Provision(context.Background())
	if !errors.Is(err, ErrUnhealthy) || FailedStep(err) != StepHealthCheck {
		t.Fatalf("want ErrUnhealthy from %s, got %v", StepHealthCheck, err)
	}
	if !strings.Contains(err.Error(), "cpu: 2 logical CPUs, at least 4 required") || strings.Contains(err.Error(), "memory") {
		t.Errorf("error names the wrong checks: %v", err)
	}
	if *selected != 0 {
		t.Errorf("select-disk ran %d times after a failed health check", *selected)
	}
	if b, _ := os.ReadFile(target); !bytes.Equal(b, bytes.Repeat([]byte("untouched"), 1000)) {
		t.Error("the target disk was written")
	}
	want := []string{"health-check:started", "health-check:failed", "machine:error"}
	if got := p.states(); !reflect.DeepEqual(got, want) {
		t.Errorf("reports %v, want %v", got, want)
	}
	if len(p.health) != 1 {
		t.Fatalf("health reported %d times, want once", len(p.health))
	}
	got := map[string]health.Status{}
	for _, r := range p.health[0] {
		got[r.Name] = r.Status
	}
	if got["cpu"] != health.StatusFail || got["memory"] != health.StatusPass || got["boot-nic"] != health.StatusFail || got["edac"] != health.StatusPass {
		t.Errorf("reported results %v", got)
	}
}

// TestReportOnlyHealthFailureContinues: failures of report-only kinds are
// reported and the plan goes on to select-disk; the results ride on the
// step's succeeded report.
func TestReportOnlyHealthFailureContinues(t *testing.T) {
	cfg := keepConfig()
	cfg.Health = &config.HealthSpec{MinCPUs: 4, ReportOnly: []string{health.KindCPU, health.KindBootNIC}}
	p := &healthProvider{}
	o, _, selected := healthOrchestrator(t, cfg, p)
	o.writeImage = func(context.Context, image.Options) (image.Result, error) {
		return image.Result{}, errors.New("stop here")
	}

	err := o.Provision(context.Background())
	if FailedStep(err) != StepWriteImage || *selected != 1 {
		t.Fatalf("want the run to reach write-image, got %v (select-disk ran %d times)", err, *selected)
	}
	for _, r := range p.recordingProvider.status {
		if r.Step == StepHealthCheck && r.State == "succeeded" {
			if d := r.Detail["health.cpu"]; d != "fail: 2 logical CPUs, at least 4 required" {
				t.Errorf("health.cpu detail %q", d)
			}
			return
		}
	}
	t.Errorf("no succeeded health-check report in %v", p.states())
}

func TestHealthCheckInPlanOnlyWithSection(t *testing.T) {
	cfg := keepConfig()
	o, _ := newTestOrchestrator(t, cfg, &recordingProvider{})
	if got := stepNames(o.ProvisionPlan()); got[0] != StepSelectDisk {
		t.Errorf("plan without health section: %v", got)
	}
	cfg.Health = &config.HealthSpec{}
	if got := stepNames(o.ProvisionPlan()); !reflect.DeepEqual(got[:2], []string{StepHealthCheck, StepSelectDisk}) {
		t.Errorf("plan with health section: %v", got)
	}
}

// bootyd's provider reports health results.
var _ HealthReporter = (*provider.ServerProvider)(nil)
