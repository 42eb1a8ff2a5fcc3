package initsys

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/initsys/kmod"
	"github.com/booty-dev/booty/pkg/redact"
)

// DefaultHostname is set when Options.Hostname is empty.
const DefaultHostname = "booty"

// ModulesLoadPath is where the initramfs builder writes the modules to load
// whether or not a device asks for them (filesystems, nls).
const ModulesLoadPath = "/etc/booty/modules-load"

// Syscalls are the kernel calls bringup and handoff make. Tests replace
// them to record what would happen; RealSyscalls returns the real ones.
type Syscalls struct {
	Mount         func(source, target, fstype string, flags uintptr, data string) error
	Unmount       func(target string, flags int) error
	Sethostname   func(name []byte) error
	Release       func() (string, error)
	Sync          func()
	KexecFileLoad func(kernelFd, initrdFd int, cmdline string, flags int) error
	Reboot        func(cmd int) error
	// Hold blocks forever; the default reaps orphans while it waits.
	Hold func()
	// InitModule loads one module file (see kmod.Loader.Init); nil keeps
	// the kmod default.
	InitModule func(path, params string) error
}

// RealSyscalls returns Syscalls that call the kernel.
func RealSyscalls() Syscalls {
	return Syscalls{
		Mount:         unix.Mount,
		Unmount:       unix.Unmount,
		Sethostname:   unix.Sethostname,
		Release:       kernelRelease,
		Sync:          unix.Sync,
		KexecFileLoad: unix.KexecFileLoad,
		Reboot:        unix.Reboot,
		Hold:          holdForever,
	}
}

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// Options configure Bringup. The zero value is what PID 1 uses.
type Options struct {
	// Root is prefixed to every path (mount targets, /proc, /sys, /dev,
	// /lib/modules). Default "/".
	Root string
	// Hostname set at bringup; default DefaultHostname.
	Hostname string
	// Mounts is the early mount table; nil means DefaultMounts().
	Mounts []Mount
	// Log, when nil, is a text logger on the consoles.
	Log *slog.Logger
	// NoColdplug skips module loading entirely.
	NoColdplug bool
	// ColdplugPasses bounds the scan-and-load rounds (default 6);
	// ColdplugSettle bounds the wait after a round for drivers that probe
	// asynchronously (default 300ms).
	ColdplugPasses int
	ColdplugSettle time.Duration
	// NoReaper leaves orphan reaping to the caller.
	NoReaper bool
	// Sys replaces the real syscalls (tests).
	Sys *Syscalls
}

// System is the state of a brought-up machine and the one place that hands
// it off.
type System struct {
	Root    string
	Cmdline Cmdline
	// Console receives the log; it is every console= device.
	Console  io.Writer
	Consoles *Consoles
	Log      *slog.Logger
	// Modules loads modules of the running kernel; nil when the initramfs
	// has none for it.
	Modules *kmod.Loader
	// LoadedModules are the modules loaded during bringup, in order.
	LoadedModules []string
	Reaper        *Reaper
	Sys           Syscalls
	// Mounts are the results of the mount table.
	Mounts []MountResult

	opts    Options
	mounted []string
}

// Bringup makes the initramfs a working system, in this order: mounts the
// early table (a failing fatal mount returns the error at once; best-effort
// ones are logged with their reason), reads the kernel command line, opens
// the consoles and the logger on them, sets the hostname, starts the
// reaper, loads the modules of /etc/booty/modules-load, coldplugs modules
// for present devices until no new module appears, then mounts the
// AfterModules entries. Module and best-effort failures are logged, not
// returned: a machine with a missing NIC driver can still report.
func Bringup(opts Options) (*System, error) {
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.Hostname == "" {
		opts.Hostname = DefaultHostname
	}
	if opts.Mounts == nil {
		opts.Mounts = DefaultMounts()
	}
	if opts.ColdplugPasses == 0 {
		opts.ColdplugPasses = 6
	}
	if opts.ColdplugSettle == 0 {
		opts.ColdplugSettle = 300 * time.Millisecond
	}
	s := &System{Root: opts.Root, opts: opts}
	if opts.Sys != nil {
		s.Sys = *opts.Sys
	} else {
		s.Sys = RealSyscalls()
	}

	for _, m := range opts.Mounts {
		if m.AfterModules {
			continue
		}
		r := s.mount(m)
		if r.Err != nil && m.Fatal {
			return nil, fmt.Errorf("bringup: %w (%s)", r.Err, m.Reason)
		}
	}

	if b, err := os.ReadFile(s.path("/proc/cmdline")); err == nil {
		s.Cmdline = ParseCmdline(string(b))
	}
	cons, cerr := OpenConsoles(s.path("/dev"), ConsoleNames(s.Cmdline))
	s.Consoles = cons
	if cons != nil {
		s.Console = cons
	} else {
		s.Console = os.Stderr
	}
	s.Log = opts.Log
	if s.Log == nil {
		s.Log = slog.New(redact.NewHandler(slog.NewTextHandler(s.Console, nil)))
	}
	s.Log = s.Log.With("component", "initsys")
	if cerr != nil {
		s.Log.Warn("open consoles", "err", cerr)
	}
	for _, r := range s.Mounts {
		s.logMount(r)
	}

	if err := s.Sys.Sethostname([]byte(opts.Hostname)); err != nil {
		s.Log.Warn("set hostname", "hostname", opts.Hostname, "err", err)
	}

	if !opts.NoReaper {
		s.Reaper = NewReaper(s.Log)
		s.Reaper.Start()
	}

	if !opts.NoColdplug {
		s.setModprobePath()
		s.loadModules()
	}

	for _, m := range opts.Mounts {
		if !m.AfterModules {
			continue
		}
		r := s.mount(m)
		s.logMount(r)
		if r.Err != nil && m.Fatal {
			return s, fmt.Errorf("bringup: %w (%s)", r.Err, m.Reason)
		}
	}
	s.Log.Info("bringup done", "consoles", s.consoleNames(), "modules", len(s.LoadedModules), "hostname", opts.Hostname)
	return s, nil
}

func (s *System) path(p string) string { return filepath.Join(s.Root, p) }

func (s *System) consoleNames() []string {
	if s.Consoles == nil {
		return nil
	}
	return s.Consoles.Names
}

func (s *System) mount(m Mount) MountResult {
	r := mountOne(s.Root, m, s.Sys.Mount)
	if r.Err == nil && !r.Skipped && !r.Already {
		s.mounted = append(s.mounted, filepath.Join(s.Root, m.Target))
	}
	s.Mounts = append(s.Mounts, r)
	return r
}

func (s *System) logMount(r MountResult) {
	switch {
	case r.Err != nil:
		s.Log.Warn("mount failed", "target", r.Mount.Target, "fatal", r.Mount.Fatal, "lost", r.Mount.Reason, "err", r.Err)
	case r.Skipped:
		s.Log.Debug("mount skipped", "target", r.Mount.Target, "missing", r.Mount.IfExists)
	default:
		s.Log.Debug("mounted", "target", r.Mount.Target, "fstype", r.Mount.FSType, "already", r.Already)
	}
}

// loadModules sets up s.Modules for the running kernel and loads the
// modules-load list and the coldplug set. Errors are logged.
func (s *System) loadModules() {
	rel, err := s.Sys.Release()
	if err != nil {
		s.Log.Warn("no module loading", "err", err)
		return
	}
	dir := s.path(filepath.Join("/lib/modules", rel))
	l, err := kmod.NewLoader(dir, s.Log)
	if err != nil {
		s.Log.Warn("no module loading", "kernel", rel, "err", err)
		return
	}
	l.ProcModules = s.path("/proc/modules")
	l.SysModule = s.path("/sys/module")
	if s.Sys.InitModule != nil {
		l.Init = s.Sys.InitModule
	}
	s.Modules = l
	names, err := ReadModulesLoad(s.path(ModulesLoadPath))
	if err != nil {
		s.Log.Warn("read modules-load list", "err", err)
	}
	if len(names) > 0 {
		loaded, err := l.Load(names...)
		s.LoadedModules = append(s.LoadedModules, loaded...)
		if err != nil {
			s.Log.Warn("load listed modules", "err", err)
		}
	}
	if _, err := s.Coldplug(); err != nil {
		s.Log.Warn("coldplug", "err", err)
	}
}

// Coldplug scans /sys for device modaliases and loads every module whose
// alias matches, repeating (up to Options.ColdplugPasses rounds) while a
// round loads something new, because a bus driver (virtio_pci, xhci)
// exposes devices that need further drivers. After a round it polls the
// devices of every bus: the next round starts as soon as new devices show
// up, and none is run when none showed up within ColdplugSettle (no fixed
// pause). It returns the modules loaded; module failures are logged and
// returned joined, the remaining modules are still loaded.
func (s *System) Coldplug() ([]string, error) {
	if s.Modules == nil {
		return nil, errors.New("coldplug: no module index for this kernel")
	}
	var all []string
	var errs []error
	passes := s.opts.ColdplugPasses
	if passes <= 0 {
		passes = 1
	}
	for pass := 1; pass <= passes; pass++ {
		devices := s.busDevices()
		aliases, err := ScanModaliases(s.path("/sys"))
		if err != nil {
			return all, fmt.Errorf("coldplug: %w", err)
		}
		want := map[string]bool{}
		var mods []string
		for _, a := range aliases {
			for _, m := range s.Modules.Index.MatchAlias(a) {
				if !want[m] && !s.Modules.Present(m) {
					want[m] = true
					mods = append(mods, m)
				}
			}
		}
		if len(mods) == 0 {
			break
		}
		loaded, err := s.Modules.Load(mods...)
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, loaded...)
		s.LoadedModules = append(s.LoadedModules, loaded...)
		s.Log.Info("coldplug pass", "pass", pass, "devices", len(aliases), "loaded", loaded)
		if len(loaded) == 0 {
			break
		}
		if pass < passes && !s.waitNewDevices(devices, s.opts.ColdplugSettle) {
			break
		}
	}
	return all, errors.Join(errs...)
}

// busDevices counts the devices of every bus (/sys/bus/*/devices): every
// device with a modalias is on one, so a new device changes the count.
func (s *System) busDevices() int {
	dirs, _ := filepath.Glob(s.path("/sys/bus/*/devices"))
	n := 0
	for _, d := range dirs {
		es, _ := os.ReadDir(d)
		n += len(es)
	}
	return n
}

// waitNewDevices polls busDevices every settlePoll until it differs from
// before (true: new devices, give drivers a poll more to publish their
// modaliases) or settle passes (false).
func (s *System) waitNewDevices(before int, settle time.Duration) bool {
	deadline := time.Now().Add(settle)
	for {
		if s.busDevices() != before {
			time.Sleep(settlePoll)
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(settlePoll)
	}
}

// settlePoll is how often waitNewDevices looks.
const settlePoll = 20 * time.Millisecond

// unmountDisks unmounts, newest first, every mounted filesystem whose
// source is a block device under /dev, so journals are clean before the
// kernel goes away; one that stays busy is remounted read-only. Failures
// are logged.
func (s *System) unmountDisks() {
	f, err := os.Open(s.path("/proc/self/mountinfo"))
	if err != nil {
		s.Log.Warn("read mountinfo", "err", err)
		return
	}
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root target options [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 2 || !strings.HasPrefix(qf[1], "/dev/") {
			continue
		}
		targets = append(targets, unescapeMountinfo(pf[4]))
	}
	f.Close()
	for i := len(targets) - 1; i >= 0; i-- {
		t := targets[i]
		if err := s.Sys.Unmount(t, 0); err != nil {
			rerr := s.Sys.Mount("", t, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
			s.Log.Warn("unmount before handoff", "target", t, "err", err, "remount_ro_err", rerr)
			continue
		}
		s.Log.Info("unmounted", "target", t)
	}
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
