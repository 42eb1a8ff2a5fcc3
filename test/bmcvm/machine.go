// Package bmcvm is the QEMU machine behind booty's test BMCs: a
// bmcsim.Machine whose power on starts the VM's QEMU (through test/vm)
// with the boot device of that start, whose power off asks the guest
// through ACPI (QMP system_powerdown) and kills QEMU after a bound, whose
// reset is QMP system_reset, and whose power state is whether its QEMU
// process runs. Put it behind bmcsim.NewRedfish or bmcsim.NewIPMI.
package bmcvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/test/vm"
)

// DefaultGracefulTimeout bounds the wait for a guest to power off after
// the ACPI power button, before QEMU is killed.
const DefaultGracefulTimeout = 30 * time.Second

// Machine is a QEMU virtual machine that a test BMC powers. Its methods are
// safe for concurrent use. The zero value is not usable: set Config and
// Dir, or use New.
type Machine struct {
	// Config is the VM: every power on starts a new QEMU from it, with
	// AllowReboot set (so that system_reset resets instead of ending
	// QEMU), "-boot order=" for the boot device and a QMP socket in Dir
	// appended to ExtraArgs. A ConsoleLog gets "-N" before its extension
	// for the N-th start. Keep Config.OVMFVars (or StateDir) fixed to keep
	// UEFI variables across power cycles.
	Config vm.Config
	// Dir holds the QMP socket; it must exist and be short enough for a
	// unix socket path (about 100 bytes).
	Dir string
	// GracefulTimeout bounds the wait for an ACPI power off; default
	// DefaultGracefulTimeout.
	GracefulTimeout time.Duration
	// Logger; default Config.Logger, else slog.Default().
	Logger *slog.Logger

	opMu sync.Mutex // serialises power changes

	mu     sync.Mutex
	cur    *vm.VM
	ctx    context.Context
	cancel context.CancelFunc
	starts int
	boots  []bmc.Device
	closed bool
}

var _ bmcsim.Machine = (*Machine)(nil)

// New returns a Machine for cfg with its QMP socket in a new directory
// under os.TempDir (short, unlike a test's TempDir); Close removes it.
func New(cfg vm.Config) (*Machine, error) {
	dir, err := os.MkdirTemp("", "bmcvm-")
	if err != nil {
		return nil, fmt.Errorf("new qemu machine: %w", err)
	}
	return &Machine{Config: cfg, Dir: dir}, nil
}

func (m *Machine) logger() *slog.Logger {
	if m.Logger != nil {
		return m.Logger
	}
	if m.Config.Logger != nil {
		return m.Config.Logger
	}
	return slog.Default()
}

// QMPSocket returns the path of the QMP socket of the running QEMU.
func (m *Machine) QMPSocket() string { return filepath.Join(m.Dir, "qmp.sock") }

// bootOrder maps a boot device to QEMU's -boot order: n is the network,
// c the first hard disk, d the first CD-ROM.
var bootOrder = map[bmc.Device]string{bmc.DevicePXE: "n", bmc.DeviceDisk: "c", bmc.DeviceCDROM: "d"}

// uefiBootOrder puts dev first in the firmware's boot order with QEMU
// bootindex, which OVMF applies to its boot options (it ignores -boot
// order, which only SeaBIOS reads): the NIC for pxe (then the first disk,
// where the firmware goes when the network boot exits), the first disk for
// disk, the first CD-ROM for cdrom.
func uefiBootOrder(cfg *vm.Config, dev bmc.Device) {
	cfg.Disks = append([]vm.Disk(nil), cfg.Disks...)
	first := func(cd bool) int {
		for i, d := range cfg.Disks {
			if d.CDROM == cd {
				return i
			}
		}
		return -1
	}
	switch dev {
	case bmc.DevicePXE:
		cfg.ExtraArgs = append(cfg.ExtraArgs, "-global", "virtio-net-pci.bootindex=1")
		if i := first(false); i >= 0 {
			cfg.Disks[i].BootIndex = 2
		}
	case bmc.DeviceDisk:
		if i := first(false); i >= 0 {
			cfg.Disks[i].BootIndex = 1
		}
	case bmc.DeviceCDROM:
		if i := first(true); i >= 0 {
			cfg.Disks[i].BootIndex = 1
		}
	}
}

// running returns the current VM if its QEMU still runs.
func (m *Machine) running() *vm.VM {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return nil
	}
	select {
	case <-m.cur.Exited():
		return nil
	default:
		return m.cur
	}
}

// config returns the VM config of the n-th power on (from 1) booting
// from dev.
func (m *Machine) config(n int, dev bmc.Device) (vm.Config, error) {
	cfg := m.Config
	cfg.AllowReboot = true
	cfg.ExtraArgs = append([]string(nil), m.Config.ExtraArgs...)
	if dev != "" {
		order, ok := bootOrder[dev]
		if !ok {
			return cfg, fmt.Errorf("boot device %q, want pxe, disk or cdrom", dev)
		}
		if cfg.UEFI {
			uefiBootOrder(&cfg, dev)
		} else {
			cfg.ExtraArgs = append(cfg.ExtraArgs, "-boot", "order="+order)
		}
	}
	sock := m.QMPSocket()
	if strings.Contains(sock, ",") {
		return cfg, fmt.Errorf("qmp socket path %q has a comma", sock)
	}
	cfg.ExtraArgs = append(cfg.ExtraArgs, "-qmp", "unix:"+sock+",server=on,wait=off")
	if cfg.ConsoleLog != "" && n > 1 {
		ext := filepath.Ext(cfg.ConsoleLog)
		cfg.ConsoleLog = strings.TrimSuffix(cfg.ConsoleLog, ext) + "-" + strconv.Itoa(n) + ext
	}
	if cfg.Logger == nil {
		cfg.Logger = m.logger()
	}
	return cfg, nil
}

// PowerOn starts QEMU booting from dev, unless it runs. QEMU runs until
// PowerOff, Close, its own Config.Timeout, or the guest powers off. It
// fails when QEMU cannot start (see vm.Start).
func (m *Machine) PowerOn(_ context.Context, dev bmc.Device) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.running() != nil {
		return nil
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("power on qemu machine: it is closed")
	}
	if m.ctx == nil {
		m.ctx, m.cancel = context.WithCancel(context.Background())
	}
	m.starts++
	n, ctx := m.starts, m.ctx
	m.mu.Unlock()

	cfg, err := m.config(n, dev)
	if err != nil {
		return fmt.Errorf("power on qemu machine: %w", err)
	}
	os.Remove(m.QMPSocket())
	v, err := vm.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("power on qemu machine: %w", err)
	}
	m.mu.Lock()
	m.cur = v
	m.boots = append(m.boots, dev)
	m.mu.Unlock()
	m.logger().Info("bmcvm: powered on", "boot", dev, "start", n)
	return nil
}

// PowerOff stops QEMU. Graceful presses the ACPI power button (QMP
// system_powerdown) and waits up to GracefulTimeout for the guest to power
// off; then, or at once when not graceful, QEMU is killed. A machine that
// is off is left alone.
func (m *Machine) PowerOff(ctx context.Context, graceful bool) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	v := m.running()
	if v == nil {
		return nil
	}
	if graceful {
		bound := m.GracefulTimeout
		if bound <= 0 {
			bound = DefaultGracefulTimeout
		}
		if err := vm.QMP(ctx, m.QMPSocket(), "system_powerdown", nil); err != nil {
			m.logger().Warn("bmcvm: acpi power off failed, killing qemu", "err", err)
		} else {
			t := time.NewTimer(bound)
			select {
			case <-v.Exited():
				t.Stop()
				m.logger().Info("bmcvm: guest powered off after acpi power button")
				return nil
			case <-t.C:
				m.logger().Warn("bmcvm: guest ignored the acpi power button, killing qemu", "bound", bound)
			case <-ctx.Done():
				t.Stop()
				m.logger().Warn("bmcvm: power off cut short, killing qemu", "err", ctx.Err())
			}
		}
	}
	if err := v.Kill(); err != nil {
		return fmt.Errorf("power off qemu machine: %w", err)
	}
	m.logger().Info("bmcvm: powered off")
	return nil
}

// Reset resets the running guest (QMP system_reset); QEMU keeps running
// with its boot order. It fails when QEMU does not run.
func (m *Machine) Reset(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.running() == nil {
		return errors.New("reset qemu machine: it is off")
	}
	if err := vm.QMP(ctx, m.QMPSocket(), "system_reset", nil); err != nil {
		return fmt.Errorf("reset qemu machine: %w", err)
	}
	m.mu.Lock()
	if n := len(m.boots); n > 0 {
		m.boots = append(m.boots, m.boots[n-1])
	}
	m.mu.Unlock()
	return nil
}

// QMP runs a QMP command without arguments ("stop", "cont"...) on the
// running QEMU, for tests that pause a guest.
func (m *Machine) QMP(ctx context.Context, command string) error {
	if m.running() == nil {
		return fmt.Errorf("qmp %s: qemu machine is off", command)
	}
	return vm.QMP(ctx, m.QMPSocket(), command, nil)
}

// State returns bmc.PowerOn while QEMU runs, bmc.PowerOff otherwise.
func (m *Machine) State() bmc.PowerState {
	if m.running() != nil {
		return bmc.PowerOn
	}
	return bmc.PowerOff
}

// VM returns the VM of the last power on (running or exited), nil before
// the first.
func (m *Machine) VM() *vm.VM {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// Boots returns the boot device of every boot so far ("" for the
// firmware's order), a reset counting as a boot from the same device.
func (m *Machine) Boots() []bmc.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]bmc.Device(nil), m.boots...)
}

// Close kills QEMU if it runs, refuses later power ons and removes Dir.
func (m *Machine) Close() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	m.closed = true
	v, cancel := m.cur, m.cancel
	m.mu.Unlock()
	var err error
	if v != nil {
		err = v.Kill()
	}
	if cancel != nil {
		cancel()
	}
	os.RemoveAll(m.Dir)
	return err
}
