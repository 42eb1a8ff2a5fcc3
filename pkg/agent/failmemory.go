package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/bootloader"
)

// MaxFailDelay bounds the growth of the failure policy's delay: a machine
// that fails every boot the same way retries at least this often.
const MaxFailDelay = 30 * time.Minute

// Kinds of failed boots that are not a step's failure.
const (
	failNetwork = "network" // no network, and so no config
	failRandom  = "random"  // the kernel's random number generator never became ready
	failRun     = "run"     // the run failed outside any step
)

// FailureMemory remembers consecutive failed boots across reboots, so that
// the failure policy backs off instead of rebooting at the same pace for
// ever.
type FailureMemory interface {
	// Record counts a failed boot of kind and returns how many consecutive
	// failed boots of that kind there were, this one included: 1 after a
	// success or a failure of another kind.
	Record(kind string) (int, error)
	// Clear forgets every failure, after a successful run.
	Clear() error
}

// failuresVar is the EFI variable (booty's vendor GUID) holding "KIND COUNT".
const failuresVar = "BootyFailures"

// maxFailCount bounds the count kept, so it never overflows.
const maxFailCount = 1000

// efiFailureMemory keeps the count in an EFI variable: it survives the
// reboot, and needs no disk (the target may be blank, a config drive is
// read-only virtual media).
type efiFailureMemory struct {
	vars bootloader.EFIVars
}

// Record reads BootyFailures (missing or unreadable content counts as
// none), adds this failure and writes it back. A failure to read or write
// is returned with the count as if it was the first.
func (m efiFailureMemory) Record(kind string) (int, error) {
	kind = strings.Join(strings.Fields(kind), "-")
	if kind == "" {
		kind = failRun
	}
	n := 0
	data, err := m.vars.ReadBootyVar(failuresVar)
	switch {
	case err == nil:
		if k, c, ok := strings.Cut(string(data), " "); ok && k == kind {
			if v, err := strconv.Atoi(c); err == nil && v > 0 {
				n = v
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return 1, fmt.Errorf("remember failed boot: %w", err)
	}
	n = min(n+1, maxFailCount)
	if err := m.vars.WriteBootyVar(failuresVar, []byte(kind+" "+strconv.Itoa(n))); err != nil {
		return 1, fmt.Errorf("remember failed boot: %w", err)
	}
	return n, nil
}

// Clear removes BootyFailures.
func (m efiFailureMemory) Clear() error {
	if err := m.vars.RemoveBootyVar(failuresVar); err != nil {
		return fmt.Errorf("forget failed boots: %w", err)
	}
	return nil
}

// newFailureMemory returns the EFI variable memory when efivarfs is
// mounted, else nil: the delay then stays at its base, a fixed bound.
func newFailureMemory(v bootloader.EFIVars) FailureMemory {
	if !v.Available() {
		return nil
	}
	return efiFailureMemory{vars: v}
}

// failDelay is base for the first failed boot of a kind, doubled for each
// further consecutive one, at most MaxFailDelay (or base when that is more).
func failDelay(base time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < MaxFailDelay; i++ {
		d *= 2
	}
	return max(base, min(d, MaxFailDelay))
}
