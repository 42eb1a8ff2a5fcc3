package config

import (
	"log/slog"
	"testing"
)

// testLogger routes a component's logs to the test output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
