package config

import (
	"context"
	"errors"
)

// ErrNoConfig is returned by a provider that has no configuration for this
// machine; the chain then asks the next provider.
var ErrNoConfig = errors.New("no config from this provider")

// Provider is where a MachineConfig comes from (seed 000's config.Provider):
// Load fetches it, parses and validates it; it returns ErrNoConfig
// (wrapped) when the provider does not apply to this machine, and any other
// error when it applies but failed. The implementations, the chain that
// asks them in order and the optional reporting capabilities are in
// pkg/provider.
type Provider interface {
	Name() string
	Load(ctx context.Context) (*MachineConfig, error)
}
