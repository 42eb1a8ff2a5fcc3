// Package health runs the agent's pre-provisioning health checks (memory,
// CPUs, every disk's SMART/health data, the boot NIC's link, EDAC memory
// errors) and defines their results, as reported to a provider that
// implements provision.HealthReporter.
package health

import (
	"fmt"
	"strings"
	"time"
)

// Status of one check.
type Status string

const (
	StatusPass Status = "pass"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
)

// Kinds of checks. A result's Name is its kind, or "disk:<name>" for the
// check of one disk; the MachineConfig's health.reportOnly names kinds.
const (
	KindMemory  = "memory"
	KindCPU     = "cpu"
	KindDisk    = "disk"
	KindBootNIC = "boot-nic"
	KindEDAC    = "edac"
)

// Kinds lists every kind of check, in the order Run runs them.
var Kinds = []string{KindMemory, KindCPU, KindDisk, KindBootNIC, KindEDAC}

// CheckResult is the outcome of one named health check.
type CheckResult struct {
	Name     string        `json:"name"`
	Status   Status        `json:"status"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration"`
	// Figures are the measured values and the limits they were held
	// against ("ramMebibytes", "minMebibytes", "percentageUsed", ...).
	Figures map[string]int64 `json:"figures,omitempty"`
	// Blocking is true for a failure that stops provisioning.
	Blocking bool `json:"blocking,omitempty"`
}

// Kind returns the kind of check r is the result of ("disk" for "disk:sda").
func (r CheckResult) Kind() string {
	k, _, _ := strings.Cut(r.Name, ":")
	return k
}

// String is "name: status: message".
func (r CheckResult) String() string {
	if r.Message == "" {
		return fmt.Sprintf("%s: %s", r.Name, r.Status)
	}
	return fmt.Sprintf("%s: %s: %s", r.Name, r.Status, r.Message)
}

// Failed reports whether any result failed.
func Failed(results []CheckResult) bool {
	for _, r := range results {
		if r.Status == StatusFail {
			return true
		}
	}
	return false
}

// Blocking returns the failures that stop provisioning.
func Blocking(results []CheckResult) []CheckResult {
	var out []CheckResult
	for _, r := range results {
		if r.Blocking {
			out = append(out, r)
		}
	}
	return out
}
