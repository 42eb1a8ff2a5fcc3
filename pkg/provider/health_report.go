package provider

import (
	"context"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/health"
)

// ReportHealthChecks POSTs the results as an api.HealthReport to
// /v1/machines/{mac}/health, like every report: bearer token, bounded
// retries. It makes ServerProvider a provision.HealthReporter.
func (p *ServerProvider) ReportHealthChecks(ctx context.Context, results []health.CheckResult) error {
	return p.report(ctx, "health", HealthReport(results, time.Now()))
}

// HealthReport turns check results into their wire form.
func HealthReport(results []health.CheckResult, now time.Time) api.HealthReport {
	r := api.HealthReport{Checks: make([]api.HealthCheck, 0, len(results)), Time: now}
	for _, c := range results {
		r.Checks = append(r.Checks, api.HealthCheck{Name: c.Name, Status: string(c.Status), Message: c.Message,
			DurationMS: c.Duration.Milliseconds(), Figures: c.Figures, Blocking: c.Blocking})
	}
	return r
}
