// Package provider holds where a MachineConfig comes from: the providers
// (a URL from the kernel command line, a config drive, /deploy with
// telekom BOOTy's vars, bootyd — by enrollment or by MAC), the chain that
// asks them in order, their HTTP client, the kernel command line
// parameters that name them, and the optional capabilities a provider has
// for reporting back (status, progress, logs, health). The schema,
// parsing, validation and redaction of the config are pkg/config's.
package provider

import (
	"context"

	"github.com/booty-dev/booty/pkg/api"
)

// StatusReporter is an optional provider capability: it records step status.
type StatusReporter interface {
	ReportStatus(ctx context.Context, r api.StatusReport) error
}

// ProgressReporter is an optional provider capability: it records progress of long steps.
type ProgressReporter interface {
	ReportProgress(ctx context.Context, p api.ProgressReport) error
}

// LogReporter is an optional provider capability: it ships agent log lines.
type LogReporter interface {
	ReportLogs(ctx context.Context, lines []api.LogLine) error
}
