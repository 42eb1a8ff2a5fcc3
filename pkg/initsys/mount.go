package initsys

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Mount is one entry of the early mount table.
type Mount struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
	// Mode is the permission of Target when it has to be created.
	Mode os.FileMode
	// Fatal means bringup stops when the mount fails; otherwise the
	// failure is logged with Reason and bringup goes on.
	Fatal bool
	// Reason says why the mount is there (and, for best-effort ones, what
	// is lost without it).
	Reason string
	// IfExists, when set, skips the mount unless this path exists (for
	// example /sys/firmware/efi for efivarfs).
	IfExists string
	// AfterModules mounts it after module loading, for filesystems that
	// may be modules (efivarfs).
	AfterModules bool
}

// MountResult is what happened to one Mount.
type MountResult struct {
	Mount   Mount
	Skipped bool // IfExists did not exist
	Already bool // the kernel said EBUSY: something is mounted there
	Err     error
}

// mountOne creates root/m.Target and mounts m there through mount. EBUSY
// counts as already mounted.
func mountOne(root string, m Mount, mount func(source, target, fstype string, flags uintptr, data string) error) MountResult {
	res := MountResult{Mount: m}
	if m.IfExists != "" {
		if _, err := os.Stat(filepath.Join(root, m.IfExists)); err != nil {
			res.Skipped = true
			return res
		}
	}
	target := filepath.Join(root, m.Target)
	mode := m.Mode
	if mode == 0 {
		mode = 0o755
	}
	if err := os.MkdirAll(target, mode); err != nil {
		if fi, serr := os.Stat(target); serr != nil || !fi.IsDir() {
			res.Err = fmt.Errorf("create mount point %s: %w", target, err)
			return res
		}
	}
	err := mount(m.Source, target, m.FSType, m.Flags, m.Data)
	switch {
	case err == nil:
	case errors.Is(err, errBusy):
		res.Already = true
	default:
		res.Err = fmt.Errorf("mount %s on %s: %w", m.FSType, target, err)
	}
	return res
}
