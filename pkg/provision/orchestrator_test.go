package provision

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/image"
)

// recordingProvider is a provider with every reporting capability; it records
// what it was told.
type recordingProvider struct {
	mu       sync.Mutex
	status   []api.StatusReport
	progress []api.ProgressReport
}

func (p *recordingProvider) Name() string { return "recording" }
func (p *recordingProvider) Load(context.Context) (*config.MachineConfig, error) {
	return nil, config.ErrNoConfig
}
func (p *recordingProvider) ReportStatus(_ context.Context, r api.StatusReport) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = append(p.status, r)
	return nil
}
func (p *recordingProvider) ReportProgress(_ context.Context, r api.ProgressReport) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.progress = append(p.progress, r)
	return nil
}

func (p *recordingProvider) states() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s []string
	for _, r := range p.status {
		s = append(s, r.Step+":"+r.State)
	}
	return s
}

func testConfig() *config.MachineConfig {
	return &config.MachineConfig{
		APIVersion: config.APIVersion,
		Hostname:   "node-1",
		Mode:       config.ModeProvision,
		Image:      config.ImageSpec{URL: "http://127.0.0.1/img.zst", Checksum: "sha256:" + strings.Repeat("a", 64)},
		Disk:       config.DiskSpec{Device: "/dev/vda"},
		Server:     config.ServerSpec{Token: "s3cret-token"},
	}
}

func newTestOrchestrator(t *testing.T, cfg *config.MachineConfig, p config.Provider) (*Orchestrator, *bytes.Buffer) {
	t.Helper()
	o := NewOrchestrator(cfg, p, nil)
	var logs bytes.Buffer
	o.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	o.selectDisk = func(spec config.DiskSpec) (*disk.Disk, error) {
		return &disk.Disk{Name: "vda", Path: filepath.Join(t.TempDir(), "vda"), Size: 1 << 30, Serial: "S1"}, nil
	}
	o.dumpDebugState = func(string) { t.Fatal("debug dump on success path") }
	return o, &logs
}

func TestProvisionPlanNames(t *testing.T) {
	cfg := testConfig()
	o, _ := newTestOrchestrator(t, cfg, &recordingProvider{})
	got := names(o.ProvisionPlan())
	want := []string{StepSelectDisk, StepWriteImage, StepReportSuccess}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	cfg.Mellanox.NumVFs = 8
	got = names(o.ProvisionPlan())
	want = []string{StepSelectDisk, StepWriteImage, StepSetupMellanox, StepReportSuccess}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan with mellanox = %v, want %v", got, want)
	}
}

func names(plan []Step) []string {
	var n []string
	for _, s := range plan {
		n = append(n, s.Name)
	}
	return n
}

func TestProvisionReportsEveryStep(t *testing.T) {
	p := &recordingProvider{}
	o, logs := newTestOrchestrator(t, testConfig(), p)
	var got image.Options
	o.writeImage = func(_ context.Context, opts image.Options) (image.Result, error) {
		got = opts
		opts.Progress(image.Progress{BytesDone: 50, BytesTotal: 100, Rate: 10, ETA: 5 * time.Second})
		return image.Result{ImageSize: 100, ImageDigest: "sha256:x"}, nil
	}
	if err := o.Provision(context.Background()); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	want := []string{
		"select-disk:started", "select-disk:succeeded",
		"write-image:started", "write-image:succeeded",
		"report-success:started", "report-success:succeeded",
		"machine:provisioned",
	}
	if s := p.states(); !reflect.DeepEqual(s, want) {
		t.Fatalf("reports = %v\nwant %v", s, want)
	}
	if got.Target != o.Target().Path || got.Source != testConfig().Image.URL || got.Checksum != testConfig().Image.Checksum {
		t.Fatalf("write-image got options %+v", got)
	}
	if len(p.progress) != 1 || p.progress[0].BytesDone != 50 || p.progress[0].Step != StepWriteImage || p.progress[0].ETASeconds != 5 {
		t.Fatalf("progress = %+v", p.progress)
	}
	// Index and total travel with each report; select-disk reports the disk.
	if r := p.status[1]; r.Index != 1 || r.Total != 3 || r.Detail["serial"] != "S1" {
		t.Fatalf("select-disk report = %+v", r)
	}
	for _, want := range []string{"step started", "step done", "n=2/3", "duration="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

func TestProvisionFailureNamesStepAndStops(t *testing.T) {
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, testConfig(), p)
	var dumped []string
	o.dumpDebugState = func(step string) { dumped = append(dumped, step) }
	boom := errors.New("checksum mismatch")
	o.writeImage = func(context.Context, image.Options) (image.Result, error) { return image.Result{}, boom }
	err := o.Provision(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want wrapping %v", err, boom)
	}
	if FailedStep(err) != StepWriteImage {
		t.Fatalf("FailedStep = %q", FailedStep(err))
	}
	if !reflect.DeepEqual(dumped, []string{StepWriteImage}) {
		t.Fatalf("debug dumps = %v", dumped)
	}
	want := []string{"select-disk:started", "select-disk:succeeded", "write-image:started", "write-image:failed", "machine:error"}
	if s := p.states(); !reflect.DeepEqual(s, want) {
		t.Fatalf("reports = %v\nwant %v", s, want)
	}
	failed := p.status[3]
	if !strings.Contains(failed.Error, "checksum mismatch") || failed.Index != 2 {
		t.Fatalf("failed report = %+v", failed)
	}
	if !strings.Contains(p.status[4].Error, "write-image") {
		t.Fatalf("machine error does not name the step: %q", p.status[4].Error)
	}
}

func TestProvisionDiskErrorWritesNothing(t *testing.T) {
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, testConfig(), p)
	o.dumpDebugState = func(string) {}
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) { return nil, errors.New("no disk /dev/vdz") }
	o.writeImage = func(context.Context, image.Options) (image.Result, error) {
		t.Fatal("write-image ran after select-disk failed")
		return image.Result{}, nil
	}
	if err := o.Provision(context.Background()); FailedStep(err) != StepSelectDisk {
		t.Fatalf("err = %v", err)
	}
}

func TestProvisionWithoutReporterCapabilities(t *testing.T) {
	// A provider that only loads configs must still work: reporting is optional.
	o, _ := newTestOrchestrator(t, testConfig(), loadOnly{})
	o.writeImage = func(_ context.Context, opts image.Options) (image.Result, error) {
		opts.Progress(image.Progress{BytesDone: 1})
		return image.Result{}, nil
	}
	if err := o.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type loadOnly struct{}

func (loadOnly) Name() string                                        { return "load-only" }
func (loadOnly) Load(context.Context) (*config.MachineConfig, error) { return nil, config.ErrNoConfig }

func TestCancelledContextStopsBeforeNextStep(t *testing.T) {
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, testConfig(), p)
	ctx, cancel := context.WithCancel(context.Background())
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) {
		cancel()
		return &disk.Disk{Path: "/dev/null"}, nil
	}
	o.writeImage = func(context.Context, image.Options) (image.Result, error) {
		t.Fatal("write-image ran after cancel")
		return image.Result{}, nil
	}
	err := o.Provision(ctx)
	if FailedStep(err) != StepWriteImage || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestDeprovisionWipesBothEnds(t *testing.T) {
	cfg := testConfig()
	cfg.Mode = config.ModeDeprovision
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, cfg, p)
	path := filepath.Join(t.TempDir(), "disk")
	data := bytes.Repeat([]byte{0xAB}, 4<<20)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) { return &disk.Disk{Path: path, Size: int64(len(data))}, nil }
	if err := o.Deprovision(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	zero := make([]byte, wipeSpan)
	if !bytes.Equal(got[:wipeSpan], zero) || !bytes.Equal(got[len(got)-wipeSpan:], zero) {
		t.Fatal("ends not zeroed")
	}
	if !bytes.Equal(got[wipeSpan:len(got)-wipeSpan], data[wipeSpan:len(got)-wipeSpan]) {
		t.Fatal("middle changed")
	}
	if s := p.states(); s[len(s)-1] != "machine:deprovisioned" {
		t.Fatalf("reports = %v", s)
	}
}

func TestDumpDebugStateRedactsSecrets(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc", "net"), 0o755)
	os.WriteFile(filepath.Join(root, "proc", "mounts"), []byte("proc /proc proc rw 0 0\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc", "net", "route"), []byte("Iface\tDestination\n"), 0o644)
	blk := filepath.Join(root, "sys", "class", "block", "vda")
	os.MkdirAll(blk, 0o755)
	os.WriteFile(filepath.Join(blk, "size"), []byte("2048\n"), 0o644)

	procDir, sysDir, readKmsg, cfg0, log0 := debug.procDir, debug.sysDir, debug.readKmsg, debug.cfg, debug.log
	t.Cleanup(func() {
		debug.procDir, debug.sysDir, debug.readKmsg, debug.cfg, debug.log = procDir, sysDir, readKmsg, cfg0, log0
	})
	var out bytes.Buffer
	debug.procDir = filepath.Join(root, "proc")
	debug.sysDir = filepath.Join(root, "sys")
	debug.readKmsg = func() ([]byte, error) {
		return []byte("[    1.0] virtio_blk virtio1: [vda] 2048 512-byte logical blocks\n"), nil
	}
	SetDebugLogger(slog.New(slog.NewTextHandler(&out, nil)))
	cfg := testConfig()
	cfg.CloudInit.UserData = "#cloud-config\npassword: hunter2"
	setDebugConfig(cfg)

	DumpDebugState(StepWriteImage)
	s := out.String()
	for _, want := range []string{"step=write-image", "mounts: proc /proc", "vda", "size=1048576", "virtio_blk", "hostname: node-1"} {
		if !strings.Contains(s, want) {
			t.Errorf("dump lacks %q", want)
		}
	}
	for _, secret := range []string{"s3cret-token", "hunter2"} {
		if strings.Contains(s, secret) {
			t.Errorf("dump leaks secret %q", secret)
		}
	}
}
