package server

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/humanize"
)

// println writes one line to the human output; lines never interleave.
func (s *Server) println(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.outMu.Lock()
	defer s.outMu.Unlock()
	fmt.Fprintln(s.opts.Output, line)
}

// stepLabel renders "3/6 write-image", or just the name when the position is unknown.
func stepLabel(step string, index, total int) string {
	if index > 0 && total > 0 {
		return fmt.Sprintf("%d/%d %s", index, total, clean(step))
	}
	if index > 0 {
		return fmt.Sprintf("%d %s", index, clean(step))
	}
	return clean(step)
}

// printStatus prints a step start/end or a machine-level outcome. m is the
// machine's state including this report; its last failed step names the
// cause of a machine-level error.
func (s *Server) printStatus(mac string, r api.StatusReport, m api.MachineState) {
	if r.Step == api.StepMachine {
		switch r.State {
		case api.StateError:
			failed := ""
			for i := len(m.Steps) - 1; i >= 0; i-- {
				if m.Steps[i].State == api.StateFailed {
					failed = m.Steps[i].Step
					break
				}
			}
			if failed != "" {
				s.println("%s ERROR in step %s: %s", mac, clean(failed), clean(r.Error))
			} else {
				s.println("%s ERROR: %s", mac, clean(r.Error))
			}
		default:
			s.println("%s %s", mac, strings.ToUpper(clean(r.State)))
		}
		return
	}
	label := stepLabel(r.Step, r.Index, r.Total)
	d := time.Duration(r.DurationMS) * time.Millisecond
	switch r.State {
	case api.StateStarted:
		s.println("%s [%s] started", mac, label)
	case api.StateSucceeded:
		s.println("%s [%s] succeeded in %s", mac, label, humanize.Duration(d))
	case api.StateFailed:
		s.println("%s [%s] FAILED after %s: %s", mac, label, humanize.Duration(d), clean(r.Error))
	}
}

// printProgress prints one progress line, e.g.
// "aa:bb:cc:dd:ee:ff [3/6 write-image] 512.0 MiB / 1.0 GiB (50%) 85.0 MiB/s ETA 6s".
// The step position comes from the last status report for the same step.
func (s *Server) printProgress(mac string, p api.ProgressReport, m api.MachineState) {
	index, total := 0, 0
	for i := len(m.Steps) - 1; i >= 0; i-- {
		if m.Steps[i].Step == p.Step {
			index, total = m.Steps[i].Index, m.Steps[i].Total
			break
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s] %s", mac, stepLabel(p.Step, index, total), humanize.Bytes(p.BytesDone))
	if p.BytesTotal > 0 {
		pct := float64(p.BytesDone) / float64(p.BytesTotal) * 100
		fmt.Fprintf(&b, " / %s (%.0f%%)", humanize.Bytes(p.BytesTotal), math.Floor(pct))
	}
	if p.RateBPS > 0 {
		fmt.Fprintf(&b, " %s/s", humanize.Bytes(int64(p.RateBPS)))
	}
	if p.ETASeconds > 0 {
		fmt.Fprintf(&b, " ETA %s", humanize.Duration(time.Duration(p.ETASeconds*float64(time.Second))))
	}
	s.println("%s", b.String())
}

// printLogs prints agent log lines prefixed with the MAC.
func (s *Server) printLogs(mac string, lines []api.LogLine) {
	for _, l := range lines {
		lvl := strings.ToUpper(clean(l.Level))
		if lvl == "" {
			lvl = "INFO"
		}
		s.println("%s | %-5s %s", mac, lvl, clean(l.Message))
	}
}

// clean makes agent-supplied text safe for a terminal: control characters
// (escape sequences, carriage returns, newlines) are shown as Go escapes.
func clean(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) && r != '\t' {
			q := fmt.Sprintf("%q", string(r))
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
