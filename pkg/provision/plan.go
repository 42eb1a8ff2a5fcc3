package provision

import (
	"context"
	"os"
	"path/filepath"

	"github.com/booty-dev/booty/pkg/config"
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
	StepConfigureNetwork = "configure-network"
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

// Plan is an ordered list of named steps. Plans are built with Append and
// AppendWhen, so what a config leaves out shows where the plan is built,
// not inside the steps.
type Plan []Step

// Append adds the step name, running fn.
func (p Plan) Append(name string, fn func(context.Context) error) Plan {
	return append(p, Step{Name: name, Fn: fn})
}

// AppendWhen adds the step only when cond holds.
func (p Plan) AppendWhen(cond bool, name string, fn func(context.Context) error) Plan {
	if !cond {
		return p
	}
	return p.Append(name, fn)
}

// Names lists the steps' names in order.
func (p Plan) Names() []string {
	out := make([]string, len(p))
	for i, s := range p {
		out[i] = s.Name
	}
	return out
}

// ProvisionPlan returns the steps Provision runs, in order, for this config.
// Steps that have nothing to do for it are left out, so the plan bootyd
// sees is what really happens: the health checks run first, and only when
// the config has a health section (so without one no NVMe or ATA command
// reaches a disk). The steps that configure the installed OS
// run between mount-root and unmount-root, which are left out too when
// there is none.
func (o *Orchestrator) ProvisionPlan() []Step {
	c := o.cfg
	grow := c.Disk.RootPartitionSize != config.RootPartitionKeep
	onRoot := Plan{}.
		AppendWhen(grow, StepGrowFilesystem, o.stepGrowFilesystem).
		AppendWhen(o.deployHas("file-system") || o.deployHas("machine-files"), StepCopyFiles, o.stepCopyFiles).
		AppendWhen(c.Hostname != "", StepSetHostname, o.stepSetHostname).
		AppendWhen(len(c.DNS.Nameservers) > 0 || len(c.DNS.Search) > 0, StepConfigureDNS, o.stepConfigureDNS).
		AppendWhen(c.Network.Persist && c.Network.HasSetup(), StepConfigureNetwork, o.stepConfigureNetwork).
		AppendWhen(c.Kubelet.ProviderID != "" || len(c.Kubelet.NodeLabels) > 0, StepConfigureKubelet, o.stepConfigureKubelet).
		AppendWhen(c.CloudInit != (config.CloudInitSpec{}), StepCloudInitSeed, o.stepCloudInitSeed).
		AppendWhen(o.deployHas("machine-commands"), StepMachineCommands, o.stepMachineCommands).
		AppendWhen(len(c.PostProvisionCommands) > 0, StepPostProvision, o.stepPostProvision).
		AppendWhen(len(c.KernelParams) > 0, StepConfigureGRUB, o.stepConfigureGRUB).
		AppendWhen(c.WantEFIBootEntry() && o.efiBooted(), StepEFIBootEntry, o.stepEFIBootEntry).
		AppendWhen(c.Handoff == "" || c.Handoff == config.HandoffKexec, StepPrepareKexec, o.stepPrepareKexec)

	plan := Plan{}.
		AppendWhen(c.Health != nil, StepHealthCheck, o.stepHealthCheck).
		Append(StepSelectDisk, o.stepSelectDisk).
		Append(StepWriteImage, o.stepWriteImage).
		AppendWhen(grow, StepGrowPartition, o.stepGrowPartition)
	if len(onRoot) > 0 {
		plan = plan.Append(StepMountRoot, o.stepMountRoot)
		plan = append(plan, onRoot...)
		plan = plan.Append(StepUnmountRoot, o.stepUnmountRoot)
	}
	return plan.
		AppendWhen(c.Mellanox.NumVFs > 0, StepSetupMellanox, o.stepSetupMellanox).
		Append(StepReportSuccess, o.stepReportSuccess)
}

// DeprovisionPlan returns the steps Deprovision runs for this config's mode.
// Hard (deprovision): select the disk, remove the EFI entries that point at
// its partitions, wipe it. Soft: select the disk, mount the installed OS,
// rename its GRUB configurations so it no longer boots, unmount.
func (o *Orchestrator) DeprovisionPlan() []Step {
	plan := Plan{}.Append(StepSelectDisk, o.stepSelectDisk)
	if o.cfg.Mode == config.ModeSoftDeprovision {
		return plan.
			Append(StepMountRoot, o.stepMountRoot).
			Append(StepDisableBoot, o.stepDisableBoot).
			Append(StepUnmountRoot, o.stepUnmountRoot)
	}
	return plan.
		AppendWhen(o.efiBooted(), StepRemoveEFIEntries, o.stepRemoveEFIEntries).
		Append(StepWipeDisk, o.stepWipeDisk)
}

func (o *Orchestrator) deployHas(sub string) bool {
	fi, err := os.Stat(filepath.Join(o.deployDir, sub))
	return err == nil && fi.IsDir()
}
