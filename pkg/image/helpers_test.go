package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/booty-dev/booty/internal/testenv"
)

const mib = 1 << 20

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

var gptTemplates sync.Map // size → []byte with an empty GPT disk

// gptTemplate runs sgdisk once per size (it sleeps a second after writing).
func gptTemplate(t testing.TB, size int64) []byte {
	t.Helper()
	if b, ok := gptTemplates.Load(size); ok {
		return b.([]byte)
	}
	testenv.NeedTools(t, "sgdisk")
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	run(t, "sgdisk", "-o", "-n", "1:2048:+8M", "-t", "1:ef00", p)
	img := readFile(t, p)
	gptTemplates.Store(size, img)
	return img
}

// gptImage builds an image of size bytes with a real GPT made by sgdisk
// (one 8 MiB EFI partition at sector 2048) and pseudo-random data in the
// partition. With dense it also fills the rest of the disk with data.
func gptImage(t testing.TB, size int64, dense bool, seed uint64) []byte {
	t.Helper()
	img := bytes.Clone(gptTemplate(t, size))
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fill := func(b []byte) { fillData(rng, b) }
	fill(img[mib : 9*mib])
	if dense {
		fill(img[9*mib : size-mib])
	} else {
		for off := int64(9 * mib); off+4096 < size-mib; off += 3 * mib / 2 {
			fill(img[off : off+4096])
		}
	}
	return img
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// compress runs the real command line tool for f on data.
func compress(t testing.TB, f Format, data []byte, extra ...string) []byte {
	t.Helper()
	var tool string
	var args []string
	switch f {
	case FormatRaw:
		return data
	case FormatGzip:
		tool, args = "gzip", []string{"-c", "-1"}
	case FormatZstd:
		tool, args = "zstd", []string{"-c", "-q", "-3"}
	case FormatXz:
		tool, args = "xz", []string{"-c", "-0", "-T1"}
	case FormatBzip2:
		tool, args = "bzip2", []string{"-c", "-1"}
	case FormatLz4:
		tool, args = "lz4", []string{"-c", "-q"}
	default:
		t.Fatalf("compress: no tool for %s", f)
	}
	testenv.NeedTools(t, tool)
	// Through a file, so tools that record the input size (zstd) do so.
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool, append(append(args, extra...), in)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v: %s", tool, err, stderr.String())
	}
	return out.Bytes()
}

func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gptAt reports whether a GPT header signature sits at byte offset off.
func gptAt(b []byte, off int64) bool {
	return off >= 0 && off+8 <= int64(len(b)) && string(b[off:off+8]) == "EFI PART"
}

// assertInvalidated checks that neither the primary GPT (LBA 1) nor a
// backup GPT in the last sector of the image or of the target survived,
// and that the first MiB is zero.
func assertInvalidated(t testing.TB, target []byte, imageSize int64) {
	t.Helper()
	if n := min(int64(len(target)), mib); !isZero(target[:n]) {
		t.Errorf("first MiB of target not zeroed")
	}
	if gptAt(target, 512) {
		t.Errorf("primary GPT header still at LBA 1")
	}
	if gptAt(target, imageSize-512) {
		t.Errorf("backup GPT header at the image end (offset %d)", imageSize-512)
	}
	if gptAt(target, int64(len(target))-512) {
		t.Errorf("backup GPT header at the target end")
	}
}

// sgdiskVerify runs sgdisk -v on a file and reports whether it found no
// problems.
func sgdiskVerify(t testing.TB, p string) (bool, string) {
	t.Helper()
	out, _ := exec.Command("sgdisk", "-v", p).CombinedOutput()
	return bytes.Contains(out, []byte("No problems found")), string(out)
}

// sgdiskFindsTable reports whether sgdisk finds any GPT, main or backup,
// on p: on a disk without one it says it is creating new entries.
func sgdiskFindsTable(t testing.TB, p string) (bool, string) {
	t.Helper()
	out, _ := exec.Command("sgdisk", "-p", p).CombinedOutput()
	return !bytes.Contains(out, []byte("Creating new GPT entries")), string(out)
}

// memTarget is an in-memory Target of fixed size whose writes can fail.
type memTarget struct {
	mu    sync.Mutex
	buf   []byte
	fail  func(off int64, p []byte) error // nil: never
	syncs int
	log   []string
}

func newMemTarget(size int, fill byte) *memTarget {
	b := bytes.Repeat([]byte{fill}, size)
	return &memTarget{buf: b}
}

func (m *memTarget) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		if err := m.fail(off, p); err != nil {
			return 0, err
		}
	}
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, fmt.Errorf("write %d bytes at %d beyond %d: %w", len(p), off, len(m.buf), io.ErrShortWrite)
	}
	m.log = append(m.log, fmt.Sprintf("write %d+%d", off, len(p)))
	return copy(m.buf[off:], p), nil
}

func (m *memTarget) Size() int64 { return int64(len(m.buf)) }

func (m *memTarget) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off >= int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memTarget) Close() error { return nil }

func (m *memTarget) Sync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncs++
	m.log = append(m.log, "sync")
	return nil
}

var errInjected = errors.New("injected write error")

// fillData fills b with pseudo-random bytes of 4 bits entropy each:
// compressible about 2:1, like an OS image, but not trivially.
func fillData(rng *rand.Rand, b []byte) {
	for i := 0; i < len(b); i += 8 {
		x := rng.Uint64() & 0x0f0f0f0f0f0f0f0f
		for k := 0; k < 8 && i+k < len(b); k++ {
			b[i+k] = byte(x >> (8 * k))
		}
	}
}
