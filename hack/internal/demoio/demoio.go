// Package demoio holds the small output helpers the demos share
// (hack/demo, hack/fleetdemo).
package demoio

import (
	"io"
	"os"
	"sync"
)

// LockedWriter serialises writes to W, so lines written by several
// goroutines (consoles, bootyd, the demo) never interleave.
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (l *LockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(b)
}

// FileSize returns the size of the file at p, 0 when it cannot be read.
func FileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
