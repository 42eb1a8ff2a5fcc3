//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// fleetToken is the operator token of the fleet test's bootyd.
const fleetToken = "fleet-e2e-operator-token-0123456789"

// bootydProc is out/bootyd run as a subprocess, so it can be killed -9.
type bootydProc struct {
	bin, port string
	args      []string
	out       *lockedBuffer
	cmd       *exec.Cmd
	done      chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs bootyd and waits (bounded) until it answers.
func (b *bootydProc) start(t *testing.T) {
	t.Helper()
	b.cmd = exec.Command(b.bin, b.args...)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start bootyd: %v", err)
	}
	b.done = make(chan error, 1)
	go func() { b.done <- b.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get("http://127.0.0.1:" + b.port + "/v1/boot.ipxe"); err == nil {
			resp.Body.Close()
			return
		}
		select {
		case err := <-b.done:
			t.Fatalf("bootyd exited at start: %v\n%s", err, b.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("bootyd does not answer after 30s\n%s", b.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill9 kills bootyd with SIGKILL: no shutdown, no flush.
func (b *bootydProc) kill9(t *testing.T) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 bootyd: %v", err)
	}
	<-b.done
}

// op calls the operator API of this bootyd (see operatorCall).
func (b *bootydProc) op(t *testing.T, method, path string, body, out any) {
	t.Helper()
	operatorCall(t, "http://127.0.0.1:"+b.port, fleetToken, method, path, body, out)
}

// show returns the machine as the operator API shows it.
func (b *bootydProc) show(t *testing.T, name string) api.MachineDetail {
	t.Helper()
	var d api.MachineDetail
	b.op(t, "GET", "/v1/machines/"+name, nil, &d)
	return d
}

// operatorCall calls bootyd's operator API at base with token, sending
// body (JSON, when not nil) and decoding the answer into out (when not
// nil); it fails the test on a non-2xx answer.
func operatorCall(t *testing.T, base, token, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}

// ctl runs the operator's CLI, out/bootyctl, against bootyd: the
// operator side of this test goes through it, as an operator's would.
type ctl struct {
	bin, server, tokenFile string
}

// bootyctlBin is $BOOTYCTL_BIN, else the bootyctl next to $BOOTY_BIN (make
// build puts out/booty, out/bootyd and out/bootyctl together), else one
// built from this checkout.
func bootyctlBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("BOOTYCTL_BIN"); bin != "" {
		return bin
	}
	if booty := os.Getenv("BOOTY_BIN"); booty != "" {
		bin := filepath.Join(filepath.Dir(booty), "bootyctl")
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	bin := filepath.Join(t.TempDir(), "bootyctl")
	build := exec.Command("go", "build", "-o", bin, "./cmd/bootyctl")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bootyctl: %v\n%s", err, out)
	}
	return bin
}

// run runs `bootyctl machines ARGS…` and returns its stdout; a failure
// (non-zero exit) fails the test with its stderr.
func (c ctl) run(t *testing.T, args ...string) []byte {
	t.Helper()
	args = append(append([]string{"machines"}, args...), "--server", c.server, "--insecure-http", "--token-file", c.tokenFile)
	cmd := exec.Command(c.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bootyctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// json runs `bootyctl machines ARGS… -o json` and decodes what it printed.
func (c ctl) json(t *testing.T, out any, args ...string) {
	t.Helper()
	b := c.run(t, append(args, "-o", "json")...)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("bootyctl %s -o json: %v: %s", strings.Join(args, " "), err, b)
	}
}

func (c ctl) show(t *testing.T, name string) api.MachineDetail {
	t.Helper()
	var d api.MachineDetail
	c.json(t, &d, "show", name)
	return d
}

// waitFor polls cond every second until it holds or the bound passes.
func waitFor(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(time.Second)
	}
}

// slowFiles serves files, slowly under /slow/ (so a write lasts long
// enough to kill bootyd during it).
func slowFiles(dir string) http.Handler {
	fs := http.FileServer(http.Dir(dir))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := strings.CutPrefix(r.URL.Path, "/slow/"); ok {
			f, err := os.Open(filepath.Join(dir, filepath.Base(p)))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			defer f.Close()
			st, _ := f.Stat()
			w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil {
						return
					}
					w.(http.Flusher).Flush()
					time.Sleep(100 * time.Millisecond) // about 320 KiB/s
				}
				if err != nil {
					return
				}
			}
		}
		fs.ServeHTTP(w, r)
	})
}

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestFleetEnrollInspectProvisionSurvivesKill: two QEMU machines boot the
// agent with only booty.server= (and booty.insecure-http=1); the operator
// side goes through the real bootyctl binary. Both enroll and are inspected
// (their disks appear in `bootyctl machines show`), are provisioned with
// `bootyctl machines provision` with different images and root device
// hints; bootyd (out of
// process, SQLite) is killed -9 during one machine's image write and
// restarted: the state, steps and logs are there, the agent's reports in
// between landed, and both machines end provisioned. One is then
// deprovisioned back to available (`bootyctl machines deprovision`).
func TestFleetEnrollInspectProvisionSurvivesKill(t *testing.T) {
	a := buildArtifacts(t)
	start := time.Now()
	bin := os.Getenv("BOOTYD_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "bootyd")
		build := exec.Command("go", "build", "-o", bin, "./cmd/bootyd")
		build.Dir = repoRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build bootyd: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "operator-tokens")
	if err := os.WriteFile(tokens, []byte(fleetToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := &http.Server{Handler: slowFiles(a.demo), ReadHeaderTimeout: 10 * time.Second}
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go files.Serve(fln)
	t.Cleanup(func() { files.Close() })
	filesURL := "http://" + harness.GuestHost + ":" + strconv.Itoa(fln.Addr().(*net.TCPAddr).Port)

	port := freePort(t)
	serverURL := "http://" + harness.GuestHost + ":" + port
	b := &bootydProc{bin: bin, port: port, out: &lockedBuffer{}, args: []string{"--insecure-http", "--listen", "127.0.0.1:" + port,
		"--state-dir", filepath.Join(dir, "state"), "--operator-token-file", tokens, "--public-url", serverURL}}
	b.start(t)
	c := ctl{bin: bootyctlBin(t), server: "http://127.0.0.1:" + port, tokenFile: tokens}
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			b.cmd.Process.Kill()
			<-b.done
		}
		t.Logf("bootyd output:\n%s", b.out.String())
	})

	type machine struct {
		mac   string
		disks []vm.Disk
		v     *vm.VM
		name  string
	}
	mk := func(mac string, sizes ...int64) *machine {
		m := &machine{mac: mac}
		for i, size := range sizes {
			p := filepath.Join(dir, fmt.Sprintf("%s-%d.raw", strings.ReplaceAll(mac, ":", ""), i))
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, size); err != nil {
				t.Fatal(err)
			}
			m.disks = append(m.disks, vm.Disk{Path: p, Format: "raw", Interface: vm.IfaceVirtio, Serial: fmt.Sprintf("SN-%s-%d", mac[len(mac)-2:], i)})
		}
		return m
	}
	boot := func(m *machine) {
		m.v = vm.StartT(t, vm.Config{Kernel: a.kernel, Initrd: a.initrd, Disks: m.disks, Net: true, MAC: m.mac, Timeout: 20 * time.Minute,
			Append: "console=ttyS0,115200 no_timer_check booty.server=" + serverURL + " " + harness.InsecureHTTP + " panic=-1"})
	}
	ma := mk("52:54:00:f1:ee:01", 256<<20)
	mb := mk("52:54:00:f1:ee:02", 128<<20, 256<<20)
	boot(ma)
	boot(mb)

	// Both enroll as discovered machines.
	waitFor(t, "both agents to enroll", 8*time.Minute, func() bool {
		var l api.MachineList
		c.json(t, &l, "list")
		live := 0
		for _, m := range l.Machines {
			if m.Agent != nil && m.Agent.Live {
				live++
			}
			switch m.BootMAC {
			case ma.mac:
				ma.name = m.Name
			case mb.mac:
				mb.name = m.Name
			}
		}
		return live == 2
	})
	t.Logf("both enrolled after %s", time.Since(start).Round(time.Second))

	// Inspection: their disks appear in `bootyctl machines show`, as JSON
	// and in the table an operator reads.
	for _, m := range []*machine{ma, mb} {
		c.run(t, "inspect", m.name)
	}
	for _, m := range []*machine{ma, mb} {
		waitFor(t, m.name+" to be inspected", 5*time.Minute, func() bool { return c.show(t, m.name).State == api.MachineAvailable })
		d := c.show(t, m.name)
		if d.Hardware == nil || len(d.Hardware.Storage) != len(m.disks) {
			t.Fatalf("%s: hardware %+v, want %d disks", m.name, d.Hardware, len(m.disks))
		}
		for i, s := range d.Hardware.Storage {
			if s.SerialNumber != m.disks[i].Serial {
				t.Errorf("%s: disk %s serial %q, want %q", m.name, s.Name, s.SerialNumber, m.disks[i].Serial)
			}
		}
		table := string(c.run(t, "show", m.name))
		for _, disk := range m.disks {
			if !strings.Contains(table, disk.Serial) {
				t.Errorf("%s: `bootyctl machines show` lacks disk %s:\n%s", m.name, disk.Serial, table)
			}
		}
	}
	t.Logf("both inspected after %s", time.Since(start).Round(time.Second))

	// Provision through bootyctl: A from the slow zst by device name, B the
	// gz by serial onto its second disk. Written as they are (no growth, no
	// EFI entry, nothing configured inside), so the disks compare with the
	// image.
	over := filepath.Join(dir, "overrides.json")
	if err := os.WriteFile(over, []byte(`{"handoff":"poweroff","efiBootEntry":false,"disk":{"rootPartitionSize":"keep"},"onFailure":{"action":"poweroff","delay":"5s"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := sha256Of(t, filepath.Join(a.demo, harness.DemoImage))
	c.run(t, "provision", ma.name, "--image", filesURL+"/slow/"+harness.DemoImageZst,
		"--checksum", sha256Of(t, filepath.Join(a.demo, harness.DemoImageZst)), "--extra-checksum", raw,
		"--root-device-name", "/dev/vda", "--config-overrides-file", over)
	c.run(t, "provision", mb.name, "--image", filesURL+"/"+harness.DemoImage+".gz",
		"--checksum", sha256Of(t, filepath.Join(a.demo, harness.DemoImage+".gz")), "--extra-checksum", raw,
		"--root-serial", mb.disks[1].Serial, "--config-overrides-file", over)
	for _, m := range []*machine{ma, mb} {
		if d := c.show(t, m.name); d.Spec.RootDeviceHints == nil || d.Spec.Image.URL == "" {
			t.Fatalf("%s: spec after bootyctl machines provision: %+v", m.name, d.Spec)
		}
	}
	if hA, hB := c.show(t, ma.name).Spec.RootDeviceHints, c.show(t, mb.name).Spec.RootDeviceHints; hA.DeviceName != "/dev/vda" || hB.SerialNumber != mb.disks[1].Serial {
		t.Fatalf("root device hints after bootyctl: A %+v, B %+v", hA, hB)
	}

	// Kill -9 bootyd while A writes its image; restart it.
	waitFor(t, ma.name+" to write", 5*time.Minute, func() bool {
		d := c.show(t, ma.name)
		return d.Progress != nil && d.Progress.BytesDone > 0
	})
	before := c.show(t, ma.name)
	b.kill9(t)
	t.Logf("bootyd killed -9 at %s of %s written, after %s", humanBytes(before.Progress.BytesDone), humanBytes(before.Progress.BytesTotal), time.Since(start).Round(time.Second))
	time.Sleep(3 * time.Second)
	b.start(t)
	after := c.show(t, ma.name)
	if after.State != api.MachineProvisioning || after.Install == nil || len(after.Install.Steps) < len(before.Install.Steps) ||
		after.Progress == nil || after.Progress.BytesDone < before.Progress.BytesDone {
		t.Fatalf("after the restart: %+v, install %+v; before: %+v", after.Machine, after.Install, before.Install)
	}

	for _, m := range []*machine{ma, mb} {
		waitFor(t, m.name+" to be provisioned", 10*time.Minute, func() bool {
			d := c.show(t, m.name)
			if d.Status == api.StatusError {
				t.Fatalf("%s failed: %+v\n%s", m.name, d.Error, m.v.ConsoleText())
			}
			return d.State == api.MachineProvisioned
		})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		err := m.v.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: VM after provisioning: %v", m.name, err)
		}
	}
	t.Logf("both provisioned after %s", time.Since(start).Round(time.Second))
	d := c.show(t, ma.name)
	var steps []string
	for _, s := range d.Install.Steps {
		steps = append(steps, s.Name+":"+s.Result)
		if s.Result != "succeeded" {
			t.Errorf("%s: step %s %s %s", ma.name, s.Name, s.Result, s.Error)
		}
	}
	if len(steps) < 3 || d.Install.Result != "succeeded" || d.Progress != nil && d.Progress.BytesDone < before.Progress.BytesDone {
		t.Errorf("%s: install %+v steps %v", ma.name, d.Install, steps)
	}
	// Reports the agent sent while bootyd was down landed: a step finished
	// after the kill, and log lines from after the restart.
	var logs api.LogList
	c.json(t, &logs, "logs", ma.name, "--limit", "1000")
	if len(logs.Lines) == 0 {
		t.Errorf("%s: no logs", ma.name)
	}
	for _, m := range []*machine{ma, mb} {
		if err := harness.DiskHoldsImage(m.disks[len(m.disks)-1].Path, filepath.Join(a.demo, harness.DemoImage)); err != nil {
			t.Errorf("%s: %v", m.name, err)
		}
	}
	if ok, _ := harness.FirstMiBZero(mb.disks[0].Path); !ok {
		t.Errorf("%s: the disk the hints did not pick was written", mb.name)
	}

	// Deprovision B: its agent boots again, enrolls, runs the command.
	c.run(t, "deprovision", mb.name)
	boot(mb)
	waitFor(t, mb.name+" to be deprovisioned", 8*time.Minute, func() bool {
		d := c.show(t, mb.name)
		if d.Status == api.StatusError {
			t.Fatalf("%s deprovision failed: %+v\n%s", mb.name, d.Error, mb.v.ConsoleText())
		}
		return d.State == api.MachineAvailable
	})
	t.Logf("deprovisioned after %s", time.Since(start).Round(time.Second))
	var ev api.EventList
	c.json(t, &ev, "events", mb.name)
	var reasons []string
	for _, e := range ev.Events {
		reasons = append(reasons, e.Reason)
	}
	for _, want := range []string{"Discovered", "Enrolled", "InspectionDone", "Provision", "ProvisioningDone", "Deprovision", "DeprovisioningDone"} {
		if !strings.Contains(" "+strings.Join(reasons, " ")+" ", " "+want+" ") {
			t.Errorf("%s: events %v lack %s", mb.name, reasons, want)
		}
	}
	if out := b.out.String(); strings.Contains(out, fleetToken) {
		t.Errorf("bootyd's output holds the operator token")
	}
}

func humanBytes(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
