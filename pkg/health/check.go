package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/inventory"
)

// Options are the thresholds of one run; the zero value checks with the
// defaults and lets every failure stop provisioning.
type Options struct {
	// MinMemoryMiB fails the memory check below it; 0 only reports.
	MinMemoryMiB int64
	// MinCPUs fails the cpu check below it; 0 only reports.
	MinCPUs int
	// MaxPercentageUsed fails an NVMe disk whose endurance estimate is
	// above it; 0 means 100 (the rated endurance is used up).
	MaxPercentageUsed int
	// MaxMediaErrors fails an NVMe disk with more media and data
	// integrity errors; a lower non-zero count is a warning.
	MaxMediaErrors int64
	// MaxUncorrectable fails the edac check when the memory controllers
	// counted more uncorrectable errors.
	MaxUncorrectable int64
	// BootNIC is the boot NIC's link name or MAC; empty is the BOOTIF= of
	// the kernel command line, and without one any physical link.
	BootNIC string
	// ReportOnly lists kinds whose failures are reported but do not stop
	// provisioning.
	ReportOnly []string
}

// DefaultMaxPercentageUsed is MaxPercentageUsed when it is 0.
const DefaultMaxPercentageUsed = 100

// Checker runs the checks against the machine. NewChecker sets the real
// interfaces; tests point Root at a fake tree and replace the disk seams.
type Checker struct {
	// Root is where sysfs and procfs are found ("/").
	Root string
	// Inventory reads memory, CPUs and links; nil reads them under Root.
	Inventory *inventory.Collector
	// Disks lists the disks to check.
	Disks func() ([]disk.Disk, error)
	// Open opens a disk's device node read-only for its health commands.
	Open func(path string, flag int) (disk.BlockDevice, error)
	// NVMe sends the Get Log Page admin command (NVME_IOCTL_ADMIN_CMD).
	NVMe disk.NVMeAdmin
	// ATA sends SMART commands through SG_IO ATA PASS-THROUGH(16).
	ATA disk.ATAPassthrough
	// CommandTimeout bounds each NVMe or ATA command.
	CommandTimeout time.Duration
	Now            func() time.Time
	Log            *slog.Logger
}

// NewChecker returns a Checker for this machine that lists and opens disks
// with m and sends their commands through m's NVMe and ATA interfaces.
func NewChecker(m *disk.Manager) *Checker {
	c := &Checker{
		Root:           "/",
		Open:           m.OpenDisk,
		NVMe:           m.NVMe,
		ATA:            m.ATA,
		CommandTimeout: 10 * time.Second,
		Now:            time.Now,
	}
	c.Disks = m.Disks
	return c
}

func (c *Checker) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default().With("component", "health")
}

func (c *Checker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Checker) path(rel ...string) string {
	root := c.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, rel...)...)
}

// Run runs every check, in the order of Kinds (one result per disk), and
// returns all results; it never stops early except when ctx ends, which
// leaves the remaining disks unchecked and reported as warnings. A check
// that cannot read its data warns: a machine is not failed for what booty
// cannot see (a RAID controller hiding its disks' SMART data). Failures of
// kinds not in ReportOnly are marked Blocking.
func (c *Checker) Run(ctx context.Context, o Options) []CheckResult {
	var out []CheckResult
	timed := func(f func() CheckResult) {
		start := c.now()
		r := f()
		r.Duration = c.now().Sub(start)
		out = append(out, r)
	}
	timed(func() CheckResult { return c.checkMemory(o) })
	timed(func() CheckResult { return c.checkCPU(o) })
	disks, err := c.listDisks()
	if err != nil {
		out = append(out, CheckResult{Name: KindDisk, Status: StatusWarn, Message: err.Error()})
	}
	for _, d := range disks {
		timed(func() CheckResult {
			if err := ctx.Err(); err != nil {
				return CheckResult{Name: KindDisk + ":" + d.Name, Status: StatusWarn, Message: fmt.Sprintf("not checked: %v", err)}
			}
			return c.checkDisk(d, o)
		})
	}
	timed(func() CheckResult { return c.checkBootNIC(o) })
	timed(func() CheckResult { return c.checkEDAC(o) })

	report := map[string]bool{}
	for _, k := range o.ReportOnly {
		report[k] = true
	}
	for i := range out {
		out[i].Blocking = out[i].Status == StatusFail && !report[out[i].Kind()]
		c.log().Info("health check", "check", out[i].Name, "status", out[i].Status, "message", out[i].Message, "blocking", out[i].Blocking)
	}
	return out
}

func (c *Checker) inv() *inventory.Collector {
	if c.Inventory != nil {
		return c.Inventory
	}
	return &inventory.Collector{Root: c.Root}
}

func (c *Checker) listDisks() ([]disk.Disk, error) {
	if c.Disks == nil {
		return nil, errors.New("no disk lister")
	}
	disks, err := c.Disks()
	if err != nil {
		return nil, fmt.Errorf("list disks: %w", err)
	}
	return disks, nil
}

// checkMemory compares the installed memory (SMBIOS, else MemTotal) with MinMemoryMiB.
func (c *Checker) checkMemory(o Options) CheckResult {
	r := CheckResult{Name: KindMemory}
	mib, err := c.inv().RAMMebibytes()
	if err != nil {
		r.Status, r.Message = StatusWarn, err.Error()
		return r
	}
	r.Figures = map[string]int64{"ramMebibytes": int64(mib), "minMebibytes": o.MinMemoryMiB}
	if int64(mib) < o.MinMemoryMiB {
		r.Status, r.Message = StatusFail, fmt.Sprintf("%d MiB installed, at least %d MiB required", mib, o.MinMemoryMiB)
		return r
	}
	r.Status, r.Message = StatusPass, fmt.Sprintf("%d MiB installed", mib)
	return r
}

// checkCPU compares the number of logical CPUs with MinCPUs.
func (c *Checker) checkCPU(o Options) CheckResult {
	r := CheckResult{Name: KindCPU}
	cpu, err := c.inv().CPU()
	if err != nil {
		r.Status, r.Message = StatusWarn, err.Error()
		return r
	}
	r.Figures = map[string]int64{"count": int64(cpu.Count), "min": int64(o.MinCPUs)}
	if cpu.Count < o.MinCPUs {
		r.Status, r.Message = StatusFail, fmt.Sprintf("%d logical CPUs, at least %d required", cpu.Count, o.MinCPUs)
		return r
	}
	r.Status, r.Message = StatusPass, fmt.Sprintf("%d logical CPUs", cpu.Count)
	return r
}

// checkBootNIC fails when the boot NIC (Options.BootNIC, else BOOTIF=)
// has no carrier, or when it is unknown and no physical link has one.
func (c *Checker) checkBootNIC(o Options) CheckResult {
	r := CheckResult{Name: KindBootNIC}
	links, err := c.inv().Links()
	if err != nil {
		r.Status, r.Message = StatusWarn, err.Error()
		return r
	}
	want := o.BootNIC
	if hw, err := net.ParseMAC(want); err == nil {
		want = hw.String()
	}
	if want == "" {
		want = inventory.BootIF(readTrim(c.path("proc/cmdline")))
	}
	if want == "" {
		var up []string
		for _, l := range links {
			if l.Carrier {
				up = append(up, l.Name)
			}
		}
		r.Figures = map[string]int64{"linksWithCarrier": int64(len(up))}
		if len(up) == 0 {
			r.Status, r.Message = StatusFail, fmt.Sprintf("boot NIC unknown (no BOOTIF=) and none of the %d physical links has carrier", len(links))
			return r
		}
		r.Status, r.Message = StatusPass, "boot NIC unknown (no BOOTIF=); links with carrier: "+strings.Join(up, ", ")
		return r
	}
	for _, l := range links {
		if l.Name != want && l.MAC != want {
			continue
		}
		r.Name = KindBootNIC + ":" + l.Name
		r.Figures = map[string]int64{"carrier": b2i(l.Carrier), "speedMbps": int64(l.SpeedMbps)}
		if !l.Carrier {
			r.Status, r.Message = StatusFail, fmt.Sprintf("%s (%s) has no carrier", l.Name, l.MAC)
			return r
		}
		r.Status, r.Message = StatusPass, fmt.Sprintf("%s (%s) is up at %d Mb/s", l.Name, l.MAC, l.SpeedMbps)
		return r
	}
	r.Status, r.Message = StatusFail, fmt.Sprintf("boot NIC %s is not a physical link of this machine", want)
	return r
}

// checkEDAC sums the uncorrectable (ue_count) and correctable (ce_count)
// errors of every EDAC memory controller and fails above MaxUncorrectable.
// Without EDAC controllers (no driver for this platform) it passes, saying so.
func (c *Checker) checkEDAC(o Options) CheckResult {
	r := CheckResult{Name: KindEDAC}
	dir := c.path("sys/devices/system/edac/mc")
	entries, _ := os.ReadDir(dir)
	var mcs []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "mc") {
			mcs = append(mcs, e.Name())
		}
	}
	sort.Strings(mcs)
	if len(mcs) == 0 {
		r.Status, r.Message = StatusPass, "no EDAC memory controller: memory errors are not counted on this machine"
		return r
	}
	var ue, ce int64
	var bad []string
	for _, mc := range mcs {
		u, uerr := strconv.ParseInt(readTrim(filepath.Join(dir, mc, "ue_count")), 10, 64)
		cc, cerr := strconv.ParseInt(readTrim(filepath.Join(dir, mc, "ce_count")), 10, 64)
		if uerr != nil || cerr != nil {
			r.Status, r.Message = StatusWarn, fmt.Sprintf("cannot read the error counts of %s", filepath.Join(dir, mc))
			return r
		}
		ue, ce = ue+u, ce+cc
		if u > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d", mc, u))
		}
	}
	r.Figures = map[string]int64{"uncorrectable": ue, "correctable": ce, "maxUncorrectable": o.MaxUncorrectable, "controllers": int64(len(mcs))}
	if ue > o.MaxUncorrectable {
		r.Status, r.Message = StatusFail, fmt.Sprintf("%d uncorrectable memory errors (%s), at most %d allowed", ue, strings.Join(bad, ", "), o.MaxUncorrectable)
		return r
	}
	r.Status, r.Message = StatusPass, fmt.Sprintf("%d uncorrectable, %d correctable memory errors on %d controllers", ue, ce, len(mcs))
	return r
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
