package initsys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// siginfoPid reads si_pid from a siginfo filled by waitid: on Linux it is
// the first int32 after si_signo, si_errno, si_code and, on 64-bit, one
// int32 of padding.
func siginfoPid(info *unix.Siginfo) int {
	off := 3 * unsafe.Sizeof(int32(0))
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off += unsafe.Sizeof(int32(0))
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}
