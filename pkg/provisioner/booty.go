package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// Requeue intervals, as metal3's Ironic provisioner uses them: a step was
// taken and its effect shows soon (3 s), or an operation runs on the machine
// (10 s). Each is lengthened by up to 25 % at random.
const (
	RequeueStep = 3 * time.Second
	RequeueWait = 10 * time.Second
	// DefaultProvisioningLimit is metal3's default for hosts inspecting,
	// provisioning or deprovisioning at once.
	DefaultProvisioningLimit = 20
	// DefaultCallTimeout bounds one Provisioner call (its database reads
	// and writes and its BMC calls).
	DefaultCallTimeout = 3 * time.Minute
)

// Event reasons the booty provisioner records in the BMDB and publishes.
const (
	ReasonRegistered        = "Registered"
	ReasonBMCUpdated        = "BMCUpdated"
	ReasonAgentBootRequest  = "AgentBootRequested"
	ReasonPowerOn           = "PowerOn"
	ReasonPowerOff          = "PowerOff"
	ReasonInspectionStarted = "InspectionStarted"
)

// Config configures the booty Factory.
type Config struct {
	// ProvisioningLimit bounds the machines inspecting, provisioning or
	// deprovisioning at once (HasCapacity); default DefaultProvisioningLimit.
	ProvisioningLimit int
	// BMC tunes the BMC drivers (timeouts, retries, CAs). Its
	// DisableCertificateVerification is taken from each host.
	BMC bmc.Options
	// NewDriver makes a BMC driver; default bmc.New.
	NewDriver func(address string, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error)
	// CallTimeout bounds one call; default DefaultCallTimeout.
	CallTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// NewFactory returns the Factory of booty's provisioner over db.
func NewFactory(db *bmdb.DB, cfg Config) Factory {
	if cfg.ProvisioningLimit <= 0 {
		cfg.ProvisioningLimit = DefaultProvisioningLimit
	}
	if cfg.NewDriver == nil {
		cfg.NewDriver = bmc.New
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &factory{db: db, cfg: cfg}
}

type factory struct {
	db  *bmdb.DB
	cfg Config
}

// NewProvisioner returns the provisioner of one host. It contacts nothing;
// ctx bounds every call the provisioner makes later. A host without a name
// and a provisioner ID is refused.
func (f *factory) NewProvisioner(ctx context.Context, h HostData, publish EventPublisher) (Provisioner, error) {
	if h.Name == "" && h.ProvisionerID == "" {
		return nil, fmt.Errorf("new provisioner: host has neither a name nor a provisioner ID")
	}
	if publish == nil {
		publish = func(string, string) {}
	}
	return &bootyProvisioner{
		ctx: ctx, db: f.db, cfg: f.cfg, host: h, publish: publish,
		log: f.cfg.Logger.With("component", "provisioner", "host", h.Name),
	}, nil
}

// bootyProvisioner implements Provisioner over the BMDB (the backend's state:
// the machine row, its agent session, hardware report and events) and the
// machine's BMC.
type bootyProvisioner struct {
	ctx     context.Context
	db      *bmdb.DB
	cfg     Config
	host    HostData
	publish EventPublisher
	log     *slog.Logger
}

// jitter lengthens d by up to 25 %, as metal3 does, so hosts that started
// together do not step in lockstep.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(mrand.Int64N(int64(d)/4+1))
}

func continuing(d time.Duration) Result { return Result{Dirty: true, RequeueAfter: jitter(d)} }

func failed(format string, args ...any) Result {
	return Result{ErrorMessage: fmt.Sprintf(format, args...)}
}

func (p *bootyProvisioner) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(p.ctx, p.cfg.CallTimeout)
}

// credentialsRef is the name under which the provisioner stores the BMC
// credentials HostData carries.
func credentialsRef(name string) string { return "host-" + name }

// machine finds the host's machine: by provisioner ID, else by boot MAC,
// else by name. None gives ErrNeedsRegistration.
func (p *bootyProvisioner) machine(ctx context.Context) (bmdb.Machine, error) {
	if p.host.ProvisionerID != "" {
		m, err := p.db.GetMachine(ctx, p.host.ProvisionerID)
		if err == nil || !errors.Is(err, bmdb.ErrNotFound) {
			return m, err
		}
	}
	if p.host.BootMACAddress != "" {
		m, err := p.db.MachineByMAC(ctx, p.host.BootMACAddress)
		if err == nil || !errors.Is(err, bmdb.ErrNotFound) {
			return m, err
		}
	}
	if p.host.Name != "" {
		m, err := p.db.MachineByName(ctx, p.host.Name)
		if err == nil || !errors.Is(err, bmdb.ErrNotFound) {
			return m, err
		}
	}
	return bmdb.Machine{}, fmt.Errorf("host %s: %w", p.host.Name, ErrNeedsRegistration)
}

// driver returns a BMC driver for the host, with the credentials HostData
// carries or, when it carries none, those the BMDB stores for the machine.
func (p *bootyProvisioner) driver(ctx context.Context, m *bmdb.Machine) (bmc.Driver, error) {
	addr, creds := p.host.BMCAddress, p.host.BMCCredentials
	insecure := p.host.DisableCertificateVerification
	if addr == "" && m != nil {
		addr, insecure = m.BMC.Address, m.BMC.DisableCertificateVerification
	}
	if addr == "" {
		return nil, fmt.Errorf("host %s has no BMC address: %w", p.host.Name, bmc.ErrUnsupported)
	}
	if creds.Username == "" && m != nil && m.BMC.CredentialsRef != "" {
		c, err := p.db.GetCredentials(ctx, m.BMC.CredentialsRef)
		if err != nil {
			return nil, fmt.Errorf("host %s: BMC credentials: %w", p.host.Name, err)
		}
		creds = bmc.Credentials{Username: c.Username, Password: c.Password}
	}
	opts := p.cfg.BMC
	opts.DisableCertificateVerification = insecure
	if opts.Logger == nil {
		opts.Logger = p.log
	}
	return p.cfg.NewDriver(addr, creds, opts)
}

// withDriver runs fn with a driver and closes it afterwards.
func (p *bootyProvisioner) withDriver(ctx context.Context, m *bmdb.Machine, fn func(bmc.Driver) error) error {
	d, err := p.driver(ctx, m)
	if err != nil {
		return err
	}
	defer d.Close(context.WithoutCancel(ctx))
	return fn(d)
}

// record appends an event to the machine's history and publishes it.
func (p *bootyProvisioner) record(ctx context.Context, id, typ, reason, msg string) error {
	p.publish(reason, msg)
	if err := p.db.RecordEvent(ctx, id, typ, reason, msg); err != nil {
		return fmt.Errorf("host %s: record event %s: %w", p.host.Name, reason, err)
	}
	return nil
}

// bmcFailure turns a BMC error into the call's answer: a refused login, a bad
// address or a power action that did not take fail the operation (the host
// goes to an error state); anything else is transient.
func bmcFailure(what string, err error) (Result, error) {
	if errors.Is(err, bmc.ErrAuth) || errors.Is(err, bmc.ErrPowerNotApplied) || errors.Is(err, bmc.ErrBadAddress) || errors.Is(err, bmc.ErrUnsupported) {
		return failed("%s: %v", what, err), nil
	}
	return Result{}, fmt.Errorf("%s: %w", what, err)
}

// ValidateManagementAccess registers the host and checks its BMC, one step
// per call:
//
//  1. no machine → store the credentials, CreateMachine (state registering,
//     or externally provisioned when data.State says so) → Dirty, provID;
//  2. BMC address, TLS setting or credentials (compared with those the BMDB
//     stores, so credentialsChanged is only a hint) changed → stored under
//     "host-NAME" and the machine updated → Dirty;
//  3. detached → attach again (status OK) → Dirty;
//  4. read the power state through the BMC: a refused login or bad address
//     fails (ErrorMessage), a network failure is transient (error);
//  5. complete, with the machine ID as provID.
//
// A host without a boot MAC cannot be registered (ErrorMessage).
func (p *bootyProvisioner) ValidateManagementAccess(data ManagementAccessData, credentialsChanged, restartOnFailure bool) (Result, string, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if errors.Is(err, ErrNeedsRegistration) {
		return p.register(ctx, data)
	}
	if err != nil {
		return Result{}, "", err
	}
	want := m.BMC
	if p.host.BMCAddress != "" {
		want.Address = p.host.BMCAddress
		want.DisableCertificateVerification = p.host.DisableCertificateVerification
	}
	if hc := p.host.BMCCredentials; hc.Username != "" {
		stored := bmdb.Credentials{}
		if m.BMC.CredentialsRef != "" {
			if stored, err = p.db.GetCredentials(ctx, m.BMC.CredentialsRef); err != nil && !errors.Is(err, bmdb.ErrNotFound) {
				return Result{}, m.ID, fmt.Errorf("host %s: read BMC credentials: %w", p.host.Name, err)
			}
		}
		if stored.Username != hc.Username || stored.Password != hc.Password {
			ref := credentialsRef(m.Name)
			if err := p.db.PutCredentials(ctx, ref, bmdb.Credentials{Username: hc.Username, Password: hc.Password}); err != nil {
				return Result{}, m.ID, fmt.Errorf("host %s: store BMC credentials: %w", p.host.Name, err)
			}
			want.CredentialsRef = ref
			if want == m.BMC {
				p.publish(ReasonBMCUpdated, "BMC credentials changed")
				return continuing(RequeueStep), m.ID, nil
			}
		}
	}
	if want != m.BMC {
		if _, err := p.db.UpdateMachine(ctx, m.ID, 0, bmdb.MachineUpdate{BMC: &want}); err != nil {
			if errors.Is(err, bmdb.ErrInvalid) {
				return failed("update BMC of host %s: %v", p.host.Name, err), m.ID, nil
			}
			return Result{}, m.ID, fmt.Errorf("host %s: update BMC: %w", p.host.Name, err)
		}
		p.publish(ReasonBMCUpdated, "BMC address or credentials changed")
		return continuing(RequeueStep), m.ID, nil
	}
	if m.Status == bmdb.StatusDetached {
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: m.State, Status: bmdb.StatusOK, Reason: "Attached",
			Message: "managed again by the provisioner"}); err != nil {
			return Result{}, m.ID, fmt.Errorf("host %s: attach: %w", p.host.Name, err)
		}
		return continuing(RequeueStep), m.ID, nil
	}
	if m.BMC.Address == "" {
		return Result{}, m.ID, nil // nothing to validate: a host managed by hand
	}
	err = p.withDriver(ctx, &m, func(d bmc.Driver) error {
		_, err := d.PowerState(ctx)
		return err
	})
	if err != nil {
		r, err := bmcFailure("validate BMC access of host "+p.host.Name, err)
		return r, m.ID, err
	}
	return Result{}, m.ID, nil
}

func (p *bootyProvisioner) register(ctx context.Context, data ManagementAccessData) (Result, string, error) {
	if p.host.Name == "" || p.host.BootMACAddress == "" {
		return failed("register host %q: a name and a boot MAC address are required", p.host.Name), "", nil
	}
	nm := bmdb.NewMachine{Name: p.host.Name, BootMAC: p.host.BootMACAddress,
		BMC: bmdb.BMC{Address: p.host.BMCAddress, DisableCertificateVerification: p.host.DisableCertificateVerification}}
	if data.State == StateExternallyProvisioned {
		nm.State = bmdb.StateExternallyProvisioned
	}
	if data.CurrentImage != nil {
		nm.Spec.Image = data.CurrentImage.spec()
	}
	if p.host.BMCCredentials.Username != "" {
		nm.BMC.CredentialsRef = credentialsRef(p.host.Name)
		if err := p.db.PutCredentials(ctx, nm.BMC.CredentialsRef, bmdb.Credentials{Username: p.host.BMCCredentials.Username, Password: p.host.BMCCredentials.Password}); err != nil {
			return Result{}, "", fmt.Errorf("register host %s: store BMC credentials: %w", p.host.Name, err)
		}
	}
	m, err := p.db.CreateMachine(ctx, nm)
	if errors.Is(err, bmdb.ErrInvalid) || errors.Is(err, bmdb.ErrConflict) {
		return failed("register host %s: %v", p.host.Name, err), "", nil
	}
	if err != nil {
		return Result{}, "", fmt.Errorf("register host %s: %w", p.host.Name, err)
	}
	p.host.ProvisionerID = m.ID
	p.publish(ReasonRegistered, "registered as machine "+m.ID)
	return continuing(RequeueStep), m.ID, nil
}

// PreprovisioningImageFormats returns nil: machines network-boot booty's
// agent, no image is built for them.
func (p *bootyProvisioner) PreprovisioningImageFormats() ([]ImageFormat, error) { return nil, nil }

// agentBusy reports whether a command is running on the machine: inspect,
// provision or deprovision pending.
func agentBusy(m bmdb.Machine, cmd bmdb.CommandKind) bool { return m.Command == cmd }

// bootAgent makes sure the machine runs the agent for its pending command,
// taking at most one step: an agent session that is live needs nothing (the
// agent long-polls the command: fast track); otherwise, once per command,
// the boot device is set to PXE (once) and the machine powered on, or reset
// when it is on, and an AgentBootRequested event records it. A machine
// without a BMC is left to its operator. It returns Dirty, 10 s.
func (p *bootyProvisioner) bootAgent(ctx context.Context, m bmdb.Machine, mode BootMode) (Result, error) {
	if s, err := p.db.GetAgentSession(ctx, m.ID); err == nil && s.Live {
		return continuing(RequeueWait), nil
	} else if err != nil && !errors.Is(err, bmdb.ErrNotFound) {
		return Result{}, err
	}
	if m.BMC.Address == "" && p.host.BMCAddress == "" {
		return continuing(RequeueWait), nil
	}
	booted, err := p.bootRequested(ctx, m)
	if err != nil || booted {
		return continuing(RequeueWait), err
	}
	var how string
	err = p.withDriver(ctx, &m, func(d bmc.Driver) error {
		if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DevicePXE, Mode: mode.bmcMode()}); err != nil {
			return err
		}
		st, err := d.PowerState(ctx)
		if err != nil {
			return err
		}
		if st == bmc.PowerOff {
			how = "powered on"
			return d.PowerOn(ctx)
		}
		how = "reset"
		return d.Reset(ctx)
	})
	if err != nil {
		return bmcFailure(fmt.Sprintf("boot host %s into the agent for %s", p.host.Name, m.Command), err)
	}
	msg := fmt.Sprintf("boot device PXE (once), %s, for command %s at generation %d", how, m.Command, m.CommandGeneration)
	if err := p.record(ctx, m.ID, bmdb.EventNormal, ReasonAgentBootRequest, msg); err != nil {
		return Result{}, err
	}
	return continuing(RequeueWait), nil
}

// bootRequested reports whether the agent was booted for the machine's
// pending command already (an AgentBootRequested event at or after its
// generation).
func (p *bootyProvisioner) bootRequested(ctx context.Context, m bmdb.Machine) (bool, error) {
	var after int64
	for {
		evs, err := p.db.Events(ctx, m.ID, after, 1000)
		if err != nil {
			return false, err
		}
		for _, e := range evs {
			if e.Reason == ReasonAgentBootRequest && e.Generation >= m.CommandGeneration && !e.Time.Before(m.CommandIssuedAt) {
				return true, nil
			}
		}
		if len(evs) < 1000 {
			return false, nil
		}
		after = evs[len(evs)-1].ID
	}
}

// hardware returns the machine's last hardware report, nil when none.
func (p *bootyProvisioner) hardware(ctx context.Context, id string) (*HardwareDetails, error) {
	raw, _, err := p.db.Hardware(ctx, id)
	if errors.Is(err, bmdb.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var d HardwareDetails
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("host %s: decode hardware report: %w", p.host.Name, err)
	}
	return &d, nil
}

// InspectHardware inspects the host through the agent, by the machine's
// state in the BMDB:
//
//   - inspecting with the inspect command pending: in progress; the agent is
//     booted once if it is not running (bootAgent) → Dirty, 10 s;
//   - inspecting, the command failed: restartOnFailure issues it again
//     (started) → Dirty; otherwise fails with the agent's error;
//   - available (or later) with a hardware report and no refresh: complete,
//     details from the report;
//   - registering, externally provisioned, or available with refresh or
//     without a report: start (inspecting, command inspect; started) → Dirty;
//   - any other state: fails naming it.
func (p *bootyProvisioner) InspectHardware(data InspectData, restartOnFailure, refresh, forceReboot bool) (Result, bool, *HardwareDetails, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return Result{}, false, nil, err
	}
	start := func(reason string) (Result, bool, *HardwareDetails, error) {
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: reason}); err != nil {
			return Result{}, false, nil, fmt.Errorf("host %s: start inspection: %w", p.host.Name, err)
		}
		p.publish(ReasonInspectionStarted, "inspection started")
		return continuing(RequeueStep), true, nil, nil
	}
	switch m.State {
	case bmdb.StateInspecting:
		if agentBusy(m, bmdb.CommandInspect) {
			r, err := p.bootAgent(ctx, m, data.BootMode)
			return r, false, nil, err
		}
		if m.Status == bmdb.StatusError {
			if restartOnFailure {
				return start("InspectionRestarted")
			}
			return failed("inspection of host %s failed: %s", p.host.Name, m.Error.Message), false, nil, nil
		}
		return start(ReasonInspectionStarted)
	case bmdb.StateRegistering, bmdb.StateExternallyProvisioned:
		return start(ReasonInspectionStarted)
	case bmdb.StateAvailable, bmdb.StatePreparing, bmdb.StateProvisioning, bmdb.StateProvisioned, bmdb.StateDeprovisioning:
		d, err := p.hardware(ctx, m.ID)
		if err != nil {
			return Result{}, false, nil, err
		}
		if m.State == bmdb.StateAvailable && (refresh || d == nil) {
			return start(ReasonInspectionStarted)
		}
		if d == nil {
			return failed("host %s is %s and has no hardware report", p.host.Name, m.State), false, nil, nil
		}
		return Result{}, false, d, nil
	}
	return failed("host %s cannot be inspected in state %s", p.host.Name, m.State), false, nil, nil
}

// UpdateHardwareState reads the power state through the BMC. A host without
// a BMC, or a BMC that answers neither on nor off, gives PoweredOn nil.
func (p *bootyProvisioner) UpdateHardwareState() (HardwareState, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return HardwareState{}, err
	}
	if m.BMC.Address == "" && p.host.BMCAddress == "" {
		return HardwareState{}, nil
	}
	var st bmc.PowerState
	err = p.withDriver(ctx, &m, func(d bmc.Driver) error {
		st, err = d.PowerState(ctx)
		return err
	})
	if err != nil {
		return HardwareState{}, fmt.Errorf("host %s: read power state: %w", p.host.Name, err)
	}
	switch st {
	case bmc.PowerOn:
		on := true
		return HardwareState{PoweredOn: &on}, nil
	case bmc.PowerOff:
		off := false
		return HardwareState{PoweredOn: &off}, nil
	}
	return HardwareState{}, nil
}

// Adopt takes a host that runs its OS under management: provisioned or
// externally provisioned is complete; registering or available moves to
// externally provisioned → Dirty; provisioning in progress → Dirty, 10 s;
// anything else fails naming the state.
func (p *bootyProvisioner) Adopt(data AdoptData, restartOnFailure bool) (Result, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return Result{}, err
	}
	switch m.State {
	case bmdb.StateProvisioned, bmdb.StateExternallyProvisioned:
		return Result{}, nil
	case bmdb.StateRegistering, bmdb.StateAvailable:
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateExternallyProvisioned, Reason: "Adopted"}); err != nil {
			return Result{}, fmt.Errorf("host %s: adopt: %w", p.host.Name, err)
		}
		return continuing(RequeueStep), nil
	case bmdb.StateProvisioning:
		if agentBusy(m, bmdb.CommandProvision) {
			return continuing(RequeueWait), nil
		}
	}
	return failed("host %s cannot be adopted in state %s (status %s)", p.host.Name, m.State, m.Status), nil
}

// Prepare checks what preparing asks for. booty configures neither RAID nor
// firmware settings, so RAID volumes or firmware settings fail the call
// (ErrorMessage naming them), firmware components give
// ErrFirmwareUpdateUnsupported, and invalid root device hints fail naming the
// hint; otherwise there is nothing to do: complete, not started.
func (p *bootyProvisioner) Prepare(data PrepareData, unprepared bool, restartOnFailure bool) (Result, bool, error) {
	ctx, cancel := p.call()
	defer cancel()
	if _, err := p.machine(ctx); err != nil {
		return Result{}, false, err
	}
	if len(data.TargetFirmwareComponents) > 0 {
		return Result{}, false, ErrFirmwareUpdateUnsupported
	}
	if !data.TargetRAIDConfig.empty() {
		return failed("host %s: RAID configuration is not supported by booty", p.host.Name), false, nil
	}
	if !data.FirmwareConfig.empty() || len(data.TargetFirmwareSettings) > 0 {
		return failed("host %s: firmware settings are not supported by booty", p.host.Name), false, nil
	}
	if data.RootDeviceHints != nil {
		if _, err := data.RootDeviceHints.Hints(); err != nil {
			return failed("host %s: root device hints: %v", p.host.Name, err), false, nil
		}
	}
	return Result{}, false, nil
}

// Service changes a provisioned host's firmware, which booty cannot:
// firmware components give ErrFirmwareUpdateUnsupported, firmware settings
// fail naming them; nothing asked is complete, not started.
func (p *bootyProvisioner) Service(data ServicingData, unprepared, restartOnFailure bool) (Result, bool, error) {
	if len(data.TargetFirmwareComponents) > 0 {
		return Result{}, false, ErrFirmwareUpdateUnsupported
	}
	if !data.FirmwareConfig.empty() || len(data.TargetFirmwareSettings) > 0 {
		return failed("host %s: firmware settings are not supported by booty", p.host.Name), false, nil
	}
	return Result{}, false, nil
}

// spec returns the machine spec data asks for, over the machine's current
// one (hostname and config overrides are kept).
func (p *bootyProvisioner) spec(cur bmdb.Spec, data ProvisionData) (bmdb.Spec, error) {
	s := cur
	s.Image = data.Image.spec()
	if cur.Image.URL == s.Image.URL {
		s.Image.Checksums = cur.Image.Checksums // not in metal3's Image: kept
	}
	s.RootDeviceHints = nil
	if data.RootDeviceHints != nil {
		s.RootDeviceHints = data.RootDeviceHints.spec()
	}
	s.UserData, s.NetworkData, s.MetaData = "", "", ""
	if data.HostConfig != nil {
		var err error
		if s.UserData, err = data.HostConfig.UserData(); err != nil {
			return s, fmt.Errorf("user data: %w", err)
		}
		if s.NetworkData, err = data.HostConfig.NetworkData(); err != nil {
			return s, fmt.Errorf("network data: %w", err)
		}
		if s.MetaData, err = data.HostConfig.MetaData(); err != nil {
			return s, fmt.Errorf("meta data: %w", err)
		}
	}
	return s, nil
}

func sameSpec(a, b bmdb.Spec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Provision writes data.Image to the host through the agent, by the
// machine's state in the BMDB:
//
//   - provisioned: complete;
//   - provisioning with the provision command pending: in progress; the
//     agent is booted once if it is not running → Dirty, 10 s;
//   - provisioning, the command failed: the same image fails with the
//     agent's error; another image deprovisions first (deprovisioning,
//     command deprovision) → Dirty;
//   - registering: made available → Dirty; inspecting, deprovisioning: wait
//     → Dirty, 10 s;
//   - available with another spec: the spec is set (image, root device
//     hints, user/network/meta data) → Dirty; with this spec: provisioning,
//     command provision → Dirty;
//   - externally provisioned and other states: fail naming the state.
//
// An image without a URL, invalid root device hints, a custom deploy method
// or failing host config data fail the call before anything changes.
// forceReboot has no effect: the agent is rebooted into whenever it is not
// running.
func (p *bootyProvisioner) Provision(data ProvisionData, forceReboot bool) (Result, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return Result{}, err
	}
	if data.CustomDeploy != nil && data.CustomDeploy.Method != "" {
		return failed("host %s: custom deploy method %q is not supported by booty", p.host.Name, data.CustomDeploy.Method), nil
	}
	if data.Image.URL == "" {
		return failed("host %s: the image has no URL", p.host.Name), nil
	}
	if data.RootDeviceHints != nil {
		if _, err := data.RootDeviceHints.Hints(); err != nil {
			return failed("host %s: root device hints: %v", p.host.Name, err), nil
		}
	}
	want, err := p.spec(m.Spec, data)
	if err != nil {
		return failed("host %s: %v", p.host.Name, err), nil
	}
	switch m.State {
	case bmdb.StateProvisioned:
		return Result{}, nil
	case bmdb.StateProvisioning:
		if agentBusy(m, bmdb.CommandProvision) {
			return p.bootAgent(ctx, m, data.BootMode)
		}
		if m.Status != bmdb.StatusError {
			return continuing(RequeueWait), nil
		}
		in, err := p.db.GetInstall(ctx, m.ID, 0)
		if err != nil && !errors.Is(err, bmdb.ErrNotFound) {
			return Result{}, err
		}
		if err == nil && in.Spec.Image.URL == data.Image.URL {
			return failed("provisioning of host %s failed: %s", p.host.Name, m.Error.Message), nil
		}
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision,
			Reason: "ImageChanged", Message: "provisioning failed and the image changed: deprovision first"}); err != nil {
			return Result{}, fmt.Errorf("host %s: deprovision after a failed provision: %w", p.host.Name, err)
		}
		return continuing(RequeueStep), nil
	case bmdb.StateRegistering:
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateAvailable, Reason: "MadeAvailable"}); err != nil {
			return Result{}, fmt.Errorf("host %s: make available: %w", p.host.Name, err)
		}
		return continuing(RequeueStep), nil
	case bmdb.StateInspecting, bmdb.StateDeprovisioning, bmdb.StatePreparing:
		if m.Status == bmdb.StatusError {
			return failed("host %s is %s and failed: %s", p.host.Name, m.State, m.Error.Message), nil
		}
		return continuing(RequeueWait), nil
	case bmdb.StateAvailable:
		if !sameSpec(m.Spec, want) {
			if _, err := p.db.UpdateMachine(ctx, m.ID, m.Generation, bmdb.MachineUpdate{Spec: &want}); err != nil {
				if errors.Is(err, bmdb.ErrInvalid) {
					return failed("host %s: %v", p.host.Name, err), nil
				}
				return Result{}, fmt.Errorf("host %s: set the spec: %w", p.host.Name, err)
			}
			return continuing(RequeueStep), nil
		}
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision,
			Reason: "ProvisioningStarted", Generation: m.Generation}); err != nil {
			return Result{}, fmt.Errorf("host %s: start provisioning: %w", p.host.Name, err)
		}
		p.publish("ProvisioningStarted", "image "+data.Image.URL)
		return continuing(RequeueStep), nil
	}
	return failed("host %s cannot be provisioned in state %s", p.host.Name, m.State), nil
}

// Deprovision removes the image through the agent, by the machine's state:
//
//   - deprovisioning with the command pending: in progress; the agent is
//     booted once if it is not running → Dirty, 10 s;
//   - deprovisioning, the command failed: restartOnFailure issues it again →
//     Dirty; otherwise fails with the agent's error;
//   - registering, inspecting, available, preparing: complete;
//   - provisioned, provisioning, externally provisioned: deprovisioning,
//     command deprovision → Dirty;
//   - powering off before delete, deleting: complete.
func (p *bootyProvisioner) Deprovision(restartOnFailure bool) (Result, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return Result{}, err
	}
	start := func(reason string) (Result, error) {
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision, Reason: reason}); err != nil {
			return Result{}, fmt.Errorf("host %s: start deprovisioning: %w", p.host.Name, err)
		}
		p.publish(reason, "deprovisioning")
		return continuing(RequeueStep), nil
	}
	switch m.State {
	case bmdb.StateDeprovisioning:
		if agentBusy(m, bmdb.CommandDeprovision) {
			return p.bootAgent(ctx, m, "")
		}
		if m.Status == bmdb.StatusError && !restartOnFailure {
			return failed("deprovisioning of host %s failed: %s", p.host.Name, m.Error.Message), nil
		}
		return start("DeprovisioningRestarted")
	case bmdb.StateProvisioned, bmdb.StateProvisioning, bmdb.StateExternallyProvisioned:
		return start("DeprovisioningStarted")
	}
	return Result{}, nil
}

// Delete removes the machine from the BMDB: first it moves to deleting →
// Dirty; then the machine and the credentials the provisioner stored for it
// are deleted → complete. A machine that is gone is complete. Work held on
// the machine by a control loop fails the call as transient.
func (p *bootyProvisioner) Delete() (Result, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return gone(err)
	}
	if m.State != bmdb.StateDeleting {
		if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateDeleting, Reason: "Deleting"}); err != nil {
			return Result{}, fmt.Errorf("host %s: delete: %w", p.host.Name, err)
		}
		return continuing(RequeueStep), nil
	}
	if err := p.db.DeleteMachine(ctx, m.ID); err != nil && !errors.Is(err, bmdb.ErrNotFound) {
		return Result{}, fmt.Errorf("host %s: delete: %w", p.host.Name, err)
	}
	if ref := m.BMC.CredentialsRef; ref == credentialsRef(m.Name) {
		if err := p.db.DeleteCredentials(ctx, ref); err != nil && !errors.Is(err, bmdb.ErrNotFound) {
			return Result{}, fmt.Errorf("host %s: delete credentials: %w", p.host.Name, err)
		}
	}
	return Result{}, nil
}

// gone answers a call that removes the machine: one the BMDB does not know
// is removed already (complete); other errors are transient.
func gone(err error) (Result, error) {
	if errors.Is(err, ErrNeedsRegistration) {
		return Result{}, nil
	}
	return Result{}, err
}

// Detach leaves the machine where it is and marks it detached (status
// detached) → Dirty; a detached machine is complete. Nothing touches the
// hardware. ValidateManagementAccess attaches it again.
func (p *bootyProvisioner) Detach() (Result, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return gone(err)
	}
	if m.Status == bmdb.StatusDetached {
		return Result{}, nil
	}
	if _, err := p.db.Transition(ctx, m.ID, bmdb.Transition{To: m.State, Status: bmdb.StatusDetached, Reason: "Detached"}); err != nil {
		return Result{}, fmt.Errorf("host %s: detach: %w", p.host.Name, err)
	}
	return continuing(RequeueStep), nil
}

// PowerOn reads the power state through the BMC: on is complete; off is
// powered on (the driver waits until the BMC reports on) and recorded →
// Dirty, 3 s. A provisioned or externally provisioned machine gets boot
// device disk (persistent) first, so it boots its OS. A power action that does not take or a refused login fails
// (ErrorMessage); network failures are transient.
func (p *bootyProvisioner) PowerOn(force bool) (Result, error) {
	return p.power(true, bmc.OffHard)
}

// PowerOff is PowerOn's opposite: soft (ACPI) unless rebootMode is hard or
// force is set. A soft power off that does not take fails with the BMC's
// error; call again with force for a hard one.
func (p *bootyProvisioner) PowerOff(rebootMode RebootMode, force bool) (Result, error) {
	mode := bmc.OffSoft
	if force || rebootMode == RebootModeHard {
		mode = bmc.OffHard
	}
	return p.power(false, mode)
}

func (p *bootyProvisioner) power(on bool, mode bmc.OffMode) (Result, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return Result{}, err
	}
	want, reason, what := bmc.PowerOff, ReasonPowerOff, fmt.Sprintf("power off (%s)", mode)
	if on {
		want, reason, what = bmc.PowerOn, ReasonPowerOn, "power on"
	}
	done := false
	err = p.withDriver(ctx, &m, func(d bmc.Driver) error {
		st, err := d.PowerState(ctx)
		if err != nil {
			return err
		}
		if st == want {
			done = true
			return nil
		}
		if !on {
			return d.PowerOff(ctx, mode)
		}
		if m.State == bmdb.StateProvisioned || m.State == bmdb.StateExternallyProvisioned {
			// Its OS is on its disk: boot that (Ironic's local boot), not
			// the PXE override an earlier agent boot may have left.
			if err := d.SetBootDevice(ctx, bmc.BootDevice{Device: bmc.DeviceDisk, Persistent: true}); err != nil {
				return err
			}
			what = "power on (boot device disk)"
		}
		return d.PowerOn(ctx)
	})
	if err != nil {
		return bmcFailure(what+" host "+p.host.Name, err)
	}
	if done {
		return Result{}, nil
	}
	if err := p.record(ctx, m.ID, bmdb.EventNormal, reason, what+" through the BMC"); err != nil {
		return Result{}, err
	}
	return continuing(RequeueStep), nil
}

// TryInit checks that the BMDB answers.
func (p *bootyProvisioner) TryInit() (bool, error) {
	ctx, cancel := p.call()
	defer cancel()
	if _, err := p.db.ListMachines(ctx, bmdb.ListOptions{Limit: 1}); err != nil {
		return false, fmt.Errorf("provisioner: BMDB not ready: %w", err)
	}
	return true, nil
}

// busyStates are the states that take a provisioning slot.
var busyStates = []bmdb.State{bmdb.StateInspecting, bmdb.StateProvisioning, bmdb.StateDeprovisioning}

// HasCapacity reports whether the host may start inspecting, provisioning
// or deprovisioning: a host that holds a slot (it is in one of those states)
// has capacity; otherwise the machines in them must number fewer than the
// provisioning limit.
func (p *bootyProvisioner) HasCapacity() (bool, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err == nil {
		for _, s := range busyStates {
			if m.State == s {
				return true, nil
			}
		}
	} else if !errors.Is(err, ErrNeedsRegistration) {
		return false, err
	}
	n, after := 0, ""
	for n < p.cfg.ProvisioningLimit {
		page, err := p.db.ListMachines(ctx, bmdb.ListOptions{States: busyStates, AfterName: after})
		if err != nil {
			return false, fmt.Errorf("provisioner: count busy machines: %w", err)
		}
		n += len(page)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Name
	}
	return n < p.cfg.ProvisioningLimit, nil
}

// GetFirmwareSettings returns ErrFirmwareUpdateUnsupported: booty reads no
// BIOS settings.
func (p *bootyProvisioner) GetFirmwareSettings(includeSchema bool) (SettingsMap, map[string]SettingSchema, error) {
	return nil, nil, ErrFirmwareUpdateUnsupported
}

// AddBMCEventSubscriptionForNode fails: the BMC drivers subscribe to no events.
func (p *bootyProvisioner) AddBMCEventSubscriptionForNode(s *BMCEventSubscription, h HTTPHeaders) (Result, error) {
	return failed("host %s: BMC event subscriptions are not supported by booty", p.host.Name), nil
}

// RemoveBMCEventSubscriptionForNode has nothing to remove: complete.
func (p *bootyProvisioner) RemoveBMCEventSubscriptionForNode(s BMCEventSubscription) (Result, error) {
	return Result{}, nil
}

// GetFirmwareComponents returns ErrFirmwareUpdateUnsupported.
func (p *bootyProvisioner) GetFirmwareComponents() ([]FirmwareComponentStatus, error) {
	return nil, ErrFirmwareUpdateUnsupported
}

// IsDataImageReady reports the machine busy while a command runs on it or
// it is inspecting, provisioning or deprovisioning.
func (p *bootyProvisioner) IsDataImageReady() (bool, error) {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return false, err
	}
	if m.Command != "" {
		return true, nil
	}
	for _, s := range busyStates {
		if m.State == s {
			return true, nil
		}
	}
	return false, nil
}

// AttachDataImage inserts the image at URL as the machine's virtual CD
// through a Redfish BMC; other BMCs give an error wrapping
// bmc.ErrUnsupported.
func (p *bootyProvisioner) AttachDataImage(url string) error {
	return p.media(func(ctx context.Context, vm bmc.VirtualMedia) error { return vm.InsertMedia(ctx, url) })
}

// DetachDataImage ejects the virtual CD (nothing inserted is no error).
func (p *bootyProvisioner) DetachDataImage() error {
	return p.media(func(ctx context.Context, vm bmc.VirtualMedia) error { return vm.EjectMedia(ctx) })
}

func (p *bootyProvisioner) media(fn func(context.Context, bmc.VirtualMedia) error) error {
	ctx, cancel := p.call()
	defer cancel()
	m, err := p.machine(ctx)
	if err != nil {
		return err
	}
	return p.withDriver(ctx, &m, func(d bmc.Driver) error {
		vm, ok := d.(bmc.VirtualMedia)
		if !ok {
			return fmt.Errorf("host %s: virtual media: %w", p.host.Name, bmc.ErrUnsupported)
		}
		return fn(ctx, vm)
	})
}
