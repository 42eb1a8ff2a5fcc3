// Package provisioner is metal3's provisioner contract (seed 001) with
// booty's types, booty's implementation of it over the Bare Metal Database
// and the BMC (NewFactory), and a fixture for controllers' tests
// (subpackage fixture).
//
// # The contract
//
// A controller (metal3's BareMetalHost controller, bootyd's host
// reconciler) makes a Provisioner per host with Factory.NewProvisioner and
// calls it as the host moves through its states. Every call reads the
// backend's state of the host and takes at most one step:
//
//   - continuing: Result{Dirty: true, RequeueAfter: d}: call again after d
//     (3 s after a step whose effect shows soon, 10 s while the agent works;
//     each lengthened by up to 25 % at random so hosts do not step in
//     lockstep);
//   - complete: the zero Result; the controller moves the host on;
//   - failed: Result.ErrorMessage; the controller puts the host in an error
//     state and retries with its own backoff;
//   - transient: a Go error (database or network trouble); call again.
//
// A call on a host the BMDB does not know returns ErrNeedsRegistration;
// ValidateManagementAccess registers it.
//
// # booty's implementation
//
// The backend is the BMDB: the machine's provisioning state, pending agent
// command, agent session, hardware report and events, plus the machine's
// BMC (pkg/bmc) for power, boot device and virtual media. Steps are BMDB
// transitions that issue agent commands (inspect, provision, deprovision),
// spec updates, and BMC calls. While a command is pending and the machine's
// agent is not running (no live agent session), the provisioner boots it
// once per command: boot device PXE for the next boot, power on (or reset
// a machine that is on), and an AgentBootRequested event records that so
// the next call only waits. A live agent (fast track) gets the command
// through its long poll with no reboot.
//
// Which seed methods are real: ValidateManagementAccess, InspectHardware,
// UpdateHardwareState, Adopt, Provision, Deprovision, Delete, Detach,
// PowerOn, PowerOff, TryInit, HasCapacity, IsDataImageReady,
// AttachDataImage and DetachDataImage (Redfish virtual media). What booty
// does not do answers with the seed's errors or a failure naming it:
// PreprovisioningImageFormats returns nil (no image is built: machines
// network-boot the agent); GetFirmwareSettings, GetFirmwareComponents and
// firmware components in Prepare/Service give
// ErrFirmwareUpdateUnsupported; RAID and firmware settings in
// Prepare/Service and BMC event subscriptions fail with an ErrorMessage;
// Prepare and Service with nothing to change are complete and not started.
//
// On failure: BMC answers that will not change by retrying (a refused
// login, a bad address, a power action that did not take) are
// ErrorMessages; network and database errors are Go errors. Credentials
// that HostData carries are stored in the BMDB's secret store under
// "host-NAME" and never logged.
package provisioner
