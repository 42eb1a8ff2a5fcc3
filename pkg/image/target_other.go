//go:build !linux

package image

import (
	"errors"
	"os"
	"unsafe"
)

func defaultTargetSys() targetSys {
	unsupported := func(int, int64, int64) error { return errors.ErrUnsupported }
	return targetSys{
		pwrite:   func(int, []byte, int64) (int, error) { return 0, errors.ErrUnsupported },
		zeroOut:  unsupported,
		punch:    unsupported,
		openDir:  func(string) (*os.File, error) { return nil, errors.ErrUnsupported },
		isDirErr: func(error) bool { return true },
	}
}

func allocAligned(n int) ([]byte, func()) {
	b := make([]byte, n+directAlign)
	k := int(uintptr(unsafe.Pointer(&b[0])) & (directAlign - 1))
	if k != 0 {
		k = directAlign - k
	}
	return b[k : k+n : k+n], func() {}
}

func addrAligned(p []byte) bool {
	return uintptr(unsafe.Pointer(&p[0]))&(directAlign-1) == 0
}
