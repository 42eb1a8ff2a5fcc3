package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/provider"
	"github.com/booty-dev/booty/pkg/server"
	"github.com/booty-dev/booty/test/vm"
)

// Defaults of MachineSpec.
const (
	DefaultMAC      = vm.DefaultMAC // 52:54:00:12:34:56
	DefaultDiskSize = 256 << 20
)

// ConsoleTailLines is how many console lines WaitOutcome's errors quote.
const ConsoleTailLines = 40

// reportGrace is how long WaitOutcome still listens for reports after QEMU
// exited without an outcome recorded.
const reportGrace = 2 * time.Second

// Errors of WaitOutcome, checked with errors.Is.
var (
	// ErrNoOutcome: QEMU exited before bootyd recorded an outcome.
	ErrNoOutcome = errors.New("vm exited before an outcome was reported")
	// ErrStillRunning: the outcome was recorded but QEMU did not exit
	// within the lab's ExitGrace; it was killed. The state is returned too.
	ErrStillRunning = errors.New("vm still running after the outcome")
	// ErrNotBooted: WaitOutcome was called before Boot.
	ErrNotBooted = errors.New("machine not booted")
)

// MachineSpec describes one machine of a lab. Only one of Config and
// ConfigTemplate is used; with neither, the machine gets Lab.DemoConfig.
type MachineSpec struct {
	// MAC of the machine's NIC, any spelling bootyd accepts; default
	// DefaultMAC. The config file is keyed by it.
	MAC string
	// Config is written as YAML after AddMachine fills in what it leaves
	// empty: apiVersion; server.token (Token, or a random one); server.url
	// (the lab's guest URL, which a token needs); an empty
	// image.url in provision mode becomes demo.img.zst; a relative
	// image.url or image.bmapUrl (no scheme) is resolved against the lab's
	// /files/. Config itself is not changed.
	Config *config.MachineConfig
	// ConfigTemplate is a text/template of the config file, rendered with
	// TemplateData and written as it comes out, unvalidated (to serve bad
	// configs). It must write server.token itself ({{.Token}}) for the
	// machine's reports to be accepted.
	ConfigTemplate string
	// Token is the machine's server.token; empty means Config's, or a
	// random one.
	Token string
	// DiskSize in bytes of the raw disk file (sparse); default
	// DefaultDiskSize.
	DiskSize int64
	// InitialDisk is a file copied to the start of the disk before boot,
	// e.g. demo.img to start from a disk holding a valid GPT.
	InitialDisk string
	// ExtraCmdline is appended to the kernel command line.
	ExtraCmdline string
	// Memory of the VM in MiB; default vm.DefaultMemory.
	Memory int
	// VMTimeout bounds the VM's life; default vm.DefaultTimeout.
	VMTimeout time.Duration
	// VMConfig, when set, may change the VM config before QEMU starts
	// (more disks, UEFI, ...).
	VMConfig func(*vm.Config)
}

// TemplateData is what a MachineSpec.ConfigTemplate is rendered with.
type TemplateData struct {
	MAC       string // lower case, colons
	Token     string
	ServerURL string // bootyd as the guest sees it, http://10.0.2.2:PORT
	FilesURL  string // ServerURL + "/files"
	ImageURL  string // FilesURL + "/demo.img.zst"
	// Checksum and ImageChecksum are "sha256:HEX" of demo.img.zst and
	// demo.img from SHA256SUMS, empty when it does not list them.
	Checksum      string
	ImageChecksum string
}

// Machine is one machine of a lab: its config file in the lab's configs
// dir and its disk. Its methods are safe for concurrent use.
type Machine struct {
	MAC        string // normalized: lower case, colons
	Token      string // server.token written to the config (secret: do not log)
	Dir        string // machines/<aa-bb-cc-dd-ee-ff> under the lab dir
	Disk       string // the raw disk file
	ConfigPath string // the config file bootyd serves
	ConsoleLog string // console log of Boot (BootT keeps it as a test artifact instead)

	lab  *Lab
	spec MachineSpec

	mu       sync.Mutex
	vm       *vm.VM
	guest    guest // vm, or a fake in tests
	bootedAt time.Time
}

// guest is what WaitOutcome needs of a running VM; *vm.VM has it.
type guest interface {
	Exited() <-chan struct{}
	Wait(ctx context.Context) error
	Kill() error
	Console() []string
}

// AddMachine renders the machine's config into the lab's configs dir
// (<aa-bb-cc-dd-ee-ff>.yaml) and creates its disk: a sparse raw file of
// DiskSize, starting with InitialDisk's bytes when set. It fails when the
// MAC is malformed, a machine with that MAC exists, the config cannot be
// rendered, or the disk cannot be made (InitialDisk larger than DiskSize).
func (l *Lab) AddMachine(spec MachineSpec) (*Machine, error) {
	if spec.MAC == "" {
		spec.MAC = DefaultMAC
	}
	mac, err := server.NormalizeMAC(spec.MAC)
	if err != nil {
		return nil, fmt.Errorf("add machine %q: %w", spec.MAC, err)
	}
	if spec.DiskSize <= 0 {
		spec.DiskSize = DefaultDiskSize
	}
	l.mu.Lock()
	for _, m := range l.machines {
		if m.MAC == mac {
			l.mu.Unlock()
			return nil, fmt.Errorf("add machine %s: already in the lab", mac)
		}
	}
	l.mu.Unlock()

	name := strings.ReplaceAll(mac, ":", "-")
	m := &Machine{
		MAC:        mac,
		Dir:        filepath.Join(l.dir, "machines", name),
		ConfigPath: filepath.Join(l.ConfigDir(), name+".yaml"),
		lab:        l,
		spec:       spec,
	}
	m.Disk = filepath.Join(m.Dir, "disk.raw")
	m.ConsoleLog = filepath.Join(m.Dir, "console.log")
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("add machine %s: %w", mac, err)
	}
	m.Token = spec.Token
	if m.Token == "" && spec.Config != nil {
		m.Token = spec.Config.Server.Token
	}
	if m.Token == "" {
		m.Token = randomToken()
	}
	data, err := l.renderConfig(m, spec)
	if err != nil {
		return nil, fmt.Errorf("add machine %s: %w", mac, err)
	}
	if err := os.WriteFile(m.ConfigPath, data, 0o600); err != nil {
		return nil, fmt.Errorf("add machine %s: write config: %w", mac, err)
	}
	if err := makeDisk(m.Disk, spec.DiskSize, spec.InitialDisk); err != nil {
		return nil, fmt.Errorf("add machine %s: %w", mac, err)
	}
	l.mu.Lock()
	l.machines = append(l.machines, m)
	l.mu.Unlock()
	l.log.Info("lab: machine added", "mac", mac, "config", m.ConfigPath, "disk", m.Disk, "disk_size", spec.DiskSize)
	return m, nil
}

// randomToken returns 32 random hex digits.
func randomToken() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// templateData returns what ConfigTemplate is rendered with for m.
func (l *Lab) templateData(m *Machine) TemplateData {
	d := TemplateData{
		MAC:       m.MAC,
		Token:     m.Token,
		ServerURL: l.GuestURL(),
		FilesURL:  l.GuestURL() + "/files",
		ImageURL:  l.FileURL(DemoImageZst),
	}
	d.Checksum, _ = l.Checksum(DemoImageZst)
	d.ImageChecksum, _ = l.Checksum(DemoImage)
	return d
}

// renderConfig returns the config file of m: the rendered template, or the
// completed MachineConfig as YAML.
func (l *Lab) renderConfig(m *Machine, spec MachineSpec) ([]byte, error) {
	if spec.ConfigTemplate != "" {
		tmpl, err := template.New(m.MAC).Option("missingkey=error").Parse(spec.ConfigTemplate)
		if err != nil {
			return nil, fmt.Errorf("parse config template: %w", err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, l.templateData(m)); err != nil {
			return nil, fmt.Errorf("render config template: %w", err)
		}
		return b.Bytes(), nil
	}
	c := spec.Config.Clone()
	if c == nil {
		var err error
		if c, err = l.DemoConfig(); err != nil {
			return nil, err
		}
	}
	if c.APIVersion == "" {
		c.APIVersion = config.APIVersion
	}
	c.Server.Token = m.Token
	if c.Server.URL == "" {
		c.Server.URL = l.GuestURL()
	}
	if c.Image.URL == "" && (c.Mode == "" || c.Mode == config.ModeProvision) {
		c.Image.URL = DemoImageZst
	}
	c.Image.URL = l.resolve(c.Image.URL)
	c.Image.BmapURL = l.resolve(c.Image.BmapURL)
	data, err := config.MarshalYAML(c)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// resolve returns u unchanged when empty or absolute (has a scheme), else
// the lab's files URL of u.
func (l *Lab) resolve(u string) string {
	if u == "" {
		return u
	}
	if p, err := url.Parse(u); err == nil && p.Scheme != "" {
		return u
	}
	return l.FileURL(u)
}

// makeDisk creates path as a sparse file of size bytes, starting with the
// contents of initial when set.
func makeDisk(path string, size int64, initial string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create disk: %w", err)
	}
	defer f.Close()
	if initial != "" {
		src, err := os.Open(initial)
		if err != nil {
			return fmt.Errorf("initial disk contents: %w", err)
		}
		defer src.Close()
		st, err := src.Stat()
		if err != nil {
			return fmt.Errorf("initial disk contents: %w", err)
		}
		if st.Size() > size {
			return fmt.Errorf("initial disk contents %s: %d bytes do not fit a disk of %d", initial, st.Size(), size)
		}
		if _, err := io.Copy(f, src); err != nil {
			return fmt.Errorf("copy %s to disk %s: %w", initial, path, err)
		}
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("size disk %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close disk %s: %w", path, err)
	}
	return nil
}

// Cmdline returns the kernel command line Boot passes:
// console=ttyS0,115200 booty.server=<guest url> booty.insecure-http=1
// panic=-1, then ExtraCmdline. The lab's bootyd serves plain HTTP, which
// the agent refuses without the opt-in.
func (m *Machine) Cmdline() string {
	s := "console=ttyS0,115200 " + provider.CmdlineServer + "=" + m.lab.GuestURL() + " " + InsecureHTTP + " panic=-1"
	if x := strings.TrimSpace(m.spec.ExtraCmdline); x != "" {
		s += " " + x
	}
	return s
}

// VMConfig returns the VM config Boot uses: kernel and initrd, Cmdline,
// the disk as the first virtio disk (/dev/vda, raw), user networking with
// the machine's MAC, -no-reboot (a guest reboot or poweroff ends QEMU),
// the console to the lab's Console writer and ConsoleLog, the lab's
// logger; then MachineSpec.VMConfig's changes.
func (m *Machine) VMConfig(kernel, initrd string) vm.Config {
	c := vm.Config{
		Kernel:     kernel,
		Initrd:     initrd,
		Append:     m.Cmdline(),
		Memory:     m.spec.Memory,
		Disks:      []vm.Disk{{Path: m.Disk, Format: "raw", Interface: vm.IfaceVirtio}},
		Net:        true,
		MAC:        m.MAC,
		Timeout:    m.spec.VMTimeout,
		Console:    m.lab.opts.Console,
		ConsoleLog: m.ConsoleLog,
		StateDir:   m.Dir,
		Logger:     m.lab.log.With("mac", m.MAC),
	}
	if m.spec.VMConfig != nil {
		m.spec.VMConfig(&c)
	}
	return c
}

// Boot starts the machine's VM (see VMConfig) and logs the command line
// that reproduces it. QEMU is killed when ctx ends, when its timeout is
// over, or by Lab.Close. It fails when the process is not in a network
// namespace of its own (vm.EnterNetNS), when a VM of this machine still
// runs, or when QEMU cannot start.
func (m *Machine) Boot(ctx context.Context, kernel, initrd string) (*vm.VM, error) {
	if err := m.canBoot(); err != nil {
		return nil, err
	}
	cfg := m.VMConfig(kernel, initrd)
	v, err := vm.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("boot machine %s: %w", m.MAC, err)
	}
	m.lab.log.Info("lab: machine booted; reproduce with the command line", "mac", m.MAC, "accel", v.Accel(), "qemu", v.CommandLine())
	m.booted(v)
	return v, nil
}

// BootT is Boot for a test through vm.StartT: the test log gets the
// command line and the console, the console log and qemu.sh are kept as
// artifacts (vm.ArtifactDir), a failure is fatal, and a cleanup kills QEMU.
// The lab's Console writer, logger and m.ConsoleLog are not used.
func (m *Machine) BootT(t testing.TB, kernel, initrd string) *vm.VM {
	t.Helper()
	if err := m.canBoot(); err != nil {
		t.Fatal(err)
	}
	cfg := m.VMConfig(kernel, initrd)
	cfg.Console, cfg.ConsoleLog, cfg.Logger, cfg.StateDir = nil, "", nil, ""
	v := vm.StartT(t, cfg)
	m.booted(v)
	return v
}

// canBoot fails outside a network namespace or while a VM of m runs.
func (m *Machine) canBoot() error {
	if !vm.InNetNS() {
		return fmt.Errorf("boot machine %s: not in a network namespace of our own: call vm.EnterNetNS first, so the guest reaches only the lab", m.MAC)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.guest != nil {
		select {
		case <-m.guest.Exited():
		default:
			return fmt.Errorf("boot machine %s: its previous VM still runs", m.MAC)
		}
	}
	return nil
}

func (m *Machine) booted(v *vm.VM) {
	m.mu.Lock()
	m.vm, m.guest, m.bootedAt = v, v, time.Now()
	m.mu.Unlock()
}

// VM returns the VM of the last Boot, nil before.
func (m *Machine) VM() *vm.VM {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vm
}

func (m *Machine) guestVM() guest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.guest
}

// State returns what bootyd recorded about the machine so far.
func (m *Machine) State() (api.MachineState, bool) { return m.lab.srv.Machine(m.MAC) }

// Terminal reports whether state ends a run: provisioned, deprovisioned or error.
func Terminal(state string) bool {
	switch state {
	case api.StateProvisioned, api.StateDeprovisioned, api.StateError:
		return true
	}
	return false
}

// WaitOutcome waits until bootyd recorded the outcome of the run the last
// Boot started (machine state provisioned, deprovisioned or error, updated
// after that Boot, so an earlier run's outcome does not count) and then
// until QEMU exited, and returns the recorded state. Once the outcome is
// known it waits at most the lab's ExitGrace for QEMU, then kills it and
// returns the state with ErrStillRunning. When QEMU exits with no outcome
// recorded it returns ErrNoOutcome; when ctx ends first, ctx's error. Both
// errors quote the last ConsoleTailLines console lines; QEMU is left
// running on ctx's end (Lab.Close or BootT's cleanup kill it).
func (m *Machine) WaitOutcome(ctx context.Context) (api.MachineState, error) {
	m.mu.Lock()
	g, since := m.guest, m.bootedAt
	m.mu.Unlock()
	if g == nil {
		return api.MachineState{}, fmt.Errorf("wait for outcome of machine %s: %w", m.MAC, ErrNotBooted)
	}
	done := func(s api.MachineState) bool { return Terminal(s.State) && !s.Updated.Before(since) }

	wctx, cancel := context.WithCancel(ctx)
	exitedFirst := make(chan struct{})
	go func() {
		select {
		case <-g.Exited():
			// Reports are answered before the agent powers off; the grace
			// only covers a report still being handled.
			select {
			case <-time.After(reportGrace):
				close(exitedFirst)
				cancel()
			case <-wctx.Done():
			}
		case <-wctx.Done():
		}
	}()
	st, err := m.lab.srv.WaitFor(wctx, m.MAC, done)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return st, fmt.Errorf("wait for outcome of machine %s (state %q%s): %w\n%s",
				m.MAC, st.State, lastStep(st), ctx.Err(), consoleTail(g, ConsoleTailLines))
		}
		<-exitedFirst
		return st, fmt.Errorf("wait for outcome of machine %s (state %q%s): %w: %s\n%s",
			m.MAC, st.State, lastStep(st), ErrNoOutcome, exitStatus(g), consoleTail(g, ConsoleTailLines))
	}
	select {
	case <-g.Exited():
		return st, nil
	case <-time.After(m.lab.opts.ExitGrace):
		kerr := g.Kill()
		return st, errors.Join(fmt.Errorf("machine %s reported %s: %w after %s, killed it\n%s",
			m.MAC, st.State, ErrStillRunning, m.lab.opts.ExitGrace, consoleTail(g, ConsoleTailLines)), kerr)
	case <-ctx.Done():
		return st, fmt.Errorf("machine %s reported %s, waiting for the vm to exit: %w\n%s",
			m.MAC, st.State, ctx.Err(), consoleTail(g, ConsoleTailLines))
	}
}

// lastStep renders ", last step NAME STATE" of st, or "".
func lastStep(st api.MachineState) string {
	if len(st.Steps) == 0 {
		return ""
	}
	r := st.Steps[len(st.Steps)-1]
	return fmt.Sprintf(", last step %s %s", r.Step, r.State)
}

// exitStatus describes how an exited guest ended.
func exitStatus(g guest) string {
	err := g.Wait(context.Background())
	if err == nil {
		return "qemu exit status 0"
	}
	first, _, _ := strings.Cut(err.Error(), "\n")
	return first
}

// consoleTail returns the last n console lines of g framed for an error.
func consoleTail(g guest, n int) string {
	lines := g.Console()
	start := max(0, len(lines)-n)
	var b strings.Builder
	fmt.Fprintf(&b, "--- last %d of %d console lines ---\n", len(lines)-start, len(lines))
	for _, l := range lines[start:] {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString("---")
	return b.String()
}
