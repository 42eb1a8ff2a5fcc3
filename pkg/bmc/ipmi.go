package bmc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"
)

// ipmiExchangeTimeout bounds one UDP exchange of go-ipmi; its own
// retransmissions stay within the attempt's deadline.
const ipmiExchangeTimeout = 3 * time.Second

// ipmi is the IPMI 2.0 (lanplus) Driver. Every call opens a session, runs
// its commands and closes the session, so that no session is left open on
// the BMC, which has few.
type ipmi struct {
	addr  Address
	creds Credentials
	opts  Options
	port  int
}

func newIPMI(a Address, creds Credentials, o Options) (*ipmi, error) {
	port := a.Port
	if port == 0 {
		port = DefaultIPMIPort
	}
	return &ipmi{addr: a, creds: creds, opts: o, port: port}, nil
}

func (d *ipmi) Address() Address { return d.addr }

// Close does nothing: every call closes its own session.
func (d *ipmi) Close(context.Context) error { return nil }

// session runs fn in one lanplus session, retried as a whole on transient
// failures. A refused login fails with ErrAuth.
func (d *ipmi) session(ctx context.Context, what string, fn func(ctx context.Context, c *client.Client) error) error {
	err := retry(ctx, d.opts, func(ctx context.Context) error {
		c, err := client.NewClient(d.addr.Host, d.port, d.creds.Username, d.creds.Password)
		if err != nil {
			// go-ipmi's error names the user name, never the password.
			return permanent(err)
		}
		c.WithTimeout(min(ipmiExchangeTimeout, d.opts.Timeout)).WithRetry(1)
		if err := c.Connect(ctx); err != nil {
			if isIPMIAuthError(err) {
				return fmt.Errorf("%w: open session as %s: %w", ErrAuth, d.creds.Username, err)
			}
			return fmt.Errorf("open session: %w", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ipmiExchangeTimeout)
			defer cancel()
			c.Close(cctx)
		}()
		return fn(ctx, c)
	})
	if err != nil {
		return redact(fmt.Errorf("%s %s: %w", what, d.addr, err), d.creds.Password)
	}
	return nil
}

// isIPMIAuthError tells a refused login (wrong password or user name, RAKP
// status codes) from a transport failure.
func isIPMIAuthError(err error) bool {
	if errors.Is(err, client.ErrRAKPAuthentication) {
		return true
	}
	s := strings.ToLower(err.Error())
	for _, m := range []string{"rakp authentication failed", "authentication code mismatch", "unauthorized name", "invalid name", "invalid integrity check", "invalid role", "unauthorized role"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func (d *ipmi) PowerState(ctx context.Context) (PowerState, error) {
	state := PowerUnknown
	err := d.session(ctx, "get power state of", func(ctx context.Context, c *client.Client) error {
		s, err := ipmiPower(ctx, c)
		state = s
		return err
	})
	return state, err
}

func ipmiPower(ctx context.Context, c *client.Client) (PowerState, error) {
	st, err := c.GetChassisStatus(ctx)
	if err != nil {
		return PowerUnknown, fmt.Errorf("get chassis status: %w", err)
	}
	if st.PowerIsOn {
		return PowerOn, nil
	}
	return PowerOff, nil
}

// control reads the power state and, unless it already is skipIf, sends
// the chassis control; it reports whether it sent it.
func (d *ipmi) control(ctx context.Context, what string, ctl chassis.ChassisControl, skipIf PowerState) (bool, error) {
	sent := false
	err := d.session(ctx, what, func(ctx context.Context, c *client.Client) error {
		s, err := ipmiPower(ctx, c)
		if err != nil {
			return err
		}
		if s == skipIf {
			return nil
		}
		if _, err := c.ChassisControl(ctx, ctl); err != nil {
			return fmt.Errorf("chassis control %d: %w", ctl, err)
		}
		sent = true
		return nil
	})
	return sent, err
}

func (d *ipmi) PowerOn(ctx context.Context) error {
	what := "power on"
	sent, err := d.control(ctx, what, chassis.ChassisControlPowerUp, PowerOn)
	if err != nil || !sent {
		return err
	}
	return waitPower(ctx, d.opts, d.opts.PowerTimeout, what+" "+d.addr.String(), PowerOn, d.PowerState)
}

func (d *ipmi) PowerOff(ctx context.Context, mode OffMode) error {
	what := fmt.Sprintf("power off (%s)", mode)
	ctl, bound := chassis.ChassisControlPowerDown, d.opts.PowerTimeout
	if mode == OffSoft {
		ctl, bound = chassis.ChassisControlSoftShutdown, d.opts.SoftOffTimeout
	}
	sent, err := d.control(ctx, what, ctl, PowerOff)
	if err != nil || !sent {
		return err
	}
	return waitPower(ctx, d.opts, bound, what+" "+d.addr.String(), PowerOff, d.PowerState)
}

func (d *ipmi) Reset(ctx context.Context) error {
	what := "reset"
	err := d.session(ctx, what, func(ctx context.Context, c *client.Client) error {
		s, err := ipmiPower(ctx, c)
		if err != nil {
			return err
		}
		ctl := chassis.ChassisControlHardReset
		if s == PowerOff {
			ctl = chassis.ChassisControlPowerUp
		}
		if _, err := c.ChassisControl(ctx, ctl); err != nil {
			return fmt.Errorf("chassis control %d: %w", ctl, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return waitPower(ctx, d.opts, d.opts.PowerTimeout, what+" "+d.addr.String(), PowerOn, d.PowerState)
}

// ipmiDevices maps boot devices to boot flag device selectors.
var ipmiDevices = map[Device]types.BootDeviceSelector{
	DevicePXE:   types.BootDeviceSelectorForcePXE,
	DeviceDisk:  types.BootDeviceSelectorForceHardDrive,
	DeviceCDROM: types.BootDeviceSelectorForceCDROM,
}

func (d *ipmi) SetBootDevice(ctx context.Context, dev BootDevice) error {
	what := "set boot device " + dev.String() + " on"
	if err := dev.Validate(); err != nil {
		return fmt.Errorf("%s %s: %w", what, d.addr, err)
	}
	bootType := types.BIOSBootTypeEFI
	if dev.mode() == BootLegacy {
		bootType = types.BIOSBootTypeLegacy
	}
	return d.session(ctx, what, func(ctx context.Context, c *client.Client) error {
		if err := c.SetBootDevice(ctx, ipmiDevices[dev.Device], bootType, dev.Persistent); err != nil {
			return fmt.Errorf("set boot flags: %w", err)
		}
		return nil
	})
}

// String names the port for logs.
func (d *ipmi) String() string { return "ipmi " + d.addr.Host + ":" + strconv.Itoa(d.port) }
