package provision

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
)

// disabledSuffix is appended to grub.cfg by a soft deprovision.
const disabledSuffix = ".booty-disabled"

// DeprovisionPlan returns the steps Deprovision runs for this config's mode.
// Hard (deprovision): select the disk, remove the EFI entries that point at
// its partitions, wipe it. Soft: select the disk, mount the installed OS,
// rename its GRUB configurations so it no longer boots, unmount.
func (o *Orchestrator) DeprovisionPlan() []Step {
	plan := []Step{{Name: StepSelectDisk, Fn: o.stepSelectDisk}}
	if o.cfg.Mode == config.ModeSoftDeprovision {
		return append(plan,
			Step{Name: StepMountRoot, Fn: o.stepMountRoot},
			Step{Name: StepDisableBoot, Fn: o.stepDisableBoot},
			Step{Name: StepUnmountRoot, Fn: o.stepUnmountRoot},
		)
	}
	if o.efiBooted() {
		plan = append(plan, Step{Name: StepRemoveEFIEntries, Fn: o.stepRemoveEFIEntries})
	}
	return append(plan, Step{Name: StepWipeDisk, Fn: o.stepWipeDisk})
}

// stepRemoveEFIEntries removes the Boot#### entries whose device path names
// a partition of the selected disk, read from its partition table before the
// wipe destroys it.
func (o *Orchestrator) stepRemoveEFIEntries(ctx context.Context) error {
	t := o.Target()
	uuids, err := o.readPartUUIDs(t)
	if err != nil {
		return err
	}
	if len(uuids) == 0 {
		o.log.Info("no GPT partitions on the disk: no EFI entry can point at it", "disk", t.Path)
		return nil
	}
	removed, err := o.removeEFI(uuids)
	if err != nil {
		return fmt.Errorf("remove EFI boot entries for %s: %w", t.Path, err)
	}
	names := make([]string, len(removed))
	for i, n := range removed {
		names[i] = fmt.Sprintf("Boot%04X", n)
	}
	o.log.Info("EFI boot entries removed", "disk", t.Path, "entries", names)
	o.addDetail(map[string]string{"efiEntriesRemoved": strings.Join(names, ",")})
	if o.listEFI != nil {
		if left, err := o.listEFI(); err == nil {
			o.addDetail(map[string]string{"efiEntriesLeft": strings.Join(left, ",")})
		}
	}
	return nil
}

// stepWipeDisk removes every partition table and signature from the
// selected disk (both ends, each partition's edges), discards it and, when
// the config asks, secure-erases it first.
func (o *Orchestrator) stepWipeDisk(ctx context.Context) error {
	t := o.Target()
	rep, err := o.wipeDisk(ctx, *t, disk.WipeOptions{SecureErase: o.cfg.Disk.SecureErase})
	if rep != nil {
		o.log.Info("disk wiped", "disk", rep.Disk, "bytesZeroed", rep.BytesZeroed, "regions", rep.Regions,
			"partitionTable", rep.PartitionTable, "discarded", rep.Discarded, "secureErase", rep.SecureErase,
			"duration", rep.Duration.Round(time.Millisecond))
		o.addDetail(map[string]string{
			"wiped": rep.Disk, "bytesZeroed": fmt.Sprint(rep.BytesZeroed), "regions": fmt.Sprint(rep.Regions),
			"discarded": fmt.Sprint(rep.Discarded), "secureErase": rep.SecureErase, "partitionTable": rep.PartitionTable,
		})
	}
	return err
}

// stepDisableBoot renames every grub.cfg of the installed OS (/boot/grub,
// /boot/grub2 and the ESP's EFI/*/), so GRUB finds no configuration and the
// machine no longer boots the OS, while its data stays.
func (o *Orchestrator) stepDisableBoot(ctx context.Context) error {
	target, err := o.mountedOS()
	if err != nil {
		return err
	}
	root := target.Root()
	var found []string
	for _, pattern := range []string{"boot/grub/grub.cfg", "boot/grub2/grub.cfg", "boot/efi/EFI/*/grub.cfg", "efi/EFI/*/grub.cfg"} {
		m, _ := filepath.Glob(filepath.Join(root, pattern))
		found = append(found, m...)
	}
	if len(found) == 0 {
		return fmt.Errorf("no grub.cfg in the installed OS on %s: nothing to disable", o.Target().Path)
	}
	var renamed []string
	for _, f := range found {
		if err := os.Rename(f, f+disabledSuffix); err != nil {
			return fmt.Errorf("disable %s: %w", strings.TrimPrefix(f, root), err)
		}
		renamed = append(renamed, strings.TrimPrefix(f, root))
	}
	o.log.Info("boot disabled: grub.cfg renamed", "files", renamed, "suffix", disabledSuffix)
	o.addDetail(map[string]string{"disabled": strings.Join(renamed, ",")})
	return nil
}
