// Package provision runs booty's provisioning pipeline: an Orchestrator runs an
// ordered plan of named Steps, reports each one to the provider, and on failure
// dumps the machine's debug state and reports the error with the step's name.
// The handoff to the installed OS (kexec, reboot, poweroff) is not done here:
// the agent's main does it in one place, from the outcome returned.
package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/health"
	"github.com/booty-dev/booty/pkg/redact"
	"github.com/booty-dev/booty/pkg/safego"
)

// Step represents a named provisioning step.
type Step struct {
	Name string
	Fn   func(ctx context.Context) error
}

// HealthReporter is an optional provider capability for reporting health check results.
type HealthReporter interface {
	ReportHealthChecks(context.Context, []health.CheckResult) error
}

// StepError is the error a failed run returns: the step that failed and why.
type StepError struct {
	Step  string
	Index int
	Total int
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %d/%d %s: %v", e.Index, e.Total, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// FailedStep returns the name of the step that failed when err came from a
// run, and "" otherwise.
func FailedStep(err error) string {
	var se *StepError
	if errors.As(err, &se) {
		return se.Step
	}
	return ""
}

// executor runs a plan: it logs and reports each step's start, end, index
// and duration; on the first failure it dumps debug state, reports the error
// with the step name and stops.
type executor struct {
	o *Orchestrator
}

func (e executor) run(ctx context.Context, plan []Step) error {
	o := e.o
	total := len(plan)
	for i, s := range plan {
		idx := i + 1
		if err := ctx.Err(); err != nil {
			return &StepError{Step: s.Name, Index: idx, Total: total, Err: fmt.Errorf("cancelled before start: %w", err)}
		}
		o.log.Info("step started", "step", s.Name, "n", fmt.Sprintf("%d/%d", idx, total))
		o.reportStatus(ctx, api.StatusReport{Step: s.Name, Index: idx, Total: total, State: api.StateStarted})
		start := o.now()
		// A panic in a step is that step's error: it is reported and the
		// failure policy runs, as for any other failure.
		err := safego.Call("step "+s.Name, func() error { return s.Fn(ctx) })
		// Step errors go to the console, the report and bootyd: the URLs
		// in them (image.url with a pre-signed query) lose their secrets.
		err = redact.Error(err)
		d := o.now().Sub(start)
		if err != nil {
			o.log.Error("step failed", "step", s.Name, "n", fmt.Sprintf("%d/%d", idx, total),
				"duration", d.Round(time.Millisecond), "error", err)
			o.dumpDebugState(s.Name)
			o.reportStatus(ctx, api.StatusReport{Step: s.Name, Index: idx, Total: total, State: api.StateFailed,
				Error: err.Error(), DurationMS: d.Milliseconds()})
			return &StepError{Step: s.Name, Index: idx, Total: total, Err: err}
		}
		o.log.Info("step done", "step", s.Name, "n", fmt.Sprintf("%d/%d", idx, total), "duration", d.Round(time.Millisecond))
		o.reportStatus(ctx, api.StatusReport{Step: s.Name, Index: idx, Total: total, State: api.StateSucceeded,
			DurationMS: d.Milliseconds(), Detail: o.takeDetail()})
	}
	return nil
}
