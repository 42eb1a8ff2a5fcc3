package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BLKPG operations, as in <linux/blkpg.h>.
const (
	BLKPGAdd    = 1
	BLKPGDelete = 2
	BLKPGResize = 3
)

// BlockIoctl issues the block-device ioctls; the Linux implementation needs
// a BlockDevice with an Fd() (an *os.File), tests use fakes.
type BlockIoctl interface {
	// RereadPartitions is BLKRRPART: the kernel drops and rescans all partitions.
	RereadPartitions(f BlockDevice) error
	// Partition is BLKPG with op BLKPGAdd/Delete/Resize for partition number
	// num at start with length, in bytes.
	Partition(f BlockDevice, op, num int, start, length int64) error
	// Discard is BLKDISCARD of length bytes at start.
	Discard(f BlockDevice, start, length int64) error
}

// ErrNodesTimeout: partition nodes did not appear in sysfs or /dev in time.
var ErrNodesTimeout = errors.New("partition nodes did not appear")

// PartitionName is the kernel name of partition n of disk: "vda3",
// "nvme0n1p3" (a "p" when the disk name ends in a digit).
func PartitionName(disk string, n int) string {
	if disk != "" && disk[len(disk)-1] >= '0' && disk[len(disk)-1] <= '9' {
		return disk + "p" + strconv.Itoa(n)
	}
	return disk + strconv.Itoa(n)
}

// RereadPartitions makes the kernel see the partition table now on dev
// ("/dev/vda" or "vda"). It opens the device read-only and issues
// BLKRRPART; EBUSY (a partition is in use) is retried with m.Retry's bounded
// backoff. When the disk stays busy, or when after BLKRRPART sysfs does not
// list exactly the table's partitions (a kernel without that table's
// parser), it updates the kernel per partition with BLKPG:
// partitions the kernel lacks are added, ones whose size changed are
// resized, ones that moved or vanished are deleted (and re-added); a busy
// partition that would have to move is an error. Then it waits up to
// NodeTimeout for SysRoot/class/block/<part> and DevRoot/<part> of every
// partition in the table (devtmpfs creates the nodes; there is no udev).
// Errors name the device and the step; ErrNodesTimeout when nodes are missing.
func (m *Manager) RereadPartitions(dev string) error {
	name := m.kernelName(dev)
	path := filepath.Join(m.devRoot(), name)
	log := m.log().With("disk", name)
	f, err := m.open(path, os.O_RDONLY)
	if err != nil {
		return fmt.Errorf("reread partitions of %s: %w", path, err)
	}
	defer f.Close()

	retry := m.Retry
	if retry.Attempts <= 0 {
		retry = DefaultRetry
	}
	for attempt := 1; ; attempt++ {
		err = m.ioctl().RereadPartitions(f)
		if err == nil || !errors.Is(err, syscall.EBUSY) || attempt >= retry.Attempts {
			break
		}
		d := retry.Delay(attempt)
		log.Info("partition table reread busy, retrying", "attempt", attempt, "of", retry.Attempts, "wait", d)
		m.sleep(d)
	}
	size, serr := readInt(filepath.Join(m.SysRoot, "class", "block", name), "size")
	if serr != nil {
		return fmt.Errorf("reread partitions of %s: read size: %w", path, serr)
	}
	pt, terr := ReadPartitionTable(f, size*512)
	if terr != nil && !errors.Is(terr, ErrNoGPT) {
		return fmt.Errorf("reread partitions of %s: %w", path, terr)
	}
	if pt == nil {
		pt = &PartitionTable{}
	}
	switch {
	case err == nil:
		// A kernel without the table's parser (CONFIG_EFI_PARTITION unset)
		// rescans and finds nothing; bring its view in line with BLKPG.
		if !m.kernelMatches(name, pt) {
			log.Warn("kernel partitions differ from the table after BLKRRPART, updating them with BLKPG")
			if err := m.updatePartitions(f, name, pt); err != nil {
				return fmt.Errorf("reread partitions of %s: BLKPG after BLKRRPART: %w", path, err)
			}
		}
	case errors.Is(err, syscall.EBUSY):
		log.Warn("disk busy after retries, updating partitions one by one with BLKPG", "attempts", retry.Attempts)
		if err := m.updatePartitions(f, name, pt); err != nil {
			return fmt.Errorf("reread partitions of %s: BLKRRPART busy after %d attempts, BLKPG: %w", path, retry.Attempts, err)
		}
	default:
		return fmt.Errorf("reread partitions of %s: BLKRRPART: %w", path, err)
	}
	return m.waitPartitionNodes(name, pt)
}

// kernelName turns "/dev/vda", "vda" or a symlink under DevRoot into "vda".
func (m *Manager) kernelName(dev string) string {
	if r := m.resolveDevice(dev); !strings.HasPrefix(r, "by-path:") {
		return filepath.Base(r)
	}
	return filepath.Base(dev)
}

// kernelPartition is a partition as sysfs shows it, in bytes.
type kernelPartition struct {
	name        string
	start, size int64
}

// kernelPartitions reads SysRoot/class/block/<disk>/<part>/{partition,start,size}.
func (m *Manager) kernelPartitions(disk string) map[int]kernelPartition {
	dir := filepath.Join(m.SysRoot, "class", "block", disk)
	out := map[int]kernelPartition{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n, err := readInt(filepath.Join(dir, e.Name()), "partition")
		if err != nil {
			continue
		}
		start, _ := readInt(filepath.Join(dir, e.Name()), "start")
		size, _ := readInt(filepath.Join(dir, e.Name()), "size")
		out[int(n)] = kernelPartition{name: e.Name(), start: start * 512, size: size * 512}
	}
	return out
}

// kernelMatches reports whether sysfs lists exactly pt's partitions.
func (m *Manager) kernelMatches(disk string, pt *PartitionTable) bool {
	have := m.kernelPartitions(disk)
	if len(have) != len(pt.Partitions) {
		return false
	}
	for _, p := range pt.Partitions {
		if k, ok := have[p.Number]; !ok || k.start != p.Start || k.size != p.Size {
			return false
		}
	}
	return true
}

// updatePartitions brings the kernel's partitions in line with pt by BLKPG.
func (m *Manager) updatePartitions(f BlockDevice, disk string, pt *PartitionTable) error {
	have := m.kernelPartitions(disk)
	want := map[int]Partition{}
	for _, p := range pt.Partitions {
		want[p.Number] = p
	}
	var errs []error
	nums := make([]int, 0, len(have))
	for n := range have {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	for _, n := range nums {
		k := have[n]
		p, ok := want[n]
		if ok && p.Start == k.start {
			continue
		}
		if err := m.ioctl().Partition(f, BLKPGDelete, n, 0, 0); err != nil {
			errs = append(errs, fmt.Errorf("delete partition %d (%s): %w", n, k.name, err))
			continue
		}
		delete(have, n)
	}
	for _, p := range pt.Partitions {
		k, ok := have[p.Number]
		switch {
		case !ok:
			if err := m.ioctl().Partition(f, BLKPGAdd, p.Number, p.Start, p.Size); err != nil {
				errs = append(errs, fmt.Errorf("add partition %d at %d size %d: %w", p.Number, p.Start, p.Size, err))
			}
		case k.size != p.Size:
			if err := m.ioctl().Partition(f, BLKPGResize, p.Number, p.Start, p.Size); err != nil {
				errs = append(errs, fmt.Errorf("resize partition %d to %d: %w", p.Number, p.Size, err))
			}
		}
	}
	return errors.Join(errs...)
}

// waitPartitionNodes polls until every partition of pt has its sysfs
// directory and device node, for at most NodeTimeout.
func (m *Manager) waitPartitionNodes(disk string, pt *PartitionTable) error {
	timeout, poll := m.NodeTimeout, m.PollInterval
	if timeout <= 0 {
		timeout = DefaultNodeTimeout
	}
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	var missing []string
	for waited := time.Duration(0); ; waited += poll {
		missing = missing[:0]
		for _, p := range pt.Partitions {
			part := PartitionName(disk, p.Number)
			for _, node := range []string{filepath.Join(m.SysRoot, "class", "block", part), filepath.Join(m.devRoot(), part)} {
				if _, err := os.Stat(node); err != nil {
					missing = append(missing, node)
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if waited >= timeout {
			break
		}
		m.sleep(poll)
	}
	return fmt.Errorf("reread partitions of %s: after %s still missing %s: %w", disk, timeout, strings.Join(missing, ", "), ErrNodesTimeout)
}
