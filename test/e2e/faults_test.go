//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// blkdebugEIO makes every write that touches the disk's sector 40960 (20 MiB
// in, inside the demo image's root partition) fail with EIO, as a dying disk
// would. Writes elsewhere, such as zeroing the first MiB, still succeed.
const blkdebugEIO = `[inject-error]
event = "write_aio"
errno = "5"
sector = "40960"
once = "off"
immediately = "off"
`

// An I/O error on the target disk fails write-image with a clear error that
// bootyd records under the step's name; no success is reported and the disk
// does not keep a valid partition table.
func TestDiskIOErrorIsReported(t *testing.T) {
	lab := newLab(t)
	conf := filepath.Join(t.TempDir(), "blkdebug.conf")
	if err := os.WriteFile(conf, []byte(blkdebugEIO), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	m, st := provision(t, lab, harness.MachineSpec{
		Config:      cfg,
		InitialDisk: lab.FilePath(harness.DemoImage),
		VMConfig: func(c *vm.Config) {
			for i := range c.Disks {
				c.Disks[i].BlkDebugConfig = conf
			}
		},
	})
	failed := failedStep(st)
	if st.State != api.StateError || failed == nil || failed.Step != "write-image" {
		t.Fatalf("state %q, failed %+v; want an error in write-image; steps %v", st.State, failed, stepStates(st))
	}
	if !strings.Contains(strings.ToLower(failed.Error), "input/output error") {
		t.Errorf("error does not say input/output error: %q", failed.Error)
	}
	if slices.Contains(stepStates(st), "machine:"+api.StateProvisioned) {
		t.Fatal("success reported after an I/O error")
	}
	if harness.HasValidGPT(m.Disk) {
		t.Fatal("disk still has a valid GPT after a failed write")
	}
}
