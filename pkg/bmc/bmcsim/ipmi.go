package bmcsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	ipmibmc "github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/clock"
	"github.com/bougou/go-ipmi/pkg/hal"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/booty-dev/booty/pkg/bmc"
)

// IPMIConfig configures an IPMI test BMC.
type IPMIConfig struct {
	// Machine is what the BMC powers; required.
	Machine Machine
	// Username (at most 16 bytes) and Password (at most 20) of the one
	// administrator; required.
	Username, Password string
	// PowerDelay is how long a power change waits before it is applied;
	// default DefaultPowerDelay.
	PowerDelay time.Duration
	// Addr is the UDP listen address; default 127.0.0.1:0.
	Addr string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// IPMI is an IPMI 2.0 BMC (RMCP+, lanplus; IPMI 1.5 too) on a loopback UDP
// port, go-ipmi's reference server with a chassis that drives a Machine:
// power up and down, soft shutdown (ACPI), power cycle (off then on), hard
// reset (the machine's reset line), and boot flags (the device of the next
// power on; a one-time override is cleared by that power on).
// ipmitool -I lanplus drives it.
type IPMI struct {
	cfg     IPMIConfig
	chassis *chassis
	conn    *udp.Conn
	srv     *server.Server
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewIPMI starts an IPMI BMC for cfg.Machine. It fails on an incomplete
// config or when it cannot listen.
func NewIPMI(cfg IPMIConfig) (*IPMI, error) {
	if err := setup("ipmi", cfg.Machine, cfg.Username, cfg.Password, &cfg.PowerDelay, &cfg.Addr, &cfg.Logger); err != nil {
		return nil, err
	}
	if len(cfg.Username) > 16 || len(cfg.Password) > 20 {
		return nil, errors.New("start ipmi bmc: username longer than 16 bytes or password longer than 20")
	}
	s := &IPMI{
		cfg:     cfg,
		chassis: newChassis(cfg.Machine, cfg.PowerDelay, cfg.Logger),
		done:    make(chan struct{}),
	}
	info := ipmibmc.DeviceInfo{
		DeviceID: 32, DeviceRevision: 1, FirmwareMajor: 1, IPMIVersion: 0x20,
		ManufacturerID: 0x000157, ProductID: 0x0001,
	}
	var guid [16]byte
	copy(guid[:], "booty-bmcsim")
	b := ipmibmc.New(info, guid, &simHAL{ch: &halChassis{c: s.chassis}}, ipmibmc.WithClock(clock.Real))
	user, err := b.Users.Add(2, cfg.Username)
	if err != nil {
		return nil, fmt.Errorf("start ipmi bmc: add user: %w", err)
	}
	user.SetPassword([]byte(cfg.Password))
	user.Enabled = true
	user.ChannelAccess[1] = ipmibmc.UserChannelAccess{MaxPrivilege: ipmibmc.PrivilegeLevelAdministrator, Enabled: true}

	conn, err := udp.Listen(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("start ipmi bmc: listen %s: %w", cfg.Addr, err)
	}
	s.conn = conn
	s.srv = server.NewServer(b, conn)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ctx); err != nil && ctx.Err() == nil {
			cfg.Logger.Error("ipmi bmc: serve", "err", err)
		}
	}()
	return s, nil
}

// Port returns the UDP port the BMC listens on.
func (s *IPMI) Port() int { return s.conn.LocalAddr().(*net.UDPAddr).Port }

// Address returns the BMC address as metal3 writes it: ipmi://127.0.0.1:PORT.
func (s *IPMI) Address() string {
	return "ipmi://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Close stops the server and waits for pending power changes.
func (s *IPMI) Close() error {
	s.cancel()
	err := s.srv.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		return errors.New("close ipmi bmc: server still running after 10s")
	}
	s.chassis.wait()
	return err
}

// SetIgnorePower makes the BMC accept power actions and never apply them
// (failure injection).
func (s *IPMI) SetIgnorePower(ignore bool) { s.chassis.setIgnore(ignore) }

// Boot returns the boot override in force (Device "" for none).
func (s *IPMI) Boot() bmc.BootDevice { return s.chassis.boot() }

// WaitPower waits until the power changes started so far are applied and
// returns the last one's error.
func (s *IPMI) WaitPower() error {
	s.chassis.wait()
	return s.chassis.lastError()
}

// simHAL is a hal.HAL with only a chassis.
type simHAL struct{ ch *halChassis }

func (h *simHAL) Chassis() hal.ChassisHAL { return h.ch }
func (h *simHAL) Sensors() hal.SensorHAL  { return nil }
func (h *simHAL) Storage() hal.StorageHAL { return nil }
func (h *simHAL) Network() hal.NetworkHAL { return nil }
func (h *simHAL) GPIO() hal.GPIOHAL       { return nil }
func (h *simHAL) I2C() hal.I2CHAL         { return nil }
func (h *simHAL) Console() hal.ConsoleHAL { return nil }
func (h *simHAL) Close() error            { return nil }

// halChassis maps go-ipmi's chassis HAL onto the shared chassis. go-ipmi's
// Chassis Control handler calls SetPower for power up and down, PowerCycle
// for a cycle, ColdReset for a hard reset and WarmReset for a soft
// shutdown (ACPI).
type halChassis struct {
	c *chassis

	mu    sync.Mutex
	flags *types.BootOptionParam_BootFlags
	ack   *types.BootOptionParam_BootInfoAcknowledge
}

func (h *halChassis) PowerState(context.Context) (bool, error) {
	return h.c.m.State() == bmc.PowerOn, nil
}

func (h *halChassis) SetPower(_ context.Context, on bool) error {
	if on {
		h.c.apply(actOn)
	} else {
		h.c.apply(actOffHard)
	}
	return nil
}

func (h *halChassis) PowerCycle(context.Context) error { h.c.apply(actRestart); return nil }
func (h *halChassis) ColdReset(context.Context) error  { h.c.apply(actReset); return nil }
func (h *halChassis) WarmReset(context.Context) error  { h.c.apply(actOffSoft); return nil }
func (h *halChassis) Identify(context.Context, uint8) error {
	return nil
}
func (h *halChassis) IntrusionState(context.Context) (bool, error) { return false, nil }

// ipmiDevices maps boot flag device selectors to boot devices.
var ipmiDevices = map[types.BootDeviceSelector]bmc.Device{
	types.BootDeviceSelectorForcePXE:         bmc.DevicePXE,
	types.BootDeviceSelectorForceHardDrive:   bmc.DeviceDisk,
	types.BootDeviceSelectorForceCDROM:       bmc.DeviceCDROM,
	types.BootDeviceSelectorForceRemoteCDROM: bmc.DeviceCDROM,
}

// SetBootFlags stores the flags and sets the chassis' boot override from
// them: valid flags with a known device set it, anything else clears it.
func (h *halChassis) SetBootFlags(_ context.Context, flags *types.BootOptionParam_BootFlags) error {
	if flags == nil {
		return hal.ErrNotSupported
	}
	f := *flags
	h.mu.Lock()
	h.flags = &f
	h.mu.Unlock()
	dev, ok := ipmiDevices[f.BootDeviceSelector]
	if !f.BootFlagsValid || !ok {
		h.c.setBoot(bmc.BootDevice{})
		return nil
	}
	mode := bmc.BootLegacy
	if f.BIOSBootType == types.BIOSBootTypeEFI {
		mode = bmc.BootUEFI
	}
	h.c.setBoot(bmc.BootDevice{Device: dev, Persistent: f.Persist, Mode: mode})
	return nil
}

// GetBootFlags returns the stored flags, marked invalid once a one-time
// override was used.
func (h *halChassis) GetBootFlags(context.Context) (*types.BootOptionParam_BootFlags, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := types.BootOptionParam_BootFlags{}
	if h.flags != nil {
		f = *h.flags
	}
	if h.c.boot().Device == "" {
		f.BootFlagsValid = false
	}
	return &f, nil
}

func (h *halChassis) SetBootInfoAcknowledge(_ context.Context, ack *types.BootOptionParam_BootInfoAcknowledge) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ack = ack
	return nil
}

func (h *halChassis) GetBootInfoAcknowledge(context.Context) (*types.BootOptionParam_BootInfoAcknowledge, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ack == nil {
		return &types.BootOptionParam_BootInfoAcknowledge{}, nil
	}
	return h.ack, nil
}
