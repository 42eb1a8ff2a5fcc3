//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/test/harness"
)

// The happy path: the agent finds its config at bootyd by MAC, writes the
// zstd demo image to the blank virtio disk, verifies it and powers off.
func TestProvisionFromBootyd(t *testing.T) {
	lab := newLab(t)
	m, st := provision(t, lab, harness.MachineSpec{})

	if st.State != api.StateProvisioned {
		t.Fatalf("state = %q, want %q; steps %v", st.State, api.StateProvisioned, stepStates(st))
	}
	want := []string{
		"select-disk:started", "select-disk:succeeded",
		"write-image:started", "write-image:succeeded",
		"report-success:started", "report-success:succeeded",
		"machine:provisioned",
	}
	if got := stepStates(st); !slices.Equal(got, want) {
		t.Fatalf("bootyd saw steps %v\nwant %v", got, want)
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatalf("disk does not hold the image: %v", err)
	}
	if !harness.HasValidGPT(m.Disk) {
		t.Fatal("disk has no valid GPT after a successful write")
	}
	img, _ := os.Stat(lab.FilePath(harness.DemoImage))
	if st.Progress == nil || st.Progress.BytesDone != img.Size() || st.Progress.Step != "write-image" {
		t.Fatalf("last progress = %+v, want %d bytes of write-image", st.Progress, img.Size())
	}
	for _, r := range st.Steps {
		if r.Step == "select-disk" && r.State == api.StateSucceeded && r.Detail["disk"] != "/dev/vda" {
			t.Errorf("select-disk reported disk %q, want /dev/vda", r.Detail["disk"])
		}
	}
	if !hasLog(st, "image written and verified") {
		t.Errorf("bootyd received no agent log line about the verified write; got %d lines", len(st.Logs))
	}
	if hasLog(st, m.Token) {
		t.Error("the machine's token appears in the shipped logs")
	}
}

// A wrong checksum is reported with its step name, and a disk that held a
// valid GPT before is left without a valid partition table.
func TestWrongChecksumLeavesNoPartitionTable(t *testing.T) {
	lab := newLab(t)
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Image.Checksum = "sha256:" + strings.Repeat("0", 64)
	cfg.Image.ImageChecksum = ""
	m, st := provision(t, lab, harness.MachineSpec{Config: cfg, InitialDisk: lab.FilePath(harness.DemoImage)})

	if st.State != api.StateError {
		t.Fatalf("state = %q, want error; steps %v", st.State, stepStates(st))
	}
	failed := failedStep(st)
	if failed == nil || failed.Step != "write-image" {
		t.Fatalf("failed step = %+v, want write-image; steps %v", failed, stepStates(st))
	}
	if !strings.Contains(failed.Error, "checksum") {
		t.Errorf("error does not say checksum: %q", failed.Error)
	}
	if harness.HasValidGPT(m.Disk) {
		t.Fatal("disk still has a valid GPT after a checksum mismatch")
	}
	if zero, err := harness.FirstMiBZero(m.Disk); err != nil || !zero {
		t.Fatalf("first MiB not zeroed (zero=%v, err=%v)", zero, err)
	}
	if slices.Contains(stepStates(st), "report-success:started") {
		t.Fatal("report-success ran after a failed write")
	}
}

// A target disk that does not exist fails select-disk before anything is
// written: the disk's previous contents are untouched.
func TestMissingDiskTouchesNothing(t *testing.T) {
	lab := newLab(t)
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Disk.Device = "/dev/vdz"
	m, st := provision(t, lab, harness.MachineSpec{Config: cfg, InitialDisk: lab.FilePath(harness.DemoImage)})

	failed := failedStep(st)
	if st.State != api.StateError || failed == nil || failed.Step != "select-disk" {
		t.Fatalf("state %q, failed %+v; want error in select-disk", st.State, failed)
	}
	if !strings.Contains(failed.Error, "vdz") || !strings.Contains(failed.Error, "vda") {
		t.Errorf("error should name the wanted disk and list the disks seen: %q", failed.Error)
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatalf("disk changed although no disk was selected: %v", err)
	}
}

// A config with an unknown field is refused before anything is written; the
// error names the field and reaches bootyd under the load-config step.
func TestUnknownConfigFieldIsReported(t *testing.T) {
	lab := newLab(t)
	tmpl := `apiVersion: booty.dev/v1
image:
  url: {{.ImageURL}}
  checksum: {{.Checksum}}
  compression: zstd
disk: {device: /dev/vda}
handoff: poweroff
server: {url: {{.ServerURL}}, token: {{.Token}}}
`
	m, st := provision(t, lab, harness.MachineSpec{ConfigTemplate: tmpl, InitialDisk: lab.FilePath(harness.DemoImage)})
	failed := failedStep(st)
	if st.State != api.StateError || failed == nil || failed.Step != api.StepLoadConfig {
		t.Fatalf("state %q, failed %+v; want error in %s", st.State, failed, api.StepLoadConfig)
	}
	if !strings.Contains(failed.Error, "image.compression") || !strings.Contains(failed.Error, "unknown field") {
		t.Errorf("error does not name the unknown field: %q", failed.Error)
	}
	if !strings.Contains(m.VM().ConsoleText(), "image.compression") {
		t.Error("the console does not show the error")
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatalf("disk changed by a run whose config was refused: %v", err)
	}
}

// Root device hints that match no disk fail select-disk with a message that
// lists the disks seen and why each was rejected; nothing is written.
func TestHintsMatchingNoDiskTouchNothing(t *testing.T) {
	lab := newLab(t)
	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Disk.Device = ""
	cfg.Disk.Hints = config.RootDeviceHints{"serial": "s== NO-SUCH-SERIAL", "size": ">= 1"}
	m, st := provision(t, lab, harness.MachineSpec{Config: cfg, InitialDisk: lab.FilePath(harness.DemoImage)})
	failed := failedStep(st)
	if st.State != api.StateError || failed == nil || failed.Step != "select-disk" {
		t.Fatalf("state %q, failed %+v; want error in select-disk", st.State, failed)
	}
	for _, want := range []string{"/dev/vda", "serial"} {
		if !strings.Contains(failed.Error, want) {
			t.Errorf("error does not mention %q: %q", want, failed.Error)
		}
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatalf("disk changed although no disk matched: %v", err)
	}
}

func failedStep(st api.MachineState) *api.StatusReport {
	for i := range st.Steps {
		if st.Steps[i].State == api.StateFailed {
			return &st.Steps[i]
		}
	}
	return nil
}

func hasLog(st api.MachineState, s string) bool {
	if s == "" {
		return false
	}
	for _, l := range st.Logs {
		if bytes.Contains([]byte(l.Message), []byte(s)) {
			return true
		}
	}
	return false
}
