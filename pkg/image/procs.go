package image

import (
	"os"
	"runtime"
)

// ExtraProcs is how many Go Ps (GOMAXPROCS) Procs adds above the cores.
//
// A Write keeps two goroutines busy on the CPU (the served-bytes hash and
// the decoder) and several that mostly wait in the kernel (the fetch on
// the socket, the writers in pwrite). With one P per core, on a machine
// with few cores both Ps run the busy two, so no P sits in the network
// poller: the fetch, woken when the socket has data, waits for the
// scheduler to notice (its poll runs when a P looks for work, sysmon's
// every 10 ms) and then for a P; meanwhile the socket buffer fills, the
// server stops sending and the hash and the decoder run dry
// (docs/bench.md, "Where the time goes"). With more Ps than cores one is
// idle, blocked in the poller, and the fetch runs as soon as data
// arrives; the kernel time-slices the extra threads, which need little
// CPU.
const ExtraProcs = 2

// Procs returns the GOMAXPROCS a process that mainly runs Write should
// use on a machine with cpus cores: cpus + ExtraProcs.
func Procs(cpus int) int {
	return max(cpus, 1) + ExtraProcs
}

// UseProcs sets GOMAXPROCS to Procs(runtime.NumCPU()) for a process whose
// main work is Write (write-image, the agent), unless GOMAXPROCS is set in
// the environment, which wins. It returns what restores the previous value.
func UseProcs() (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	prev := runtime.GOMAXPROCS(Procs(runtime.NumCPU()))
	return func() { runtime.GOMAXPROCS(prev) }
}
