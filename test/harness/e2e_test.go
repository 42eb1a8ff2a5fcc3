//go:build e2e

package harness

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/vm"
)

// TestMain runs the e2e tests of this package in a network namespace of
// their own.
func TestMain(m *testing.M) {
	vm.EnterNetNS()
	os.Exit(m.Run())
}

// input returns $env or the path under the repository's out/ directory,
// and fails the test when it does not exist.
func input(t *testing.T, env, rel string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join("..", "..", "out", rel)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (run 'make initramfs demo-image', or set %s)", rel, err, env)
	}
	return p
}

// TestBootTProvisionsDemo proves the harness end to end: the standard
// scenario through BootT provisions the demo image and powers off.
func TestBootTProvisionsDemo(t *testing.T) {
	kernel := input(t, "BOOTY_KERNEL", "vmlinuz")
	initrd := input(t, "BOOTY_INITRD", "initramfs.img")
	demo := input(t, "BOOTY_DEMO", "demo")

	lab := NewLabT(t, LabOptions{FilesDir: demo})
	m, err := lab.AddMachine(MachineSpec{VMTimeout: 12 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.BootT(t, kernel, initrd)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := m.WaitOutcome(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != api.StateProvisioned {
		t.Fatalf("outcome %q, steps %+v", st.State, st.Steps)
	}
	if err := DiskHoldsImage(m.Disk, lab.FilePath(DemoImage)); err != nil {
		t.Error(err)
	}
	if !HasValidGPT(m.Disk) {
		t.Errorf("provisioned disk: %v", CheckGPT(m.Disk))
	}
}
