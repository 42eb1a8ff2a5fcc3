package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/fsprobe"
)

// StartLBA is the partition's first sector in the table's sector size.
func (p Partition) StartLBA() uint64 { return uint64(p.Start / p.sectorSize()) }

// SizeLBA is the partition's length in the table's sector size.
func (p Partition) SizeLBA() uint64 { return uint64(p.Size / p.sectorSize()) }

func (p Partition) sectorSize() int64 {
	if p.SectorSize > 0 {
		return p.SectorSize
	}
	return 512
}

// String describes the partition the way errors and logs show it:
// "/dev/vda1 type=<guid> partlabel="x" fs=ext4 label="root" uuid=...".
func (p Partition) String() string {
	var b strings.Builder
	b.WriteString(p.Path)
	if p.Type != "" {
		fmt.Fprintf(&b, " type=%s", p.Type)
	}
	if p.Name != "" {
		fmt.Fprintf(&b, " partlabel=%q", p.Name)
	}
	fs := p.FSType
	if fs == "" {
		fs = "unknown"
	}
	fmt.Fprintf(&b, " fs=%s", fs)
	if p.Label != "" {
		fmt.Fprintf(&b, " label=%q", p.Label)
	}
	if p.UUID != "" {
		fmt.Fprintf(&b, " uuid=%s", p.UUID)
	}
	return b.String()
}

// ReadPartitions lists the partitions of the disk dev ("/dev/vda", "vda"
// or a link to it) with their device nodes and filesystems: it reads the
// partition table (ReadPartitionTable), waits (bounded by NodeTimeout and
// ctx) for each partition's node under DevRoot, and probes each
// partition's superblock (fsprobe; unknown content leaves FSType empty).
// Errors name the disk; ErrNoPartitionTable is wrapped when it has none,
// ErrNodesTimeout when a node did not appear.
func (m *Manager) ReadPartitions(ctx context.Context, dev string) ([]Partition, error) {
	name := m.kernelName(dev)
	path := filepath.Join(m.devRoot(), name)
	f, err := m.open(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("read partitions of %s: %w", dev, err)
	}
	pt, err := ReadPartitionTable(f, f.Size())
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read partitions of %s: %w", dev, err)
	}
	timeout := m.NodeTimeout
	if timeout <= 0 {
		timeout = DefaultNodeTimeout
	}
	deadline := time.Now().Add(timeout)
	parts := pt.Partitions
	for i := range parts {
		p := &parts[i]
		p.Path = filepath.Join(m.devRoot(), PartitionName(name, p.Number))
		if err := m.waitNode(ctx, p.Path, deadline); err != nil {
			return nil, fmt.Errorf("read partitions of %s: %w", dev, err)
		}
		if err := m.probeFS(p); err != nil {
			return nil, fmt.Errorf("read partitions of %s: %w", dev, err)
		}
	}
	return parts, nil
}

// waitNode polls until path exists (devtmpfs creates partition nodes
// shortly after the kernel read the table), until deadline or ctx ends.
func (m *Manager) waitNode(ctx context.Context, path string, deadline time.Time) error {
	poll := m.PollInterval
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	for {
		if st, err := os.Stat(path); err == nil && !st.IsDir() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("device node %s: %w", path, ErrNodesTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// probeFS fills FSType, UUID and Label of p from its superblock.
func (m *Manager) probeFS(p *Partition) error {
	info, err := m.probeDevice(p.Path)
	if errors.Is(err, fsprobe.ErrUnknown) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read superblock of %s: %w", p.Path, err)
	}
	p.FSType, p.UUID, p.Label = info.Type, info.UUID, info.Label
	return nil
}

// PartUUIDs returns the GPT partition GUIDs of d, lower case; none for a
// disk without a partition table or with an MBR.
func (m *Manager) PartUUIDs(d Disk) (map[string]bool, error) {
	f, err := m.open(d.Path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("read the partition table of %s: %w", d.Path, err)
	}
	defer f.Close()
	pt, err := ReadPartitionTable(f, f.Size())
	if errors.Is(err, ErrNoPartitionTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the partition table of %s: %w", d.Path, err)
	}
	uuids := map[string]bool{}
	for _, p := range pt.Partitions {
		if p.PartUUID != "" {
			uuids[strings.ToLower(p.PartUUID)] = true
		}
	}
	return uuids, nil
}

// EndsSpan is how much ZeroEnds zeroes at each end of a disk: it covers
// the protective MBR, both GPT headers and tables, and the signatures of
// common filesystems, RAID and LVM metadata.
const EndsSpan = 1 << 20

// ZeroEnds makes a disk unbootable after a failed run: it zeroes the
// first and last EndsSpan bytes of path and syncs. Unlike Wipe it refuses
// nothing: the caller wrote the image there itself.
func (m *Manager) ZeroEnds(path string) error {
	f, err := m.open(path, os.O_WRONLY)
	if err != nil {
		return fmt.Errorf("zero the ends of %s: %w", path, err)
	}
	defer f.Close()
	size := f.Size()
	n := min(int64(EndsSpan), size)
	zero := make([]byte, n)
	if _, err := f.WriteAt(zero, 0); err != nil {
		return fmt.Errorf("zero %s at offset 0: %w", path, err)
	}
	if size > n {
		off := max(size-n, n)
		if _, err := f.WriteAt(zero[:size-off], off); err != nil {
			return fmt.Errorf("zero %s at offset %d: %w", path, off, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("zero the ends of %s: sync: %w", path, err)
	}
	return nil
}

// GrowPartitionTable fits the partition table the image wrote to the whole
// disk d: GrowGPT moves the backup GPT to the end and grows the root
// partition to size bytes (0: fill the disk), then the kernel re-reads the
// grown table (RereadPartitions, which waits for the partition nodes). An MBR image is left as written (booty grows GPT disks
// only): the result says so and the error is nil. The result describes
// what changed, for the step's report.
func (m *Manager) GrowPartitionTable(ctx context.Context, d Disk, size int64) (string, error) {
	f, err := m.open(d.Path, os.O_RDWR)
	if err != nil {
		return "", fmt.Errorf("grow the partition table of %s: %w", d.Path, err)
	}
	res, err := GrowGPT(f, GrowOptions{Size: size, SectorSize: d.LogicalBlockSize})
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", d.Path, cerr)
	}
	if errors.Is(err, ErrNoGPT) {
		m.log().Warn("no GPT on the disk: partition table left as the image wrote it", "disk", d.Path)
		return "not grown: no GPT", nil
	}
	if err != nil {
		return "", fmt.Errorf("grow the partition table of %s: %w", d.Path, err)
	}
	if err := m.RereadPartitions(d.Path); err != nil {
		return "", err
	}
	return fmt.Sprintf("%+v", *res), nil
}
