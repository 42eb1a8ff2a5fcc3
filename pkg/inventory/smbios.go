package inventory

import (
	"os"

	"github.com/booty-dev/booty/pkg/api"
)

// smbiosFacts is what the report takes from SMBIOS.
type smbiosFacts struct {
	system api.HardwareSystemVendor
	bios   api.BIOS
	// memBytes is the sum of the memory devices' sizes (type 17); 0 when unknown.
	memBytes uint64
}

// readSMBIOS parses Root/sys/firmware/dmi/tables/DMI (the raw SMBIOS
// structure table the kernel exports) with u-root's smbios package. When
// the table is absent or unreadable, the identity comes from the kernel's
// decoded copy in Root/sys/class/dmi/id; memory stays unknown.
func (c *Collector) readSMBIOS() smbiosFacts {
	var f smbiosFacts
	data, err := os.ReadFile(c.path("sys/firmware/dmi/tables/DMI"))
	if err == nil {
		f = parseSMBIOS(data)
	}
	id := func(name string) string { return readTrim(c.path("sys/class/dmi/id", name)) }
	fill := func(dst *string, name string) {
		if *dst == "" {
			*dst = id(name)
		}
	}
	fill(&f.system.Manufacturer, "sys_vendor")
	fill(&f.system.ProductName, "product_name")
	fill(&f.system.SerialNumber, "product_serial")
	fill(&f.bios.Vendor, "bios_vendor")
	fill(&f.bios.Version, "bios_version")
	fill(&f.bios.Date, "bios_date")
	return f
}
