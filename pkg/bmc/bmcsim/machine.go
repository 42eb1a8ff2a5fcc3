// Package bmcsim provides BMCs for tests and demos: a Redfish BMC (HTTPS,
// shaped like DMTF's schema, with failure injection) and an IPMI BMC
// (lanplus on a loopback UDP port, through go-ipmi's server), both
// driving a Machine. A Machine is what the BMC powers: MemMachine in
// memory, or a QEMU virtual machine (test/bmcvm).
//
// Like sushy-tools' fake driver, both BMCs apply a power change in the
// background after a small delay and answer at once; a restart is off then
// on, so a boot device override takes effect on it.
package bmcsim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
)

// Machine is the hardware behind a test BMC.
type Machine interface {
	// PowerOn starts the machine booting from dev ("" is the firmware's
	// own order). A machine that is on is left alone.
	PowerOn(ctx context.Context, dev bmc.Device) error
	// PowerOff stops the machine: graceful asks the OS (ACPI power button)
	// and cuts the power after the machine's own bound; otherwise the
	// power is cut at once. A machine that is off is left alone.
	PowerOff(ctx context.Context, graceful bool) error
	// Reset restarts a running machine (the reset line), keeping its
	// boot device.
	Reset(ctx context.Context) error
	// State returns bmc.PowerOn or bmc.PowerOff.
	State() bmc.PowerState
}

// MemMachine is an in-memory Machine that records what was asked of it.
// Its methods are safe for concurrent use.
type MemMachine struct {
	// IgnoreACPI makes a graceful PowerOff do nothing, like an OS that
	// does not handle the power button.
	IgnoreACPI bool

	mu     sync.Mutex
	on     bool
	boots  []bmc.Device
	resets int
}

// PowerOn turns the machine on and records dev.
func (m *MemMachine) PowerOn(_ context.Context, dev bmc.Device) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.on {
		return nil
	}
	m.on = true
	m.boots = append(m.boots, dev)
	return nil
}

// PowerOff turns the machine off, unless graceful and IgnoreACPI.
func (m *MemMachine) PowerOff(_ context.Context, graceful bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if graceful && m.IgnoreACPI {
		return nil
	}
	m.on = false
	return nil
}

// Reset counts a reset of a running machine and records a boot from the
// device of the last power on.
func (m *MemMachine) Reset(_ context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on {
		return fmt.Errorf("reset memory machine: it is off")
	}
	m.resets++
	var dev bmc.Device
	if n := len(m.boots); n > 0 {
		dev = m.boots[n-1]
	}
	m.boots = append(m.boots, dev)
	return nil
}

// State returns bmc.PowerOn or bmc.PowerOff.
func (m *MemMachine) State() bmc.PowerState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.on {
		return bmc.PowerOn
	}
	return bmc.PowerOff
}

// Boots returns the boot device of every boot so far, in order.
func (m *MemMachine) Boots() []bmc.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]bmc.Device(nil), m.boots...)
}

// Resets returns how many resets the machine had.
func (m *MemMachine) Resets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.resets
}

// action is a power change a BMC applies to its machine.
type action int

const (
	actOn action = iota
	actOffHard
	actOffSoft
	actRestart // off (hard) then on
	actReset   // the machine's reset line
)

func (a action) String() string {
	return [...]string{"on", "off", "soft off", "restart", "reset"}[a]
}

// DefaultPowerDelay is how long a test BMC waits before applying a power
// change.
const DefaultPowerDelay = 100 * time.Millisecond

// powerBound bounds one power change applied to a machine.
const powerBound = 5 * time.Minute

// setup checks what both test BMCs need (a machine, a user name and a
// password) and fills in the defaults of the power delay, the listen
// address (127.0.0.1:0) and the logger.
func setup(kind string, m Machine, user, password string, delay *time.Duration, addr *string, log **slog.Logger) error {
	if m == nil || user == "" || password == "" {
		return fmt.Errorf("start %s bmc: machine, username and password are required", kind)
	}
	if *delay <= 0 {
		*delay = DefaultPowerDelay
	}
	if *addr == "" {
		*addr = "127.0.0.1:0"
	}
	if *log == nil {
		*log = slog.Default()
	}
	return nil
}

// chassis is what both test BMCs share: the machine, its boot override and
// the background application of power changes.
type chassis struct {
	m     Machine
	delay time.Duration
	log   *slog.Logger

	mu       sync.Mutex
	override bmc.BootDevice // Device "" is no override
	ignore   bool           // failure injection: power actions do not take
	lastErr  error
	issued   int        // power changes accepted so far
	applied  int        // power changes applied (or failed) so far
	changed  *sync.Cond // on mu, broadcast when applied grows
}

func newChassis(m Machine, delay time.Duration, log *slog.Logger) *chassis {
	c := &chassis{m: m, delay: delay, log: log}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// setBoot sets the boot override; dev.Device "" clears it.
func (c *chassis) setBoot(dev bmc.BootDevice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.override = dev
}

func (c *chassis) boot() bmc.BootDevice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.override
}

// nextBoot returns the device of the next boot and clears a one-time
// override.
func (c *chassis) nextBoot() bmc.Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	dev := c.override.Device
	if !c.override.Persistent {
		c.override = bmc.BootDevice{}
	}
	return dev
}

// apply applies a in the background after the delay, unless power actions
// are set to be ignored. Changes are applied one at a time, in the order
// they were accepted. Errors are logged and kept for lastError.
func (c *chassis) apply(a action) {
	c.mu.Lock()
	if c.ignore {
		c.mu.Unlock()
		c.log.Warn("bmcsim: ignoring power action (failure injection)", "action", a)
		return
	}
	ticket := c.issued
	c.issued++
	c.mu.Unlock()
	go func() {
		time.Sleep(c.delay)
		c.mu.Lock()
		for c.applied != ticket {
			c.changed.Wait()
		}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), powerBound)
		err := c.run(ctx, a)
		cancel()
		if err != nil {
			c.log.Error("bmcsim: power action failed", "action", a, "err", err)
		}
		c.mu.Lock()
		c.lastErr = err
		c.applied++
		c.changed.Broadcast()
		c.mu.Unlock()
	}()
}

func (c *chassis) run(ctx context.Context, a action) error {
	switch a {
	case actOn:
		if c.m.State() == bmc.PowerOn {
			return nil
		}
		return c.m.PowerOn(ctx, c.nextBoot())
	case actOffHard:
		return c.m.PowerOff(ctx, false)
	case actOffSoft:
		return c.m.PowerOff(ctx, true)
	case actRestart:
		if err := c.m.PowerOff(ctx, false); err != nil {
			return err
		}
		return c.m.PowerOn(ctx, c.nextBoot())
	case actReset:
		if c.m.State() != bmc.PowerOn {
			return c.m.PowerOn(ctx, c.nextBoot())
		}
		return c.m.Reset(ctx)
	}
	return fmt.Errorf("unknown power action %d", a)
}

// wait waits until every power change started so far is applied.
func (c *chassis) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.applied < c.issued {
		c.changed.Wait()
	}
}

func (c *chassis) setIgnore(ignore bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ignore = ignore
}

func (c *chassis) lastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}
