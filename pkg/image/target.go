package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Target is what Write writes the image to: a block device, a regular file,
// or in tests anything that can fail on demand.
type Target interface {
	io.WriterAt
	// Size is the capacity in bytes, or -1 when the target grows as it is
	// written (a regular file without Options.TargetSize).
	Size() int64
	// Sync makes everything written so far durable.
	Sync() error
}

// Unlimited is the Size of a target that grows as it is written.
const Unlimited = -1

// fileTarget is a block device or a regular file opened by Write.
type fileTarget struct {
	f       *os.File
	size    int64
	regular bool // regular file: Write truncates it and may leave holes
}

func (t *fileTarget) WriteAt(p []byte, off int64) (int, error) { return t.f.WriteAt(p, off) }
func (t *fileTarget) Size() int64                              { return t.size }
func (t *fileTarget) Sync() error                              { return t.f.Sync() }
func (t *fileTarget) Truncate(n int64) error                   { return t.f.Truncate(n) }
func (t *fileTarget) Close() error                             { return t.f.Close() }

// openTarget opens path for writing without changing it: a block device
// exclusively (fails while it is mounted or otherwise claimed) with its size
// from the kernel, or a regular file, created when missing, whose size is
// limit when limit > 0 and Unlimited otherwise. Other file types are refused.
func openTarget(path string, limit int64) (*fileTarget, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("create target %s: %w", path, err)
		}
		return newRegularTarget(f, limit), nil
	case err != nil:
		return nil, fmt.Errorf("open target %s: %w", path, err)
	case fi.Mode().IsRegular():
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open target %s: %w", path, err)
		}
		return newRegularTarget(f, limit), nil
	case fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0:
		f, err := os.OpenFile(path, os.O_RDWR|os.O_EXCL, 0)
		if err != nil {
			return nil, fmt.Errorf("open block device %s exclusively: %w", path, err)
		}
		size, err := blockDeviceSize(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("size block device %s: %w", path, err)
		}
		if limit > 0 && limit < size {
			size = limit
		}
		return &fileTarget{f: f, size: size}, nil
	default:
		return nil, fmt.Errorf("open target %s: %s is neither a block device nor a regular file: %w", path, fi.Mode().Type(), ErrBadTarget)
	}
}

func newRegularTarget(f *os.File, limit int64) *fileTarget {
	size := int64(Unlimited)
	if limit > 0 {
		size = limit
	}
	return &fileTarget{f: f, size: size, regular: true}
}
