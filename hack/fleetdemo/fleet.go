package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/booty-dev/booty/hack/internal/demoio"
	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/pkg/humanize"
	"github.com/booty-dev/booty/test/bmcvm"
	"github.com/booty-dev/booty/test/vm"
)

// Bounds of the demo's own waits.
const (
	readyTimeout   = 30 * time.Second // bootyd answering its API
	poolTimeout    = 2 * time.Minute  // the Provisioner loop registering the pool's machines
	applyTimeout   = 2 * time.Minute  // bootyctl apply
	stopTimeout    = 10 * time.Second // a child process after SIGINT/SIGTERM
	pollInterval   = 2 * time.Second  // machines and events
	requestTimeout = 10 * time.Second // each API request of the demo
)

// demoMachine is one QEMU machine of the demo behind its test BMC.
type demoMachine struct {
	name, mac, kind string
	vm              *bmcvm.Machine
	bmcAddress      string
	closeBMC        func() error
	console         *consoleWatch
	consoleLog      string
	events          []api.Event
	last            *api.Machine
}

// fleet runs the demo inside the network namespace and returns the exit
// status: 0 when both machines booted their installed OS.
func fleet(ctx context.Context, o options, stdout *os.File, stderr io.Writer) int {
	tty := term.IsTerminal(int(stdout.Fd()))
	out := &demoio.LockedWriter{W: stdout}
	p := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	fail := func(format string, args ...any) int {
		fmt.Fprintf(out, "fleetdemo: "+format+"\n", args...)
		return 1
	}
	start := time.Now()

	for _, f := range []*string{&o.bootyd, &o.bootyctl, &o.kernel, &o.initrd, &o.imageDir} {
		abs, err := filepath.Abs(*f)
		if err != nil {
			return fail("%v", err)
		}
		*f = abs
	}
	work := o.workDir
	if work == "" {
		d, err := os.MkdirTemp("", "booty-fleetdemo-")
		if err != nil {
			return fail("create work directory: %v", err)
		}
		work = d
		defer os.RemoveAll(d)
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return fail("create work directory: %v", err)
	}
	logf, err := os.Create(filepath.Join(work, "fleetdemo.log"))
	if err != nil {
		return fail("create log: %v", err)
	}
	defer logf.Close()
	log := slog.New(slog.NewTextHandler(&demoio.LockedWriter{W: logf}, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// What bootyd serves under /files.
	files := filepath.Join(work, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		return fail("create files directory: %v", err)
	}
	for _, c := range [][2]string{{o.kernel, "vmlinuz"}, {o.initrd, "initramfs.img"}, {filepath.Join(o.imageDir, imageZst), imageZst}} {
		if err := linkOrCopy(c[0], filepath.Join(files, c[1])); err != nil {
			return fail("%v", err)
		}
	}
	sums, err := readChecksums(filepath.Join(o.imageDir, checksumsFile), imageZst, imageRaw)
	if err != nil {
		return fail("%v", err)
	}
	tokenFile := filepath.Join(work, "operator.token")
	if err := writeSecret(tokenFile, randomHex(24)); err != nil {
		return fail("%v", err)
	}
	token, _ := os.ReadFile(tokenFile)
	client := &apiClient{base: fmt.Sprintf("http://127.0.0.1:%d", port), token: strings.TrimSpace(string(token))}
	publicURL := fmt.Sprintf("http://%s:%d", guestHost, port)

	// Piped, proof lines (and with --consoles every console line) go to
	// the output; on a terminal the watch table owns the screen.
	var consoleOut io.Writer
	if !tty {
		consoleOut = out
	}

	// The two machines and their BMCs.
	var machines []*demoMachine
	defer func() {
		for _, m := range machines {
			if err := m.closeBMC(); err != nil {
				log.Warn("close bmc", "machine", m.name, "err", err)
			}
			if err := m.vm.Close(); err != nil {
				log.Warn("close qemu machine", "machine", m.name, "err", err)
			}
		}
	}()
	var caFile string
	for i, kind := range []string{"ipmi", "redfish"} {
		m, ca, err := newDemoMachine(i+1, kind, work, publicURL, o, consoleOut, log)
		if err != nil {
			return fail("%v", err)
		}
		machines = append(machines, m)
		if ca != "" {
			caFile = ca
		}
	}

	// hosts.yaml, pool.yaml and the password files. The Redfish machine
	// comes from the demo's QEMU pool, an inventory bootyd's Provisioner
	// loop brings into the database; the IPMI one is registered by apply.
	var hosts []host
	for _, m := range machines {
		pw := m.name + ".password"
		if err := writeSecret(filepath.Join(work, pw), bmcPassword(m)); err != nil {
			return fail("%v", err)
		}
		img := api.ImageSpec{URL: publicURL + "/files/" + imageZst, Checksum: sums[0], Checksums: sums[1:], Format: "raw"}
		hosts = append(hosts, host{Name: m.name, MAC: m.mac, BMCAddress: m.bmcAddress, Username: bmcUser,
			PasswordFile: pw, Image: img, RootDevice: "/dev/vda", FromPool: m.kind == "redfish"})
	}
	hostsYAMLBytes, err := hostsYAML(hosts)
	if err != nil {
		return fail("%v", err)
	}
	hostsFile := filepath.Join(work, "hosts.yaml")
	if err := os.WriteFile(hostsFile, hostsYAMLBytes, 0o644); err != nil {
		return fail("write hosts.yaml: %v", err)
	}
	poolYAMLBytes, err := poolYAML(hosts)
	if err != nil {
		return fail("%v", err)
	}
	poolFile := filepath.Join(work, "pool.yaml")
	if err := os.WriteFile(poolFile, poolYAMLBytes, 0o644); err != nil {
		return fail("write pool.yaml: %v", err)
	}

	// bootyd.
	bootydLog := filepath.Join(work, "bootyd.log")
	args := []string{"--insecure-http", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--public-url", publicURL,
		"--files", files, "--state-dir", filepath.Join(work, "state"), "--operator-token-file", tokenFile,
		"--bmc-ca-cert", caFile,
		// The demo's QEMU pool: the Provisioner loop registers its machines
		// (a round each 5s instead of a minute).
		"--inventory", poolFile, "--provisioner-reconcile-rate", "5s,1",
		// The agent allows plain HTTP only when told, like bootyctl.
		"--ipxe-cmdline", "console=tty0 console=ttyS0,115200n8 booty.insecure-http=1",
		// A machine that powered itself off (the installed OS does, after its
		// proof) is powered on again within seconds, not bootyd's default
		// minute; a failed BMC or agent call is retried after 10s, not 1 min.
		"--reconcile-resync", "15s", "--reconcile-error-backoff", "10s", "--reconcile-error-backoff-max", "2m"}
	args = append(args, o.bootydArgs...)
	bootyd, err := startProcess(o.bootyd, args, bootydLog)
	if err != nil {
		return fail("%v", err)
	}
	defer func() {
		if err := bootyd.stop(); err != nil {
			log.Warn("stop bootyd", "err", err)
		}
	}()
	if err := client.waitReady(ctx, bootyd); err != nil {
		return fail("%v; bootyd's log ends:\n%s", err, tail(bootydLog, 20))
	}

	p("booty fleet demo: two QEMU machines, provisioned by bootyd's host reconciler through their BMCs")
	p("")
	p("  bootyd     %s (SQLite in %s, plain HTTP), guests reach it as %s; log %s", o.bootyd, filepath.Join(work, "state"), publicURL, bootydLog)
	for _, m := range machines {
		p("  %-9s  %s BMC %s, boot MAC %s, fresh %d GiB disk, console %s", m.name, m.kind, m.bmcAddress, m.mac, o.diskGiB, m.consoleLog)
	}
	p("  image      %s (%s)", filepath.Join(o.imageDir, imageZst), humanize.Bytes(demoio.FileSize(filepath.Join(o.imageDir, imageZst))))
	if o.workDir == "" {
		p("  work dir   %s (removed at exit; --work-dir keeps it)", work)
	} else {
		p("  work dir   %s", work)
	}
	p("")
	p("$ bootyd --inventory %s   (the QEMU pool: bootyd's Provisioner loop registers these)", poolFile)
	for _, l := range strings.Split(strings.TrimRight(string(poolYAMLBytes), "\n"), "\n") {
		p("    %s", l)
	}
	for _, h := range hosts {
		if !h.FromPool {
			continue
		}
		if err := client.waitMachine(ctx, h.Name, bootyd); err != nil {
			return fail("%v; bootyd's log ends:\n%s", err, tail(bootydLog, 20))
		}
		p("  %s registered from the pool", h.Name)
	}
	p("")
	p("$ bootyctl apply -f %s", hostsFile)
	for _, l := range strings.Split(strings.TrimRight(string(hostsYAMLBytes), "\n"), "\n") {
		p("    %s", l)
	}
	ctl := []string{"--server", client.base, "--insecure-http", "--token-file", tokenFile}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	applyOut, err := exec.CommandContext(actx, o.bootyctl, append([]string{"apply", "-f", hostsFile}, ctl...)...).CombinedOutput()
	cancel()
	for _, l := range strings.Split(strings.TrimRight(string(applyOut), "\n"), "\n") {
		p("  %s", l)
	}
	if err != nil {
		return fail("bootyctl apply: %v", err)
	}
	p("")
	p("$ bootyctl machines watch %s %s   (until both machines booted their installed OS; up to %s, Ctrl-C aborts)", machines[0].name, machines[1].name, o.timeout)

	// The watch: on a terminal it draws on our stdout; piped, its lines
	// are prefixed.
	watchArgs := append([]string{"machines", "watch", "--interval", o.interval.String(), machines[0].name, machines[1].name}, ctl...)
	watch := exec.Command(o.bootyctl, watchArgs...)
	var watchOut *prefixWriter
	if tty {
		watch.Stdout = stdout
	} else {
		watchOut = &prefixWriter{w: out, prefix: "watch  | "}
		watch.Stdout = watchOut
	}
	watch.Stderr = &prefixWriter{w: out, prefix: "watch  | "}
	watch.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := watch.Start(); err != nil {
		return fail("start bootyctl machines watch: %v", err)
	}
	watchDone := make(chan error, 1)
	go func() { watchDone <- watch.Wait() }()
	stopWatch := func() {
		select {
		case <-watchDone:
			return
		default:
		}
		watch.Process.Signal(os.Interrupt)
		t := time.NewTimer(stopTimeout)
		defer t.Stop()
		select {
		case <-watchDone:
		case <-t.C:
			watch.Process.Kill()
			<-watchDone
		}
	}

	// Wait for both proofs, polling bootyd for the states and events.
	wctx, wcancel := context.WithTimeout(ctx, o.timeout)
	defer wcancel()
	var eventsOut io.Writer
	if !tty {
		eventsOut = out
	}
	allDone := make(chan struct{})
	go func() {
		for _, m := range machines {
			select {
			case <-m.console.Done():
			case <-wctx.Done():
				return
			}
		}
		close(allDone)
	}()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var demoErr error
wait:
	for {
		for _, m := range machines {
			if err := client.refresh(wctx, m, eventsOut); err != nil && wctx.Err() == nil {
				log.Warn("poll bootyd", "machine", m.name, "err", err)
			}
		}
		if bootyd.exited() {
			demoErr = fmt.Errorf("bootyd exited: %v; its log ends:\n%s", bootyd.err(), tail(bootydLog, 20))
			break
		}
		select {
		case <-allDone:
			break wait
		case <-wctx.Done():
			break wait
		case <-tick.C:
		}
	}
	stopWatch()
	if tty {
		// watch drew the table; the summary follows below it.
		p("")
	}
	// A last look at the states, whatever ended the wait.
	fctx, fcancel := context.WithTimeout(context.Background(), requestTimeout)
	for _, m := range machines {
		if err := client.refresh(fctx, m, eventsOut); err != nil {
			log.Warn("poll bootyd", "machine", m.name, "err", err)
		}
	}
	fcancel()

	s := summary{Took: time.Since(start), Now: time.Now(), Timeout: o.timeout, Err: demoErr,
		Aborted: ctx.Err() != nil, TimedOut: ctx.Err() == nil && wctx.Err() != nil}
	for _, m := range machines {
		proof, dev := m.console.Proof()
		s.Machines = append(s.Machines, machineReport{Name: m.name, BMC: m.bmcAddress, MAC: m.mac, Machine: m.last,
			Events: m.events, Boots: m.vm.Boots(), Proof: proof, ProofBoot: dev, KexecProof: m.console.KexecProof(), Console: m.consoleLog})
	}
	p("")
	s.write(out)
	if o.workDir != "" {
		p("")
		p("The work directory %s keeps bootyd's state and log, hosts.yaml, the disks and the consoles.", work)
	}
	if !s.ok() {
		return 1
	}
	return 0
}

// bmcUser is the test BMCs' user name.
const bmcUser = "admin"

// bmcPassword is the test BMC password of m: not a secret (the demo's
// BMCs exist only in its network namespace), but kept out of hosts.yaml
// all the same, as a real one must be.
func bmcPassword(m *demoMachine) string { return m.kind + "-demo-" + m.name }

// newDemoMachine makes machine n (node-n) behind a test BMC of kind (ipmi
// or redfish): a QEMU machine with OVMF, a fresh sparse disk and its NIC
// on QEMU user networking, whose DHCP hands iPXE bootyd's chain script.
// For Redfish it also writes the BMC's CA certificate and returns its
// path, for bootyd's --bmc-ca-cert.
func newDemoMachine(n int, kind, work, publicURL string, o options, consoleOut io.Writer, log *slog.Logger) (*demoMachine, string, error) {
	name := fmt.Sprintf("node-%d", n)
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("machine %s: %w", name, err)
	}
	disk := filepath.Join(dir, "disk.img")
	if err := createSparse(disk, int64(o.diskGiB)<<30); err != nil {
		return nil, "", fmt.Errorf("machine %s: %w", name, err)
	}
	dm := &demoMachine{name: name, mac: fmt.Sprintf("52:54:00:de:00:%02x", n), kind: kind, consoleLog: filepath.Join(dir, "console.log")}
	mlog := log.With("machine", name)
	qm, err := bmcvm.New(vm.Config{
		UEFI:       true,
		OVMFVars:   filepath.Join(dir, "OVMF_VARS.fd"), // kept across power cycles: the agent's boot entry
		StateDir:   dir,
		Memory:     o.memoryMiB,
		Disks:      []vm.Disk{{Path: disk}},
		Net:        true,
		MAC:        dm.mac,
		NetOptions: "bootfile=" + publicURL + "/v1/boot.ipxe",
		Timeout:    o.timeout + 10*time.Minute, // a backstop; the demo ends it
		ConsoleLog: dm.consoleLog,
		Logger:     mlog,
	})
	if err != nil {
		return nil, "", fmt.Errorf("machine %s: %w", name, err)
	}
	qm.GracefulTimeout = 20 * time.Second
	dm.vm = qm
	dm.console = newConsoleWatch(name, consoleOut, o.consoles, func() bmc.Device {
		b := qm.Boots()
		if len(b) == 0 {
			return ""
		}
		return b[len(b)-1]
	})
	qm.Config.Console = dm.console
	var ca string
	switch kind {
	case "ipmi":
		s, err := bmcsim.NewIPMI(bmcsim.IPMIConfig{Machine: qm, Username: bmcUser, Password: bmcPassword(dm), Logger: mlog})
		if err != nil {
			qm.Close()
			return nil, "", fmt.Errorf("machine %s: %w", name, err)
		}
		dm.bmcAddress, dm.closeBMC = s.Address(), s.Close
	case "redfish":
		r, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: qm, Username: bmcUser, Password: bmcPassword(dm), Logger: mlog})
		if err != nil {
			qm.Close()
			return nil, "", fmt.Errorf("machine %s: %w", name, err)
		}
		dm.bmcAddress, dm.closeBMC = r.Address(), r.Close
		ca = filepath.Join(work, "redfish-ca.pem")
		if err := os.WriteFile(ca, r.CACertPEM(), 0o644); err != nil {
			r.Close()
			qm.Close()
			return nil, "", fmt.Errorf("machine %s: write the redfish bmc's ca: %w", name, err)
		}
	default:
		qm.Close()
		return nil, "", fmt.Errorf("machine %s: bmc kind %q, want ipmi or redfish", name, kind)
	}
	return dm, ca, nil
}

// apiClient is the demo's own small client of bootyd's operator API.
type apiClient struct {
	base, token string
	http        http.Client
}

// get fetches path into v. It fails naming the path on a transport
// error or a status other than 200.
func (c *apiClient) get(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return fmt.Errorf("get %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("get %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("get %s: decode: %w", path, err)
	}
	return nil
}

// waitReady waits until bootyd answers the operator API, bounded by
// readyTimeout; it fails early when bootyd exits.
func (c *apiClient) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		var l json.RawMessage
		if last = c.get(ctx, "/v1/machines", &l); last == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("bootyd exited before it answered: %v", p.err())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bootyd did not answer within %s: %w", readyTimeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitMachine waits until bootyd has the machine named name (the
// Provisioner loop brings the pool's machines in), bounded by poolTimeout;
// it fails early when bootyd exits.
func (c *apiClient) waitMachine(ctx context.Context, name string, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, poolTimeout)
	defer cancel()
	var last error
	for {
		var m api.Machine
		if last = c.get(ctx, "/v1/machines/"+url.PathEscape(name), &m); last == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("bootyd exited before it registered %s from the pool: %v", name, p.err())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bootyd did not register %s from the pool within %s: %w", name, poolTimeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// refresh fetches m's machine and its new events; each new event is
// printed to out when out is set.
func (c *apiClient) refresh(ctx context.Context, m *demoMachine, out io.Writer) error {
	var got api.Machine
	if err := c.get(ctx, "/v1/machines/"+url.PathEscape(m.name), &got); err != nil {
		return err
	}
	m.last = &got
	after := int64(0)
	if n := len(m.events); n > 0 {
		after = m.events[n-1].ID
	}
	var evs api.EventList
	if err := c.get(ctx, "/v1/machines/"+url.PathEscape(m.name)+"/events?after="+strconv.FormatInt(after, 10), &evs); err != nil {
		return err
	}
	for _, e := range evs.Events {
		if e.ID <= after {
			continue
		}
		m.events = append(m.events, e)
		if out != nil {
			fmt.Fprintf(out, "event  | %s %s %-6s %s: %s\n", e.Time.Local().Format("15:04:05"), e.Type, m.name, e.Reason, e.Message)
		}
	}
	return nil
}

// process is a child process the demo started, its output in a file.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	werr error
}

// startProcess starts bin with args, its stdout and stderr to logPath, in
// its own process group (a terminal's Ctrl-C reaches only the demo, which
// stops it) and killed should the demo die.
func startProcess(bin string, args []string, logPath string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	p := &process{name: filepath.Base(bin), cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.werr = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.werr == nil {
		return errors.New("exit status 0")
	}
	return p.werr
}

// stop sends SIGTERM and waits up to stopTimeout, then kills.
func (p *process) stop() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("stop %s: still running %s after SIGTERM, killed", p.name, stopTimeout)
	}
}

// linkOrCopy makes to a hard link of from, or a copy when they are on
// different file systems.
func linkOrCopy(from, to string) error {
	os.Remove(to)
	if err := os.Link(from, to); err == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	return nil
}

// createSparse creates an empty (sparse) file of size bytes.
func createSparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create disk: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("create disk %s: %w", path, err)
	}
	return f.Close()
}

// writeSecret writes s and a newline to path, readable by its owner only.
func writeSecret(path, s string) error {
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tail returns the last n lines of a file, indented, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// prefixWriter writes each whole line it is given with a prefix, keeping
// a partial last line until its end arrives.
type prefixWriter struct {
	w       io.Writer
	prefix  string
	mu      sync.Mutex
	partial string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := strings.Split(p.partial+string(b), "\n")
	p.partial = lines[len(lines)-1]
	var sb strings.Builder
	for _, l := range lines[:len(lines)-1] {
		sb.WriteString(p.prefix + strings.TrimRight(l, "\r") + "\n")
	}
	if sb.Len() > 0 {
		if _, err := io.WriteString(p.w, sb.String()); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
