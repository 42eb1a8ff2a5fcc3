package provision

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/booty-dev/booty/pkg/config"
)

// wipeSpan is how much is zeroed at each end of a disk: it covers the
// protective MBR, both GPT headers and tables, and the signatures of common
// filesystems, RAID and LVM metadata.
const wipeSpan = 1 << 20

// DeprovisionPlan returns the steps Deprovision runs for this config's mode.
func (o *Orchestrator) DeprovisionPlan() []Step {
	if o.cfg.Mode == config.ModeSoftDeprovision {
		return []Step{
			{Name: StepSelectDisk, Fn: o.stepSelectDisk},
			{Name: "disable-boot", Fn: func(context.Context) error {
				return errors.New("soft deprovision (rename grub.cfg) is not supported by this build yet")
			}},
		}
	}
	return []Step{
		{Name: StepSelectDisk, Fn: o.stepSelectDisk},
		{Name: StepWipeDisks, Fn: o.stepWipeDisks},
	}
}

// stepWipeDisks zeroes both ends of the selected disk, so no partition table,
// GPT backup or filesystem signature survives.
func (o *Orchestrator) stepWipeDisks(ctx context.Context) error {
	t := o.Target()
	if t == nil {
		return errors.New("no target disk selected")
	}
	if err := wipeEnds(t.Path); err != nil {
		return err
	}
	o.log.Info("disk wiped", "disk", t.Path, "bytesEachEnd", wipeSpan)
	o.addDetail(map[string]string{"wiped": t.Path})
	return nil
}

// wipeEnds zeroes the first and last wipeSpan bytes of path and syncs.
func wipeEnds(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("wipe %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		return fmt.Errorf("wipe %s: size: %w", path, err)
	}
	zero := make([]byte, wipeSpan)
	n := int64(wipeSpan)
	if size < n {
		n = size
	}
	if _, err := f.WriteAt(zero[:n], 0); err != nil {
		return fmt.Errorf("wipe %s at offset 0: %w", path, err)
	}
	if size > n {
		off := size - n
		if off < n {
			off = n
		}
		if _, err := f.WriteAt(zero[:size-off], off); err != nil {
			return fmt.Errorf("wipe %s at offset %d: %w", path, off, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wipe %s: sync: %w", path, err)
	}
	return nil
}
