package config

import (
	"context"
	"errors"

	"github.com/booty-dev/booty/pkg/api"
)

// ErrNoConfig is returned by a provider that has no configuration for this
// machine; the chain then asks the next provider.
var ErrNoConfig = errors.New("no config from this provider")

// Provider is where a MachineConfig comes from. Load fetches it, parses and
// validates it; it returns ErrNoConfig (wrapped) when the provider does not
// apply to this machine, and any other error when it applies but failed.
type Provider interface {
	Name() string
	Load(ctx context.Context) (*MachineConfig, error)
}

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
