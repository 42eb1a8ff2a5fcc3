package provision

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/image"
)

// The steps that act on the selected disk as a block device: select it,
// write the image, fit the partition table to it, and for deprovisioning
// remove its EFI entries and wipe it.

func (o *Orchestrator) stepSelectDisk(ctx context.Context) error {
	d, err := o.selectDisk(o.cfg.Disk)
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.selected = d
	o.mu.Unlock()
	o.log.Info("target disk chosen", "disk", d.Path, "size", d.Size, "model", d.Model, "serial", d.Serial)
	o.addDetail(d.Identity())
	o.addDetail(map[string]string{"disk": d.Path})
	return nil
}

// clientFor is a provider that lends its HTTP connections to a download
// from its own server (provider.ServerProvider.ClientFor).
type clientFor interface {
	ClientFor(rawURL, caPEM string) *http.Client
}

func (o *Orchestrator) stepWriteImage(ctx context.Context) error {
	t := o.SelectedDisk()
	if t == nil {
		return errors.New("no target disk selected")
	}
	var ca []byte
	if o.cfg.Server.CACert != "" {
		ca = []byte(o.cfg.Server.CACert)
	}
	// An image on bootyd's own files reuses the provider's connections.
	var client *http.Client
	if cf, ok := o.provider.(clientFor); ok {
		client = cf.ClientFor(o.cfg.Image.URL, o.cfg.Server.CACert)
	}
	res, err := o.writeImage(ctx, image.Options{
		HTTPClient:    client,
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
	t := o.SelectedDisk()
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

// stepRemoveEFIEntries removes the Boot#### entries whose device path names
// a partition of the selected disk, read from its partition table before the
// wipe destroys it.
func (o *Orchestrator) stepRemoveEFIEntries(ctx context.Context) error {
	t := o.SelectedDisk()
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
	t := o.SelectedDisk()
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
