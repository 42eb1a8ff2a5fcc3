package initsys

import (
	"bufio"
	"context"
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
	// Uevents opens the kernel's device events for coldplug; nil makes
	// coldplug scan /sys again after every module load instead.
	Uevents func() (deviceSource, error)
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
		Uevents:       openUevents,
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
	// ColdplugTimeout bounds the wait for all module loads of the
	// coldplug (default 2 minutes); NetworkDriversTimeout bounds how long
	// Bringup waits for the network drivers (default 1 minute).
	ColdplugTimeout       time.Duration
	NetworkDriversTimeout time.Duration
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
	Reaper  *Reaper
	Sys     Syscalls
	// Mounts are the results of the mount table.
	Mounts []MountResult

	opts     Options
	mounted  []string
	coldplug *coldplugger
}

// Bringup makes the initramfs a working system, in this order: mounts the
// early table (a failing fatal mount returns the error at once; best-effort
// ones are logged with their reason), reads the kernel command line, opens
// the consoles and the logger on them, sets the hostname, starts the
// reaper, starts the coldplug in the background (the modules of
// /etc/booty/modules-load and the drivers of the present devices, in
// parallel; see startColdplug), waits (bounded) until the network drivers
// are loaded, then mounts the AfterModules entries. The storage and other
// drivers go on loading: WaitColdplug waits for them, and whatever looks
// at disks must call it first. Module and best-effort failures are logged,
// not returned: a machine with a missing NIC driver can still report.
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
	if opts.ColdplugTimeout == 0 {
		opts.ColdplugTimeout = 2 * time.Minute
	}
	if opts.NetworkDriversTimeout == 0 {
		opts.NetworkDriversTimeout = time.Minute
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
		s.startColdplug()
		ctx, cancel := context.WithTimeout(context.Background(), opts.NetworkDriversTimeout)
		if err := s.WaitNetworkDrivers(ctx); err != nil {
			s.Log.Warn("network drivers still loading; going on", "bound", opts.NetworkDriversTimeout)
		}
		cancel()
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
	s.Log.Info("bringup done", "consoles", s.consoleNames(), "hostname", opts.Hostname)
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

// startColdplug sets up s.Modules for the running kernel and starts, in
// the background, the loading of the modules-load list and of the drivers
// of the present devices (ScanDevices): every module whose alias matches
// a device's modalias, several at a time, each after its dependencies.
// After each load it reads the kernel's device events (Syscalls.Uevents),
// which hold every device the driver created while it probed, and loads
// their drivers too (virtio_pci exposes the virtio devices that need
// virtio_net and virtio_blk): no rounds, no settle pauses. Without the
// event socket it scans /sys again after each load. Once all loads ended
// it keeps loading drivers for devices that come later (USB) until the
// handoff. Errors are logged.
func (s *System) startColdplug() {
	c := newColdplugger()
	c.log = s.Log
	c.timeout = s.opts.ColdplugTimeout
	s.coldplug = c
	rel, err := s.Sys.Release()
	if err != nil {
		s.Log.Warn("no module loading", "err", err)
		c.markSettled(time.Now())
		close(c.finished)
		return
	}
	dir := s.path(filepath.Join("/lib/modules", rel))
	l, err := kmod.NewLoader(dir, s.Log)
	if err != nil {
		s.Log.Warn("no module loading", "kernel", rel, "err", err)
		c.markSettled(time.Now())
		close(c.finished)
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
	c.listed = names
	c.scan = func() ([]Device, error) { return ScanDevices(s.path("/sys")) }
	c.match = l.Index.MatchAlias
	c.present = l.Present
	c.load = func(m string) ([]string, error) { return l.Load(m) }
	c.loadDeps = func(m string) ([]string, error) { return l.LoadDeps(m) }
	if s.Sys.Uevents != nil {
		src, err := s.Sys.Uevents()
		if err != nil {
			s.Log.Warn("no device events; coldplug scans /sys after every load", "err", err)
		} else {
			c.src = src
		}
	}
	go c.run()
}

// WaitNetworkDrivers waits until no driver load for a network controller
// (or a device below one, like virtio_pci's virtio device) is in flight:
// then every network interface the coldplug can bring is there. It
// returns at once without coldplug, and ctx's error when ctx ends first.
func (s *System) WaitNetworkDrivers(ctx context.Context) error {
	if s.coldplug == nil {
		return nil
	}
	return wait(ctx, s.coldplug.netReady)
}

// WaitColdplug waits until every module load of the coldplug ended (or
// its bound passed): then every disk the drivers can find is there. It
// returns at once without coldplug, and ctx's error when ctx ends first.
func (s *System) WaitColdplug(ctx context.Context) error {
	if s.coldplug == nil {
		return nil
	}
	return wait(ctx, s.coldplug.settled)
}

// LoadedModules returns the modules the coldplug loaded so far, in the
// order their loads ended, and the load failures joined.
func (s *System) LoadedModules() ([]string, error) {
	if s.coldplug == nil {
		return nil, nil
	}
	return s.coldplug.Loaded()
}

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
