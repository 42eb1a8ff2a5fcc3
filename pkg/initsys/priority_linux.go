package initsys

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// lowPriority moves the calling goroutine to a thread of its own at nice
// 19 (what the kernel does for it, a module's init included, then takes
// only otherwise idle CPU). The goroutine keeps the thread until it ends,
// and Go then ends the thread too, so no other goroutine runs at that
// priority. A failure to renice is ignored: the load still runs.
func lowPriority() {
	runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
}
