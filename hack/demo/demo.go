package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/booty-dev/booty/hack/internal/demoio"
	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/humanize"
	"github.com/booty-dev/booty/test/harness"
)

// demo runs the scenario inside the network namespace and returns the exit
// status: 0 when the machine was provisioned and its disk holds the image.
func demo(ctx context.Context, o options, stdout, stderr io.Writer) int {
	out := &demoio.LockedWriter{W: stdout}
	p := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	fail := func(format string, args ...any) int {
		fmt.Fprintf(out, "demo: "+format+"\n", args...)
		return 1
	}

	var console io.Writer
	bootyd := io.Writer(&prefixWriter{w: out, prefix: "bootyd | "})
	if !o.quietConsole {
		console = &prefixWriter{w: out, prefix: "console| "}
		// The agent's log lines that bootyd relays repeat the console.
		bootyd = &dropWriter{w: bootyd, re: agentLogLine}
	}
	lab, err := harness.NewLab(harness.LabOptions{
		FilesDir: o.imageDir,
		Dir:      o.workDir,
		Output:   bootyd,
		Console:  console,
		Logger:   slog.New(&warnHandler{w: &demoio.LockedWriter{W: stderr}}),
	})
	if err != nil {
		return fail("%v", err)
	}
	defer func() {
		if err := lab.Close(); err != nil {
			p("demo: %v", err)
		}
	}()
	cfg, err := lab.DemoConfig()
	if err != nil {
		return fail("%v", err)
	}
	m, err := lab.AddMachine(harness.MachineSpec{
		MAC:          o.mac,
		Config:       cfg,
		DiskSize:     int64(o.diskMiB) << 20,
		ExtraCmdline: o.appendArgs,
		Memory:       o.memoryMiB,
		VMTimeout:    o.timeout + 2*time.Minute, // a backstop; WaitOutcome decides
	})
	if err != nil {
		return fail("%v", err)
	}
	image := lab.FilePath(harness.DemoImage)
	imageSize := demoio.FileSize(image)

	p("booty demo: provision one QEMU machine from an in-process bootyd")
	p("")
	p("  kernel    %s", o.kernel)
	p("  initrd    %s (%s)", o.initrd, humanize.Bytes(demoio.FileSize(o.initrd)))
	p("  image     %s (%s), %s raw", lab.FilePath(harness.DemoImageZst), humanize.Bytes(demoio.FileSize(lab.FilePath(harness.DemoImageZst))), humanize.Bytes(imageSize))
	p("  bootyd    %s, which the guest reaches as %s", lab.HostURL(), lab.GuestURL())
	p("  machine   %s with a %s disk %s", m.MAC, humanize.Bytes(int64(o.diskMiB)<<20), m.Disk)
	if o.workDir == "" {
		p("            (a temporary lab, removed at exit; --work-dir keeps it)")
	}
	p("  config    what bootyd serves to %s (token redacted):", m.MAC)
	for _, l := range strings.Split(strings.TrimRight(redactedConfig(m.ConfigPath), "\n"), "\n") {
		p("              %s", l)
	}

	start := time.Now()
	v, err := m.Boot(ctx, o.kernel, o.initrd)
	if err != nil {
		return fail("%v", err)
	}
	p("  qemu      %s, reproduce with:", v.Accel())
	p("              %s", v.CommandLine())
	p("  waiting   up to %s for the outcome (Ctrl-C aborts)", o.timeout)
	if !o.quietConsole {
		p("")
	}

	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	st, werr := m.WaitOutcome(wctx)
	cancel()
	took := time.Since(start)
	v.Kill() // the disk is read next; nothing may still write to it

	s := summary{
		state:     st,
		waitErr:   werr,
		timedOut:  errors.Is(werr, context.DeadlineExceeded),
		aborted:   ctx.Err() != nil,
		timeout:   o.timeout,
		took:      took,
		imageName: harness.DemoImage,
		imageSize: imageSize,
		disk:      m.Disk,
	}
	if st, ok := m.State(); ok && werr != nil {
		s.state = st // the freshest record, for the steps reached so far
	}
	s.diskErr = harness.DiskHoldsImage(m.Disk, image)
	if s.diskErr != nil {
		s.gptErr = harness.CheckGPT(m.Disk)
		s.zero, _ = harness.FirstMiBZero(m.Disk)
	}
	p("")
	s.write(out)
	if o.workDir != "" {
		p("")
		p("The lab is kept in %s (disk, console.log, configs, state).", o.workDir)
	}
	if !s.ok() {
		return 1
	}
	return 0
}

// summary is everything the final report says.
type summary struct {
	state     api.MachineState
	waitErr   error
	timedOut  bool
	aborted   bool
	timeout   time.Duration
	took      time.Duration
	imageName string
	imageSize int64
	disk      string
	diskErr   error // from DiskHoldsImage
	gptErr    error // from CheckGPT, when the disk does not hold the image
	zero      bool  // first MiB zero, when the disk does not hold the image
}

// ok reports whether the demo succeeded: provisioned, QEMU exited by
// itself, and the disk holds exactly the image.
func (s summary) ok() bool {
	return s.waitErr == nil && s.state.State == api.StateProvisioned && s.diskErr == nil
}

// write prints the summary: outcome, steps, bytes written, disk check,
// result; on failure the wait error with its console tail.
func (s summary) write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("summary")
	p("  outcome   %s", s.outcome())
	steps := collapseSteps(s.state.Steps)
	if len(steps) == 0 {
		p("  steps     none reported")
	}
	width := 0
	for _, st := range steps {
		width = max(width, len(st.label))
	}
	for i, st := range steps {
		head := "  steps    "
		if i > 0 {
			head = "           "
		}
		p("%s", strings.TrimRight(fmt.Sprintf("%s %-*s  %-10s %8s", head, width, st.label, st.state, st.duration), " "))
	}
	if n, fromStep := bytesWritten(s.state); fromStep {
		p("  written   %s (%d bytes)", humanize.Bytes(n), n)
	} else if n > 0 {
		p("  written   %s by the last progress report", humanize.Bytes(n))
	} else {
		p("  written   unknown: no step reported bytes written")
	}
	var mm *harness.MismatchError
	switch {
	case s.diskErr == nil:
		p("  disk      holds exactly %s (%s compared byte by byte)", s.imageName, humanize.Bytes(s.imageSize))
	case errors.As(s.diskErr, &mm):
		p("  disk      does NOT hold %s: first difference at offset %d (0x%x)", s.imageName, mm.Offset, mm.Offset)
		s.writeDiskState(p)
	default:
		p("  disk      could not be compared with %s: %v", s.imageName, s.diskErr)
		s.writeDiskState(p)
	}
	if s.ok() {
		p("  result    OK")
		return
	}
	p("  result    FAILED")
	if s.waitErr != nil {
		p("")
		p("%s", s.waitErr)
	}
}

func (s summary) writeDiskState(p func(string, ...any)) {
	gpt := "valid GPT"
	if s.gptErr != nil {
		gpt = "no valid GPT (" + strings.TrimPrefix(s.gptErr.Error(), "check gpt of "+s.disk+": ") + ")"
	}
	zero := "first MiB is not zero"
	if s.zero {
		zero = "first MiB is zero"
	}
	p("            %s; %s", gpt, zero)
}

// outcome is the one-line verdict of the run.
func (s summary) outcome() string {
	took := humanize.Duration(s.took)
	switch {
	case s.aborted:
		return fmt.Sprintf("ABORTED after %s; %s", took, lastHeard(s.state))
	case s.timedOut:
		return fmt.Sprintf("TIMEOUT: no outcome within %s; %s", s.timeout, lastHeard(s.state))
	case errors.Is(s.waitErr, harness.ErrNoOutcome):
		return fmt.Sprintf("NO OUTCOME: the machine stopped after %s without reporting one; %s", took, lastHeard(s.state))
	}
	verdict := strings.ToUpper(orNone(s.state.State)) + " after " + took
	if s.state.State == api.StateError {
		if step, msg := failure(s.state); step != "" {
			verdict += " in step " + step + ": " + msg
		} else if msg != "" {
			verdict += ": " + msg
		}
	}
	if errors.Is(s.waitErr, harness.ErrStillRunning) {
		verdict += "; the machine did not power off and was killed"
	}
	return verdict
}

// lastHeard says what bootyd last recorded of a run without an outcome.
func lastHeard(m api.MachineState) string {
	if m.State == "" {
		return "bootyd heard nothing from the machine"
	}
	if n := len(m.Steps); n > 0 {
		r := m.Steps[n-1]
		return fmt.Sprintf("last report: step %s %s", r.Step, r.State)
	}
	return fmt.Sprintf("last state %q", m.State)
}

func orNone(s string) string {
	if s == "" {
		return "nothing reported"
	}
	return s
}

// failure returns the last failed step and the error of the run.
func failure(m api.MachineState) (step, msg string) {
	for i := len(m.Steps) - 1; i >= 0; i-- {
		r := m.Steps[i]
		if r.Step == api.StepMachine && r.State == api.StateError && msg == "" {
			msg = r.Error
		}
		if r.Step != api.StepMachine && r.State == api.StateFailed {
			if r.Error != "" {
				msg = r.Error
			}
			return r.Step, msg
		}
	}
	return "", msg
}

// stepLine is one step of the summary.
type stepLine struct {
	label, state, duration string
}

// collapseSteps turns the reports into one line per step, in the order
// the steps started: the last report of each step decides its state.
func collapseSteps(reports []api.StatusReport) []stepLine {
	var order []string
	last := map[string]api.StatusReport{}
	for _, r := range reports {
		if r.Step == api.StepMachine {
			continue
		}
		if _, seen := last[r.Step]; !seen {
			order = append(order, r.Step)
		}
		last[r.Step] = r
	}
	out := make([]stepLine, 0, len(order))
	for _, name := range order {
		r := last[name]
		l := stepLine{label: name, state: r.State}
		if r.Index > 0 && r.Total > 0 {
			l.label = fmt.Sprintf("%d/%d %s", r.Index, r.Total, name)
		}
		switch r.State {
		case api.StateStarted:
			l.state = "unfinished"
		case api.StateSucceeded, api.StateFailed:
			l.duration = humanize.Duration(time.Duration(r.DurationMS) * time.Millisecond)
		}
		out = append(out, l)
	}
	return out
}

// bytesWritten returns the "bytes" detail a step reported (the image
// write does once it verified the image) and true, else the bytes of the
// run's last progress report (0 without one) and false.
func bytesWritten(m api.MachineState) (n int64, fromStep bool) {
	for i := len(m.Steps) - 1; i >= 0; i-- {
		if v, ok := m.Steps[i].Detail["bytes"]; ok {
			if b, err := strconv.ParseInt(v, 10, 64); err == nil {
				return b, true
			}
		}
	}
	if m.Progress != nil {
		return m.Progress.BytesDone, false
	}
	return 0, false
}

// redactedConfig returns the config file as YAML with its secrets
// replaced, or a note when it does not parse.
func redactedConfig(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	c, err := config.Parse(data)
	if err != nil {
		return "(does not parse: " + err.Error() + ")"
	}
	y, err := config.MarshalYAML(c.Redacted())
	if err != nil {
		return err.Error()
	}
	return string(y)
}

// prefixWriter writes every line it is given with a prefix; a trailing
// partial line is completed with a newline.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var sb strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		sb.WriteString(p.prefix)
		sb.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			sb.WriteByte('\n')
		}
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// agentLogLine matches bootyd's lines relaying an agent log line:
// "aa:bb:cc:dd:ee:ff | INFO  message".
var agentLogLine = regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5} \| `)

// dropWriter passes on the lines it is given (whole lines, one per Write,
// as bootyd writes them) except those re matches.
type dropWriter struct {
	w  io.Writer
	re *regexp.Regexp
}

func (d *dropWriter) Write(b []byte) (int, error) {
	if d.re.Match(b) {
		return len(b), nil
	}
	return d.w.Write(b)
}

// warnHandler prints warnings and errors of bootyd, the lab and the VM
// harness as one plain line each: "warning: message (key=value ...)".
type warnHandler struct {
	w     io.Writer
	attrs []slog.Attr
}

func (h *warnHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *warnHandler) Handle(_ context.Context, r slog.Record) error {
	var kv []string
	add := func(a slog.Attr) bool {
		if a.Key != "component" && a.Key != "mac" {
			kv = append(kv, a.Key+"="+a.Value.String())
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	level := "warning"
	if r.Level >= slog.LevelError {
		level = "error"
	}
	line := level + ": " + r.Message
	if len(kv) > 0 {
		line += " (" + strings.Join(kv, " ") + ")"
	}
	_, err := io.WriteString(h.w, line+"\n")
	return err
}

func (h *warnHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnHandler{w: h.w, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *warnHandler) WithGroup(string) slog.Handler { return h }
