package api

import "time"

// HealthReport is the body of POST /v1/machines/{mac}/health: the results
// of the agent's health-check step (pkg/health's CheckResults on the wire).
type HealthReport struct {
	Checks []HealthCheck `json:"checks"`
	Time   time.Time     `json:"time"`
}

// HealthCheck is one check's verdict: status pass, warn or fail, the
// measured figures, and whether the failure stops provisioning.
type HealthCheck struct {
	Name       string           `json:"name"`
	Status     string           `json:"status"`
	Message    string           `json:"message,omitempty"`
	DurationMS int64            `json:"durationMs"`
	Figures    map[string]int64 `json:"figures,omitempty"`
	Blocking   bool             `json:"blocking,omitempty"`
}
