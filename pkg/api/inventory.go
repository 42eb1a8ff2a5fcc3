package api

// HardwareDetails is the agent's hardware report, in metal3's
// HardwareDetails JSON shape (baremetal-operator's BareMetalHost
// status.hardware) so the tools operators already have read it; gpus,
// pciDevices and nics[].ips/lldp are booty's additions.
type HardwareDetails struct {
	SystemVendor HardwareSystemVendor `json:"systemVendor"`
	Firmware     Firmware             `json:"firmware"`
	RAMMebibytes int                  `json:"ramMebibytes"`
	NIC          []NIC                `json:"nics"`
	Storage      []Storage            `json:"storage"`
	CPU          CPU                  `json:"cpu"`
	Hostname     string               `json:"hostname"`
	// GPUs are the PCI display controllers (class 0x03).
	GPUs []PCIDevice `json:"gpus,omitempty"`
	// PCIDevices lists every PCI function, GPUs and NICs included.
	PCIDevices []PCIDevice `json:"pciDevices,omitempty"`
}

// HardwareSystemVendor is SMBIOS type 1 (System Information).
type HardwareSystemVendor struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	ProductName  string `json:"productName,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
}

// Firmware is the machine's firmware.
type Firmware struct {
	BIOS BIOS `json:"bios"`
}

// BIOS is SMBIOS type 0 (BIOS Information).
type BIOS struct {
	Date    string `json:"date,omitempty"`
	Vendor  string `json:"vendor,omitempty"`
	Version string `json:"version,omitempty"`
}

// CPU describes the processors; Count is the number of logical CPUs.
type CPU struct {
	Arch           string   `json:"arch"`
	Model          string   `json:"model,omitempty"`
	ClockMegahertz float64  `json:"clockMegahertz,omitempty"`
	Flags          []string `json:"flags,omitempty"`
	Count          int      `json:"count"`
}

// NIC is one physical network interface.
type NIC struct {
	Name  string `json:"name"`
	Model string `json:"model,omitempty"`
	MAC   string `json:"mac"`
	// IP is the interface's first IPv4 address, else its first IPv6 one.
	IP string `json:"ip,omitempty"`
	// IPs are all its addresses, IPv4 first (booty's addition).
	IPs       []string `json:"ips,omitempty"`
	SpeedGbps int      `json:"speedGbps,omitempty"`
	// VLANs are the VLANs the switch announces on the port (LLDP 802.1
	// VLAN name TLVs) and those configured on the link here.
	VLANs []VLAN `json:"vlans,omitempty"`
	// VLANID is the port's untagged VLAN, from LLDP's 802.1 port VLAN ID.
	VLANID int `json:"vlanId,omitempty"`
	// PXE is true for the NIC the machine booted from (BOOTIF=).
	PXE        bool   `json:"pxe"`
	LLDP       *LLDP  `json:"lldp,omitempty"`
	PCIAddress string `json:"pciAddress,omitempty"`
}

// VLAN is one VLAN a NIC can reach.
type VLAN struct {
	ID   int    `json:"id"`
	Name string `json:"name,omitempty"`
}

// LLDP is what the switch port a NIC is cabled to announced.
type LLDP struct {
	SwitchID         string `json:"switchID,omitempty"`
	PortID           string `json:"portID,omitempty"`
	SwitchSystemName string `json:"switchSystemName,omitempty"`
}

// Storage types.
const (
	StorageHDD  = "HDD"
	StorageSSD  = "SSD"
	StorageNVMe = "NVME"
)

// Storage is one disk, with every field a root device hint can match.
type Storage struct {
	// Name is the device node, "/dev/sda".
	Name           string   `json:"name"`
	AlternateNames []string `json:"alternateNames,omitempty"`
	Rotational     bool     `json:"rotational"`
	// Type is HDD, SSD or NVME.
	Type               string `json:"type"`
	SizeBytes          int64  `json:"sizeBytes"`
	Vendor             string `json:"vendor,omitempty"`
	Model              string `json:"model,omitempty"`
	SerialNumber       string `json:"serialNumber,omitempty"`
	WWN                string `json:"wwn,omitempty"`
	WWNVendorExtension string `json:"wwnVendorExtension,omitempty"`
	WWNWithExtension   string `json:"wwnWithExtension,omitempty"`
	HCTL               string `json:"hctl,omitempty"`
}

// PCIDevice is one PCI function. IDs are four lower-case hex digits,
// Class six ("030000"); the names come from pci.ids when it is present.
type PCIDevice struct {
	Address    string `json:"pciAddress"`
	VendorID   string `json:"vendorId"`
	DeviceID   string `json:"deviceId"`
	Class      string `json:"class"`
	VendorName string `json:"vendorName,omitempty"`
	DeviceName string `json:"deviceName,omitempty"`
	Driver     string `json:"driver,omitempty"`
}
