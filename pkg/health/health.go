// Package health defines the results of the agent's pre-provisioning health
// checks, as reported to a provider that implements provision.HealthReporter.
package health

import "time"

// Status of one check.
type Status string

const (
	StatusPass Status = "pass"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
)

// CheckResult is the outcome of one named health check.
type CheckResult struct {
	Name     string        `json:"name"`
	Status   Status        `json:"status"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration"`
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
