package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/hack/internal/benchutil"
	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// stampedLine is one console line and when it reached the host.
type stampedLine struct {
	At   time.Time
	Text string
}

// stamper is a VM's Console writer that keeps every line with its arrival
// time (VM.emit writes whole lines, one per Write).
type stamper struct {
	mu    sync.Mutex
	lines []stampedLine
}

func (s *stamper) Write(b []byte) (int, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		s.lines = append(s.lines, stampedLine{At: now, Text: l})
	}
	return len(b), nil
}

// firstLineBound is how long a boot may stay silent: the kernel's first
// line comes within seconds even under TCG on a loaded machine.
const firstLineBound = time.Minute

// waitFirstLine waits until the guest wrote a console line (QEMU's own
// "qemu: " lines do not count). It fails when QEMU exited first, when
// bound passed, or when ctx ended; the error completes "the kernel ...".
func (s *stamper) waitFirstLine(ctx context.Context, exited <-chan struct{}, bound time.Duration) error {
	deadline := time.After(bound)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, l := range s.snapshot() {
			if !strings.HasPrefix(l.Text, "qemu: ") {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("printed nothing before QEMU exited")
		case <-deadline:
			return fmt.Errorf("printed nothing in %s", bound)
		case <-ctx.Done():
			return fmt.Errorf("printed nothing before the bench was stopped: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func (s *stamper) snapshot() []stampedLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stampedLine(nil), s.lines...)
}

// milestone says how a phase's end is found on the console.
type milestone struct {
	Name string
	// Kernel is a substring of a kernel (printk) line; Msg the msg= of an
	// agent (slog) line. The first line that matches counts.
	Kernel, Msg string
	// Info marks milestones shown for reference, outside the chain the
	// issue names.
	Info bool
	// Note says which line stands for the milestone and why.
	Note string
}

// milestones in boot order. The agent has no line of its own for "PID 1
// started" (its first line, "coldplug started", comes once the device scan
// is done) nor for "first image byte":
// the kernel's "Run /init" and the image writer's "writing image" stand in.
var milestones = []milestone{
	{Name: "kernel start", Note: "printk time 0"},
	{Name: "agent (PID 1) start", Kernel: "Run /init as init process", Note: `kernel: "Run /init as init process" (booty's first line, "coldplug started", comes after the Go runtime's start, the early mounts and the device scan)`},
	{Name: "first agent line", Msg: "*", Info: true, Note: "the agent's first console line"},
	{Name: "network drivers loaded", Msg: "network drivers loaded", Info: true, Note: `initsys: "network drivers loaded", the NIC drivers in (bringup returns; storage drivers still load)`},
	{Name: "modules loaded (coldplug done)", Msg: "coldplug done", Note: `initsys: "coldplug done", when the last driver load of the coldplug ended (the agent waits for it before it looks at disks)`},
	{Name: "network up", Msg: "network up", Note: `agent: "network up"`},
	{Name: "config loaded", Msg: "config loaded", Note: `agent: "config loaded"`},
	{Name: "first image byte", Msg: "writing image", Note: `image: "writing image", logged once the first bytes arrived and the format was detected (no first-byte line of its own)`},
	{Name: "image written", Msg: "image written", Info: true, Note: `image: "image written" (all bytes written, before the final verify and sync of the step)`},
	{Name: "handoff", Msg: "handoff", Note: `initsys: "handoff" (poweroff here)`},
}

// insecureHTTP is the kernel parameter that lets the agent use the lab's
// plain-HTTP bootyd.
const insecureHTTP = "booty.insecure-http"

var (
	kernelLine = regexp.MustCompile(`^\[\s*(\d+\.\d+)\] (.*)$`)
	agentLine  = regexp.MustCompile(`^time=(\S+) level=\S+ msg=("(?:[^"\\]|\\.)*"|\S+)`)
)

// bootRun is one boot's milestones, in seconds since kernel start; a
// milestone not seen is missing from the map and named in Missing.
type bootRun struct {
	Accel      string             `json:"accel"`
	Run        int                `json:"run"`
	QEMUToKern float64            `json:"qemu_to_kernel_s"` // QEMU start → kernel's printk zero
	Milestones map[string]float64 `json:"milestones_s"`
	ConsoleLog string             `json:"console_log"`
	Missing    []string           `json:"missing,omitempty"`
}

// analyse puts every milestone of one boot's console on the kernel's clock
// (see the package comment). It fails when the console has no kernel line
// with a printk time or no agent line.
func analyse(lines []stampedLine, qemuStart time.Time) (bootRun, error) {
	var k0 time.Time      // host time of the kernel's printk zero
	var off time.Duration // host time minus the guest's wall clock
	haveK, haveOff := false, false
	type agentAt struct {
		msg  string
		wall time.Time
	}
	var agent []agentAt
	kernelAt := map[string]time.Duration{}
	for _, l := range lines {
		if m := kernelLine.FindStringSubmatch(l.Text); m != nil {
			sec, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				continue
			}
			t := time.Duration(sec * float64(time.Second))
			if z := l.At.Add(-t); !haveK || z.Before(k0) {
				k0, haveK = z, true
			}
			for _, ms := range milestones {
				if _, seen := kernelAt[ms.Name]; ms.Kernel != "" && !seen && strings.Contains(m[2], ms.Kernel) {
					kernelAt[ms.Name] = t
				}
			}
			continue
		}
		if m := agentLine.FindStringSubmatch(l.Text); m != nil {
			wall, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				continue
			}
			if o := l.At.Sub(wall); !haveOff || o < off {
				off, haveOff = o, true
			}
			msg, err := strconv.Unquote(m[2])
			if err != nil {
				msg = m[2]
			}
			agent = append(agent, agentAt{msg: msg, wall: wall})
		}
	}
	if !haveK {
		return bootRun{}, fmt.Errorf("no kernel line with a printk time on the console (is printk.time=1 on the command line?)")
	}
	if !haveOff {
		return bootRun{}, fmt.Errorf("no agent log line on the console")
	}
	since := func(wall time.Time) float64 { return wall.Add(off).Sub(k0).Seconds() }
	r := bootRun{QEMUToKern: k0.Sub(qemuStart).Seconds(), Milestones: map[string]float64{}}
	for _, ms := range milestones {
		switch {
		case ms.Name == "kernel start":
			r.Milestones[ms.Name] = 0
		case ms.Kernel != "":
			if t, ok := kernelAt[ms.Name]; ok {
				r.Milestones[ms.Name] = t.Seconds()
			}
		case ms.Msg == "*":
			if len(agent) > 0 {
				r.Milestones[ms.Name] = since(agent[0].wall)
			}
		default:
			for _, a := range agent {
				if a.msg == ms.Msg {
					r.Milestones[ms.Name] = since(a.wall)
					break
				}
			}
		}
		if _, ok := r.Milestones[ms.Name]; !ok {
			r.Missing = append(r.Missing, ms.Name)
		}
	}
	return r, nil
}

// bench boots the demo --runs times under each usable accelerator and
// returns the report, with what was measured so far on error.
func bench(ctx context.Context, o options, stderr io.Writer) (*report, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	started := time.Now()
	rep := &report{Date: started.UTC().Format(time.RFC3339), Options: o, Kernel: describeFile(o.Kernel), Initrd: describeFile(o.Initrd)}
	consoleDir := filepath.Join(o.Out, "boot-console")
	if err := os.MkdirAll(consoleDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", consoleDir, err)
	}
	var accels []vm.Accel
	for _, a := range o.Accels {
		switch vm.Accel(a) {
		case vm.AccelTCG:
			accels = append(accels, vm.AccelTCG)
		case vm.AccelKVM:
			p := vm.ProbeKVMGuest(ctx, vm.DefaultQEMU, vm.DefaultKVMDevice, o.Kernel, vm.DefaultProbeTimeout)
			log.Info("KVM probe", "result", p.String(), "took", p.Took.Round(time.Millisecond))
			if !p.Works {
				rep.Skipped = append(rep.Skipped, "kvm: "+p.String())
				log.Warn("not measuring KVM", "probe", p.String())
				continue
			}
			accels = append(accels, vm.AccelKVM)
		}
	}
	lab, err := harness.NewLab(harness.LabOptions{
		FilesDir: o.ImageDir,
		Logger:   slog.New(benchutil.WarnOnly(log.Handler())),
	})
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	cfg, err := lab.DemoConfig()
	if err != nil {
		return nil, err
	}
	n := 0
accels:
	for _, accel := range accels {
		for i := 1; i <= o.Runs; i++ {
			n++
			st := &stamper{}
			m, err := lab.AddMachine(harness.MachineSpec{
				MAC:          fmt.Sprintf("52:54:00:b0:0b:%02x", n),
				Config:       cfg,
				ExtraCmdline: strings.TrimSpace("printk.time=1 " + o.Append),
				Memory:       o.Memory,
				VMTimeout:    o.Timeout,
				VMConfig: func(c *vm.Config) {
					c.Accel = accel
					c.Console = st
					// Agents since the plain-HTTP opt-in refuse the lab's
					// http:// bootyd without it; harnesses that add it
					// themselves are left alone.
					if !strings.Contains(c.Append, insecureHTTP) {
						c.Append += " " + insecureHTTP + "=1"
					}
				},
			})
			if err != nil {
				return rep.finish(started), err
			}
			qemuStart := time.Now()
			v, err := m.Boot(ctx, o.Kernel, o.Initrd)
			if err != nil {
				return rep.finish(started), err
			}
			if err := st.waitFirstLine(ctx, v.Exited(), firstLineBound); err != nil {
				v.Kill()
				logPath := filepath.Join(consoleDir, fmt.Sprintf("%s-%d.log", accel, i))
				writeConsole(logPath, st.snapshot(), qemuStart)
				if accel == vm.AccelKVM {
					// The probe's one-sector guest runs on hosts where a
					// real kernel hangs silently under KVM.
					msg := fmt.Sprintf("kvm: the probe guest ran, but the demo kernel %s (console: %s)", err, logPath)
					rep.Skipped = append(rep.Skipped, msg)
					log.Warn("not measuring KVM", "reason", msg)
					continue accels
				}
				return rep.finish(started), fmt.Errorf("%s run %d: the kernel %w (console: %s)", accel, i, err, logPath)
			}
			wctx, cancel := context.WithTimeout(ctx, o.Timeout)
			state, werr := m.WaitOutcome(wctx)
			cancel()
			v.Kill()
			logPath := filepath.Join(consoleDir, fmt.Sprintf("%s-%d.log", accel, i))
			lines := st.snapshot()
			writeConsole(logPath, lines, qemuStart)
			if werr != nil {
				return rep.finish(started), fmt.Errorf("%s run %d: %w (console: %s)", accel, i, werr, logPath)
			}
			if state.State != api.StateProvisioned {
				return rep.finish(started), fmt.Errorf("%s run %d: machine ended %q, not provisioned (console: %s)", accel, i, state.State, logPath)
			}
			if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
				return rep.finish(started), fmt.Errorf("%s run %d: %w", accel, i, err)
			}
			os.Remove(m.Disk)
			r, err := analyse(lines, qemuStart)
			if err != nil {
				return rep.finish(started), fmt.Errorf("%s run %d: %w (console: %s)", accel, i, err, logPath)
			}
			r.Accel, r.Run, r.ConsoleLog = string(accel), i, logPath
			rep.Runs = append(rep.Runs, r)
			log.Info("boot", "accel", accel, "run", fmt.Sprintf("%d/%d", i, o.Runs),
				"pid1_s", fmt.Sprintf("%.2f", r.Milestones["agent (PID 1) start"]),
				"first_byte_s", fmt.Sprintf("%.2f", r.Milestones["first image byte"]),
				"handoff_s", fmt.Sprintf("%.2f", r.Milestones["handoff"]), "missing", r.Missing)
		}
	}
	return rep.finish(started), nil
}

// writeConsole keeps a boot's console with each line's arrival time
// since QEMU started.
func writeConsole(path string, lines []stampedLine, qemuStart time.Time) {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%9.3f %s\n", l.At.Sub(qemuStart).Seconds(), l.Text)
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
}

// describeFile names a file with its size and modification time.
func describeFile(p string) string {
	fi, err := os.Stat(p)
	if err != nil {
		return p
	}
	return fmt.Sprintf("%s (%.1f MiB, %s)", p, float64(fi.Size())/(1<<20), fi.ModTime().UTC().Format(time.RFC3339))
}
