//go:build e2e

// Package e2e boots booty's real kernel and initramfs in QEMU against a bootyd
// running inside the test process, in a network namespace the test creates,
// and checks what ends up on the guest's disk and what bootyd recorded.
//
// Run with `make e2e`, which builds the initramfs and the demo image first and
// passes their paths in BOOTY_KERNEL, BOOTY_INITRD and BOOTY_DEMO. Without
// them the tests build the artifacts with make themselves. A missing QEMU or
// kernel fails the tests; nothing here skips.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

func TestMain(m *testing.M) {
	vm.EnterNetNS() // re-executes this binary in a fresh network namespace
	os.Exit(m.Run())
}

type artifacts struct {
	kernel, initrd, demo string
}

var (
	artOnce sync.Once
	art     artifacts
	artErr  error
)

// buildArtifacts returns the kernel, initramfs and demo image directory,
// building them with make when the environment does not name them.
func buildArtifacts(t *testing.T) artifacts {
	t.Helper()
	artOnce.Do(func() {
		art = artifacts{os.Getenv("BOOTY_KERNEL"), os.Getenv("BOOTY_INITRD"), os.Getenv("BOOTY_DEMO")}
		if art.kernel != "" && art.initrd != "" && art.demo != "" {
			return
		}
		root := repoRoot()
		cmd := exec.Command("make", "-C", root, "initramfs", "demo-image")
		out, err := cmd.CombinedOutput()
		if err != nil {
			artErr = fmt.Errorf("make initramfs demo-image: %v\n%s", err, out)
			return
		}
		art = artifacts{filepath.Join(root, "out", "vmlinuz"), filepath.Join(root, "out", "initramfs.img"), filepath.Join(root, "out", "demo")}
	})
	if artErr != nil {
		t.Fatal(artErr)
	}
	for _, p := range []string{art.kernel, art.initrd, filepath.Join(art.demo, harness.DemoImage)} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("artifact missing: %v", err)
		}
	}
	return art
}

// provision boots one machine of lab and waits for its outcome.
func provision(t *testing.T, lab *harness.Lab, spec harness.MachineSpec) (*harness.Machine, api.MachineState) {
	t.Helper()
	a := buildArtifacts(t)
	m, err := lab.AddMachine(spec)
	if err != nil {
		t.Fatalf("add machine: %v", err)
	}
	m.BootT(t, a.kernel, a.initrd)
	return m, waitOutcome(t, m)
}

// waitOutcome waits for the outcome of the machine's run and for its VM to
// exit, and returns what bootyd recorded.
func waitOutcome(t *testing.T, m *harness.Machine) api.MachineState {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	st, err := m.WaitOutcome(ctx)
	if err != nil {
		t.Fatalf("wait for outcome: %v", err)
	}
	t.Logf("outcome %s after %s", st.State, time.Since(start).Round(time.Second))
	// The agent ships its last log lines after the outcome, before the VM
	// exits; read the state again now that it has.
	if last, ok := m.State(); ok {
		st = last
	}
	return st
}

func newLab(t *testing.T) *harness.Lab {
	return harness.NewLabT(t, harness.LabOptions{FilesDir: buildArtifacts(t).demo})
}

// stepStates returns "step:state" for every report bootyd recorded, in order.
func stepStates(st api.MachineState) []string {
	var s []string
	for _, r := range st.Steps {
		s = append(s, r.Step+":"+r.State)
	}
	return s
}

// repoRoot is the checkout this test file belongs to.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
