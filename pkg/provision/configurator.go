package provision

import (
	"context"
	"errors"
	"sync"

	"github.com/booty-dev/booty/pkg/disk"
)

// ErrMellanoxUnsupported is returned by SetupMellanox until SR-IOV support lands.
var ErrMellanoxUnsupported = errors.New("mellanox SR-IOV configuration is not supported by this build")

// Configurator handles post-image OS configuration.
type Configurator struct {
	disks   *disk.Manager
	rootDir string
}

// NewConfigurator creates a Configurator.
func NewConfigurator(diskMgr *disk.Manager) *Configurator {
	return &Configurator{disks: diskMgr, rootDir: "/mnt/root"}
}

// SetRootDir overrides the root directory (for testing).
func (c *Configurator) SetRootDir(dir string) { c.rootDir = dir }

var (
	pciVendorMu    sync.Mutex
	pciVendorCheck = func(string) (bool, error) { return false, nil }
)

// SetPCIVendorCheckFunc overrides the PCI vendor detection for testing. Returns a restore function that resets to the original implementation.
func SetPCIVendorCheckFunc(fn func(string) (bool, error)) func() {
	pciVendorMu.Lock()
	defer pciVendorMu.Unlock()
	old := pciVendorCheck
	pciVendorCheck = fn
	return func() {
		pciVendorMu.Lock()
		defer pciVendorMu.Unlock()
		pciVendorCheck = old
	}
}

// SetupMellanox detects and configures Mellanox ConnectX NICs. Returns true if firmware values were changed (requiring a hard reboot for reinit).
// This build refuses with ErrMellanoxUnsupported rather than ignore the request.
func (c *Configurator) SetupMellanox(ctx context.Context, numVFs int) (bool, error) {
	return false, ErrMellanoxUnsupported
}
