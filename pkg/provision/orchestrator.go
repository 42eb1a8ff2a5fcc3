package provision

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/image"
)

// Step names. Tests and bootyd see these; they are part of the contract.
const (
	StepSelectDisk    = "select-disk"
	StepWriteImage    = "write-image"
	StepSetupMellanox = "setup-mellanox"
	StepWipeDisks     = "wipe-disks"
	StepReportSuccess = "report-success"
)

// reportTimeout bounds every report to the provider so a dead server cannot
// hold a step; reports are best effort.
const reportTimeout = 15 * time.Second

// Orchestrator runs the full provisioning pipeline.
type Orchestrator struct {
	cfg      *config.MachineConfig
	provider config.Provider
	disks    *disk.Manager
	log      *slog.Logger

	mu              sync.Mutex
	target          *disk.Disk
	detail          map[string]string
	firmwareChanged bool

	// Seams, set to the real implementations by NewOrchestrator.
	now            func() time.Time
	selectDisk     func(spec config.DiskSpec) (*disk.Disk, error)
	writeImage     func(ctx context.Context, opts image.Options) (image.Result, error)
	dumpDebugState func(step string)
	setupMellanox  func(ctx context.Context, numVFs int) (bool, error)
}

// NewOrchestrator creates an Orchestrator with the given dependencies. The
// provider's optional capabilities (status, progress, log reporting) are found
// by type assertion when the orchestrator reports.
func NewOrchestrator(cfg *config.MachineConfig, provider config.Provider, diskMgr *disk.Manager) *Orchestrator {
	o := &Orchestrator{
		cfg:      cfg,
		provider: provider,
		disks:    diskMgr,
		log:      slog.Default().With("component", "provision"),
		now:      time.Now,
	}
	o.selectDisk = func(spec config.DiskSpec) (*disk.Disk, error) {
		if o.disks == nil {
			return nil, fmt.Errorf("no disk manager")
		}
		return o.disks.Select(spec, 0)
	}
	o.writeImage = image.Write
	o.dumpDebugState = func(step string) {
		setDebugConfig(o.cfg)
		DumpDebugState(step)
	}
	o.setupMellanox = func(ctx context.Context, numVFs int) (bool, error) {
		return NewConfigurator(o.disks).SetupMellanox(ctx, numVFs)
	}
	return o
}

// SetLogger routes the orchestrator's logs to l.
func (o *Orchestrator) SetLogger(l *slog.Logger) { o.log = l.With("component", "provision") }

// FirmwareChanged reports whether any provisioning step changed firmware values that require a hard reboot (not kexec) to reinitialize.
func (o *Orchestrator) FirmwareChanged() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.firmwareChanged
}

// Target returns the disk the select-disk step chose, or nil before it ran.
func (o *Orchestrator) Target() *disk.Disk {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.target
}

// ProvisionPlan returns the steps Provision runs, in order, for this config.
func (o *Orchestrator) ProvisionPlan() []Step {
	plan := []Step{
		{Name: StepSelectDisk, Fn: o.stepSelectDisk},
		{Name: StepWriteImage, Fn: o.stepWriteImage},
	}
	if o.cfg.Mellanox.NumVFs > 0 {
		plan = append(plan, Step{Name: StepSetupMellanox, Fn: o.stepSetupMellanox})
	}
	plan = append(plan, Step{Name: StepReportSuccess, Fn: o.stepReportSuccess})
	return plan
}

// Provision runs all provisioning steps sequentially. On failure it returns
// a *StepError naming the step; the failed step has already been reported
// and debug state dumped. The machine-level outcome (provisioned or error) is
// reported before returning.
func (o *Orchestrator) Provision(ctx context.Context) error {
	return o.runPlan(ctx, o.ProvisionPlan(), api.StateProvisioned)
}

// Deprovision runs the deprovisioning pipeline. Mode "soft" renames grub.cfg to make the system unbootable. Mode "hard" (default) wipes all disks and removes EFI boot entries.
func (o *Orchestrator) Deprovision(ctx context.Context) error {
	return o.runPlan(ctx, o.DeprovisionPlan(), api.StateDeprovisioned)
}

func (o *Orchestrator) runPlan(ctx context.Context, plan []Step, success string) error {
	err := runner{o: o}.run(ctx, plan)
	if err != nil {
		o.reportStatus(ctx, api.StatusReport{Step: api.StepMachine, State: api.StateError, Error: err.Error()})
		return err
	}
	o.reportStatus(ctx, api.StatusReport{Step: api.StepMachine, State: success})
	return nil
}

func (o *Orchestrator) stepSelectDisk(ctx context.Context) error {
	d, err := o.selectDisk(o.cfg.Disk)
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.target = d
	o.mu.Unlock()
	o.log.Info("target disk chosen", "disk", d.Path, "size", d.Size, "model", d.Model, "serial", d.Serial)
	o.addDetail(map[string]string{
		"disk": d.Path, "size": fmt.Sprint(d.Size), "model": d.Model, "serial": d.Serial, "wwn": d.WWN, "tran": d.Tran,
	})
	return nil
}

func (o *Orchestrator) stepWriteImage(ctx context.Context) error {
	t := o.Target()
	if t == nil {
		return fmt.Errorf("no target disk selected")
	}
	var ca []byte
	if o.cfg.Server.CACert != "" {
		ca = []byte(o.cfg.Server.CACert)
	}
	res, err := o.writeImage(ctx, image.Options{
		Source:        o.cfg.Image.URL,
		Checksum:      o.cfg.Image.Checksum,
		ImageChecksum: o.cfg.Image.ImageChecksum,
		Target:        t.Path,
		CACert:        ca,
		Log:           o.log.With("step", StepWriteImage),
		Progress: func(p image.Progress) {
			o.reportProgress(ctx, api.ProgressReport{Step: StepWriteImage, BytesDone: p.BytesDone,
				BytesTotal: p.BytesTotal, RateBPS: p.Rate, ETASeconds: p.ETA.Seconds()})
		},
	})
	if err != nil {
		return fmt.Errorf("write %s to %s: %w", o.cfg.Image.URL, t.Path, err)
	}
	o.log.Info("image written and verified", "disk", t.Path, "bytes", res.ImageSize,
		"digest", res.ImageDigest, "duration", res.Duration.Round(time.Millisecond))
	o.addDetail(map[string]string{"bytes": fmt.Sprint(res.ImageSize), "sourceDigest": res.SourceDigest,
		"imageDigest": res.ImageDigest})
	return nil
}

func (o *Orchestrator) stepSetupMellanox(ctx context.Context) error {
	changed, err := o.setupMellanox(ctx, o.cfg.Mellanox.NumVFs)
	if err != nil {
		return err
	}
	if changed {
		o.mu.Lock()
		o.firmwareChanged = true
		o.mu.Unlock()
		o.log.Info("firmware values changed: handoff will be a hard reboot")
	}
	return nil
}

func (o *Orchestrator) stepReportSuccess(ctx context.Context) error {
	o.log.Info("provisioning succeeded", "hostname", o.cfg.Hostname)
	return nil
}

func (o *Orchestrator) addDetail(kv map[string]string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.detail == nil {
		o.detail = map[string]string{}
	}
	for k, v := range kv {
		if v != "" {
			o.detail[k] = v
		}
	}
}

func (o *Orchestrator) takeDetail() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.detail
	o.detail = nil
	return d
}

func (o *Orchestrator) reportStatus(ctx context.Context, r api.StatusReport) {
	sr, ok := o.provider.(config.StatusReporter)
	if !ok || sr == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = o.now()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err := sr.ReportStatus(ctx, r); err != nil {
		o.log.Warn("report status failed", "step", r.Step, "state", r.State, "error", err)
	}
}

func (o *Orchestrator) reportProgress(ctx context.Context, p api.ProgressReport) {
	pr, ok := o.provider.(config.ProgressReporter)
	if !ok || pr == nil {
		return
	}
	if p.Time.IsZero() {
		p.Time = o.now()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err := pr.ReportProgress(ctx, p); err != nil {
		o.log.Warn("report progress failed", "error", err)
	}
}
