package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bootloader"
	"github.com/booty-dev/booty/pkg/command"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/health"
	"github.com/booty-dev/booty/pkg/image"
	"github.com/booty-dev/booty/pkg/provider"
)

// reportTimeout bounds every report to the provider so a dead server cannot
// hold a step; reports are best effort.
const reportTimeout = 15 * time.Second

// DefaultKexecDir is where prepare-kexec copies the installed kernel and
// initrd, so they outlive the unmount of the installed OS.
const DefaultKexecDir = "/run/booty/kexec"

// installedOS is the installed OS mounted for configuration; *InstalledOS
// is the real one.
type installedOS interface {
	Mount(ctx context.Context) error
	Unmount() error
	Root() string
	RootPartition() (disk.Partition, bool)
	ESP() (disk.Partition, bool)
	Partitions() []disk.Partition
}

// KexecEntry is the installed kernel that the handoff loads.
type KexecEntry struct {
	Kernel, Initrd, Cmdline string
	// Source says where the entry came from (a BLS file, grub.cfg).
	Source string
}

// Orchestrator runs the full provisioning pipeline.
type Orchestrator struct {
	cfg      *config.MachineConfig
	provider config.Provider
	disks    *disk.Manager
	conf     *Configurator
	log      *slog.Logger
	debug    *debugDumper

	mu              sync.Mutex
	selected        *disk.Disk
	installed       installedOS
	imageWritten    bool
	kexec           *KexecEntry
	detail          map[string]string
	firmwareChanged bool
	allowHTTP       bool // the operator's opt-in to plain http image URLs

	// Seams, set to the real implementations by NewOrchestrator.
	now            func() time.Time
	selectDisk     func(spec config.DiskSpec) (*disk.Disk, error)
	writeImage     func(ctx context.Context, opts image.Options) (image.Result, error)
	dumpDebugState func(step string)
	setupMellanox  func(ctx context.Context, numVFs int) (bool, error)
	newInstalledOS func(disk string) installedOS
	growPartition  func(ctx context.Context, d *disk.Disk, size int64) (string, error)
	growFilesystem func(ctx context.Context, root string, p disk.Partition) error
	efiBooted      func() bool
	findBootEntry  func(root string) (*bootloader.BootEntry, error)
	wipeDisk       func(ctx context.Context, d disk.Disk, opts disk.WipeOptions) (*disk.WipeReport, error)
	removeEFI      func(partUUIDs map[string]bool) ([]uint16, error)
	listEFI        func() ([]string, error)
	readPartUUIDs  func(d *disk.Disk) (map[string]bool, error)
	zeroEnds       func(path string) error
	// rereadPartitions makes the kernel read the disk's partition table
	// (mount-root, when no grow-partition step did).
	rereadPartitions func(dev string) error
	healthChecks     func(ctx context.Context, opts health.Options) []health.CheckResult // nil: health.NewChecker
	deployDir        string
	kexecDir         string
	devDir           string
}

// NewOrchestrator creates an Orchestrator with the given dependencies. The
// provider's optional capabilities (status, progress, log reporting) are found
// by type assertion when the orchestrator reports.
func NewOrchestrator(cfg *config.MachineConfig, provider config.Provider, diskMgr *disk.Manager) *Orchestrator {
	o := &Orchestrator{
		cfg:       cfg,
		provider:  provider,
		disks:     diskMgr,
		conf:      NewConfigurator(diskMgr),
		log:       slog.Default().With("component", "provision"),
		debug:     newDebugDumper(),
		now:       time.Now,
		deployDir: DefaultDeployDir,
		kexecDir:  DefaultKexecDir,
		devDir:    "/dev",
	}
	o.selectDisk = func(spec config.DiskSpec) (*disk.Disk, error) {
		if o.disks == nil {
			return nil, errors.New("no disk manager")
		}
		// Validation parsed the hints with the same function.
		hints, err := disk.ParseHints(spec.Hints)
		if err != nil {
			return nil, fmt.Errorf("disk.hints: %w", err)
		}
		return o.disks.Select(disk.Spec{Device: spec.Device, Hints: hints}, 0)
	}
	o.writeImage = image.Write
	o.debug.cfg = cfg
	o.dumpDebugState = o.debug.dump
	o.setupMellanox = func(ctx context.Context, numVFs int) (bool, error) { return o.conf.SetupMellanox(ctx, numVFs) }
	o.newInstalledOS = func(d string) installedOS {
		t := NewInstalledOS(o.disks, d)
		t.Log = o.log
		return t
	}
	o.rereadPartitions = func(dev string) error { return o.disks.RereadPartitions(dev) }
	o.growPartition = func(ctx context.Context, d *disk.Disk, size int64) (string, error) {
		return o.disks.GrowPartitionTable(ctx, *d, size)
	}
	o.growFilesystem = func(ctx context.Context, root string, p disk.Partition) error {
		return disk.GrowFilesystem(ctx, command.Exec{Log: o.log}, root, p.Path, p.FSType)
	}
	// One place decides whether this is a UEFI machine: the configurator,
	// whose EFI methods refuse with ErrNotEFI otherwise.
	o.efiBooted = func() bool { return o.conf.checkEFI() == nil }
	o.findBootEntry = bootloader.DefaultEntry
	o.wipeDisk = func(ctx context.Context, d disk.Disk, opts disk.WipeOptions) (*disk.WipeReport, error) {
		return o.disks.Wipe(ctx, d, opts)
	}
	o.removeEFI = func(uuids map[string]bool) ([]uint16, error) {
		return bootloader.EFIVars{Log: o.log}.RemoveBootEntries(func(lo bootloader.LoadOption) bool {
			p, ok := lo.Partition()
			return ok && uuids[p.PartUUID]
		})
	}
	o.listEFI = func() ([]string, error) {
		entries, err := bootloader.EFIVars{Log: o.log}.BootEntries()
		var left []string
		for _, e := range entries {
			left = append(left, fmt.Sprintf("Boot%04X", e.Num))
		}
		return left, err
	}
	o.readPartUUIDs = func(d *disk.Disk) (map[string]bool, error) { return o.disks.PartUUIDs(*d) }
	o.zeroEnds = func(path string) error { return o.disks.ZeroEnds(path) }
	return o
}

// SetAllowHTTP passes the operator's opt-in to plain http:// image and
// bmap URLs (kernel parameter booty.insecure-http=1) to the image writer;
// without it such URLs fail the write-image step before anything is written.
func (o *Orchestrator) SetAllowHTTP(allow bool) { o.allowHTTP = allow }

// SetLogger routes the orchestrator's logs to l.
func (o *Orchestrator) SetLogger(l *slog.Logger) {
	o.log = l.With("component", "provision")
	o.debug.setLogger(l)
	o.conf.SetLogger(l)
}

// FirmwareChanged reports whether any provisioning step changed firmware values that require a hard reboot (not kexec) to reinitialize.
func (o *Orchestrator) FirmwareChanged() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.firmwareChanged
}

// SelectedDisk returns the disk the select-disk step chose, or nil before it ran.
func (o *Orchestrator) SelectedDisk() *disk.Disk {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.selected
}

// Kexec returns the installed kernel prepared for a kexec handoff, or nil
// when the run did not prepare one.
func (o *Orchestrator) Kexec() *KexecEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kexec
}

// Provision runs all provisioning steps sequentially. On failure it returns
// a *StepError naming the step; the failed step has already been reported
// and debug state dumped, the installed OS unmounted, and, when the image
// had been written, the disk made unbootable again. The machine-level
// outcome (provisioned or error) is reported before returning.
func (o *Orchestrator) Provision(ctx context.Context) error {
	return o.runPlan(ctx, o.ProvisionPlan(), api.StateProvisioned)
}

// Deprovision runs the deprovisioning pipeline. Mode "soft" renames grub.cfg to make the system unbootable. Mode "hard" (default) removes the EFI boot entries that point at the selected disk and wipes that disk only (DeprovisionPlan).
func (o *Orchestrator) Deprovision(ctx context.Context) error {
	return o.runPlan(ctx, o.DeprovisionPlan(), api.StateDeprovisioned)
}

func (o *Orchestrator) runPlan(ctx context.Context, plan []Step, success string) error {
	err := executor{o: o}.run(ctx, plan)
	if err != nil {
		o.cleanupAfterFailure()
		o.reportStatus(ctx, api.StatusReport{Step: api.StepMachine, State: api.StateError, Error: err.Error()})
		return err
	}
	o.reportStatus(ctx, api.StatusReport{Step: api.StepMachine, State: success})
	return nil
}

// cleanupAfterFailure unmounts the installed OS and, when the image was
// written, zeroes both ends of the disk: a disk is never left bootable by a
// run that failed.
func (o *Orchestrator) cleanupAfterFailure() {
	o.mu.Lock()
	t, mounted, written := o.selected, o.installed, o.imageWritten
	o.installed = nil
	o.mu.Unlock()
	if mounted != nil {
		if err := mounted.Unmount(); err != nil {
			o.log.Error("unmount after failure", "error", err)
		}
	}
	if written && t != nil {
		if err := o.zeroEnds(t.Path); err != nil {
			o.log.Error("cannot make the disk unbootable after the failure", "disk", t.Path, "error", err)
			return
		}
		o.log.Warn("disk made unbootable after the failure: partition tables zeroed", "disk", t.Path)
	}
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
	sr, ok := o.provider.(provider.StatusReporter)
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
	pr, ok := o.provider.(provider.ProgressReporter)
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
