package kmod

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// initModuleFile loads the module at path. Uncompressed files go through
// finit_module(2). Compressed files are first offered to the kernel with
// MODULE_INIT_COMPRESSED_FILE (kernels with CONFIG_MODULE_DECOMPRESS); when
// the kernel refuses the flag they are decompressed here and loaded with
// init_module(2). EEXIST comes back as an error wrapping os.ErrExist.
func initModuleFile(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open module: %w", err)
	}
	defer f.Close()
	if !Compressed(path) {
		if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil {
			return fmt.Errorf("finit_module %s: %w", path, err)
		}
		return nil
	}
	err = unix.FinitModule(int(f.Fd()), params, unix.MODULE_INIT_COMPRESSED_FILE)
	if err == nil || errors.Is(err, unix.EEXIST) {
		if err != nil {
			return fmt.Errorf("finit_module %s: %w", path, err)
		}
		return nil
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("finit_module %s: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read module: %w", err)
	}
	img, err := Decompress(path, data)
	if err != nil {
		return err
	}
	if err := unix.InitModule(img, params); err != nil {
		return fmt.Errorf("init_module %s: %w", path, err)
	}
	return nil
}
