package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/humanize"
)

// barWidth is the number of cells of a progress bar.
const barWidth = 24

// bar draws a progress bar of done/total: [█████░░░░░] 50%.
func bar(done, total int64) string {
	if total <= 0 {
		return "[" + strings.Repeat("░", barWidth) + "]   ?%"
	}
	frac := float64(done) / float64(total)
	frac = min(max(frac, 0), 1)
	n := int(frac * barWidth)
	return fmt.Sprintf("[%s%s] %3d%%", strings.Repeat("█", n), strings.Repeat("░", barWidth-n), int(frac*100))
}

// writing says whether m is writing an image now: provisioning with a
// progress report whose write has not ended.
func writing(m api.Machine) bool {
	p := m.Progress
	return m.State == api.MachineProvisioning && p != nil && p.BytesTotal > 0 && p.BytesDone < p.BytesTotal
}

// progressCell is the PROGRESS column: a bar for a writing machine, bytes
// written when the total is unknown, else empty.
func progressCell(m api.Machine) string {
	p := m.Progress
	switch {
	case p == nil || m.State != api.MachineProvisioning:
		return ""
	case p.BytesTotal > 0:
		return bar(p.BytesDone, p.BytesTotal) + " " + humanize.Bytes(p.BytesDone) + "/" + humanize.Bytes(p.BytesTotal)
	case p.BytesDone > 0:
		return humanize.Bytes(p.BytesDone) + " written"
	}
	return ""
}

// sortMachines orders machines by name.
func sortMachines(ms []api.Machine) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
}

// drawScreen writes one frame of the live table for a terminal of cols ×
// rows (0: unknown): cursor home, the table, each line cut to the width and
// cleared to its end, the rest of the screen cleared. When the fleet does
// not fit, the machines that are busy (writing first, then any other
// install, inspection or error) take the rows and a last line counts the
// rest by state.
func drawScreen(w io.Writer, ms []api.Machine, server string, now time.Time, cols, rows int) error {
	var b strings.Builder
	b.WriteString("\x1b[H")
	lines := []string{fmt.Sprintf("bootyctl machines watch: %s  %s  (%d machines, %d writing; Ctrl-C to stop)", server, now.Format("15:04:05"), len(ms), countWriting(ms)), ""}
	shown, rest := ms, []api.Machine(nil)
	if rows > 0 && len(ms) > rows-4 {
		byBusy := slices.Clone(ms)
		sort.SliceStable(byBusy, func(i, j int) bool { return busy(byBusy[i]) > busy(byBusy[j]) })
		n := max(rows-4, 1)
		shown, rest = byBusy[:n], byBusy[n:]
		sortMachines(shown)
	}
	var t strings.Builder
	if err := table(&t, []string{"NAME", "STATE", "STATUS", "STEP", "PROGRESS"}, watchRows(shown)); err != nil {
		return err
	}
	lines = append(lines, strings.Split(strings.TrimSuffix(t.String(), "\n"), "\n")...)
	if len(rest) > 0 {
		lines = append(lines, "… and "+countByState(rest))
	}
	for i, line := range lines {
		if r := []rune(line); cols > 0 && len(r) > cols {
			line = string(r[:cols])
		}
		b.WriteString(line)
		b.WriteString("\x1b[K")
		if i < len(lines)-1 {
			b.WriteString("\n") // none after the last: it would scroll a full screen
		}
	}
	b.WriteString("\x1b[J")
	_, err := io.WriteString(w, b.String())
	return err
}

// busy ranks what a watcher wants to see first: a machine writing its
// image, then one in another install or inspection, then one in error.
func busy(m api.Machine) int {
	switch {
	case writing(m):
		return 3
	case m.State == api.MachineProvisioning || m.State == api.MachineDeprovisioning || m.State == api.MachineInspecting:
		return 2
	case m.Status == api.StatusError:
		return 1
	}
	return 0
}

// countByState says how many machines are in each state: "12 more: 10
// provisioned, 2 available".
func countByState(ms []api.Machine) string {
	n := map[string]int{}
	for _, m := range ms {
		n[m.State]++
	}
	var states []string
	for st := range n {
		states = append(states, st)
	}
	sort.Slice(states, func(i, j int) bool {
		return n[states[i]] > n[states[j]] || (n[states[i]] == n[states[j]] && states[i] < states[j])
	})
	parts := make([]string, len(states))
	for i, st := range states {
		parts[i] = fmt.Sprintf("%d %s", n[st], st)
	}
	return fmt.Sprintf("%d more: %s", len(ms), strings.Join(parts, ", "))
}

func countWriting(ms []api.Machine) int {
	n := 0
	for _, m := range ms {
		if writing(m) {
			n++
		}
	}
	return n
}

func watchRows(ms []api.Machine) [][]string {
	rows := make([][]string, 0, len(ms))
	for _, m := range ms {
		rows = append(rows, []string{m.Name, m.State, statusCell(m), stepCell(m), progressCell(m)})
	}
	return rows
}

// statusCell is the operational status, with the error when there is one.
func statusCell(m api.Machine) string {
	if m.Error != nil && m.Error.Message != "" {
		return m.Status + ": " + truncate(m.Error.Message, 60)
	}
	return m.Status
}

// stepCell names the step a running install reported progress for.
func stepCell(m api.Machine) string {
	if m.Progress != nil && (m.State == api.MachineProvisioning || m.State == api.MachineDeprovisioning) {
		return m.Progress.Step
	}
	return ""
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// lineWatcher prints one line per change of a machine when stdout is not a
// terminal: a new state, status, step, or a progress that crossed another
// tenth.
type lineWatcher struct {
	last map[string]string
}

// update writes the lines for what changed since the last call.
func (lw *lineWatcher) update(w io.Writer, ms []api.Machine, now time.Time) error {
	if lw.last == nil {
		lw.last = map[string]string{}
	}
	for _, m := range ms {
		key := m.State + "|" + statusCell(m) + "|" + stepCell(m)
		line := fmt.Sprintf("%s %s %s %s", now.Format("15:04:05"), cell(m.Name), m.State, cell(statusCell(m)))
		if s := stepCell(m); s != "" {
			line += " step " + cell(s)
		}
		if p := m.Progress; p != nil && m.State == api.MachineProvisioning && p.BytesTotal > 0 {
			pct := int(float64(p.BytesDone) / float64(p.BytesTotal) * 100)
			key += fmt.Sprintf("|%d", pct/10)
			line += fmt.Sprintf(" %d%% %s/%s", pct, humanize.Bytes(p.BytesDone), humanize.Bytes(p.BytesTotal))
		}
		if lw.last[m.ID] == key {
			continue
		}
		lw.last[m.ID] = key
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}
