package disk

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/booty-dev/booty/internal/testenv"
	"golang.org/x/sys/unix"
)

func TestGrowFilesystemXFSMounted(t *testing.T) {
	testenv.NeedTools(t, "xfs_growfs", "losetup")
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device and a mount")
	}
	if fss, _ := os.ReadFile("/proc/filesystems"); !strings.Contains(string(fss), "\txfs\n") {
		t.Skip("SKIPPED: the kernel has no xfs; xfs_growfs is covered by the command-line test only")
	}
	img := mkfsImage(t, 300<<20, "mkfs.xfs", "-q", "-f")
	if err := os.Truncate(img, 512<<20); err != nil {
		t.Fatal(err)
	}
	loop := attachLoop(t, img, false)
	mnt := t.TempDir()
	if err := unix.Mount(loop, mnt, "xfs", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", loop, err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, 0) })
	size := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks) * st.Bsize
	}
	before := size()
	if err := GrowFilesystem(context.Background(), hostRunner{t}, "/", loop, ""); err != nil {
		t.Fatal(err)
	}
	if after := size(); after < before+150<<20 {
		t.Fatalf("xfs size %d before, %d after growing by 212 MiB", before, after)
	}
}
