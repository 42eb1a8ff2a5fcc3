package provision

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/health"
)

// StepHealthCheck runs the health checks; it is the first step of a
// provision plan whose config has a health section, so a failing check
// stops the run before a disk is selected or written.
const StepHealthCheck = "health-check"

// ErrUnhealthy is the error of a health-check step whose blocking checks failed.
var ErrUnhealthy = errors.New("health checks failed")

// stepHealthCheck runs every check with the config's thresholds and
// reports all results through the provider's HealthReporter (when it has
// one). It fails with ErrUnhealthy naming each blocking failure (the step's
// error bootyd records); otherwise every result goes into the step's
// succeeded report as detail "health.<check>": "<status>: <message>".
func (o *Orchestrator) stepHealthCheck(ctx context.Context) error {
	opts, err := o.cfg.Health.HealthOptions()
	if err != nil {
		return err
	}
	run := o.healthChecks
	if run == nil {
		run = func(ctx context.Context, opts health.Options) []health.CheckResult {
			m := o.disks
			if m == nil {
				m = disk.NewManager()
			}
			c := health.NewChecker(m)
			c.Log = o.log.With("step", StepHealthCheck)
			return c.Run(ctx, opts)
		}
	}
	results := run(ctx, opts)
	o.reportHealth(ctx, results)
	var failed []string
	for _, r := range health.Blocking(results) {
		failed = append(failed, r.Name+": "+r.Message)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s", ErrUnhealthy, strings.Join(failed, "; "))
	}
	detail := map[string]string{}
	for _, r := range results {
		detail["health."+r.Name] = string(r.Status) + ": " + r.Message
	}
	o.addDetail(detail)
	return nil
}

// reportHealth sends the results to a provider that is a HealthReporter;
// like every report it is bounded and best effort.
func (o *Orchestrator) reportHealth(ctx context.Context, results []health.CheckResult) {
	hr, ok := o.provider.(HealthReporter)
	if !ok || hr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err := hr.ReportHealthChecks(ctx, results); err != nil {
		o.log.Warn("report health checks failed", "error", err)
	}
}
