package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/booty-dev/booty/pkg/safego"
)

// ErrRefuseWipe: the disk is read-only, removable or the boot medium; Wipe writes nothing to it.
var ErrRefuseWipe = errors.New("refusing to wipe disk")

// DefaultWipeEdge is how much Wipe zeroes at each end of the disk and of each partition.
const DefaultWipeEdge = 1 << 20

// WipeOptions tune Wipe. The zero value zeroes 1 MiB at each edge and
// discards, without secure erase.
type WipeOptions struct {
	// SecureErase runs the drive's own erase first: NVMe Sanitize or
	// Format NVM (SES=1), or ATA SECURITY ERASE UNIT for SATA disks.
	SecureErase bool
	// NoDiscard skips BLKDISCARD of the whole device.
	NoDiscard bool
	// EdgeBytes is zeroed at the start and end of the disk and of every
	// partition; values below 1 MiB mean 1 MiB.
	EdgeBytes int64
	// SecureEraseTimeout bounds the secure erase (12 h; ATA drives' own
	// estimate shortens it).
	SecureEraseTimeout time.Duration
	// ATAPassword is the temporary ATA user password ("booty"); the erase
	// clears it.
	ATAPassword string `json:"-"`
}

// WipeReport says what Wipe did to one disk.
type WipeReport struct {
	Disk     string            `json:"disk"`
	Identity map[string]string `json:"identity,omitempty"`
	// BytesZeroed over Regions distinct ranges.
	BytesZeroed int64 `json:"bytesZeroed"`
	Regions     int   `json:"regions"`
	// PartitionTable is "gpt", "dos" or "" (none found) before the wipe.
	PartitionTable string `json:"partitionTable,omitempty"`
	Partitions     int    `json:"partitions"`
	Discarded      bool   `json:"discarded"`
	// DiscardNote says why there was no discard ("not supported", "disabled").
	DiscardNote string `json:"discardNote,omitempty"`
	// SecureErase is the method used ("nvme-sanitize-crypto-erase",
	// "nvme-format-user-data-erase", "ata-security-erase", …) or "none".
	SecureErase string        `json:"secureErase"`
	Duration    time.Duration `json:"duration"`
	Error       string        `json:"error,omitempty"`
}

// region is a byte range [off, end).
type region struct{ off, end int64 }

// wipeRegions lists what Wipe zeroes on a disk of size bytes with table pt
// (nil: none): edge bytes at both ends of the disk, the GPT backup entries
// and header wherever the primary header says they are, and edge bytes at
// both ends of every partition (superblocks at the start; MD 1.0, LVM and
// ZFS metadata near the end). Ranges are clamped, sorted and merged.
func wipeRegions(size, edge int64, pt *PartitionTable) []region {
	rs := []region{{0, edge}, {size - edge, size}}
	if pt != nil {
		if pt.BackupHeaderOffset > 0 {
			start := pt.BackupEntriesOffset
			if start <= 0 || start > pt.BackupHeaderOffset {
				start = pt.BackupHeaderOffset
			}
			rs = append(rs, region{start, pt.BackupHeaderOffset + pt.SectorSize})
		}
		for _, p := range pt.Partitions {
			e := min(edge, p.Size)
			rs = append(rs, region{p.Start, p.Start + e}, region{p.Start + p.Size - e, p.Start + p.Size})
		}
	}
	for i := range rs {
		rs[i].off, rs[i].end = max(0, rs[i].off), min(size, rs[i].end)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].off < rs[j].off })
	var out []region
	for _, r := range rs {
		if r.end <= r.off {
			continue
		}
		if n := len(out); n > 0 && r.off <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, r.end)
			continue
		}
		out = append(out, r)
	}
	return out
}

// Wipe removes every partition table and signature booty knows from d so
// that nothing on it boots or is recognised again. In order: it refuses a
// read-only, removable or boot-medium disk (ErrRefuseWipe, nothing
// written); opens d.Path read-write and exclusive (a mounted or otherwise
// held block device fails with EBUSY); reads the partition table to learn
// the regions (wipeRegions); runs the secure erase when asked; discards the
// whole device (EOPNOTSUPP and ENOTTY count as not supported, not as
// errors); zeroes the regions; syncs; and asks the kernel to reread the
// (now empty) table, best effort. A failed secure erase or discard does not
// stop the zeroing; all failures are joined into the returned error and
// the report says what was done. The report is returned even on error.
func (m *Manager) Wipe(ctx context.Context, d Disk, opts WipeOptions) (*WipeReport, error) {
	start := time.Now()
	rep := &WipeReport{Disk: d.Path, Identity: d.Identity(), SecureErase: "none"}
	err := m.wipe(ctx, d, opts, rep)
	rep.Duration = time.Since(start)
	if err != nil {
		rep.Error = err.Error()
	}
	m.log().Info("wipe", "disk", d.Path, "zeroed", rep.BytesZeroed, "regions", rep.Regions, "discarded", rep.Discarded,
		"secureErase", rep.SecureErase, "duration", rep.Duration, "error", rep.Error)
	return rep, err
}

func (m *Manager) wipe(ctx context.Context, d Disk, opts WipeOptions, rep *WipeReport) error {
	switch {
	case d.ReadOnly:
		return fmt.Errorf("wipe %s: read-only: %w", d.Path, ErrRefuseWipe)
	case d.Removable:
		return fmt.Errorf("wipe %s: removable: %w", d.Path, ErrRefuseWipe)
	case d.BootMedium:
		return fmt.Errorf("wipe %s: boot medium or mounted: %w", d.Path, ErrRefuseWipe)
	case d.Size <= 0:
		return fmt.Errorf("wipe %s: unknown size", d.Path)
	}
	f, err := m.open(d.Path, os.O_RDWR|os.O_EXCL)
	if err != nil {
		return fmt.Errorf("wipe %s: open: %w", d.Path, err)
	}
	defer f.Close()

	edge := max(opts.EdgeBytes, DefaultWipeEdge)
	pt, terr := ReadPartitionTable(f, d.Size)
	if terr != nil {
		m.log().Info("wipe: no readable partition table, zeroing the disk's edges only", "disk", d.Path, "reason", terr)
		pt = nil
	} else {
		rep.PartitionTable, rep.Partitions = pt.Kind, len(pt.Partitions)
	}
	regions := wipeRegions(d.Size, edge, pt)

	var errs []error
	if opts.SecureErase {
		method, err := m.secureErase(ctx, f, d, opts)
		if method != "" && err == nil {
			rep.SecureErase = method
		}
		if errors.Is(err, ErrSecureEraseMultiNamespace) {
			return err // refused before anything was erased, on any disk
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(append(errs, fmt.Errorf("wipe %s: %w", d.Path, err))...)
	}
	if opts.NoDiscard {
		rep.DiscardNote = "disabled"
	} else {
		switch err := m.ioctl().Discard(f, 0, d.Size); {
		case err == nil:
			rep.Discarded = true
		case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOTTY):
			rep.DiscardNote = "not supported"
		default:
			rep.DiscardNote = err.Error()
			errs = append(errs, fmt.Errorf("wipe %s: discard: %w", d.Path, err))
		}
	}
	zero := make([]byte, 1<<20)
	for _, r := range regions {
		for off := r.off; off < r.end; off += int64(len(zero)) {
			if err := ctx.Err(); err != nil {
				return errors.Join(append(errs, fmt.Errorf("wipe %s: %w", d.Path, err))...)
			}
			n := min(int64(len(zero)), r.end-off)
			if _, err := f.WriteAt(zero[:n], off); err != nil {
				return errors.Join(append(errs, fmt.Errorf("wipe %s: zero %d bytes at offset %d: %w", d.Path, n, off, err))...)
			}
			rep.BytesZeroed += n
		}
		rep.Regions++
	}
	if err := f.Sync(); err != nil {
		errs = append(errs, fmt.Errorf("wipe %s: sync: %w", d.Path, err))
	}
	if err := m.ioctl().RereadPartitions(f); err != nil && !errors.Is(err, syscall.ENOTTY) && !errors.Is(err, syscall.EINVAL) {
		m.log().Warn("wipe: kernel keeps the old partitions until the next reread", "disk", d.Path, "error", err)
	}
	return errors.Join(errs...)
}

// WipeAll wipes disks in parallel, one goroutine per disk, and returns one
// report per disk in the order given. The error joins every disk's error;
// a failure on one disk does not stop the others.
func (m *Manager) WipeAll(ctx context.Context, disks []Disk, opts WipeOptions) ([]WipeReport, error) {
	reports := make([]WipeReport, len(disks))
	errs := make([]error, len(disks))
	var wg sync.WaitGroup
	for i, d := range disks {
		safego.Go(&wg, "wipe "+d.Path, func(err error) { errs[i] = err }, func() {
			rep, err := m.Wipe(ctx, d, opts)
			reports[i], errs[i] = *rep, err
		})
	}
	wg.Wait()
	return reports, errors.Join(errs...)
}

// Identity returns the disk's identifying properties for reports, keyed as
// Ironic's root device hints: name, size (bytes), model, serial, wwn,
// tran, by_path, hctl. Empty properties are left out.
func (d Disk) Identity() map[string]string {
	out := map[string]string{"name": d.Name, "size": strconv.FormatInt(d.Size, 10)}
	for k, v := range map[string]string{"model": d.Model, "serial": d.Serial, "wwn": d.WWN, "tran": d.Tran,
		"by_path": d.ByPath, "hctl": d.HCTL} {
		if v != "" {
			out[k] = v
		}
	}
	if d.Name == "" {
		delete(out, "name")
	}
	return out
}
