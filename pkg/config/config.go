// Package config defines booty's MachineConfig: its schema, strict decoding,
// validation (each value through the parser of the package that consumes
// it) and redaction, telekom BOOTy's /deploy/vars as a second input
// format, and the Provider interface. The providers themselves, the chain
// and their HTTP client are in pkg/provider.
package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// APIVersion is the schema version written at the top of every MachineConfig.
const APIVersion = "booty.dev/v1"

// Modes of a run.
const (
	ModeProvision       = "provision"
	ModeDeprovision     = "deprovision"      // hard: wipe disks, remove EFI entries
	ModeSoftDeprovision = "soft-deprovision" // make the installed OS unbootable
)

// Handoff actions once provisioning succeeded.
const (
	HandoffKexec    = "kexec"
	HandoffReboot   = "reboot"
	HandoffPoweroff = "poweroff"
)

// Failure actions once a run failed.
const (
	FailureReboot   = "reboot"
	FailureHold     = "hold"
	FailurePoweroff = "poweroff"
)

// MachineConfig is everything booty needs to provision one machine.
// Field names are the YAML/JSON keys (camelCase); unknown keys are errors.
type MachineConfig struct {
	APIVersion string `json:"apiVersion"`
	// Hostname written to the installed OS.
	Hostname string `json:"hostname,omitempty"`
	// Mode is provision (default), deprovision or soft-deprovision.
	Mode string `json:"mode,omitempty"`
	// Image to write; required for provision.
	Image ImageSpec `json:"image,omitzero"`
	// Disk selects the target disk.
	Disk DiskSpec `json:"disk,omitzero"`
	// DNS written to the installed OS's resolv.conf.
	DNS DNSSpec `json:"dns,omitzero"`
	// KernelParams appended to the installed OS's kernel command line.
	KernelParams []string `json:"kernelParams,omitempty"`
	// Kubelet drop-ins.
	Kubelet KubeletSpec `json:"kubelet,omitzero"`
	// PostProvisionCommands run in a chroot of the installed OS, in order, via /bin/sh -c.
	PostProvisionCommands []string `json:"postProvisionCommands,omitempty"`
	// Mellanox SR-IOV settings.
	Mellanox MellanoxSpec `json:"mellanox,omitzero"`
	// Handoff is kexec (default), reboot or poweroff.
	Handoff string `json:"handoff,omitempty"`
	// EFIBootEntry makes the installed OS the first UEFI boot entry, pointing
	// at the loader on its ESP; default true on machines booted with UEFI.
	// Set it false for images that are not bootable operating systems.
	EFIBootEntry *bool `json:"efiBootEntry,omitempty"`
	// OnFailure is what happens when a step fails.
	OnFailure FailureSpec `json:"onFailure,omitzero"`
	// Server is the bootyd instance that receives status, progress and logs.
	Server ServerSpec `json:"server,omitzero"`
	// CloudInit seeds a NoCloud datasource in the installed OS.
	CloudInit CloudInitSpec `json:"cloudInit,omitzero"`
	// Network configures the agent's own network when the kernel command line does not.
	Network NetworkSpec `json:"network,omitzero"`
	// Health, when present, runs the health checks before select-disk (see HealthSpec).
	Health *HealthSpec `json:"health,omitempty"`
}

// ImageSpec names the OS image and how to verify it.
type ImageSpec struct {
	// URL of the image: http://, https:// or file://.
	URL string `json:"url,omitempty"`
	// Checksum of the file as served, "sha256:HEX" or "sha512:HEX".
	Checksum string `json:"checksum,omitempty"`
	// ImageChecksum of the decompressed image, "sha256:HEX" or "sha512:HEX".
	ImageChecksum string `json:"imageChecksum,omitempty"`
	// BmapURL of a bmaptool XML block map for the image.
	BmapURL string `json:"bmapUrl,omitempty"`
	// BmapChecksum pins the bmap file ("sha256:HEX"): a bmap 1.x carries no
	// checksum of itself, and a changed bmap changes what is written.
	BmapChecksum string `json:"bmapChecksum,omitempty"`
}

// DiskSpec selects the target disk: Device names it directly, Hints select it
// with Ironic's root device hint grammar. At least one is required for provision.
type DiskSpec struct {
	Device string          `json:"device,omitempty"`
	Hints  RootDeviceHints `json:"hints,omitempty"`
	// RootPartitionSize grows the root partition to this size ("20G"); empty
	// fills the disk; RootPartitionKeep leaves the partition table exactly as
	// the image has it (the backup GPT is not moved either).
	RootPartitionSize string `json:"rootPartitionSize,omitempty"`
	// SecureErase asks deprovision for an NVMe format/sanitize or ATA secure erase.
	SecureErase bool `json:"secureErase,omitempty"`
}

// MaxFailureDelay bounds onFailure.delay: a machine waits at most a day
// before its failure action.
const MaxFailureDelay = 24 * time.Hour

// MaxNumVFs bounds mellanox.numVFs: the SR-IOV capability's TotalVFs field
// is 16 bits wide; mstconfig refuses more than the firmware allows.
const MaxNumVFs = 65535

// RootPartitionKeep as disk.rootPartitionSize leaves the image's partition
// table as written: no partition grows and the backup GPT stays where the
// image put it.
const RootPartitionKeep = "keep"

// RootDeviceHints are Ironic root device hints: keys name, wwn, wwn_with_extension,
// wwn_vendor_extension, serial, size, rotational, vendor, model, hctl, by_path, tran;
// values are strings with optional operators ("s== ", "<in> ", ">= ", ...),
// numbers (size in GiB) or booleans (rotational).
type RootDeviceHints map[string]any

// DNSSpec is written to resolv.conf.
type DNSSpec struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Search      []string `json:"search,omitempty"`
}

// KubeletSpec becomes kubelet drop-in configuration.
type KubeletSpec struct {
	ProviderID string            `json:"providerID,omitempty"`
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
}

// MellanoxSpec configures SR-IOV on ConnectX cards; NumVFs 0 leaves them alone.
type MellanoxSpec struct {
	NumVFs int `json:"numVFs,omitempty"`
}

// FailureSpec is the failure policy.
type FailureSpec struct {
	// Action is reboot (default), hold or poweroff.
	Action string `json:"action,omitempty"`
	// Delay before the action, e.g. "30s" (default 30s).
	Delay Duration `json:"delay,omitempty"`
}

// ServerSpec is how the agent reaches bootyd.
type ServerSpec struct {
	URL string `json:"url,omitempty"`
	// Token is this machine's bearer token. Secret: never logged.
	Token string `json:"token,omitempty"`
	// CACert is a PEM bundle that verifies the server; empty uses the system pool.
	CACert string `json:"caCert,omitempty"`
}

// CloudInitSpec seeds cloud-init's NoCloud datasource (metal3's UserData, MetaData, NetworkData).
type CloudInitSpec struct {
	// UserData is secret: never logged.
	UserData      string `json:"userData,omitempty"`
	MetaData      string `json:"metaData,omitempty"`
	NetworkConfig string `json:"networkConfig,omitempty"`
}

// NetworkSpec configures the agent's network when the kernel command line
// has no ip=: either the simple form (interface, address, gateway) or
// bonds, VLANs and links (see network.go), with dns for both.
type NetworkSpec struct {
	// Interface limits DHCP/static configuration to one link name; empty means all links with carrier.
	Interface string `json:"interface,omitempty"`
	// Address in CIDR form for a static address; empty means DHCP.
	Address string   `json:"address,omitempty"`
	Gateway string   `json:"gateway,omitempty"`
	DNS     []string `json:"dns,omitempty"`
	// Search domains for the agent (and the installed OS with Persist).
	Search []string   `json:"search,omitempty"`
	Bonds  []BondSpec `json:"bonds,omitempty"`
	VLANs  []VLANSpec `json:"vlans,omitempty"`
	Links  []LinkSpec `json:"links,omitempty"`
	// Persist writes bonds, VLANs and links into the installed OS
	// (netplan when it has /etc/netplan, else systemd-networkd).
	Persist bool `json:"persist,omitempty"`
}

// Defaults applied by Parse and ApplyDefaults to fields left empty.
const (
	DefaultMode          = ModeProvision
	DefaultHandoff       = HandoffKexec
	DefaultFailureAction = FailureReboot
	DefaultFailureDelay  = 30 * time.Second
)

// WantEFIBootEntry reports whether an EFI boot entry should be created on
// a UEFI machine: EFIBootEntry, defaulting to true.
func (c *MachineConfig) WantEFIBootEntry() bool {
	return c.EFIBootEntry == nil || *c.EFIBootEntry
}

// Duration is a time.Duration written as a Go duration string ("30s", "5m").
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a Go duration string, "30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Duration.String())
}

// UnmarshalJSON reads a Go duration string ("30s", "1m30s"); a number or a
// malformed string is an error naming the value.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a value like \"30s\" or \"5m\"", s)
	}
	d.Duration = v
	return nil
}

// ApplyDefaults fills the fields left empty with their defaults: mode
// provision, handoff kexec, onFailure reboot after 30s. It never overwrites a
// value that is set; a zero onFailure.delay counts as unset here (Parse
// keeps an explicit "0s").
func (c *MachineConfig) ApplyDefaults() {
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	if c.Handoff == "" {
		c.Handoff = DefaultHandoff
	}
	if c.OnFailure.Action == "" {
		c.OnFailure.Action = DefaultFailureAction
	}
	if c.OnFailure.Delay.Duration == 0 {
		c.OnFailure.Delay.Duration = DefaultFailureDelay
	}
}
