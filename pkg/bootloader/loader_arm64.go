package bootloader

// Loader file names for AArch64 firmware.
const (
	shimName      = "shimaa64.efi"
	grubName      = "grubaa64.efi"
	removableName = "BOOTAA64.EFI"
)
