package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors returned by Expect and Wait, checked with errors.Is.
var (
	// ErrTimeout: the VM outlived Config.Timeout and was killed.
	ErrTimeout = errors.New("vm lifetime timeout")
	// ErrExited: the VM exited before the awaited console line appeared.
	ErrExited = errors.New("vm exited")
	// ErrQEMUMissing: the QEMU binary was not found.
	ErrQEMUMissing = errors.New("qemu not found")
)

// tailLines is how many console lines an error message quotes.
const tailLines = 20

// VM is a running (or exited) QEMU process and its captured console.
// Its methods are safe for concurrent use.
type VM struct {
	cfg      Config
	args     []string
	accel    Accel
	varsPath string
	log      *slog.Logger

	cmd   *exec.Cmd
	stdin io.WriteCloser
	timer *time.Timer
	logf  *os.File

	mu       sync.Mutex
	lines    []string      // complete console lines, without line ends
	cursor   int           // Expect searches lines[cursor:]
	changed  chan struct{} // closed and replaced when lines or state change
	timedOut bool

	exited  chan struct{} // closed when QEMU has exited and output is drained
	exitErr error         // QEMU's exit status, valid once exited is closed
	stderr  []string      // QEMU's own stderr lines
	outMu   sync.Mutex    // serialises writes to Console and ConsoleLog
}

// Start checks cfg, picks the accelerator with ChooseAccel (logging which
// and why; the KVM probe runs once per process), prepares
// the UEFI variable store, and starts QEMU with the serial console on its
// stdout. It returns once QEMU runs; the console is read in the background.
// QEMU is killed when ctx is done or cfg.Timeout has passed. It fails, with
// nothing left running, when QEMU is missing (ErrQEMUMissing), a kernel,
// initrd, disk or firmware file does not exist, or the config is invalid
// (ErrBadConfig), or KVM was asked for and does not work (ErrKVMUnusable).
func Start(ctx context.Context, cfg Config) (*VM, error) {
	cfg = cfg.withDefaults()
	log := cfg.Logger
	qemu, err := exec.LookPath(cfg.QEMU)
	if err != nil {
		return nil, fmt.Errorf("start vm: %w: %s (install qemu-system-x86, see hack/deps.sh): %w", ErrQEMUMissing, cfg.QEMU, err)
	}
	cfg.QEMU = qemu
	if err := checkFiles(cfg); err != nil {
		return nil, fmt.Errorf("start vm: %w", err)
	}

	accel, err := ChooseAccel(ctx, cfg.QEMU, cfg.KVMDevice, cfg.Accel, log)
	if err != nil {
		return nil, fmt.Errorf("start vm: %w", err)
	}

	var varsPath string
	if cfg.UEFI {
		varsPath, err = prepareVars(cfg)
		if err != nil {
			return nil, fmt.Errorf("start vm: %w", err)
		}
	}
	args, err := cfg.args(accel, varsPath)
	if err != nil {
		return nil, fmt.Errorf("start vm: %w", err)
	}

	v := &VM{
		cfg:      cfg,
		args:     args,
		accel:    accel,
		varsPath: varsPath,
		log:      log,
		changed:  make(chan struct{}),
		exited:   make(chan struct{}),
	}
	if cfg.ConsoleLog != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.ConsoleLog), 0o755); err != nil {
			return nil, fmt.Errorf("start vm: create console log dir: %w", err)
		}
		v.logf, err = os.Create(cfg.ConsoleLog)
		if err != nil {
			return nil, fmt.Errorf("start vm: create console log: %w", err)
		}
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		v.closeLog()
		return nil, fmt.Errorf("start vm: console pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		v.closeLog()
		return nil, fmt.Errorf("start vm: stderr pipe: %w", err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout = outW
	cmd.Stderr = errW
	stdin, err := cmd.StdinPipe()
	if err == nil {
		// QEMU gets SIGKILL when the thread that started it dies, and runs
		// in its own process group so a terminal's ^C reaches only us.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		v.closeLog()
		return nil, fmt.Errorf("start vm: run %s: %w", qemu, err)
	}
	v.cmd = cmd
	v.stdin = stdin
	log.Info("vm: started", "pid", cmd.Process.Pid, "accel", accel, "cmdline", v.CommandLine())

	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); v.readConsole(outR) }()
	go func() { defer readers.Done(); v.readStderr(errR) }()

	v.timer = time.AfterFunc(cfg.Timeout, func() {
		v.mu.Lock()
		v.timedOut = true
		v.mu.Unlock()
		log.Error("vm: lifetime timeout, killing qemu", "timeout", cfg.Timeout)
		v.signal()
	})
	stop := context.AfterFunc(ctx, func() {
		log.Info("vm: context done, killing qemu", "err", ctx.Err())
		v.signal()
	})

	go func() {
		err := cmd.Wait()
		v.timer.Stop()
		stop()
		// QEMU is gone; give the readers a moment to drain the pipes, then
		// close them so nothing a stray child holds can block us.
		done := make(chan struct{})
		go func() { readers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			outR.Close()
			errR.Close()
			<-done
		}
		outR.Close()
		errR.Close()
		v.closeLog()
		v.mu.Lock()
		v.exitErr = err
		v.mu.Unlock()
		log.Info("vm: exited", "status", exitString(err))
		close(v.exited)
		v.notify()
	}()
	return v, nil
}

// checkFiles returns an error naming the first kernel, initrd, disk, blkdebug
// config or firmware file of cfg that does not exist.
func checkFiles(cfg Config) error {
	check := func(what, p string) error {
		if p == "" {
			return nil
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s %s: %w", what, p, err)
		}
		return nil
	}
	if err := check("kernel", cfg.Kernel); err != nil {
		return err
	}
	if err := check("initrd", cfg.Initrd); err != nil {
		return err
	}
	for i, d := range cfg.Disks {
		if err := check(fmt.Sprintf("disk %d", i), d.Path); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("disk %d blkdebug config", i), d.BlkDebugConfig); err != nil {
			return err
		}
	}
	if cfg.UEFI {
		if err := check("ovmf code (install ovmf)", cfg.OVMFCode); err != nil {
			return err
		}
	}
	return nil
}

// prepareVars returns the UEFI variable store for cfg: cfg.OVMFVars if it
// exists, else a fresh copy of the template at cfg.OVMFVars or, when that is
// empty, in cfg.StateDir (made under os.TempDir when empty).
func prepareVars(cfg Config) (string, error) {
	dst := cfg.OVMFVars
	if dst != "" {
		if _, err := os.Stat(dst); err == nil {
			return dst, nil
		}
	} else {
		dir := cfg.StateDir
		if dir == "" {
			d, err := os.MkdirTemp("", "booty-vm-")
			if err != nil {
				return "", fmt.Errorf("create vm state dir: %w", err)
			}
			dir = d
		}
		dst = filepath.Join(dir, "OVMF_VARS.fd")
	}
	tmpl, err := os.ReadFile(cfg.OVMFVarsTemplate)
	if err != nil {
		return "", fmt.Errorf("read ovmf vars template (install ovmf): %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("create dir of ovmf vars %s: %w", dst, err)
	}
	if err := os.WriteFile(dst, tmpl, 0o644); err != nil {
		return "", fmt.Errorf("write ovmf vars %s: %w", dst, err)
	}
	return dst, nil
}

// readConsole splits QEMU's stdout into lines, stores them for Expect and
// writes them to the Console writer and the console log.
func (v *VM) readConsole(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			clean := cleanLine(line)
			v.emit(clean + "\n")
			v.mu.Lock()
			v.lines = append(v.lines, clean)
			v.mu.Unlock()
			v.notify()
		}
		if err != nil {
			return
		}
	}
}

// ansiRE matches the terminal escape sequences firmware (OVMF, SeaBIOS)
// and guests write to a serial console: CSI sequences, charset selection,
// reset.
var ansiRE = regexp.MustCompile(`\x1b(\[[0-9;=?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>c])`)

// cleanLine returns a console line without its line end, escape sequences,
// carriage returns and other control characters but tabs.
func cleanLine(s string) string {
	s = ansiRE.ReplaceAllString(strings.TrimRight(s, "\r\n"), "")
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// readStderr keeps QEMU's stderr lines for error messages and writes them,
// prefixed "qemu: ", where the console goes.
func (v *VM) readStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		v.emit("qemu: " + line + "\n")
		v.mu.Lock()
		v.stderr = append(v.stderr, line)
		v.mu.Unlock()
	}
}

func (v *VM) emit(s string) {
	v.outMu.Lock()
	defer v.outMu.Unlock()
	if v.cfg.Console != nil {
		io.WriteString(v.cfg.Console, s)
	}
	if v.logf != nil {
		v.logf.WriteString(s)
	}
}

func (v *VM) closeLog() {
	v.outMu.Lock()
	defer v.outMu.Unlock()
	if v.logf != nil {
		v.logf.Close()
		v.logf = nil
	}
}

// notify wakes every waiter in Expect.
func (v *VM) notify() {
	v.mu.Lock()
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// signal kills the QEMU process group; it is a no-op once QEMU exited.
func (v *VM) signal() {
	select {
	case <-v.exited:
		return
	default:
	}
	if p := v.cmd.Process; p != nil {
		syscall.Kill(-p.Pid, syscall.SIGKILL)
		p.Kill()
	}
}

// CommandLine returns the QEMU command as one shell line that can be
// pasted into a terminal to reproduce the VM (the console then is the
// terminal).
func (v *VM) CommandLine() string { return shellQuote(v.args) }

// Args returns a copy of the QEMU command line, binary first.
func (v *VM) Args() []string { return append([]string(nil), v.args...) }

// Accel returns the accelerator the VM runs with (AccelKVM or AccelTCG).
func (v *VM) Accel() Accel { return v.accel }

// VarsPath returns the UEFI variable store the VM uses, "" without UEFI.
// Passing it as Config.OVMFVars to a later VM keeps the boot entries.
func (v *VM) VarsPath() string { return v.varsPath }

// Console returns every console line received so far, without line ends.
func (v *VM) Console() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}

// ConsoleText returns the console received so far as one string.
func (v *VM) ConsoleText() string {
	lines := v.Console()
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// Send writes s to the guest's serial console input.
func (v *VM) Send(s string) error {
	if _, err := io.WriteString(v.stdin, s); err != nil {
		return fmt.Errorf("send to vm console: %w", err)
	}
	return nil
}

// Expect waits for a console line matching re that arrived after the line
// of the previous successful Expect (each match consumes the console up to
// and including its line) and returns that line. Lines are matched one at a
// time, without their line end. It fails with ErrExited when QEMU exits
// first, ErrTimeout when the VM's lifetime ended, or ctx's error; each error
// quotes the last console lines.
func (v *VM) Expect(ctx context.Context, re *regexp.Regexp) (string, error) {
	m, err := v.ExpectSubmatch(ctx, re)
	if err != nil {
		return "", err
	}
	return m[0], nil
}

// ExpectString is Expect for a regexp that matches s literally.
func (v *VM) ExpectString(ctx context.Context, s string) (string, error) {
	return v.Expect(ctx, regexp.MustCompile(regexp.QuoteMeta(s)))
}

// ExpectSubmatch is Expect returning the whole matching line followed by
// re's submatches in that line.
func (v *VM) ExpectSubmatch(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	for {
		v.mu.Lock()
		for i := v.cursor; i < len(v.lines); i++ {
			if sm := re.FindStringSubmatch(v.lines[i]); sm != nil {
				v.cursor = i + 1
				line := v.lines[i]
				v.mu.Unlock()
				return append([]string{line}, sm[1:]...), nil
			}
		}
		v.cursor = len(v.lines)
		changed := v.changed
		v.mu.Unlock()

		select {
		case <-v.exited:
			// Output is drained once exited is closed; look once more.
			v.mu.Lock()
			more := v.cursor < len(v.lines)
			v.mu.Unlock()
			if more {
				continue
			}
			return nil, fmt.Errorf("expect %q on vm console: %w", re, v.exitError())
		case <-ctx.Done():
			return nil, fmt.Errorf("expect %q on vm console: %w\n%s", re, ctx.Err(), v.tail())
		case <-changed:
		}
	}
}

// Wait waits for QEMU to exit and returns nil when it exited with status 0
// (the guest powered off, or rebooted under -no-reboot). Otherwise it
// returns ErrTimeout when the lifetime ran out, or an error with QEMU's exit
// status and stderr; on ctx's end it returns ctx's error, leaving QEMU
// running. Errors quote the last console lines.
func (v *VM) Wait(ctx context.Context) error {
	select {
	case <-v.exited:
	case <-ctx.Done():
		return fmt.Errorf("wait for vm exit: %w\n%s", ctx.Err(), v.tail())
	}
	v.mu.Lock()
	err, timedOut := v.exitErr, v.timedOut
	v.mu.Unlock()
	if timedOut {
		return fmt.Errorf("wait for vm exit: %w after %s\n%s", ErrTimeout, v.cfg.Timeout, v.tail())
	}
	if err != nil {
		return fmt.Errorf("wait for vm exit: qemu %s%s\n%s", exitString(err), v.stderrText(), v.tail())
	}
	return nil
}

// Exited returns a channel closed once QEMU has exited.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// Kill kills QEMU, if it still runs, and waits (at most a minute) until it
// is gone and its console is drained. It is safe to call more than once.
func (v *VM) Kill() error {
	v.signal()
	select {
	case <-v.exited:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("kill vm pid %d: still running after a minute", v.cmd.Process.Pid)
	}
}

// exitError is the error Expect returns when QEMU is gone.
func (v *VM) exitError() error {
	v.mu.Lock()
	err, timedOut := v.exitErr, v.timedOut
	v.mu.Unlock()
	if timedOut {
		return fmt.Errorf("%w after %s\n%s", ErrTimeout, v.cfg.Timeout, v.tail())
	}
	return fmt.Errorf("%w: qemu %s%s\n%s", ErrExited, exitString(err), v.stderrText(), v.tail())
}

// tail returns the last console lines, for error messages.
func (v *VM) tail() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	start := max(0, len(v.lines)-tailLines)
	var b strings.Builder
	fmt.Fprintf(&b, "--- last %d of %d console lines ---\n", len(v.lines)-start, len(v.lines))
	for _, l := range v.lines[start:] {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString("---")
	return b.String()
}

func (v *VM) stderrText() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.stderr) == 0 {
		return ""
	}
	return ": " + strings.Join(v.stderr, "; ")
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
