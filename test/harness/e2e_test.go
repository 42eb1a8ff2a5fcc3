//go:build e2e

package harness

import (
	"context"
	"os"
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

// TestBootTProvisionsDemo proves the harness end to end: the standard
// scenario through BootT provisions the demo image and powers off.
func TestBootTProvisionsDemo(t *testing.T) {
	kernel := vm.Artifact(t, "BOOTY_KERNEL", "vmlinuz")
	initrd := vm.Artifact(t, "BOOTY_INITRD", "initramfs.img")
	demo := vm.Artifact(t, "BOOTY_DEMO", "demo")

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
