package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// loopDev is a loop device with direct I/O over a sparse file on disk.
type loopDev struct {
	Dev      string
	Backing  string
	DirectIO bool
	dir      string
}

// loopInfo is what the report says about the target.
type loopInfo struct {
	Backing  string `json:"backing"`
	DirectIO bool   `json:"direct_io"`
}

func (l *loopDev) info() loopInfo { return loopInfo{Backing: l.Backing, DirectIO: l.DirectIO} }

// attachLoop creates a sparse file of size bytes in a new directory under
// parent and attaches it to a free loop device with direct I/O on. On
// failure nothing is left behind.
func attachLoop(ctx context.Context, parent, name string, size int64) (*loopDev, error) {
	dir, err := os.MkdirTemp(parent, "booty-bench-")
	if err != nil {
		return nil, fmt.Errorf("make target directory: %w", err)
	}
	l := &loopDev{Backing: filepath.Join(dir, name+"-target.img"), dir: dir}
	f, err := os.OpenFile(l.Backing, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err == nil {
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("make target file: %w", err)
	}
	dev, err := runQuiet(ctx, "losetup", "--direct-io=on", "--find", "--show", l.Backing)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("attach loop device: %w", err)
	}
	l.Dev = dev
	dio, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "dio"))
	l.DirectIO = strings.TrimSpace(string(dio)) == "1"
	return l, nil
}

// discard empties the device (on a loop device: punches holes in its
// file), so every run starts from the same all-zero target.
func (l *loopDev) discard(ctx context.Context) error {
	if _, err := runQuiet(ctx, "blkdiscard", l.Dev); err != nil {
		return fmt.Errorf("discard target: %w", err)
	}
	return nil
}

// detach detaches the loop device, retrying while it is busy for up to 10
// s, and removes its file. It uses its own context: it runs on the way out,
// also after Ctrl-C.
func (l *loopDev) detach() error {
	var err error
	for i := 0; i < 20; i++ {
		if err = exec.Command("losetup", "-d", l.Dev).Run(); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("detach %s (backing %s): %w", l.Dev, l.Backing, err)
	}
	return os.RemoveAll(l.dir)
}

// flushBufs writes back and drops the page cache of the block device dev
// (BLKFLSBUF), so no run reads what the previous one left cached.
func flushBufs(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return fmt.Errorf("flush buffers of %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0); err != nil {
		return fmt.Errorf("flush buffers of %s: %w", dev, err)
	}
	return nil
}

// syncAll writes back all dirty data of all file systems.
func syncAll() { unix.Sync() }

// allocated returns the bytes of path that are not holes, or 0 when it
// cannot tell.
func allocated(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// lookPath finds a program in PATH.
func lookPath(name string) (string, error) { return exec.LookPath(name) }
