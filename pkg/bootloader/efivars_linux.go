package bootloader

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsImmutableFL is FS_IMMUTABLE_FL from linux/fs.h.
const fsImmutableFL = 0x00000010

// makeMutable clears FS_IMMUTABLE_FL on path. File systems without the
// flag ioctl (ENOTTY, EOPNOTSUPP, EINVAL) count as not immutable. The
// error wraps fs.ErrNotExist when path does not exist.
func makeMutable(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		if unsupportedIoctl(err) {
			return nil
		}
		return fmt.Errorf("get inode flags of %s: %w", path, err)
	}
	if flags&fsImmutableFL == 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags&^fsImmutableFL)); err != nil {
		return fmt.Errorf("clear immutable flag of %s: %w", path, err)
	}
	return nil
}

func unsupportedIoctl(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}

// isEFIVarFS reports whether dir is an efivarfs mount.
func isEFIVarFS(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return uint32(st.Type) == unix.EFIVARFS_MAGIC
}
