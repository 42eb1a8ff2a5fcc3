package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/disk"
)

// The seed's errors, checked with errors.Is.
var (
	// ErrFirmwareUpdateUnsupported is returned if the host can't execute
	// firmware updates (booty's backend never can: it does not read or write
	// BIOS settings or flash firmware).
	ErrFirmwareUpdateUnsupported = errors.New("host does not support Firmware Updates")
	// ErrNeedsPreprovisioningImage is returned if a preprovisioning image is
	// required (never by booty's backend: machines network-boot the agent).
	ErrNeedsPreprovisioningImage = errors.New("no suitable Preprovisioning image available")
	// ErrNeedsRegistration is returned if the host is not registered: the
	// BMDB has no machine for it. ValidateManagementAccess registers it.
	ErrNeedsRegistration = errors.New("host not registered")
)

// ProvisioningState is a host's provisioning state, in metal3's names.
type ProvisioningState string

// The provisioning states of metal3's BareMetalHost.
const (
	StateNone                    ProvisioningState = ""
	StateUnmanaged               ProvisioningState = "unmanaged"
	StateRegistering             ProvisioningState = "registering"
	StateMatchProfile            ProvisioningState = "match profile"
	StatePreparing               ProvisioningState = "preparing"
	StateReady                   ProvisioningState = "ready"
	StateAvailable               ProvisioningState = "available"
	StateProvisioning            ProvisioningState = "provisioning"
	StateProvisioned             ProvisioningState = "provisioned"
	StateExternallyProvisioned   ProvisioningState = "externally provisioned"
	StateDeprovisioning          ProvisioningState = "deprovisioning"
	StateInspecting              ProvisioningState = "inspecting"
	StatePoweringOffBeforeDelete ProvisioningState = "powering off before delete"
	StateDeleting                ProvisioningState = "deleting"
)

// BootMode is the firmware boot mode a host is provisioned for.
type BootMode string

// Boot modes, in metal3's spelling.
const (
	UEFI            BootMode = "UEFI"
	UEFISecureBoot  BootMode = "UEFISecureBoot"
	Legacy          BootMode = "legacy"
	DefaultBootMode BootMode = UEFI
)

// bmcMode maps a boot mode onto the BMC's boot override mode ("" is UEFI).
func (m BootMode) bmcMode() bmc.BootMode {
	if m == Legacy {
		return bmc.BootLegacy
	}
	return bmc.BootUEFI
}

// AutomatedCleaningMode says whether disks are cleaned on deprovisioning.
type AutomatedCleaningMode string

// Cleaning modes.
const (
	CleaningModeDisabled AutomatedCleaningMode = "disabled"
	CleaningModeMetadata AutomatedCleaningMode = "metadata"
)

// RebootMode says how PowerOff turns a host off.
type RebootMode string

// Reboot modes.
const (
	RebootModeHard RebootMode = "hard"
	RebootModeSoft RebootMode = "soft"
)

// ImageFormat is a format of a preprovisioning image.
type ImageFormat string

// Preprovisioning image formats.
const (
	ImageFormatISO    ImageFormat = "iso"
	ImageFormatInitRD ImageFormat = "initrd"
)

// Image is the OS image a provision writes, in metal3's field names.
type Image struct {
	URL string `json:"url"`
	// Checksum is the digest, bare hex with ChecksumType, or
	// "sha256:HEX"/"sha512:HEX".
	Checksum     string `json:"checksum,omitempty"`
	ChecksumType string `json:"checksumType,omitempty"`
	DiskFormat   string `json:"format,omitempty"`
}

func (i Image) spec() bmdb.Image {
	return bmdb.Image{URL: i.URL, Checksum: i.Checksum, ChecksumType: i.ChecksumType, Format: i.DiskFormat}
}

// CustomDeploy asks for a deploy method other than writing an image.
type CustomDeploy struct {
	Method string `json:"method"`
}

// HardwareDetails is the inspected hardware, metal3's JSON.
type HardwareDetails = api.HardwareDetails

// RootDeviceHints pick the disk to write, in metal3's field names
// (deviceName, hctl, model, vendor, serialNumber, minSizeGigabytes, wwn,
// wwnWithExtension, wwnVendorExtension, rotational): the BMDB's spec type,
// with the mapping onto Ironic's grammar.
type RootDeviceHints bmdb.RootDeviceHints

// HintMap returns the hints in Ironic's grammar, as metal3's Ironic
// provisioner writes them: a device name under /dev/disk/by-path/ becomes
// by_path, names, HCTL, serial numbers and WWNs match exactly (s==), model
// and vendor by substring (<in>), minSizeGigabytes is "size >= N".
func (h RootDeviceHints) HintMap() map[string]any {
	m := map[string]any{}
	if h.DeviceName != "" {
		if strings.HasPrefix(h.DeviceName, "/dev/disk/by-path/") {
			m["by_path"] = "s== " + h.DeviceName
		} else {
			m["name"] = "s== " + h.DeviceName
		}
	}
	if h.HCTL != "" {
		m["hctl"] = "s== " + h.HCTL
	}
	if h.Model != "" {
		m["model"] = "<in> " + h.Model
	}
	if h.Vendor != "" {
		m["vendor"] = "<in> " + h.Vendor
	}
	if h.SerialNumber != "" {
		m["serial"] = "s== " + h.SerialNumber
	}
	if h.MinSizeGigabytes != 0 {
		m["size"] = ">= " + strconv.Itoa(h.MinSizeGigabytes)
	}
	if h.WWN != "" {
		m["wwn"] = "s== " + h.WWN
	}
	if h.WWNWithExtension != "" {
		m["wwn_with_extension"] = "s== " + h.WWNWithExtension
	}
	if h.WWNVendorExtension != "" {
		m["wwn_vendor_extension"] = "s== " + h.WWNVendorExtension
	}
	if h.Rotational != nil {
		m["rotational"] = *h.Rotational
	}
	return m
}

// Hints parses HintMap with the agent's grammar (disk.ParseHints), so what
// is accepted here is what the agent's disk selection runs. The error wraps
// disk.ErrInvalidHints and names the hint.
func (h RootDeviceHints) Hints() (disk.Hints, error) {
	if h.MinSizeGigabytes < 0 {
		return nil, fmt.Errorf("%w: minSizeGigabytes %d is negative", disk.ErrInvalidHints, h.MinSizeGigabytes)
	}
	return disk.ParseHints(h.HintMap())
}

func (h RootDeviceHints) spec() *bmdb.RootDeviceHints {
	s := bmdb.RootDeviceHints(h)
	return &s
}

// HardwareRAIDVolume is one volume a hardware RAID controller builds.
type HardwareRAIDVolume struct {
	Name                  string   `json:"name,omitempty"`
	Level                 string   `json:"level"`
	SizeGibibytes         *int     `json:"sizeGibibytes,omitempty"`
	Controller            string   `json:"controller,omitempty"`
	PhysicalDisks         []string `json:"physicalDisks,omitempty"`
	NumberOfPhysicalDisks *int     `json:"numberOfPhysicalDisks,omitempty"`
}

// SoftwareRAIDVolume is one Linux software RAID volume.
type SoftwareRAIDVolume struct {
	Level         string            `json:"level"`
	SizeGibibytes *int              `json:"sizeGibibytes,omitempty"`
	PhysicalDisks []RootDeviceHints `json:"physicalDisks,omitempty"`
}

// RAIDConfig is the RAID layout a host is prepared with.
type RAIDConfig struct {
	HardwareRAIDVolumes []HardwareRAIDVolume `json:"hardwareRAIDVolumes,omitempty"`
	SoftwareRAIDVolumes []SoftwareRAIDVolume `json:"softwareRAIDVolumes,omitempty"`
}

func (r *RAIDConfig) empty() bool {
	return r == nil || len(r.HardwareRAIDVolumes) == 0 && len(r.SoftwareRAIDVolumes) == 0
}

// FirmwareConfig is metal3's small vendor-neutral subset of BIOS settings.
type FirmwareConfig struct {
	VirtualizationEnabled             *bool `json:"virtualizationEnabled,omitempty"`
	SimultaneousMultithreadingEnabled *bool `json:"simultaneousMultithreadingEnabled,omitempty"`
	SriovEnabled                      *bool `json:"sriovEnabled,omitempty"`
}

func (f *FirmwareConfig) empty() bool {
	return f == nil || f.VirtualizationEnabled == nil && f.SimultaneousMultithreadingEnabled == nil && f.SriovEnabled == nil
}

// SettingsMap holds vendor-specific firmware settings and their values.
type SettingsMap map[string]string

// DesiredSettingsMap holds the firmware settings a user asked for.
type DesiredSettingsMap map[string]string

// SettingSchema describes one firmware setting.
type SettingSchema struct {
	AttributeType   string   `json:"attributeType,omitempty"`
	AllowableValues []string `json:"allowableValues,omitempty"`
	LowerBound      *int     `json:"lowerBound,omitempty"`
	UpperBound      *int     `json:"upperBound,omitempty"`
	MinLength       *int     `json:"minLength,omitempty"`
	MaxLength       *int     `json:"maxLength,omitempty"`
	ReadOnly        *bool    `json:"readOnly,omitempty"`
	Unique          *bool    `json:"unique,omitempty"`
}

// FirmwareUpdate asks for a firmware component to be flashed.
type FirmwareUpdate struct {
	Component string `json:"component"`
	URL       string `json:"url"`
}

// FirmwareComponentStatus is what a host reports of one firmware component.
type FirmwareComponentStatus struct {
	Component          string    `json:"component"`
	InitialVersion     string    `json:"initialVersion"`
	CurrentVersion     string    `json:"currentVersion,omitempty"`
	LastVersionFlashed string    `json:"lastVersionFlashed,omitempty"`
	UpdatedAt          time.Time `json:"updatedAt,omitzero"`
}

// BMCEventSubscription asks the BMC to send its events to a destination.
type BMCEventSubscription struct {
	Name           string `json:"name"`
	Destination    string `json:"destination"`
	Context        string `json:"context,omitempty"`
	SubscriptionID string `json:"subscriptionID,omitempty"`
}

// HTTPHeaders are headers sent with BMC events.
type HTTPHeaders []map[string]string

// Result is the answer to a Provisioner call (seed 001):
//
//   - continuing: Dirty, RequeueAfter says when to call again;
//   - complete: the zero Result;
//   - failed: ErrorMessage set (the host goes to an error state);
//   - transient: the call's Go error instead (call again with backoff).
type Result struct {
	// Dirty indicates whether the host object needs to be saved.
	Dirty bool
	// RequeueAfter indicates how long to wait before making the same
	// Provisioner call again. The request should only be requeued if
	// Dirty is also true.
	RequeueAfter time.Duration
	// Any error message produced by the provisioner.
	ErrorMessage string
}

// HardwareState holds the response from an UpdateHardwareState call.
type HardwareState struct {
	// PoweredOn is a pointer to a bool indicating whether the Host is currently
	// powered on. The value is nil if the power state cannot be determined.
	PoweredOn *bool
}

// HostConfigData retrieves host configuration data for cloud-init.
type HostConfigData interface {
	// UserData returns the user data for a host being provisioned.
	UserData() (string, error)
	// NetworkData returns the network configuration for a host.
	NetworkData() (string, error)
	// MetaData returns the metadata for a host.
	MetaData() (string, error)
}

// StaticHostConfig is a HostConfigData of fixed strings.
type StaticHostConfig struct {
	User, Network, Meta string
}

// UserData returns User.
func (c StaticHostConfig) UserData() (string, error) { return c.User, nil }

// NetworkData returns Network.
func (c StaticHostConfig) NetworkData() (string, error) { return c.Network, nil }

// MetaData returns Meta.
func (c StaticHostConfig) MetaData() (string, error) { return c.Meta, nil }

// HostData is what a provisioner is made for: one host.
type HostData struct {
	// Name is the host's name, the BMDB machine's name when it registers.
	Name                           string
	BMCAddress                     string
	BMCCredentials                 bmc.Credentials
	DisableCertificateVerification bool
	BootMACAddress                 string
	// ProvisionerID is the BMDB machine ID, "" before registration.
	ProvisionerID string
}

// BuildHostData returns the HostData of a BMDB machine with its BMC
// credentials.
func BuildHostData(m bmdb.Machine, bmcCreds bmc.Credentials) HostData {
	h := BuildHostDataNoBMC(m)
	h.BMCAddress = m.BMC.Address
	h.BMCCredentials = bmcCreds
	h.DisableCertificateVerification = m.BMC.DisableCertificateVerification
	return h
}

// BuildHostDataNoBMC returns the HostData of a machine for callers that do
// not manage its BMC.
func BuildHostDataNoBMC(m bmdb.Machine) HostData {
	return HostData{Name: m.Name, BootMACAddress: m.BootMAC, ProvisionerID: m.ID}
}

// LoadHostData reads machine id and its BMC credentials (from the BMDB's
// secret store) and returns its HostData. A machine without credentials
// gets empty ones; a missing machine gives an error wrapping
// bmdb.ErrNotFound.
func LoadHostData(ctx context.Context, db *bmdb.DB, id string) (HostData, error) {
	m, err := db.GetMachine(ctx, id)
	if err != nil {
		return HostData{}, fmt.Errorf("load host data: %w", err)
	}
	var creds bmc.Credentials
	if m.BMC.CredentialsRef != "" {
		c, err := db.GetCredentials(ctx, m.BMC.CredentialsRef)
		if err != nil {
			return HostData{}, fmt.Errorf("load host data of %s: %w", m.Name, err)
		}
		creds = bmc.Credentials{Username: c.Username, Password: c.Password}
	}
	return BuildHostData(m, creds), nil
}

// PreprovisioningImage is a generated image a host boots before it is
// provisioned.
type PreprovisioningImage struct {
	ImageURL          string
	KernelURL         string
	ExtraKernelParams string
	Format            ImageFormat
}

// ManagementAccessData is what ValidateManagementAccess needs.
type ManagementAccessData struct {
	BootMode                   BootMode
	AutomatedCleaningMode      AutomatedCleaningMode
	State                      ProvisioningState
	CurrentImage               *Image
	PreprovisioningImage       *PreprovisioningImage
	PreprovisioningNetworkData string
	HasCustomDeploy            bool
}

// AdoptData is what Adopt needs.
type AdoptData struct {
	State ProvisioningState
}

// InspectData is what InspectHardware needs.
type InspectData struct {
	BootMode BootMode
}

// PrepareData is what Prepare needs. FirmwareConfig is a small common
// subset of BIOS settings; the Firmware settings maps are vendor specific.
type PrepareData struct {
	TargetRAIDConfig         *RAIDConfig
	ActualRAIDConfig         *RAIDConfig
	RootDeviceHints          *RootDeviceHints
	FirmwareConfig           *FirmwareConfig
	TargetFirmwareSettings   DesiredSettingsMap
	ActualFirmwareSettings   SettingsMap
	TargetFirmwareComponents []FirmwareUpdate
}

// ProvisionData is what Provision needs.
type ProvisionData struct {
	Image           Image
	HostConfig      HostConfigData
	BootMode        BootMode
	HardwareProfile string
	RootDeviceHints *RootDeviceHints
	CustomDeploy    *CustomDeploy
	CPUArchitecture string
}

// ServicingData is what Service needs.
type ServicingData struct {
	FirmwareConfig           *FirmwareConfig
	TargetFirmwareSettings   DesiredSettingsMap
	ActualFirmwareSettings   SettingsMap
	TargetFirmwareComponents []FirmwareUpdate
}

// EventPublisher is a function type for publishing events associated with
// provisioning.
type EventPublisher func(reason, message string)

// Factory is the interface for creating new Provisioner objects.
type Factory interface {
	NewProvisioner(ctx context.Context, hostData HostData, publish EventPublisher) (Provisioner, error)
}

// Provisioner holds the state information for talking to the provisioning
// backend (seed 001). Every call reads the backend's state and takes at
// most one step.
type Provisioner interface {
	// ValidateManagementAccess tests the connection information for
	// the host to verify that the location and credentials work. The
	// boolean argument tells the provisioner whether the current set
	// of credentials it has are different from the credentials it has
	// previously been using, without implying that either set of
	// credentials is correct.
	ValidateManagementAccess(data ManagementAccessData, credentialsChanged, restartOnFailure bool) (result Result, provID string, err error)

	// PreprovisioningImageFormats returns a list of acceptable formats for a
	// pre-provisioning image to be built by a PreprovisioningImage object. The
	// list should be nil if no image build is requested.
	PreprovisioningImageFormats() ([]ImageFormat, error)

	// InspectHardware updates the HardwareDetails field of the host with
	// details of devices discovered on the hardware. It may be called
	// multiple times, and should return true for its dirty flag until the
	// inspection is completed.
	InspectHardware(data InspectData, restartOnFailure, refresh, forceReboot bool) (result Result, started bool, details *HardwareDetails, err error)

	// UpdateHardwareState fetches the latest hardware state of the
	// server and updates the HardwareDetails field of the host with
	// details. It is expected to do this in the least expensive way
	// possible, such as reading from a cache.
	UpdateHardwareState() (hwState HardwareState, err error)

	// Adopt brings an externally-provisioned host under management by
	// the provisioner.
	Adopt(data AdoptData, restartOnFailure bool) (result Result, err error)

	// Prepare remove existing configuration and set new configuration
	Prepare(data PrepareData, unprepared bool, restartOnFailure bool) (result Result, started bool, err error)

	// Service updates configuration for a provisioned host.
	Service(data ServicingData, unprepared, restartOnFailure bool) (result Result, started bool, err error)

	// Provision writes the image from the host spec to the host. It
	// may be called multiple times, and should return true for its
	// dirty flag until the provisioning operation is completed.
	Provision(data ProvisionData, forceReboot bool) (result Result, err error)

	// Deprovision removes the host from the image. It may be called
	// multiple times, and should return true for its dirty flag until
	// the deprovisioning operation is completed.
	Deprovision(restartOnFailure bool) (result Result, err error)

	// Delete removes the host from the provisioning system. It may be
	// called multiple times, and should return true for its dirty
	// flag until the deletion operation is completed.
	Delete() (result Result, err error)

	// Detach removes the host from the provisioning system.
	// Similar to Delete, but ensures non-interruptive behavior
	// for the target system.  It may be called multiple times,
	// and should return true for its dirty  flag until the
	// deletion operation is completed.
	Detach() (result Result, err error)

	// PowerOn ensures the server is powered on independently of any image
	// provisioning operation.
	PowerOn(force bool) (result Result, err error)

	// PowerOff ensures the server is powered off independently of any image
	// provisioning operation. The boolean argument may be used to specify
	// if a hard reboot (force power off) is required - true if so.
	PowerOff(rebootMode RebootMode, force bool) (result Result, err error)

	// TryInit checks if the provisioning backend is available to accept
	// all the incoming requests and configures the available features.
	TryInit() (ready bool, err error)

	// HasCapacity checks if the backend has a free (de)provisioning slot for the current host
	HasCapacity() (result bool, err error)

	// GetFirmwareSettings gets the BIOS settings and optional schema from the host and returns maps
	GetFirmwareSettings(includeSchema bool) (settings SettingsMap, schema map[string]SettingSchema, err error)

	// AddBMCEventSubscriptionForNode creates the subscription, and updates Status.SubscriptionID
	AddBMCEventSubscriptionForNode(subscription *BMCEventSubscription, httpHeaders HTTPHeaders) (result Result, err error)

	// RemoveBMCEventSubscriptionForNode delete the subscription
	RemoveBMCEventSubscriptionForNode(subscription BMCEventSubscription) (result Result, err error)

	// GetFirmwareComponents gets all firmware components available from a note
	GetFirmwareComponents() (components []FirmwareComponentStatus, err error)

	// Check if DataImage attach/detach was successful
	IsDataImageReady() (isNodeBusy bool, nodeError error)

	// Attach DataImage
	AttachDataImage(URL string) (err error)

	// Detach DataImage
	DetachDataImage() (err error)
}
