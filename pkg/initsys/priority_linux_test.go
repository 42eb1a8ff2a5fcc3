package initsys

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// nice is the calling thread's nice value (getpriority(2) returns 20-nice).
func nice(t *testing.T) int {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	return 20 - p
}

// A load put off to after coldplug runs at nice 19 on a thread of its own,
// and the priority does not leak to other goroutines' threads.
func TestLowPriority(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := nice(t)
	got := make(chan int)
	go func() {
		lowPriority()
		got <- nice(t)
	}()
	if n := <-got; n != 19 {
		t.Errorf("nice after lowPriority = %d, want 19", n)
	}
	if n := nice(t); n != before {
		t.Errorf("the test's own thread went from nice %d to %d", before, n)
	}
}
