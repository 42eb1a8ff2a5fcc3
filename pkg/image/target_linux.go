package image

import (
	"os"

	"golang.org/x/sys/unix"
)

// blockDeviceSize asks the kernel for the size of the open block device.
func blockDeviceSize(f *os.File) (int64, error) {
	n, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
	if err != nil {
		return 0, err
	}
	return int64(n), nil
}
