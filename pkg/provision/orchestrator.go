package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bootloader"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/image"
)

// Step names. Tests and bootyd see these; they are part of the contract.
const (
	StepSelectDisk       = "select-disk"
	StepWriteImage       = "write-image"
	StepGrowPartition    = "grow-partition"
	StepMountRoot        = "mount-root"
	StepGrowFilesystem   = "grow-filesystem"
	StepCopyFiles        = "copy-files"
	StepSetHostname      = "set-hostname"
	StepConfigureDNS     = "configure-dns"
	StepConfigureKubelet = "configure-kubelet"
	StepCloudInitSeed    = "cloud-init-seed"
	StepMachineCommands  = "machine-commands"
	StepPostProvision    = "post-provision-commands"
	StepConfigureGRUB    = "configure-grub"
	StepEFIBootEntry     = "efi-boot-entry"
	StepSetupMellanox    = "setup-mellanox"
	StepPrepareKexec     = "prepare-kexec"
	StepUnmountRoot      = "unmount-root"
	StepReportSuccess    = "report-success"
	StepWipeDisk         = "wipe-disk"
	StepRemoveEFIEntries = "remove-efi-entries"
	StepDisableBoot      = "disable-boot"
)

// reportTimeout bounds every report to the provider so a dead server cannot
// hold a step; reports are best effort.
const reportTimeout = 15 * time.Second

// DefaultKexecDir is where prepare-kexec copies the installed kernel and
// initrd, so they outlive the unmount of the installed OS.
const DefaultKexecDir = "/run/booty/kexec"

// osTarget is the installed OS mounted for configuration; *Target is the
// real one.
type osTarget interface {
	Mount(ctx context.Context) error
	Unmount() error
	Root() string
	RootPartition() (Partition, bool)
	ESP() (Partition, bool)
	Partitions() []Partition
}

// KexecTarget is the installed kernel that the handoff loads.
type KexecTarget struct {
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

	mu              sync.Mutex
	target          *disk.Disk
	os              osTarget
	imageWritten    bool
	kexec           *KexecTarget
	detail          map[string]string
	firmwareChanged bool
	allowHTTP       bool // the operator's opt-in to plain http image URLs

	// Seams, set to the real implementations by NewOrchestrator.
	now            func() time.Time
	selectDisk     func(spec config.DiskSpec) (*disk.Disk, error)
	writeImage     func(ctx context.Context, opts image.Options) (image.Result, error)
	dumpDebugState func(step string)
	setupMellanox  func(ctx context.Context, numVFs int) (bool, error)
	newTarget      func(disk string) osTarget
	growPartition  func(ctx context.Context, d *disk.Disk, size int64) (string, error)
	growFilesystem func(ctx context.Context, root string, p Partition) error
	efiBooted      func() bool
	findBootEntry  func(root string) (*bootloader.BootEntry, error)
	wipeDisk       func(ctx context.Context, d disk.Disk, opts disk.WipeOptions) (*disk.WipeReport, error)
	removeEFI      func(partUUIDs map[string]bool) ([]uint16, error)
	listEFI        func() ([]string, error)
	readPartUUIDs  func(d *disk.Disk) (map[string]bool, error)
	deployDir      string
	kexecDir       string
	devDir         string
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
		now:       time.Now,
		deployDir: DefaultDeployDir,
		kexecDir:  DefaultKexecDir,
		devDir:    "/dev",
	}
	o.selectDisk = func(spec config.DiskSpec) (*disk.Disk, error) {
		if o.disks == nil {
			return nil, errors.New("no disk manager")
		}
		return o.disks.Select(disk.Spec{Device: spec.Device, Hints: spec.Hints}, 0)
	}
	o.writeImage = image.Write
	o.dumpDebugState = func(step string) {
		setDebugConfig(o.cfg)
		DumpDebugState(step)
	}
	o.setupMellanox = func(ctx context.Context, numVFs int) (bool, error) { return o.conf.SetupMellanox(ctx, numVFs) }
	o.newTarget = func(d string) osTarget {
		t := NewTarget(d)
		t.Log = o.log
		return t
	}
	o.growPartition = o.growPartitionTable
	o.growFilesystem = func(ctx context.Context, root string, p Partition) error {
		return disk.GrowFilesystem(ctx, ExecRunner{Log: o.log}, root, p.Path, p.FSType)
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
	o.readPartUUIDs = readPartUUIDs
	return o
}

// SetAllowHTTP passes the operator's opt-in to plain http:// image and
// bmap URLs (kernel parameter booty.insecure-http=1) to the image writer;
// without it such URLs fail the write-image step before anything is written.
func (o *Orchestrator) SetAllowHTTP(allow bool) { o.allowHTTP = allow }

// SetLogger routes the orchestrator's logs to l.
func (o *Orchestrator) SetLogger(l *slog.Logger) {
	o.log = l.With("component", "provision")
	o.conf.SetLogger(l)
}

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

// Kexec returns the installed kernel prepared for a kexec handoff, or nil
// when the run did not prepare one.
func (o *Orchestrator) Kexec() *KexecTarget {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kexec
}

// ProvisionPlan returns the steps Provision runs, in order, for this config.
// Steps that have nothing to do for it are left out, so the plan bootyd
// sees is what really happens.
func (o *Orchestrator) ProvisionPlan() []Step {
	c := o.cfg
	grow := c.Disk.RootPartitionSize != config.RootPartitionKeep
	plan := []Step{
		{Name: StepSelectDisk, Fn: o.stepSelectDisk},
		{Name: StepWriteImage, Fn: o.stepWriteImage},
	}
	if grow {
		plan = append(plan, Step{Name: StepGrowPartition, Fn: o.stepGrowPartition})
	}
	var onRoot []Step
	if grow {
		onRoot = append(onRoot, Step{Name: StepGrowFilesystem, Fn: o.stepGrowFilesystem})
	}
	if o.deployHas("file-system") || o.deployHas("machine-files") {
		onRoot = append(onRoot, Step{Name: StepCopyFiles, Fn: o.stepCopyFiles})
	}
	if c.Hostname != "" {
		onRoot = append(onRoot, Step{Name: StepSetHostname, Fn: func(context.Context) error { return o.conf.SetHostname(c) }})
	}
	if len(c.DNS.Nameservers) > 0 || len(c.DNS.Search) > 0 {
		onRoot = append(onRoot, Step{Name: StepConfigureDNS, Fn: func(context.Context) error { return o.conf.ConfigureDNS(c) }})
	}
	if c.Kubelet.ProviderID != "" || len(c.Kubelet.NodeLabels) > 0 {
		onRoot = append(onRoot, Step{Name: StepConfigureKubelet, Fn: func(context.Context) error { return o.conf.ConfigureKubelet(c) }})
	}
	if c.CloudInit != (config.CloudInitSpec{}) {
		onRoot = append(onRoot, Step{Name: StepCloudInitSeed, Fn: func(context.Context) error { return o.conf.WriteCloudInitSeed(c) }})
	}
	if o.deployHas("machine-commands") {
		onRoot = append(onRoot, Step{Name: StepMachineCommands, Fn: o.conf.RunMachineCommands})
	}
	if len(c.PostProvisionCommands) > 0 {
		onRoot = append(onRoot, Step{Name: StepPostProvision, Fn: func(ctx context.Context) error {
			return o.conf.RunPostProvisionCmds(ctx, c.PostProvisionCommands)
		}})
	}
	if len(c.KernelParams) > 0 {
		onRoot = append(onRoot, Step{Name: StepConfigureGRUB, Fn: func(ctx context.Context) error { return o.conf.ConfigureGRUB(ctx, c) }})
	}
	if c.WantEFIBootEntry() && o.efiBooted() {
		onRoot = append(onRoot, Step{Name: StepEFIBootEntry, Fn: o.stepEFIBootEntry})
	}
	if c.Handoff == "" || c.Handoff == config.HandoffKexec {
		onRoot = append(onRoot, Step{Name: StepPrepareKexec, Fn: o.stepPrepareKexec})
	}
	if len(onRoot) > 0 {
		plan = append(plan, Step{Name: StepMountRoot, Fn: o.stepMountRoot})
		plan = append(plan, onRoot...)
		plan = append(plan, Step{Name: StepUnmountRoot, Fn: o.stepUnmountRoot})
	}
	if c.Mellanox.NumVFs > 0 {
		plan = append(plan, Step{Name: StepSetupMellanox, Fn: o.stepSetupMellanox})
	}
	return append(plan, Step{Name: StepReportSuccess, Fn: o.stepReportSuccess})
}

func (o *Orchestrator) deployHas(sub string) bool {
	fi, err := os.Stat(filepath.Join(o.deployDir, sub))
	return err == nil && fi.IsDir()
}

// Provision runs all provisioning steps sequentially. On failure it returns
// a *StepError naming the step; the failed step has already been reported
// and debug state dumped, the installed OS unmounted, and, when the image
// had been written, the disk made unbootable again. The machine-level
// outcome (provisioned or error) is reported before returning.
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
	t, mounted, written := o.target, o.os, o.imageWritten
	o.os = nil
	o.mu.Unlock()
	if mounted != nil {
		if err := mounted.Unmount(); err != nil {
			o.log.Error("unmount after failure", "error", err)
		}
	}
	if written && t != nil {
		if err := wipeEnds(t.Path); err != nil {
			o.log.Error("cannot make the disk unbootable after the failure", "disk", t.Path, "error", err)
			return
		}
		o.log.Warn("disk made unbootable after the failure: partition tables zeroed", "disk", t.Path)
	}
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
	o.addDetail(d.Identity())
	o.addDetail(map[string]string{"disk": d.Path})
	return nil
}

func (o *Orchestrator) stepWriteImage(ctx context.Context) error {
	t := o.Target()
	if t == nil {
		return errors.New("no target disk selected")
	}
	var ca []byte
	if o.cfg.Server.CACert != "" {
		ca = []byte(o.cfg.Server.CACert)
	}
	res, err := o.writeImage(ctx, image.Options{
		Source:        o.cfg.Image.URL,
		Checksum:      o.cfg.Image.Checksum,
		ImageChecksum: o.cfg.Image.ImageChecksum,
		Bmap:          o.cfg.Image.BmapURL,
		BmapChecksum:  o.cfg.Image.BmapChecksum,
		Target:        t.Path,
		CACert:        ca,
		AllowHTTP:     o.allowHTTP,
		Log:           o.log.With("step", StepWriteImage),
		Progress: func(p image.Progress) {
			o.reportProgress(ctx, api.ProgressReport{Step: StepWriteImage, BytesDone: p.BytesDone,
				BytesTotal: p.BytesTotal, RateBPS: p.Rate, ETASeconds: p.ETA.Seconds()})
		},
	})
	if err != nil {
		return fmt.Errorf("write %s to %s: %w", o.cfg.Image.URL, t.Path, err)
	}
	o.mu.Lock()
	o.imageWritten = true
	o.mu.Unlock()
	o.log.Info("image written and verified", "disk", t.Path, "bytes", res.ImageSize,
		"digest", res.ImageDigest, "duration", res.Duration.Round(time.Millisecond))
	o.addDetail(map[string]string{"bytes": fmt.Sprint(res.ImageSize), "sourceDigest": res.SourceDigest,
		"imageDigest": res.ImageDigest})
	return nil
}

// stepGrowPartition moves the backup GPT to the end of the disk and grows
// the root partition, then makes the kernel see the new table.
func (o *Orchestrator) stepGrowPartition(ctx context.Context) error {
	t := o.Target()
	var size int64
	if s := o.cfg.Disk.RootPartitionSize; s != "" {
		n, err := disk.ParseSize(s)
		if err != nil {
			return fmt.Errorf("disk.rootPartitionSize: %w", err)
		}
		size = n
	}
	what, err := o.growPartition(ctx, t, size)
	if err != nil {
		return err
	}
	o.log.Info("partition table grown", "disk", t.Path, "result", what)
	o.addDetail(map[string]string{"grown": what})
	return nil
}

func (o *Orchestrator) growPartitionTable(ctx context.Context, d *disk.Disk, size int64) (string, error) {
	if err := o.disks.RereadPartitions(d.Path); err != nil {
		return "", err
	}
	f, err := os.OpenFile(d.Path, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", d.Path, err)
	}
	res, err := disk.GrowGPT(f, d.Size, disk.GrowOptions{Size: size, SectorSize: d.LogicalBlockSize})
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", d.Path, cerr)
	}
	if errors.Is(err, disk.ErrNoGPT) {
		// An MBR image: booty grows GPT disks only; the image boots as written.
		o.log.Warn("no GPT on the disk: partition table left as the image wrote it", "disk", d.Path)
		return "not grown: no GPT", nil
	}
	if err != nil {
		return "", fmt.Errorf("grow the partition table of %s: %w", d.Path, err)
	}
	if err := o.disks.RereadPartitions(d.Path); err != nil {
		return "", err
	}
	return fmt.Sprintf("%+v", *res), nil
}

func (o *Orchestrator) stepMountRoot(ctx context.Context) error {
	t := o.Target()
	target := o.newTarget(t.Path)
	if err := target.Mount(ctx); err != nil {
		// Mount unmounts what it mounted before failing.
		return err
	}
	o.mu.Lock()
	o.os = target
	o.mu.Unlock()
	o.conf.SetRootDir(target.Root())
	o.linkDiskNodes(target.Partitions())
	if p, ok := target.RootPartition(); ok {
		o.addDetail(map[string]string{"root": p.String()})
	}
	return nil
}

// linkDiskNodes creates the /dev/disk/by-uuid, by-partuuid and by-label
// links that udev would (the initramfs has no udev). The installed OS's
// tools look for them: grub-mkconfig writes root=UUID=... only when
// /dev/disk/by-uuid/<uuid> exists. Failures are logged, not fatal.
func (o *Orchestrator) linkDiskNodes(parts []Partition) {
	for _, p := range parts {
		for dir, name := range map[string]string{"by-uuid": p.UUID, "by-partuuid": p.PartUUID, "by-label": p.Label} {
			if name == "" || p.Path == "" || strings.ContainsAny(name, "/") {
				continue
			}
			d := filepath.Join(o.devDir, "disk", dir)
			link := filepath.Join(d, name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				o.log.Warn("cannot create device links", "dir", d, "error", err)
				return
			}
			_ = os.Remove(link)
			if err := os.Symlink(p.Path, link); err != nil {
				o.log.Warn("cannot create device link", "link", link, "error", err)
			}
		}
	}
}

func (o *Orchestrator) mountedOS() (osTarget, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.os == nil {
		return nil, errors.New("the installed OS is not mounted")
	}
	return o.os, nil
}

func (o *Orchestrator) stepGrowFilesystem(ctx context.Context) error {
	target, err := o.mountedOS()
	if err != nil {
		return err
	}
	p, ok := target.RootPartition()
	if !ok {
		return errors.New("no root partition to grow")
	}
	return o.growFilesystem(ctx, target.Root(), p)
}

func (o *Orchestrator) stepCopyFiles(ctx context.Context) error {
	if err := o.conf.CopyProvisionerFiles(); err != nil {
		return err
	}
	return o.conf.CopyMachineFiles()
}

func (o *Orchestrator) stepEFIBootEntry(ctx context.Context) error {
	t := o.Target()
	if err := o.conf.RemoveEFIBootEntries(ctx); err != nil {
		return err
	}
	if err := o.conf.CreateEFIBootEntry(ctx, t.Path, ""); err != nil {
		return err
	}
	if order, err := o.conf.efiVars.BootOrder(); err == nil && len(order) > 0 {
		o.addDetail(map[string]string{"efiBootEntry": fmt.Sprintf("Boot%04X", order[0])})
	}
	return nil
}

// stepPrepareKexec finds the installed OS's default boot entry and copies
// its kernel and initrds out of the installed OS, which is unmounted before
// the handoff.
func (o *Orchestrator) stepPrepareKexec(ctx context.Context) error {
	target, err := o.mountedOS()
	if err != nil {
		return err
	}
	e, err := o.findBootEntry(target.Root())
	if err != nil {
		return fmt.Errorf("find the installed kernel: %w", err)
	}
	if err := os.MkdirAll(o.kexecDir, 0o700); err != nil {
		return fmt.Errorf("prepare kexec: %w", err)
	}
	k := &KexecTarget{Kernel: filepath.Join(o.kexecDir, "vmlinuz"), Cmdline: e.Cmdline, Source: e.Source}
	if err := concatFiles(k.Kernel, []string{e.Kernel}); err != nil {
		return fmt.Errorf("prepare kexec: %w", err)
	}
	initrds := e.Initrds
	if len(initrds) == 0 && e.Initrd != "" {
		initrds = []string{e.Initrd}
	}
	if len(initrds) > 0 {
		k.Initrd = filepath.Join(o.kexecDir, "initrd")
		if err := concatFiles(k.Initrd, initrds); err != nil {
			return fmt.Errorf("prepare kexec: %w", err)
		}
	}
	o.mu.Lock()
	o.kexec = k
	o.mu.Unlock()
	o.log.Info("kexec target ready", "entry", e.Title, "source", e.Source, "kernel", e.Kernel, "cmdline", e.Cmdline)
	o.addDetail(map[string]string{"kernel": e.Kernel, "cmdline": e.Cmdline})
	return nil
}

// concatFiles writes the concatenation of srcs to dst (initrds may be
// several cpio archives; the kernel reads them back to back).
func concatFiles(dst string, srcs []string) error {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for _, s := range srcs {
		in, err := os.Open(s)
		if err != nil {
			out.Close()
			return err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			out.Close()
			return fmt.Errorf("copy %s to %s: %w", s, dst, err)
		}
	}
	return out.Close()
}

func (o *Orchestrator) stepUnmountRoot(ctx context.Context) error {
	o.mu.Lock()
	target := o.os
	o.os = nil
	o.mu.Unlock()
	if target == nil {
		return nil
	}
	return target.Unmount()
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
	o.addDetail(map[string]string{"firmwareChanged": fmt.Sprint(changed)})
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
