package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/booty-dev/booty/pkg/disk"
)

// Target is what Write writes the image to: pkg/disk's one block-device
// interface (a block device, a regular file, or in tests a disk.MemDevice
// or anything that can fail on demand). Its Size is Unlimited for a
// regular file without Options.TargetSize.
type Target = disk.BlockDevice

// Zeroer is an optional interface of a Target that can make a range read
// back as zeros faster than writing zeros (BLKZEROOUT, hole punching).
// Write falls back to writing zeros when a Target lacks it.
type Zeroer interface {
	ZeroRange(off, n int64) error
}

// Unlimited is the Size of a target that grows as it is written.
const Unlimited = disk.Unlimited

// directAlign is the alignment of offset, length and buffer address that
// Write keeps for O_DIRECT writes (enough for 512 and 4096 byte sectors).
const directAlign = 4096

// fileTarget is a block device or a regular file opened by Write. Writes
// that are aligned to directAlign go through an O_DIRECT descriptor when
// there is one; the rest, and all writes after the kernel refused O_DIRECT
// (EINVAL), go through the buffered descriptor f.
type fileTarget struct {
	f       *os.File
	direct  *os.File // O_DIRECT descriptor, or nil
	noDir   atomic.Bool
	size    int64
	regular bool // regular file: Write truncates it and may leave holes
	// sys holds the syscalls, replaced in tests.
	sys targetSys
}

// targetSys is the system access of a fileTarget.
type targetSys struct {
	pwrite   func(fd int, p []byte, off int64) (int, error)
	zeroOut  func(fd int, off, n int64) error // block device: BLKZEROOUT
	punch    func(fd int, off, n int64) error // regular file: punch a hole
	openDir  func(path string) (*os.File, error)
	isDirErr func(err error) bool // the kernel refused O_DIRECT for this write
}

func (t *fileTarget) Size() int64                             { return t.size }
func (t *fileTarget) ReadAt(p []byte, off int64) (int, error) { return t.f.ReadAt(p, off) }
func (t *fileTarget) Sync() error                             { return t.f.Sync() }
func (t *fileTarget) Truncate(n int64) error                  { return t.f.Truncate(n) }

func (t *fileTarget) Close() error {
	var err error
	if t.direct != nil {
		err = t.direct.Close()
	}
	return errors.Join(err, t.f.Close())
}

// WriteAt writes p at off, through O_DIRECT when p, off and the length are
// aligned and O_DIRECT works, else buffered.
func (t *fileTarget) WriteAt(p []byte, off int64) (int, error) {
	if t.direct != nil && !t.noDir.Load() && aligned(p, off) {
		n, err := t.pwriteAll(int(t.direct.Fd()), p, off)
		if err == nil || !t.sys.isDirErr(err) || n > 0 {
			return n, err
		}
		t.noDir.Store(true) // e.g. tmpfs or a device with larger sectors
	}
	return t.f.WriteAt(p, off)
}

func (t *fileTarget) pwriteAll(fd int, p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := t.sys.pwrite(fd, p[done:], off+int64(done))
		if n > 0 {
			done += n
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, io.ErrShortWrite
		}
	}
	return done, nil
}

// Direct reports whether O_DIRECT writes are in use.
func (t *fileTarget) Direct() bool { return t.direct != nil && !t.noDir.Load() }

// ZeroRange makes [off, off+n) read back as zeros: BLKZEROOUT on a block
// device (the kernel offloads it where the device can), a punched hole on a
// regular file; where that is refused it writes zeros.
func (t *fileTarget) ZeroRange(off, n int64) error {
	if n <= 0 {
		return nil
	}
	var err error
	switch {
	case t.regular:
		err = t.sys.punch(int(t.f.Fd()), off, n)
	case off%512 == 0 && n%512 == 0:
		err = t.sys.zeroOut(int(t.f.Fd()), off, n)
	default:
		err = errors.ErrUnsupported
	}
	if err == nil {
		return nil
	}
	return writeZeros(t, off, n)
}

// writeZeros writes n zero bytes at off from the shared zero buffer.
func writeZeros(t io.WriterAt, off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := t.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

func aligned(p []byte, off int64) bool {
	return len(p) > 0 && off%directAlign == 0 && len(p)%directAlign == 0 && addrAligned(p)
}

// openTarget opens path for writing without changing it: a block device
// exclusively (fails while it is mounted or otherwise claimed) with its size
// from the kernel, or a regular file, created when missing, whose size is
// limit when limit > 0 and Unlimited otherwise. Other file types are refused.
// Unless noDirect, it also opens an O_DIRECT descriptor; a kernel or file
// system that refuses one just leaves writes buffered.
func openTarget(path string, limit int64, noDirect bool) (*fileTarget, error) {
	t, err := openTargetFile(path, limit)
	if err != nil {
		return nil, err
	}
	t.sys = defaultTargetSys()
	if !noDirect {
		if d, err := t.sys.openDir(path); err == nil {
			t.direct = d
		}
	}
	return t, nil
}

func openTargetFile(path string, limit int64) (*fileTarget, error) {
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
		f, err := disk.OpenDevice(path, os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("open target %s: %w", path, err)
		}
		return newRegularTarget(f.File, limit), nil
	case fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0:
		f, err := disk.OpenDevice(path, os.O_RDWR|os.O_EXCL)
		if err != nil {
			return nil, fmt.Errorf("open block device %s exclusively: %w", path, err)
		}
		size := f.Size()
		if limit > 0 && limit < size {
			size = limit
		}
		return &fileTarget{f: f.File, size: size}, nil
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
