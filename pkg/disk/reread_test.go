package disk

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/booty-dev/booty/internal/testenv"
)

// fakeIoctl records block ioctls; RereadPartitions pops rereadErrs.
type fakeIoctl struct {
	mu          sync.Mutex
	rereadErrs  []error
	partErr     map[int]error // by partition number
	discardErr  error
	ops         []string
	onReread    func()
	onPartition func(op, num int, start, length int64)
}

func (f *fakeIoctl) RereadPartitions(BlockDevice) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "BLKRRPART")
	if len(f.rereadErrs) > 0 {
		err := f.rereadErrs[0]
		f.rereadErrs = f.rereadErrs[1:]
		if err != nil {
			return err
		}
	}
	if f.onReread != nil {
		f.onReread()
	}
	return nil
}

func (f *fakeIoctl) Partition(_ BlockDevice, op, num int, start, length int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, fmt.Sprintf("BLKPG %s %d %d %d", map[int]string{BLKPGAdd: "add", BLKPGDelete: "del", BLKPGResize: "resize"}[op], num, start, length))
	if err := f.partErr[num]; err != nil {
		return err
	}
	if f.onPartition != nil {
		f.onPartition(op, num, start, length)
	}
	return nil
}

func (f *fakeIoctl) Discard(_ BlockDevice, start, length int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, fmt.Sprintf("BLKDISCARD %d %d", start, length))
	return f.discardErr
}

// rereadFixture is a fake sysfs and /dev holding disk "vda" whose device
// node is an sgdisk image with partitions 1 (1-9 MiB) and 2 (9-29 MiB).
type rereadFixture struct {
	m        *Manager
	sys, dev string
	io       *fakeIoctl
	sleeps   []time.Duration
}

func newRereadFixture(t *testing.T) *rereadFixture {
	img := sgdiskImage(t, 64, 64, "-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8304")
	root := t.TempDir()
	fx := &rereadFixture{sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev"), io: &fakeIoctl{}}
	os.MkdirAll(filepath.Join(fx.sys, "class", "block", "vda"), 0o755)
	os.WriteFile(filepath.Join(fx.sys, "class", "block", "vda", "size"), []byte(strconv.Itoa(64*mib/512)+"\n"), 0o644)
	os.MkdirAll(fx.dev, 0o755)
	if err := os.Rename(img, filepath.Join(fx.dev, "vda")); err != nil {
		t.Fatal(err)
	}
	fx.m = NewManager()
	fx.m.SysRoot, fx.m.DevRoot, fx.m.Ioctl = fx.sys, fx.dev, fx.io
	fx.m.Log = testLogger(t)
	fx.m.Sleep = func(d time.Duration) { fx.sleeps = append(fx.sleeps, d) }
	return fx
}

// kernelHas creates what the kernel and devtmpfs create for a partition.
func (fx *rereadFixture) kernelHas(n int, start, size int64) {
	name := PartitionName("vda", n)
	dir := filepath.Join(fx.sys, "class", "block", "vda", name)
	os.MkdirAll(dir, 0o755)
	for k, v := range map[string]int64{"partition": int64(n), "start": start / 512, "size": size / 512} {
		os.WriteFile(filepath.Join(dir, k), []byte(strconv.FormatInt(v, 10)+"\n"), 0o644)
	}
	os.Symlink(filepath.Join("vda", name), filepath.Join(fx.sys, "class", "block", name))
	os.WriteFile(filepath.Join(fx.dev, name), nil, 0o644)
}

func TestRereadPartitionsRetriesBusy(t *testing.T) {
	fx := newRereadFixture(t)
	fx.io.rereadErrs = []error{syscall.EBUSY, syscall.EBUSY, syscall.EBUSY}
	fx.io.onReread = func() { fx.kernelHas(1, 1*mib, 8*mib); fx.kernelHas(2, 9*mib, 20*mib) }
	fx.m.Retry = Backoff{Attempts: 5, Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond}
	if err := fx.m.RereadPartitions("/dev/vda"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"BLKRRPART", "BLKRRPART", "BLKRRPART", "BLKRRPART"}; !reflect.DeepEqual(fx.io.ops, want) {
		t.Fatalf("ops %q, want %q", fx.io.ops, want)
	}
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}; !reflect.DeepEqual(fx.sleeps, want) {
		t.Fatalf("backoff %v, want %v", fx.sleeps, want)
	}
}

func TestRereadPartitionsFallsBackToBLKPG(t *testing.T) {
	fx := newRereadFixture(t)
	fx.io.rereadErrs = []error{syscall.EBUSY, syscall.EBUSY, syscall.EBUSY}
	fx.m.Retry = Backoff{Attempts: 3, Initial: 10 * time.Millisecond, Max: time.Second}
	// The kernel knows the image's old layout: 1 unchanged, 2 smaller, and a stale 3.
	fx.kernelHas(1, 1*mib, 8*mib)
	fx.kernelHas(2, 9*mib, 10*mib)
	fx.kernelHas(3, 40*mib, 4*mib)
	os.Remove(filepath.Join(fx.dev, "vda2")) // devtmpfs recreates it after the resize
	fx.io.onPartition = func(op, num int, start, length int64) {
		if op != BLKPGDelete {
			fx.kernelHas(num, start, length)
		}
	}
	if err := fx.m.RereadPartitions("vda"); err != nil {
		t.Fatal(err)
	}
	want := []string{"BLKRRPART", "BLKRRPART", "BLKRRPART", "BLKPG del 3 0 0", fmt.Sprintf("BLKPG resize 2 %d %d", 9*mib, 20*mib)}
	if !reflect.DeepEqual(fx.io.ops, want) {
		t.Fatalf("ops %q, want %q", fx.io.ops, want)
	}
	// A partition that has to move while busy is an error naming it.
	fx = newRereadFixture(t)
	fx.io.rereadErrs = []error{syscall.EBUSY, syscall.EBUSY}
	fx.m.Retry = Backoff{Attempts: 2, Initial: time.Millisecond, Max: time.Millisecond}
	fx.kernelHas(2, 5*mib, 20*mib)
	fx.io.partErr = map[int]error{2: syscall.EBUSY}
	err := fx.m.RereadPartitions("vda")
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "delete partition 2") {
		t.Fatalf("err = %v, want busy delete of partition 2", err)
	}
}

func TestRereadPartitionsErrors(t *testing.T) {
	fx := newRereadFixture(t)
	fx.io.rereadErrs = []error{syscall.EINVAL}
	if err := fx.m.RereadPartitions("vda"); !errors.Is(err, syscall.EINVAL) || len(fx.io.ops) != 1 || len(fx.sleeps) != 0 {
		t.Fatalf("err = %v, ops %q, sleeps %v; want EINVAL at once", err, fx.io.ops, fx.sleeps)
	}

	// Nodes never appear: bounded wait, then ErrNodesTimeout naming them.
	fx = newRereadFixture(t)
	fx.m.NodeTimeout, fx.m.PollInterval = time.Second, 100*time.Millisecond
	err := fx.m.RereadPartitions("vda")
	if !errors.Is(err, ErrNodesTimeout) || !strings.Contains(err.Error(), filepath.Join(fx.dev, "vda2")) {
		t.Fatalf("err = %v, want ErrNodesTimeout naming vda2", err)
	}
	if len(fx.sleeps) != 10 {
		t.Fatalf("polled %d times, want 10", len(fx.sleeps))
	}

	if err := fx.m.RereadPartitions("vdz"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing disk: %v", err)
	}
}

func TestPartitionName(t *testing.T) {
	for in, want := range map[string]string{"vda": "vda3", "sda": "sda3", "nvme0n1": "nvme0n1p3", "mmcblk0": "mmcblk0p3", "loop7": "loop7p3"} {
		if got := PartitionName(in, 3); got != want {
			t.Errorf("PartitionName(%s, 3) = %s, want %s", in, got, want)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

func needRootLoop(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root for loop devices")
	}
	testenv.NeedTools(t, "losetup", "sgdisk")
}

func sysfsSize(t *testing.T, part string) int64 {
	t.Helper()
	v, err := readInt(filepath.Join("/sys/class/block", part), "size")
	if err != nil {
		t.Fatal(err)
	}
	return v * 512
}

// TestRereadPartitionsLoop runs the production sequence on a real loop
// device: image smaller than the disk, GrowGPT through the device node,
// RereadPartitions; then again with partition 1 held open, so BLKRRPART is
// busy and BLKPG resizes partition 2.
func TestRereadPartitionsLoop(t *testing.T) {
	needRootLoop(t)
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			img := sgdiskImage(t, 48, 96, "-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+20M", "-t", "2:8304")
			loop := attachLoop(t, img, true)
			name := filepath.Base(loop)
			m := NewManager()
			m.Log = testLogger(t)
			m.Retry = Backoff{Attempts: 3, Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond}
			if err := m.RereadPartitions(loop); err != nil {
				t.Fatal(err)
			}
			p2 := PartitionName(name, 2)
			if got := sysfsSize(t, p2); got != 20*mib {
				t.Fatalf("%s is %d bytes before growing", p2, got)
			}
			if busy {
				h, err := os.Open("/dev/" + PartitionName(name, 1))
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close()
			}
			f, err := OpenDevice(loop, os.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			res, err := GrowGPT(f, GrowOptions{})
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			if err := m.RereadPartitions(loop); err != nil {
				t.Fatal(err)
			}
			want := int64(res.NewLastLBA-res.FirstLBA+1) * 512
			if got := sysfsSize(t, p2); got != want {
				t.Fatalf("%s is %d bytes after reread, want %d", p2, got, want)
			}
			if _, err := os.Stat("/dev/" + p2); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("sgdisk", "-v", loop).CombinedOutput(); err != nil || !strings.Contains(string(out), "No problems found") {
				t.Fatalf("sgdisk -v %s: %v\n%s", loop, err, out)
			}
		})
	}
}
