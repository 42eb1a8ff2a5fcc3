package inventory

import (
	"github.com/u-root/u-root/pkg/smbios"

	"github.com/booty-dev/booty/pkg/api"
)

// parseSMBIOS reads the structure table: type 0 (BIOS), type 1 (system)
// and type 17 (memory devices). A malformed structure ends the walk; what
// was read before it is kept.
func parseSMBIOS(data []byte) smbiosFacts {
	var f smbiosFacts
	for len(data) > 0 {
		t, rest, err := smbios.ParseTable(data)
		if t == nil {
			break
		}
		switch t.Type {
		case smbios.TableTypeBIOSInfo:
			if bi, perr := smbios.ParseBIOSInfo(t); perr == nil {
				f.bios = api.BIOS{Vendor: bi.Vendor, Version: bi.Version, Date: bi.ReleaseDate}
			}
		case smbios.TableTypeSystemInfo:
			if si, perr := smbios.ParseSystemInfo(t); perr == nil {
				f.system = api.HardwareSystemVendor{Manufacturer: si.Manufacturer, ProductName: si.ProductName, SerialNumber: si.SerialNumber}
			}
		case smbios.TableTypeMemoryDevice:
			if md, perr := smbios.NewMemoryDevice(t); perr == nil {
				f.memBytes += md.GetSizeBytes()
			}
		}
		if err != nil { // end of table, or malformed
			break
		}
		data = rest
	}
	return f
}
