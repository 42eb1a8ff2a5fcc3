//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/test/bmcvm"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/osimage"
	"github.com/booty-dev/booty/test/vm"
)

// reconcileBounds are the waits of the reconciler e2e tests (bounds, never
// timing asserts; TCG on a loaded machine is slow).
const (
	reconcileProvisionBound   = 30 * time.Minute
	reconcileProofBound       = 15 * time.Minute
	reconcileDeprovisionBound = 20 * time.Minute
)

// bmcLab is bootyd (out of process, the real binary with its reconciler),
// serving the agent's kernel and initramfs and the Debian image, and one
// UEFI QEMU machine behind a test BMC, reached by the guest through QEMU
// user networking.
type bmcLab struct {
	b    *bootydProc
	url  string // bootyd as the guest reaches it
	mach *bmcvm.Machine
	mac  string
	spec api.MachineSpec
	// tokens is bootyd's operator token file, for bootyctl.
	tokens string
}

// imageSum returns "sha256:HEX" from a sha256sum line file of the Debian
// image directory.
func imageSum(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || len(f[0]) != 64 {
		t.Fatalf("%s: not a sha256sum line: %q", file, b)
	}
	return "sha256:" + f[0]
}

// linkOrCopy puts from at to, by a hard link when both are on one
// filesystem.
func linkOrCopy(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Link(from, to); err != nil {
		copyFile(t, from, to)
	}
}

func newBMCLab(t *testing.T, mac string, extraArgs ...string) *bmcLab {
	t.Helper()
	a := buildArtifacts(t)
	deb := osimage.Ensure(t)
	dir := t.TempDir()
	files := filepath.Join(dir, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		t.Fatal(err)
	}
	linkOrCopy(t, a.kernel, filepath.Join(files, "vmlinuz"))
	linkOrCopy(t, a.initrd, filepath.Join(files, "initramfs.img"))
	linkOrCopy(t, filepath.Join(deb, osimage.Compressed), filepath.Join(files, osimage.Compressed))

	bin := os.Getenv("BOOTYD_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "bootyd")
		build := exec.Command("go", "build", "-o", bin, "./cmd/bootyd")
		build.Dir = repoRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build bootyd: %v\n%s", err, out)
		}
	}
	tokens := filepath.Join(dir, "operator-tokens")
	if err := os.WriteFile(tokens, []byte(fleetToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	l := &bmcLab{url: "http://" + harness.GuestHost + ":" + port, mac: mac, tokens: tokens}
	args := append([]string{"--insecure-http", "--listen", "127.0.0.1:" + port,
		"--state-dir", filepath.Join(dir, "state"), "--operator-token-file", tokens, "--public-url", l.url, "--files", files,
		"--ipxe-cmdline", "console=ttyS0,115200 " + harness.InsecureHTTP,
		"--reconcile-resync", "5s", "--reconcile-error-backoff", "2s", "--reconcile-error-backoff-max", "10s",
		"--bmc-power-timeout", "30s", // the injected power action that does not take fails in 30 s, not 2 min
		"--recover=false"}, extraArgs...)
	l.b = &bootydProc{bin: bin, port: port, out: &lockedBuffer{}, args: args}
	l.b.start(t)
	t.Cleanup(func() {
		if l.b.cmd.ProcessState == nil {
			l.b.cmd.Process.Kill()
			<-l.b.done
		}
		if t.Failed() {
			t.Logf("bootyd output:\n%s", l.b.out.String())
		}
	})

	disk := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 2<<30); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := bmcvm.New(vm.Config{
		UEFI:       true,
		Memory:     1024,
		Disks:      []vm.Disk{{Path: disk, Format: "raw"}},
		Net:        true,
		MAC:        mac,
		NetOptions: "bootfile=" + l.url + "/v1/boot.ipxe",
		StateDir:   filepath.Join(dir, "ovmf"),
		Timeout:    reconcileProvisionBound + reconcileDeprovisionBound,
		ConsoleLog: filepath.Join(vm.ArtifactDir(t), "console-"+strings.ReplaceAll(mac, ":", "")+".log"),
		Logger:     log,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.GracefulTimeout = 2 * time.Minute
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	l.mach = m
	l.spec = api.MachineSpec{
		Image: api.ImageSpec{URL: l.url + "/files/" + osimage.Compressed,
			Checksum:  imageSum(t, deb, osimage.CompressedSum),
			Checksums: []string{imageSum(t, deb, osimage.ImageSum)}},
		RootDeviceHints: &api.RootDeviceHints{DeviceName: "/dev/vda"},
		// The agent reboots after the write (no kexec, no EFI boot entry),
		// so the firmware boots the disk: through the network first, whose
		// script for a provisioned machine exits.
		ConfigOverrides: json.RawMessage(`{"handoff":"reboot","efiBootEntry":false,"onFailure":{"action":"poweroff","delay":"5s"}}`),
	}
	return l
}

// register registers the machine through the operator API with its BMC,
// the Debian image and online: true.
func (l *bmcLab) register(t *testing.T, name string, b api.BMCRequest) {
	t.Helper()
	l.b.op(t, "POST", "/v1/machines", api.RegisterRequest{Name: name, BootMAC: l.mac, BMC: &b, Online: true, Spec: l.spec}, nil)
}

// apply registers the machine as an operator would: a BareMetalHost
// document (its BMC with the password in a file, the boot MAC, online, the
// Debian image, hints and booty's configOverrides) applied with the real
// bootyctl, which must answer "NAME created".
func (l *bmcLab) apply(t *testing.T, name string, b api.BMCRequest) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bmc.pass"), []byte(b.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var overrides map[string]any
	if err := json.Unmarshal(l.spec.ConfigOverrides, &overrides); err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{
		"apiVersion": "booty.dev/v1alpha1", "kind": "BareMetalHost", "metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"online": true, "bootMACAddress": l.mac,
			"bmc": map[string]any{"address": b.Address, "disableCertificateVerification": b.DisableCertificateVerification,
				"credentials": map[string]any{"username": b.Username, "passwordFile": "./bmc.pass"}},
			"image": l.spec.Image, "rootDeviceHints": l.spec.RootDeviceHints, "configOverrides": overrides,
		},
	}
	j, _ := json.MarshalIndent(doc, "", "  ") // JSON is YAML
	host := filepath.Join(dir, "host.yaml")
	if err := os.WriteFile(host, j, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bootyctlBin(t), "apply", "-f", host, "--server", "http://127.0.0.1:"+l.b.port, "--insecure-http", "--token-file", l.tokens)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != name+" created\n" {
		t.Fatalf("bootyctl apply -f host.yaml: %v: %s", err, out)
	}
	if strings.Contains(string(out), b.Password) {
		t.Fatal("bootyctl apply printed the BMC password")
	}
}

func (l *bmcLab) console() string {
	if v := l.mach.VM(); v != nil {
		return v.ConsoleText()
	}
	return ""
}

// provisioned waits until the reconciler has the machine provisioned and
// its firmware booted the Debian image from the disk (BOOTY-PROOF done on
// its console), through bootyd's local-boot iPXE script. failOnError
// fails at the first error state.
func (l *bmcLab) provisioned(t *testing.T, name string, start time.Time, failOnError bool) {
	t.Helper()
	waitFor(t, name+" to be provisioned", reconcileProvisionBound, func() bool {
		d := l.b.show(t, name)
		if failOnError && d.Status == api.StatusError {
			t.Fatalf("%s: error state %+v\nconsole:\n%s", name, d.Error, l.console())
		}
		return d.State == api.MachineProvisioned
	})
	t.Logf("%s provisioned after %s", name, time.Since(start).Round(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), reconcileProofBound)
	defer cancel()
	if _, err := l.mach.VM().Expect(ctx, osimage.ProofDoneRE); err != nil {
		t.Fatalf("%s: the Debian image did not boot from the disk: %v", name, err)
	}
	t.Logf("%s booted Debian from its disk after %s", name, time.Since(start).Round(time.Second))
	if !strings.Contains(l.b.out.String(), "serve iPXE script: local boot") {
		t.Errorf("%s: bootyd never served the local-boot script", name)
	}
	if !strings.Contains(l.console(), "BOOTY-PROOF") {
		t.Errorf("%s: no BOOTY-PROOF lines on the console", name)
	}
}

// deprovisioned sets online false, deprovisions the machine through the
// operator API and waits until it is available and powered off by the
// reconciler.
func (l *bmcLab) deprovisioned(t *testing.T, name string, start time.Time) {
	t.Helper()
	off := false
	l.b.op(t, "PATCH", "/v1/machines/"+name, api.UpdateRequest{Online: &off}, nil)
	waitFor(t, name+" to be powered off", 5*time.Minute, func() bool { return l.mach.State() == bmc.PowerOff })
	l.b.op(t, "POST", "/v1/machines/"+name+"/deprovision", nil, nil)
	waitFor(t, name+" to be deprovisioned", reconcileDeprovisionBound, func() bool {
		d := l.b.show(t, name)
		if d.Status == api.StatusError {
			t.Fatalf("%s deprovision failed: %+v\nconsole:\n%s", name, d.Error, l.console())
		}
		return d.State == api.MachineAvailable
	})
	waitFor(t, name+" to be powered off after deprovisioning", 5*time.Minute, func() bool { return l.mach.State() == bmc.PowerOff })
	t.Logf("%s deprovisioned and powered off after %s", name, time.Since(start).Round(time.Second))
	var ev api.EventList
	l.b.op(t, "GET", "/v1/machines/"+name+"/events", nil, &ev)
	var reasons []string
	for _, e := range ev.Events {
		reasons = append(reasons, e.Reason)
	}
	all := " " + strings.Join(reasons, " ") + " "
	for _, want := range []string{"Registered", "InspectionStarted", "AgentBootRequested", "InspectionDone", "ProvisioningStarted",
		"ProvisioningDone", "PowerOff", "Deprovision", "DeprovisioningDone"} {
		if !strings.Contains(all, " "+want+" ") {
			t.Errorf("%s: events %v lack %s", name, reasons, want)
		}
	}
	if strings.Contains(l.b.out.String(), fleetToken) {
		t.Error("bootyd's output holds the operator token")
	}
}

// TestReconcileIPMIMachine is issue 11's e2e (a): a UEFI QEMU machine
// behind the IPMI test BMC, registered by `bootyctl apply -f host.yaml`
// (its BMC, the Debian image and online: true). bootyd's reconciler powers it on
// with boot device PXE; it iPXE-boots the agent from bootyd, enrolls, is
// inspected and provisioned; the agent reboots it, bootyd's iPXE script
// for a provisioned machine exits and the firmware boots Debian from the
// disk (BOOTY-PROOF on its console). Then online: false powers it off,
// a deprovision boots the agent again through the BMC, and the machine
// ends available and powered off.
func TestReconcileIPMIMachine(t *testing.T) {
	t.Parallel()
	start := time.Now()
	l := newBMCLab(t, "52:54:00:e2:e0:0a")
	sim, err := bmcsim.NewIPMI(bmcsim.IPMIConfig{Machine: l.mach, Username: "admin", Password: "ipmi-e2e-pw",
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	l.apply(t, "bmc-ipmi", api.BMCRequest{Address: sim.Address(), Username: "admin", Password: "ipmi-e2e-pw"})
	l.provisioned(t, "bmc-ipmi", start, true)
	if boots := l.mach.Boots(); len(boots) == 0 || boots[0] != bmc.DevicePXE {
		t.Errorf("boots %v, want the first from PXE", boots)
	}
	l.deprovisioned(t, "bmc-ipmi", start)
}

// TestReconcileRedfishMachineRecovers is issue 11's e2e (b): the same
// machine behind the Redfish test BMC, whose first power action does not
// take (accepted, never applied): the machine goes to its error state
// with the reason; once the BMC works again the retry clears it, and the
// machine is provisioned, boots Debian from its disk, and is deprovisioned
// and powered off.
func TestReconcileRedfishMachineRecovers(t *testing.T) {
	t.Parallel()
	start := time.Now()
	l := newBMCLab(t, "52:54:00:e2:e0:0b")
	sim, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: l.mach, Username: "admin", Password: "redfish-e2e-pw",
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	sim.SetFaults(bmcsim.Faults{IgnorePower: true})
	l.register(t, "bmc-redfish", api.BMCRequest{Address: sim.Address(), Username: "admin", Password: "redfish-e2e-pw",
		DisableCertificateVerification: true})
	var failed api.MachineDetail
	waitFor(t, "the error state", 10*time.Minute, func() bool {
		failed = l.b.show(t, "bmc-redfish")
		return failed.Status == api.StatusError
	})
	if failed.Error == nil || !strings.Contains(failed.Error.Message, "did not take") || failed.Error.Count < 1 {
		t.Fatalf("error state %+v, want the power action that did not take as its reason", failed.Error)
	}
	t.Logf("error state after %s: %s: %s", time.Since(start).Round(time.Second), failed.Error.Type, failed.Error.Message)
	if l.mach.State() != bmc.PowerOff {
		t.Fatal("the ignored power on started the machine")
	}
	sim.SetFaults(bmcsim.Faults{})
	l.provisioned(t, "bmc-redfish", start, false)
	if d := l.b.show(t, "bmc-redfish"); d.Status != api.StatusOK || d.Error != nil && d.Error.Type != "" {
		t.Errorf("after the recovery: status %s error %+v, want OK", d.Status, d.Error)
	}
	l.deprovisioned(t, "bmc-redfish", start)
}
