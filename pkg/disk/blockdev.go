package disk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
)

// BlockDevice is an open disk or disk image. Every read and write of a
// disk in booty goes through it: partition tables (ReadPartitionTable,
// GrowGPT), wipes, secure erase, and the image write (pkg/image's Target is
// this interface). *File is the real one; MemDevice serves tests.
type BlockDevice interface {
	io.ReaderAt
	io.WriterAt
	// Size is the capacity in bytes, or Unlimited for a regular file that
	// grows as it is written.
	Size() int64
	// Sync makes everything written so far durable.
	Sync() error
	Close() error
}

// Unlimited is the Size of a target that grows as it is written.
const Unlimited = -1

// File is a block device node or a regular file opened as a BlockDevice.
// It embeds the *os.File, so ioctls reach its descriptor (Fd).
type File struct {
	*os.File
	size int64
}

// Size is the device's size from the kernel (BLKGETSIZE64), or the
// regular file's length when it was opened.
func (f *File) Size() int64 { return f.size }

// OpenDevice opens path with flag (os.O_RDONLY, os.O_RDWR|os.O_EXCL, ...):
// a block device, sized by the kernel, or a regular file (a disk image),
// sized by its length. Other file types are refused.
func OpenDevice(path string, flag int) (*File, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	var size int64
	switch {
	case fi.Mode().IsRegular():
		size = fi.Size()
	case fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0:
		size, err = deviceSize(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("size of %s: %w", path, err)
		}
	default:
		f.Close()
		return nil, fmt.Errorf("open %s: %s is neither a block device nor a regular file", path, fi.Mode().Type())
	}
	return &File{File: f, size: size}, nil
}

// MemDevice is an in-memory BlockDevice for tests: a fixed size, reads
// past the end give io.EOF, writes past it fail. It counts syncs and can
// fail writes on demand.
type MemDevice struct {
	mu    sync.Mutex
	buf   []byte
	syncs int
	// FailWrite, when set, is asked before every write; its error fails it.
	FailWrite func(off int64, p []byte) error
}

// NewMemDevice returns a MemDevice of size bytes, all zero.
func NewMemDevice(size int64) *MemDevice { return &MemDevice{buf: make([]byte, size)} }

// NewMemDeviceFrom returns a MemDevice holding a copy of b.
func NewMemDeviceFrom(b []byte) *MemDevice {
	return &MemDevice{buf: append([]byte(nil), b...)}
}

// ErrPastEnd is returned by MemDevice writes beyond its size.
var ErrPastEnd = errors.New("write past the end of the device")

func (m *MemDevice) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off >= int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *MemDevice) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.FailWrite != nil {
		if err := m.FailWrite(off, p); err != nil {
			return 0, err
		}
	}
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, fmt.Errorf("write %d bytes at %d of %d: %w", len(p), off, len(m.buf), ErrPastEnd)
	}
	return copy(m.buf[off:], p), nil
}

func (m *MemDevice) Size() int64 { return int64(len(m.buf)) }

func (m *MemDevice) Sync() error {
	m.mu.Lock()
	m.syncs++
	m.mu.Unlock()
	return nil
}

func (m *MemDevice) Close() error { return nil }

// Bytes returns a copy of the device's content.
func (m *MemDevice) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.buf...)
}

// Syncs returns how many times Sync was called.
func (m *MemDevice) Syncs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncs
}
