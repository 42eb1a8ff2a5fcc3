//go:build !amd64 && !arm64

package bootloader

// Loader file names: x86-64's, for architectures booty does not target.
const (
	shimName      = "shimx64.efi"
	grubName      = "grubx64.efi"
	removableName = "BOOTX64.EFI"
)
