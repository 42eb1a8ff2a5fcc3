package config

import (
	"fmt"
	"net"
	"slices"

	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/health"
	"github.com/booty-dev/booty/pkg/network"
)

// HealthSpec turns on the health checks that run before select-disk and
// sets their thresholds. An empty section (`health: {}`) runs every check
// with the defaults, and every failure stops provisioning before anything
// is written.
type HealthSpec struct {
	// MinMemory is the least installed memory, as a size ("64G"); empty
	// only reports it.
	MinMemory string `json:"minMemory,omitempty"`
	// MinCPUs is the least number of logical CPUs; 0 only reports it.
	MinCPUs int `json:"minCPUs,omitempty"`
	// Disks holds the thresholds of every disk's check.
	Disks HealthDisksSpec `json:"disks,omitzero"`
	// MaxUncorrectableMemoryErrors is how many uncorrectable errors the
	// EDAC memory controllers may have counted (default 0).
	MaxUncorrectableMemoryErrors int64 `json:"maxUncorrectableMemoryErrors,omitempty"`
	// BootInterface names the boot NIC (link name or MAC) whose link must
	// be up; empty is BOOTIF= from the kernel command line, and without
	// one any physical link with carrier.
	BootInterface string `json:"bootInterface,omitempty"`
	// ReportOnly lists kinds of checks (memory, cpu, disk, boot-nic,
	// edac) whose failures are reported but do not stop provisioning.
	ReportOnly []string `json:"reportOnly,omitempty"`
}

// HealthDisksSpec are the thresholds of the disk checks.
type HealthDisksSpec struct {
	// MaxPercentageUsed fails an NVMe disk whose endurance estimate is
	// above it, 1 to 255 (default 100).
	MaxPercentageUsed int `json:"maxPercentageUsed,omitempty"`
	// MaxMediaErrors fails an NVMe disk with more media and data
	// integrity errors (default 0; fewer than the maximum warn).
	MaxMediaErrors int64 `json:"maxMediaErrors,omitempty"`
}

// MaxMinCPUs bounds health.minCPUs (Linux's NR_CPUS limit is 8192).
const MaxMinCPUs = 8192

// HealthOptions converts the section into the checks' options; it fails
// on a minMemory that does not parse (Validate reports the same).
func (h *HealthSpec) HealthOptions() (health.Options, error) {
	o := health.Options{
		MinCPUs:           h.MinCPUs,
		MaxPercentageUsed: h.Disks.MaxPercentageUsed,
		MaxMediaErrors:    h.Disks.MaxMediaErrors,
		MaxUncorrectable:  h.MaxUncorrectableMemoryErrors,
		BootNIC:           h.BootInterface,
		ReportOnly:        slices.Clone(h.ReportOnly),
	}
	if h.MinMemory != "" {
		n, err := disk.ParseSize(h.MinMemory)
		if err != nil {
			return o, fmt.Errorf("health.minMemory: %w", err)
		}
		o.MinMemoryMiB = n >> 20
	}
	return o, nil
}

// validate adds the section's problems through add.
func (h *HealthSpec) validate(add func(field, format string, args ...any)) {
	if h.MinMemory != "" {
		if _, err := disk.ParseSize(h.MinMemory); err != nil {
			add("health.minMemory", "%v", err)
		}
	}
	if h.MinCPUs < 0 || h.MinCPUs > MaxMinCPUs {
		add("health.minCPUs", "want 0 to %d, got %d", MaxMinCPUs, h.MinCPUs)
	}
	if v := h.Disks.MaxPercentageUsed; v < 0 || v > 255 {
		add("health.disks.maxPercentageUsed", "want 1 to 255 (NVMe reports at most 255; unset is 100), got %d", v)
	}
	if h.Disks.MaxMediaErrors < 0 {
		add("health.disks.maxMediaErrors", "want 0 or more, got %d", h.Disks.MaxMediaErrors)
	}
	if h.MaxUncorrectableMemoryErrors < 0 {
		add("health.maxUncorrectableMemoryErrors", "want 0 or more, got %d", h.MaxUncorrectableMemoryErrors)
	}
	if b := h.BootInterface; b != "" {
		if _, err := net.ParseMAC(b); err != nil {
			if lerr := network.CheckLinkName(b); lerr != nil {
				add("health.bootInterface", "%q is neither a MAC address nor a link name: %v", b, lerr)
			}
		}
	}
	seen := map[string]bool{}
	for i, k := range h.ReportOnly {
		switch {
		case !slices.Contains(health.Kinds, k):
			add(fmt.Sprintf("health.reportOnly[%d]", i), "unknown check %q, want one of %v", k, health.Kinds)
		case seen[k]:
			add(fmt.Sprintf("health.reportOnly[%d]", i), "%q listed twice", k)
		}
		seen[k] = true
	}
}
