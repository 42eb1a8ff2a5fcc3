package api

import (
	"encoding/json"
	"time"
)

// The fleet API: bootyd keeps every machine in its Bare Metal Database
// (pkg/bmdb); operators register, inspect, provision and deprovision them,
// and the agent on each machine enrolls and waits for work.
//
// Operator routes need "Authorization: Bearer <operator token>" (one of the
// lines of bootyd's --operator-token-file); a missing or wrong one gets 401.
// {machine} is a machine's name, its ID or any of its MACs.
//
//	GET    /v1/machines                        MachineList  (?state=S[,S…] &after=NAME &limit=N, ordered by name)
//	POST   /v1/machines                        RegisterRequest → 201 MachineDetail
//	GET    /v1/machines/{machine}              MachineDetail (spec, hardware, current install's steps)
//	PATCH  /v1/machines/{machine}              UpdateRequest → MachineDetail
//	DELETE /v1/machines/{machine}              204; the machine and its history are gone
//	POST   /v1/machines/{machine}/inspect      ActionRequest    → Machine (state inspecting, command inspect)
//	POST   /v1/machines/{machine}/provision    ProvisionRequest → Machine (state provisioning, command provision)
//	POST   /v1/machines/{machine}/deprovision  ActionRequest    → Machine (state deprovisioning, command deprovision)
//	POST   /v1/machines/{machine}/reboot       ActionRequest    → Machine (command reboot, state kept)
//	POST   /v1/machines/{machine}/poweroff     ActionRequest    → Machine (command poweroff, state kept)
//	GET    /v1/machines/{machine}/events       EventList (?after=EVENT_ID &limit=N, oldest first)
//	GET    /v1/machines/{machine}/logs         LogList   (?limit=N, the newest N lines, oldest first)
//
// Agent routes need "Authorization: Bearer <machine token>", the token the
// enrollment returned for this boot; {mac} is the MAC the enrollment
// answered with (EnrollResponse.MAC). An unknown MAC, an ended agent session
// and a wrong token all get the same 401. Every report carries the
// generation of the command it belongs to; a stale one gets 409 and the
// agent drops it.
//
//	POST /v1/enroll                       EnrollRequest → EnrollResponse (no token; 409 while another agent session is live, 404 with auto-discovery off, 429 at the discovered-machines bound)
//	POST /v1/machines/{mac}/heartbeat     Heartbeat → HeartbeatResponse
//	GET  /v1/machines/{mac}/command       ?wait=SECONDS (default and at most 25): AgentCommand, or 204 when none came within the wait
//	POST /v1/machines/{mac}/command       CommandResult → {} (the result of anything but an inspection, success or failure, ends the agent session: the agent's run is over, and its next boot enrolls at once)
//	POST /v1/machines/{mac}/status        StatusReport   (with Generation)
//	POST /v1/machines/{mac}/progress      ProgressReport (with Generation)
//	POST /v1/machines/{mac}/logs          LogBatch       (429 past the per-machine rate)
//	POST /v1/machines/{mac}/health        HealthReport
//	POST /v1/machines/{mac}/hardware      HardwareDetails: a new report outside an inspection (LLDP neighbours heard after the enrollment)
//	GET  /v1/machines/{mac}/config        the MachineConfig (YAML) of the pending or last provision
//
// Unauthenticated (iPXE cannot carry a token; the scripts hold no secret):
//
//	GET  /v1/boot.ipxe, GET /v1/machines/{mac}/ipxe, GET /files/{path}
//	GET  /v1/agent/boot                   AgentBoot (for booty takeover)
//
// The command long poll is cheap to hold: bootyd parks an HTTP/1.1 poll
// that finds no command (its connection, a timer and a callback; no
// goroutine, no buffers), answers it within milliseconds of a command, and
// keeps the connection alive for the agent's next request. bootyd serves
// HTTP/1.1 only, over TLS too.
//
// Bodies are bounded (413); errors are Error bodies with the usual codes:
// 400 bad input, 401, 404, 409 (conflict, transition not allowed, stale
// generation), 413, 429 (with Retry-After), 5xx.

// Provisioning states of a machine (metal3's).
const (
	MachineRegistering             = "registering"
	MachineInspecting              = "inspecting"
	MachineAvailable               = "available"
	MachinePreparing               = "preparing"
	MachineProvisioning            = "provisioning"
	MachineProvisioned             = "provisioned"
	MachineDeprovisioning          = "deprovisioning"
	MachineExternallyProvisioned   = "externally provisioned"
	MachinePoweringOffBeforeDelete = "powering off before delete"
	MachineDeleting                = "deleting"
)

// Operational statuses of a machine.
const (
	StatusOK         = "OK"
	StatusDiscovered = "discovered"
	StatusError      = "error"
	StatusDetached   = "detached"
)

// Commands an agent is given.
const (
	CommandInspect     = "inspect"
	CommandProvision   = "provision"
	CommandDeprovision = "deprovision"
	CommandReboot      = "reboot"
	CommandPowerOff    = "poweroff"
)

// Machine is one machine as listed: identity, lifecycle and, while an
// install runs, its progress.
type Machine struct {
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels,omitempty"`
	BootMAC string            `json:"bootMAC"`
	// MACs are all the machine's MACs, BootMAC first.
	MACs []string `json:"macs"`
	BMC  BMCInfo  `json:"bmc,omitzero"`
	// Online is the power state the operator wants (metal3's
	// spec.online); bootyd's host reconciler powers machines with a BMC
	// accordingly.
	Online bool `json:"online"`

	// State is the provisioning state (Machine* constants), Status the
	// operational status (Status* constants).
	State  string        `json:"state"`
	Status string        `json:"status"`
	Error  *MachineError `json:"error,omitempty"`
	// Generation is bumped by every change of the spec and every command.
	Generation int64 `json:"generation"`
	// Command is the command waiting for or being run by the agent.
	Command           string `json:"command,omitempty"`
	CommandGeneration int64  `json:"commandGeneration,omitempty"`
	// Progress is the running install's progress (provisioning,
	// deprovisioning), nil otherwise.
	Progress *InstallProgress `json:"progress,omitempty"`
	// Agent is the agent session of the machine's current boot, nil when
	// no agent ever enrolled.
	Agent *AgentInfo `json:"agent,omitempty"`

	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	StateChangedAt time.Time `json:"stateChangedAt"`
}

// MachineError is the last error of a machine: its type (metal3's:
// "inspection error", "provisioning error", …), message and how many
// happened in a row.
type MachineError struct {
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"`
	Count   int    `json:"count"`
}

// AgentInfo is a machine's agent session: when it enrolled, its last
// heartbeat, whether it is live (heard from recently, not ended).
type AgentInfo struct {
	StartedAt     time.Time `json:"startedAt"`
	LastHeartbeat time.Time `json:"lastHeartbeat"`
	EndedAt       time.Time `json:"endedAt,omitzero"`
	EndReason     string    `json:"endReason,omitempty"`
	Live          bool      `json:"live"`
}

// BMCInfo is how a machine's BMC is reached; the credentials are only ever
// named, never shown.
type BMCInfo struct {
	// Address in metal3's form: ipmi://host:port, redfish://host/path, …
	Address                        string `json:"address,omitempty"`
	CredentialsRef                 string `json:"credentialsRef,omitempty"`
	DisableCertificateVerification bool   `json:"disableCertificateVerification,omitempty"`
}

// MachineList is the answer of GET /v1/machines. Next, when set, is the
// ?after= of the next page.
type MachineList struct {
	Machines []Machine `json:"machines"`
	Next     string    `json:"next,omitempty"`
}

// MachineDetail is one machine with its spec, its last hardware report and
// its current (or last) install with the steps the agent reported.
type MachineDetail struct {
	Machine
	Spec       MachineSpec      `json:"spec"`
	Hardware   *HardwareDetails `json:"hardware,omitempty"`
	HardwareAt time.Time        `json:"hardwareAt,omitzero"`
	Install    *Install         `json:"install,omitempty"`
}

// MachineSpec is the desired state of a machine: what a provision writes.
type MachineSpec struct {
	Image           ImageSpec        `json:"image,omitzero"`
	RootDeviceHints *RootDeviceHints `json:"rootDeviceHints,omitempty"`
	Hostname        string           `json:"hostname,omitempty"`
	// UserData, NetworkData and MetaData are handed to cloud-init. They are
	// never logged.
	UserData    string `json:"userData,omitempty"`
	NetworkData string `json:"networkData,omitempty"`
	MetaData    string `json:"metaData,omitempty"`
	// ConfigOverrides is a JSON object merged over the MachineConfig bootyd
	// renders from this spec (a config file of --configs lands here whole).
	ConfigOverrides json.RawMessage `json:"configOverrides,omitempty"`
}

// ImageSpec is the OS image a provision writes.
type ImageSpec struct {
	URL string `json:"url,omitempty"`
	// Checksum is "sha256:HEX" or "sha512:HEX" (or bare hex with
	// ChecksumType); Checksums holds more digests (of the compressed and
	// the raw stream, say) in the same grammar.
	Checksum     string   `json:"checksum,omitempty"`
	ChecksumType string   `json:"checksumType,omitempty"`
	Checksums    []string `json:"checksums,omitempty"`
	Format       string   `json:"format,omitempty"`
}

// RootDeviceHints picks the disk a provision writes, in metal3's field
// names; every hint given must match.
type RootDeviceHints struct {
	DeviceName         string `json:"deviceName,omitempty"`
	HCTL               string `json:"hctl,omitempty"`
	Model              string `json:"model,omitempty"`
	Vendor             string `json:"vendor,omitempty"`
	SerialNumber       string `json:"serialNumber,omitempty"`
	MinSizeGigabytes   int    `json:"minSizeGigabytes,omitempty"`
	WWN                string `json:"wwn,omitempty"`
	WWNWithExtension   string `json:"wwnWithExtension,omitempty"`
	WWNVendorExtension string `json:"wwnVendorExtension,omitempty"`
	Rotational         *bool  `json:"rotational,omitempty"`
}

// Install is a provision or deprovision: when it was asked for, its steps
// as the agent reported them, its progress and result.
type Install struct {
	Generation  int64     `json:"generation"`
	Kind        string    `json:"kind"` // provision, deprovision
	RequestedAt time.Time `json:"requestedAt"`
	FinishedAt  time.Time `json:"finishedAt,omitzero"`
	// Result is "" while running, then "succeeded" or "failed" (Error).
	Result   string           `json:"result,omitempty"`
	Error    string           `json:"error,omitempty"`
	Progress *InstallProgress `json:"progress,omitempty"`
	Steps    []InstallStep    `json:"steps,omitempty"`
}

// InstallStep is the last report of one step of an install.
type InstallStep struct {
	Index      int               `json:"index"`
	Total      int               `json:"total"`
	Name       string            `json:"name"`
	Result     string            `json:"result"` // started, succeeded, failed
	DurationMS int64             `json:"durationMs,omitempty"`
	Error      string            `json:"error,omitempty"`
	Detail     map[string]string `json:"detail,omitempty"`
	Time       time.Time         `json:"time"`
}

// InstallProgress is how far the long step of an install (the image write) is.
type InstallProgress struct {
	Step       string    `json:"step,omitempty"`
	BytesDone  int64     `json:"bytesDone"`
	BytesTotal int64     `json:"bytesTotal"` // 0 when unknown
	Time       time.Time `json:"time,omitzero"`
}

// RegisterRequest is the body of POST /v1/machines: a machine the operator
// knows about before it boots.
type RegisterRequest struct {
	Name    string            `json:"name"`
	BootMAC string            `json:"bootMAC"`
	MACs    []string          `json:"macs,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	BMC     *BMCRequest       `json:"bmc,omitempty"`
	Spec    MachineSpec       `json:"spec,omitzero"`
	// Online is the power state the operator wants.
	Online bool `json:"online,omitempty"`
	// ExternallyProvisioned registers a machine that already runs its OS.
	ExternallyProvisioned bool `json:"externallyProvisioned,omitempty"`
}

// BMCRequest sets a machine's BMC. Username and Password, when given, are
// stored as the credentials named CredentialsRef (default "bmc-<machine
// name>"); they are never returned or logged.
type BMCRequest struct {
	Address                        string `json:"address"`
	CredentialsRef                 string `json:"credentialsRef,omitempty"`
	Username                       string `json:"username,omitempty"`
	Password                       string `json:"password,omitempty"`
	DisableCertificateVerification bool   `json:"disableCertificateVerification,omitempty"`
}

// UpdateRequest is the body of PATCH /v1/machines/{machine}; fields left
// out stay. Generation, when non-zero, must be the machine's (409 otherwise).
type UpdateRequest struct {
	Generation int64             `json:"generation,omitempty"`
	Name       *string           `json:"name,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	MACs       []string          `json:"macs,omitempty"`
	BMC        *BMCRequest       `json:"bmc,omitempty"`
	Spec       *MachineSpec      `json:"spec,omitempty"`
	// Online sets the power state the operator wants; it changes in any
	// state and does not bump the generation.
	Online *bool `json:"online,omitempty"`
}

// ActionRequest is the body of inspect, deprovision, reboot and poweroff
// (an empty body is fine). Generation, when non-zero, must be the
// machine's (409 otherwise); Message goes into the event.
type ActionRequest struct {
	Generation int64  `json:"generation,omitempty"`
	Message    string `json:"message,omitempty"`
}

// ProvisionRequest is the body of POST /v1/machines/{machine}/provision.
// Spec, when set, replaces the machine's spec first (the image is required
// one way or the other).
type ProvisionRequest struct {
	Generation int64        `json:"generation,omitempty"`
	Message    string       `json:"message,omitempty"`
	Spec       *MachineSpec `json:"spec,omitempty"`
}

// Event is one entry of a machine's history: every transition, command,
// enrollment and refusal, with its reason.
type Event struct {
	ID         int64     `json:"id"`
	Time       time.Time `json:"time"`
	Type       string    `json:"type"` // Normal, Warning
	Reason     string    `json:"reason"`
	Message    string    `json:"message"`
	Generation int64     `json:"generation"`
}

// EventList is the answer of GET /v1/machines/{machine}/events.
type EventList struct {
	Events []Event `json:"events"`
}

// LogList is the answer of GET /v1/machines/{machine}/logs.
type LogList struct {
	Lines []LogLine `json:"lines"`
}

// EnrollRequest is what an agent sends when it boots: every MAC of the
// machine (BootMAC, the one it booted from, first when known) and its
// hardware.
type EnrollRequest struct {
	BootMAC  string           `json:"bootMAC,omitempty"`
	MACs     []string         `json:"macs"`
	Hardware *HardwareDetails `json:"hardware,omitempty"`
}

// EnrollResponse is bootyd's answer to an enrollment. Token is handed out
// once, for this boot; bootyd keeps only its hash.
type EnrollResponse struct {
	MachineID string `json:"machineID"`
	Name      string `json:"name"`
	// MAC is the {mac} of every agent route for this boot.
	MAC   string `json:"mac"`
	Token string `json:"token"`
	// HeartbeatSeconds is how often the agent heartbeats (with jitter);
	// PollSeconds how long its command long-polls wait.
	HeartbeatSeconds int `json:"heartbeatSeconds"`
	PollSeconds      int `json:"pollSeconds"`
}

// Heartbeat is the body of POST /v1/machines/{mac}/heartbeat.
type Heartbeat struct {
	// Activity is what the agent does: "waiting", or the command it runs.
	Activity   string    `json:"activity,omitempty"`
	Generation int64     `json:"generation,omitempty"`
	Time       time.Time `json:"time"`
}

// HeartbeatResponse answers a heartbeat.
type HeartbeatResponse struct {
	// Command is the pending command's kind, "" when none: the agent's long
	// poll fetches it.
	Command string `json:"command,omitempty"`
}

// AgentCommand is what the agent of a machine is to do.
type AgentCommand struct {
	Kind       string    `json:"kind"` // Command* constants
	Generation int64     `json:"generation"`
	IssuedAt   time.Time `json:"issuedAt"`
	// Config is the MachineConfig (JSON) bootyd rendered from the
	// machine's spec, for provision and deprovision. Its server section
	// names bootyd; the token is the agent's own.
	Config json.RawMessage `json:"config,omitempty"`
}

// CommandResult is the agent's report that it ran the command of
// Generation: Error empty on success. An inspect carries the hardware.
type CommandResult struct {
	Kind       string           `json:"kind"`
	Generation int64            `json:"generation"`
	Error      string           `json:"error,omitempty"`
	Hardware   *HardwareDetails `json:"hardware,omitempty"`
}

// The BMC routes (operator token): bootyd drives a machine's BMC with the
// credentials it stores, which never leave it. Each call waits until the
// BMC reports the wanted power state (bounded) and is recorded as a machine
// event naming the operator token (by its line in --operator-token-file),
// the client's address and the outcome.
//
//	GET  /v1/machines/{machine}/bmc/power    BMCPower (the state the BMC reports)
//	POST /v1/machines/{machine}/bmc/power    BMCPowerRequest      → BMCPower (the state after the action)
//	POST /v1/machines/{machine}/bmc/bootdev  BMCBootDeviceRequest → BMCBootDeviceRequest (as set)
//
// 400 for a bad action, device or mode; 409 when the machine has no BMC
// address or no stored credentials, or another BMC call on it runs; 502
// with the BMC's error (never a credential) when the BMC refused, failed or
// did not reach the wanted state.

// Power actions of BMCPowerRequest.
const (
	PowerActionOn      = "on"
	PowerActionOff     = "off"      // hard: the power is cut
	PowerActionSoftOff = "soft-off" // ACPI: the OS shuts down
	PowerActionReset   = "reset"    // hard restart; turns on a machine that is off
)

// BMCPowerRequest is the body of POST /v1/machines/{machine}/bmc/power.
type BMCPowerRequest struct {
	Action string `json:"action"`
}

// BMCPower is a machine's power as its BMC reports it: On, Off,
// PoweringOn, PoweringOff or Unknown.
type BMCPower struct {
	State string `json:"state"`
}

// BMCBootDeviceRequest is the body of POST /v1/machines/{machine}/bmc/bootdev:
// the device the machine boots from next time (every time when
// Persistent), pxe, disk or cdrom, in firmware Mode uefi (the default) or
// legacy.
type BMCBootDeviceRequest struct {
	Device     string `json:"device"`
	Persistent bool   `json:"persistent,omitempty"`
	Mode       string `json:"mode,omitempty"`
}
