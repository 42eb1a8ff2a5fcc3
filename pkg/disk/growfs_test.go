package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/booty-dev/booty/internal/testenv"
)

// hostRunner runs commands on the host; the tests chroot into "/" only.
type hostRunner struct{ t *testing.T }

func (h hostRunner) Run(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	return h.RunChroot(ctx, "/", name, args...)
}

func (h hostRunner) RunChroot(ctx context.Context, root, name string, args ...string) ([]byte, []byte, error) {
	if root != "/" {
		h.t.Fatalf("hostRunner asked to chroot into %s", root)
	}
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	h.t.Logf("ran %s %v: %v\n%s%s", name, args, err, stdout.String(), stderr.String())
	return []byte(stdout.String()), []byte(stderr.String()), err
}

// fakeRunner records command lines and answers from a table keyed by the command line.
type fakeRunner struct {
	answers map[string]string
	fail    map[string]bool
	calls   []string
	roots   []string
}

func (f *fakeRunner) Run(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	return f.RunChroot(ctx, "", name, args...)
}

func (f *fakeRunner) RunChroot(_ context.Context, root, name string, args ...string) ([]byte, []byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	f.calls = append(f.calls, line)
	f.roots = append(f.roots, root)
	if f.fail[line] {
		return nil, []byte("boom"), errors.New("exit status 5")
	}
	return []byte(f.answers[line]), nil, nil
}

func mkfsImage(t *testing.T, size int64, mkfs ...string) string {
	t.Helper()
	testenv.NeedTools(t, mkfs[0])
	p := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs[0], append(mkfs[1:], p)...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", mkfs, err, out)
	}
	return p
}

// extBlocks reads an ext superblock's block count.
func extBlocks(t *testing.T, img string) uint32 {
	t.Helper()
	b := make([]byte, 2048)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[1024+4:])
}

func TestGrowFilesystemExt4(t *testing.T) {
	testenv.NeedTools(t, "resize2fs")
	img := mkfsImage(t, 32<<20, "mkfs.ext4", "-q", "-F", "-b", "4096")
	if got := extBlocks(t, img); got != 8192 {
		t.Fatalf("fresh fs has %d blocks", got)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := GrowFilesystem(context.Background(), hostRunner{t}, "/", img, ""); err != nil {
		t.Fatal(err)
	}
	if got := extBlocks(t, img); got != 16384 {
		t.Fatalf("grown fs has %d blocks, want 16384", got)
	}
	// Again: nothing to do, no error.
	if err := GrowFilesystem(context.Background(), hostRunner{t}, "/", img, FSExt4); err != nil {
		t.Fatalf("second grow: %v", err)
	}
}

// attachLoop attaches img to a free loop device (with partition scanning
// when partscan) and detaches it at cleanup.
func attachLoop(t *testing.T, img string, partscan bool) string {
	t.Helper()
	args := []string{"--find", "--show"}
	if partscan {
		args = append(args, "--partscan")
	}
	out, err := exec.Command("losetup", append(args, img)...).CombinedOutput()
	if err != nil {
		t.Skipf("SKIPPED: no loop device: losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Logf("losetup -d %s: %v %s", loop, err, out)
		}
	})
	return loop
}

func TestGrowFilesystemCommands(t *testing.T) {
	root := t.TempDir()
	mounts := filepath.Join(root, "mounts")
	sys := filepath.Join(root, "sys")
	os.MkdirAll(filepath.Join(sys, "block", "dm-0", "dm"), 0o755)
	os.WriteFile(filepath.Join(sys, "block", "dm-0", "dm", "name"), []byte("my--vg-root\n"), 0o644)
	tests := []struct {
		name      string
		fsType    string
		mounts    string
		rootLV    string
		answers   map[string]string
		fail      map[string]bool
		wantCalls []string
		wantErr   error
		errText   string
	}{
		{name: "ext4", fsType: "ext4", wantCalls: []string{"resize2fs /dev/vda3"}},
		{name: "xfs mounted at the chroot", fsType: "xfs", mounts: "/dev/vda3 /mnt/target xfs rw 0 0\n",
			wantCalls: []string{"xfs_growfs /"}},
		{name: "xfs mounted below the chroot", fsType: "xfs", mounts: "/dev/vda3 /mnt/target/var\\040x xfs rw 0 0\n",
			wantCalls: []string{"xfs_growfs /var x"}},
		{name: "xfs not mounted", fsType: "xfs", mounts: "/dev/vda1 /mnt/target ext4 rw 0 0\n", wantErr: ErrNotMounted},
		{name: "xfs mounted elsewhere", fsType: "xfs", mounts: "/dev/vda3 /elsewhere xfs rw 0 0\n", wantErr: ErrNotMounted, errText: "outside the chroot"},
		{name: "btrfs", fsType: "btrfs", mounts: "/dev/vda3 /mnt/target btrfs rw 0 0\n",
			wantCalls: []string{"btrfs filesystem resize max /"}},
		{name: "lvm root from mapper name", fsType: FSLVM2PV, mounts: "/dev/mapper/my--vg-root /mnt/target ext4 rw 0 0\n",
			answers: map[string]string{"pvs --noheadings -o vg_name /dev/vda3": "  my-vg\n", "vgs --noheadings -o vg_free_count my-vg": "  2560\n"},
			wantCalls: []string{"pvresize /dev/vda3", "pvs --noheadings -o vg_name /dev/vda3", "vgs --noheadings -o vg_free_count my-vg",
				"lvextend -r -l +100%FREE my-vg/root"}},
		{name: "lvm root from dm-0", fsType: "lvm", mounts: "/dev/dm-0 /mnt/target xfs rw 0 0\n",
			answers: map[string]string{"pvs --noheadings -o vg_name /dev/vda3": "my-vg", "vgs --noheadings -o vg_free_count my-vg": "10"},
			wantCalls: []string{"pvresize /dev/vda3", "pvs --noheadings -o vg_name /dev/vda3", "vgs --noheadings -o vg_free_count my-vg",
				"lvextend -r -l +100%FREE my-vg/root"}},
		{name: "lvm explicit root LV, /dev/VG/LV", fsType: FSLVM2PV, rootLV: "rhel/root",
			answers:   map[string]string{"pvs --noheadings -o vg_name /dev/vda3": "rhel", "vgs --noheadings -o vg_free_count rhel": "7"},
			wantCalls: []string{"pvresize /dev/vda3", "pvs --noheadings -o vg_name /dev/vda3", "vgs --noheadings -o vg_free_count rhel", "lvextend -r -l +100%FREE rhel/root"}},
		{name: "lvm no free extents: idempotent", fsType: FSLVM2PV, mounts: "/dev/rhel/root /mnt/target xfs rw 0 0\n",
			answers:   map[string]string{"pvs --noheadings -o vg_name /dev/vda3": "rhel", "vgs --noheadings -o vg_free_count rhel": "0"},
			wantCalls: []string{"pvresize /dev/vda3", "pvs --noheadings -o vg_name /dev/vda3", "vgs --noheadings -o vg_free_count rhel"}},
		{name: "lvm root in another vg", fsType: FSLVM2PV, mounts: "/dev/mapper/sys-root /mnt/target xfs rw 0 0\n",
			answers:   map[string]string{"pvs --noheadings -o vg_name /dev/vda3": "data"},
			wantCalls: []string{"pvresize /dev/vda3", "pvs --noheadings -o vg_name /dev/vda3"}},
		{name: "lvm root not an LV", fsType: FSLVM2PV, mounts: "/dev/vda2 /mnt/target xfs rw 0 0\n",
			answers:   map[string]string{"pvs --noheadings -o vg_name /dev/vda3": "data"},
			wantCalls: []string{"pvresize /dev/vda3", "pvs --noheadings -o vg_name /dev/vda3"}, errText: "not a logical volume"},
		{name: "pvresize fails", fsType: FSLVM2PV, fail: map[string]bool{"pvresize /dev/vda3": true},
			wantCalls: []string{"pvresize /dev/vda3"}, errText: "run pvresize /dev/vda3 in /mnt/target: exit status 5: boom"},
		{name: "vfat", fsType: "vfat", wantErr: ErrUnsupportedFS},
		{name: "swap", fsType: FSSwap, wantErr: ErrUnsupportedFS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.WriteFile(mounts, []byte("proc /proc proc rw 0 0\n"+tt.mounts), 0o644)
			r := &fakeRunner{answers: tt.answers, fail: tt.fail}
			g := &FSGrower{Runner: r, MountsFile: mounts, SysRoot: sys, RootLV: tt.rootLV}
			err := g.Grow(context.Background(), "/mnt/target", "/dev/vda3", tt.fsType)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) || tt.wantErr == nil && tt.errText == "" && err != nil {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.errText != "" && (err == nil || !strings.Contains(err.Error(), tt.errText)) {
				t.Fatalf("err = %v, want it to say %q", err, tt.errText)
			}
			if !reflect.DeepEqual(r.calls, tt.wantCalls) {
				t.Fatalf("calls = %q, want %q", r.calls, tt.wantCalls)
			}
			for _, root := range r.roots {
				if root != "/mnt/target" {
					t.Fatalf("ran in %s, want the chroot", root)
				}
			}
		})
	}
}

func TestGrowFilesystemDetectError(t *testing.T) {
	g := &FSGrower{Runner: &fakeRunner{}, Open: func(string) (io.ReadCloser, error) { return nil, fmt.Errorf("open: %w", os.ErrNotExist) }}
	if err := g.Grow(context.Background(), "/mnt", "/dev/nope", ""); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
	img := filepath.Join(t.TempDir(), "zero")
	os.WriteFile(img, make([]byte, 1<<17), 0o644)
	if err := GrowFilesystem(context.Background(), &fakeRunner{}, "/mnt", img, ""); !errors.Is(err, ErrUnknownFS) {
		t.Fatalf("err = %v, want ErrUnknownFS", err)
	}
}
