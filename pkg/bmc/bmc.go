// Package bmc drives baseboard management controllers: power state, power
// on, soft and hard power off, reset, the boot device (one-time or
// persistent; PXE, disk or CD-ROM; UEFI or legacy) and, over Redfish,
// virtual media. A Driver is chosen by the BMC address as metal3 writes it
// (ipmi://, redfish://, redfish-virtualmedia://, idrac-redfish://...; see
// ParseAddress). IPMI speaks lanplus through github.com/bougou/go-ipmi;
// Redfish is a small client of our own on the DMTF schema.
//
// Every call has a timeout and a bounded retry with backoff for transient
// failures (network errors, 5xx, IPMI timeouts); authentication failures are
// not retried. A power action is verified: the driver polls the power state
// until it matches, within Options.PowerTimeout, and fails with
// ErrPowerNotApplied naming the wanted and the observed state otherwise.
// Credentials never appear in logs or errors.
package bmc

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// PowerState is a machine's power as its BMC reports it.
type PowerState string

// Power states. Redfish's PoweringOn and PoweringOff are reported as they
// are; IPMI knows only On and Off.
const (
	PowerOn          PowerState = "On"
	PowerOff         PowerState = "Off"
	PowerPoweringOn  PowerState = "PoweringOn"
	PowerPoweringOff PowerState = "PoweringOff"
	PowerUnknown     PowerState = "Unknown"
)

// OffMode says how PowerOff turns a machine off.
type OffMode int

// Power off modes.
const (
	// OffSoft asks the OS to shut down (ACPI power button: IPMI soft
	// shutdown, Redfish GracefulShutdown). It fails with ErrPowerNotApplied
	// when the machine is still on after Options.SoftOffTimeout; the caller
	// decides whether to follow up with OffHard.
	OffSoft OffMode = iota
	// OffHard cuts the power (IPMI power down, Redfish ForceOff).
	OffHard
)

func (m OffMode) String() string {
	if m == OffSoft {
		return "soft"
	}
	return "hard"
}

// Device is a boot device.
type Device string

// Boot devices.
const (
	DevicePXE   Device = "pxe"
	DeviceDisk  Device = "disk"
	DeviceCDROM Device = "cdrom"
)

// BootMode is the firmware's boot mode for a boot override.
type BootMode string

// Boot modes.
const (
	BootUEFI   BootMode = "UEFI"
	BootLegacy BootMode = "Legacy"
)

// BootDevice is a boot device override.
type BootDevice struct {
	Device Device
	// Persistent keeps the override for every following boot; otherwise
	// it applies to the next boot only.
	Persistent bool
	// Mode is the firmware boot mode; empty means UEFI.
	Mode BootMode
}

// Validate returns an error naming the field of b that is not valid.
func (b BootDevice) Validate() error {
	switch b.Device {
	case DevicePXE, DeviceDisk, DeviceCDROM:
	default:
		return fmt.Errorf("boot device %q, want pxe, disk or cdrom", b.Device)
	}
	switch b.Mode {
	case "", BootUEFI, BootLegacy:
	default:
		return fmt.Errorf("boot mode %q, want UEFI or Legacy", b.Mode)
	}
	return nil
}

func (b BootDevice) mode() BootMode {
	if b.Mode == "" {
		return BootUEFI
	}
	return b.Mode
}

func (b BootDevice) String() string {
	p := "once"
	if b.Persistent {
		p = "persistent"
	}
	return fmt.Sprintf("%s (%s, %s)", b.Device, p, b.mode())
}

// Credentials are a BMC's user name and password. Its String and LogValue
// hide the password.
type Credentials struct {
	Username string
	Password string
}

// String returns the user name and a redacted password.
func (c Credentials) String() string { return c.Username + ":REDACTED" }

// LogValue keeps the password out of slog output.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("username", c.Username), slog.String("password", "REDACTED"))
}

// GoString keeps the password out of %#v.
func (c Credentials) GoString() string { return "bmc.Credentials{" + c.String() + "}" }

// Driver controls one machine through its BMC. Its methods are safe for
// concurrent use.
type Driver interface {
	// Address returns the BMC address the driver was made for.
	Address() Address
	// PowerState returns the machine's power state.
	PowerState(ctx context.Context) (PowerState, error)
	// PowerOn turns the machine on and waits until the BMC reports it on;
	// a machine already on is left alone.
	PowerOn(ctx context.Context) error
	// PowerOff turns the machine off (softly or hard) and waits until the
	// BMC reports it off; a machine already off is left alone.
	PowerOff(ctx context.Context, mode OffMode) error
	// Reset restarts a machine that is on (hard) and turns on one that is
	// off, then waits until it is reported on.
	Reset(ctx context.Context) error
	// SetBootDevice sets the device the machine boots from next time (or
	// every time, when persistent).
	SetBootDevice(ctx context.Context, dev BootDevice) error
	// Close ends what the driver keeps open (a Redfish session, idle
	// connections). The driver can be used again afterwards.
	Close(ctx context.Context) error
}

// VirtualMedia is implemented by drivers that can attach an ISO as a
// virtual CD (Redfish). Find it with a type assertion.
type VirtualMedia interface {
	// InsertMedia attaches the image at imageURL as the machine's virtual
	// CD, ejecting what was inserted before.
	InsertMedia(ctx context.Context, imageURL string) error
	// EjectMedia detaches the virtual CD; nothing inserted is no error.
	EjectMedia(ctx context.Context) error
}

// Errors, checked with errors.Is.
var (
	// ErrPowerNotApplied: a power action was accepted but the machine did
	// not reach the wanted state within the bound.
	ErrPowerNotApplied = errors.New("power action did not take")
	// ErrAuth: the BMC refused the credentials (not retried).
	ErrAuth = errors.New("bmc authentication failed")
	// ErrUnsupported: the BMC does not offer what was asked.
	ErrUnsupported = errors.New("not supported by the bmc")
)

// Defaults of Options.
const (
	DefaultTimeout        = 20 * time.Second
	DefaultRetries        = 3
	DefaultBackoff        = 500 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultPowerTimeout   = 2 * time.Minute
	DefaultSoftOffTimeout = 5 * time.Minute
	DefaultPollInterval   = 2 * time.Second
)

// Options tune a driver. The zero value of every field is a default.
type Options struct {
	// DisableCertificateVerification accepts any TLS certificate of a
	// Redfish BMC (metal3's disableCertificateVerification).
	DisableCertificateVerification bool
	// RootCAs verify the Redfish BMC's certificate; nil means the system's.
	RootCAs *x509.CertPool
	// SessionAuth logs in through the Redfish SessionService and sends
	// X-Auth-Token instead of basic auth on every request.
	SessionAuth bool
	// Timeout bounds one request (one IPMI session or HTTP request);
	// default DefaultTimeout.
	Timeout time.Duration
	// Retries is how often a transient failure is retried; default
	// DefaultRetries, negative means none.
	Retries int
	// Backoff is the first wait before a retry, doubled each time up to
	// MaxBackoff; defaults DefaultBackoff and DefaultMaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// PowerTimeout bounds the wait for a power on, hard off or reset to
	// show; default DefaultPowerTimeout.
	PowerTimeout time.Duration
	// SoftOffTimeout bounds the wait for a soft power off; default
	// DefaultSoftOffTimeout.
	SoftOffTimeout time.Duration
	// PollInterval is the pause between power state polls; default
	// DefaultPollInterval.
	PollInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.PowerTimeout <= 0 {
		o.PowerTimeout = DefaultPowerTimeout
	}
	if o.SoftOffTimeout <= 0 {
		o.SoftOffTimeout = DefaultSoftOffTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// New parses address and returns the driver for it. It does not contact
// the BMC. It fails on a bad address (ErrBadAddress) or empty user name.
func New(address string, creds Credentials, opts Options) (Driver, error) {
	a, err := ParseAddress(address)
	if err != nil {
		return nil, err
	}
	if creds.Username == "" {
		return nil, fmt.Errorf("bmc %s: empty user name", a)
	}
	opts = opts.withDefaults()
	switch a.Protocol {
	case ProtocolIPMI:
		return newIPMI(a, creds, opts)
	case ProtocolRedfish:
		return newRedfish(a, creds, opts)
	}
	return nil, fmt.Errorf("%w: %s: no driver for protocol %q", ErrBadAddress, a, a.Protocol)
}
