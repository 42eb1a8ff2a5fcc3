package bootloader

// Loader file names for x86-64 firmware.
const (
	shimName      = "shimx64.efi"
	grubName      = "grubx64.efi"
	removableName = "BOOTX64.EFI"
)
