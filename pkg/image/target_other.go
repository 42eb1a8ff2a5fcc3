//go:build !linux

package image

import (
	"io"
	"os"
)

// blockDeviceSize seeks to the end of the open block device.
func blockDeviceSize(f *os.File) (int64, error) {
	return f.Seek(0, io.SeekEnd)
}
