package image

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

func defaultTargetSys() targetSys {
	return targetSys{
		pwrite: unix.Pwrite,
		zeroOut: func(fd int, off, n int64) error {
			r := [2]uint64{uint64(off), uint64(n)}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r)))
			if e != 0 {
				return e
			}
			return nil
		},
		punch: func(fd int, off, n int64) error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		},
		openDir: func(path string) (*os.File, error) {
			return os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0)
		},
		isDirErr: func(err error) bool { return errors.Is(err, unix.EINVAL) },
	}
}

// allocAligned returns n bytes (a multiple of the page size) of anonymous
// memory outside the Go heap, page aligned for O_DIRECT, and its release.
func allocAligned(n int) ([]byte, func()) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		b := make([]byte, n+directAlign)
		k := int(uintptr(unsafe.Pointer(&b[0])) & (directAlign - 1))
		if k != 0 {
			k = directAlign - k
		}
		return b[k : k+n : k+n], func() {}
	}
	return b, func() { unix.Munmap(b) }
}

func addrAligned(p []byte) bool {
	return uintptr(unsafe.Pointer(&p[0]))&(directAlign-1) == 0
}
