package bootloader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNoLoader is wrapped by FindLoader's error when the ESP holds no
// known loader.
var ErrNoLoader = errors.New("no EFI loader found")

// FindLoader returns the EFI path (`\EFI\debian\shimx64.efi`, with the
// case found on disk) of the loader to register for the ESP mounted at
// espRoot. It prefers, in order: EFI/<distro>/shim<arch>.efi, then
// EFI/<distro>/grub<arch>.efi, then the removable-media path
// EFI/BOOT/BOOT<ARCH>.EFI; names match case-insensitively as on FAT. With
// several distro directories the first in sorted order wins. The error
// wraps ErrNoLoader and lists what was looked for.
func FindLoader(espRoot string) (string, error) {
	efiDir, err := lookupFold(espRoot, "EFI")
	if err != nil {
		return "", fmt.Errorf("find EFI loader in %s: %w", espRoot, errors.Join(ErrNoLoader, err))
	}
	ents, err := os.ReadDir(filepath.Join(espRoot, efiDir))
	if err != nil {
		return "", fmt.Errorf("find EFI loader in %s: %w", espRoot, err)
	}
	var distros []string
	for _, e := range ents {
		if e.IsDir() && !strings.EqualFold(e.Name(), "BOOT") {
			distros = append(distros, e.Name())
		}
	}
	sort.Strings(distros)
	for _, want := range []string{shimName, grubName} {
		for _, d := range distros {
			name, err := lookupFold(filepath.Join(espRoot, efiDir, d), want)
			if err == nil && isRegular(filepath.Join(espRoot, efiDir, d, name)) {
				return `\` + efiDir + `\` + d + `\` + name, nil
			}
		}
	}
	if b, err := lookupFold(filepath.Join(espRoot, efiDir), "BOOT"); err == nil {
		if name, err := lookupFold(filepath.Join(espRoot, efiDir, b), removableName); err == nil &&
			isRegular(filepath.Join(espRoot, efiDir, b, name)) {
			return `\` + efiDir + `\` + b + `\` + name, nil
		}
	}
	return "", fmt.Errorf("find EFI loader in %s: tried EFI/*/%s, EFI/*/%s, EFI/BOOT/%s (distro dirs %q): %w",
		espRoot, shimName, grubName, removableName, distros, ErrNoLoader)
}

// lookupFold finds name in dir case-insensitively, preferring an exact
// match, and returns the name as stored.
func lookupFold(dir, name string) (string, error) {
	if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
		return name, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if strings.EqualFold(e.Name(), name) {
			return e.Name(), nil
		}
	}
	return "", fmt.Errorf("%s: %w", filepath.Join(dir, name), fs.ErrNotExist)
}

func isRegular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
