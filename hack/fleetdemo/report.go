package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/humanize"
)

// stateSpan is one state a machine was in: when it entered it and, unless
// it is the current one, how long it stayed.
type stateSpan struct {
	State   string
	At      time.Time
	Took    time.Duration
	Current bool
}

// transition matches the message bootyd's BMDB records with every state
// change: "FROM → TO", then ", command …" or ": message" or nothing.
var transition = regexp.MustCompile(`^([a-z][a-z ]*?) → ([a-z][a-z ]*?)(?:[,:]|$)`)

// timeline returns the states a machine went through, from its events
// (oldest first): the state it was registered in at created (the first
// transition's from-state), then each transition's to-state at its event's
// time. Each state but the last lasts until the next; the last is current
// and its Took runs until now.
func timeline(created time.Time, events []api.Event, now time.Time) []stateSpan {
	var spans []stateSpan
	for _, e := range events {
		m := transition.FindStringSubmatch(e.Message)
		if m == nil {
			continue
		}
		if len(spans) == 0 {
			spans = append(spans, stateSpan{State: m[1], At: created})
		}
		spans = append(spans, stateSpan{State: m[2], At: e.Time})
	}
	for i := range spans {
		if i+1 < len(spans) {
			spans[i].Took = spans[i+1].At.Sub(spans[i].At)
		} else {
			spans[i].Took, spans[i].Current = now.Sub(spans[i].At), true
		}
	}
	return spans
}

// proofPrefix starts every line of the Debian image's booty-proof.service.
const proofPrefix = "BOOTY-PROOF "

// consoleWatch is a machine's serial console (vm.Config.Console): it
// collects the installed OS's proof lines of each boot and notes the first
// boot whose proof ended with "done", with the BMC boot device of that
// power on. Proof lines go to out as "NAME | BOOTY-PROOF …" when out is
// set, and so does every line when all is set.
type consoleWatch struct {
	name string
	out  io.Writer
	all  bool
	// boot returns the boot device of the current power on.
	boot func() bmc.Device

	mu       sync.Mutex
	partial  string
	agent    bool     // the agent ran since the firmware last printed: a proof now follows its kexec
	current  []string // proof lines of the boot printing them now
	kexec    []string // the first complete proof after the agent's kexec
	proof    []string // the first complete proof of a firmware boot
	bootDev  bmc.Device
	finished chan struct{} // closed with the first complete proof of a firmware boot
}

// Console lines that tell how the installed OS was reached: the firmware
// (OVMF's boot manager, iPXE) prints before every boot it makes, the
// agent when it starts; a proof with the agent since the firmware's last
// line came through the agent's kexec, not through the firmware.
var (
	firmwareLines = []string{"BdsDxe: ", "iPXE initialising devices", "iPXE 1."}
	agentLine     = "booty agent starting"
)

func newConsoleWatch(name string, out io.Writer, all bool, boot func() bmc.Device) *consoleWatch {
	return &consoleWatch{name: name, out: out, all: all, boot: boot, finished: make(chan struct{})}
}

func (c *consoleWatch) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	text := c.partial + string(b)
	lines := strings.Split(text, "\n")
	c.partial = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		c.line(strings.TrimRight(l, "\r"))
	}
	return len(b), nil
}

// line takes one console line; c.mu is held.
func (c *consoleWatch) line(l string) {
	for _, f := range firmwareLines {
		if strings.Contains(l, f) {
			c.agent = false
		}
	}
	if strings.Contains(l, agentLine) {
		c.agent = true
	}
	i := strings.Index(l, proofPrefix)
	if i < 0 {
		if c.all && c.out != nil {
			fmt.Fprintf(c.out, "%-6s | %s\n", c.name, l)
		}
		return
	}
	p := strings.TrimSpace(l[i+len(proofPrefix):])
	if c.out != nil {
		fmt.Fprintf(c.out, "%-6s | %s%s\n", c.name, proofPrefix, p)
	}
	if strings.HasPrefix(p, "hostname=") { // the first line of each run
		c.current = nil
	}
	c.current = append(c.current, p)
	if p != "done" {
		return
	}
	if c.agent {
		if c.kexec == nil {
			c.kexec = c.current
		}
		return
	}
	if c.proof == nil {
		c.proof = c.current
		if c.boot != nil {
			c.bootDev = c.boot()
		}
		close(c.finished)
	}
}

// Done is closed once the installed OS, booted by the firmware from the
// disk, printed a complete proof.
func (c *consoleWatch) Done() <-chan struct{} { return c.finished }

// Proof returns the lines of the first complete proof of a firmware boot
// and the BMC boot device of the power on that made it; nil before.
func (c *consoleWatch) Proof() ([]string, bmc.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.proof...), c.bootDev
}

// KexecProof returns the lines of the first complete proof printed after
// the agent kexec'd into the installed OS; nil without one.
func (c *consoleWatch) KexecProof() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.kexec...)
}

// machineReport is what the summary says of one machine.
type machineReport struct {
	Name, BMC, MAC string
	Machine        *api.Machine // the last answer of bootyd; nil without one
	Events         []api.Event
	Boots          []bmc.Device // every power on and reset, as the BMC saw them
	Proof          []string     // the complete proof of a firmware boot of the installed OS, nil without one
	ProofBoot      bmc.Device   // the BMC boot device of the power on that made that boot
	KexecProof     []string     // the complete proof after the agent's kexec, nil without one
	Console        string       // the console log's path
}

// booted reports whether the firmware booted the machine's installed OS
// from its disk.
func (r machineReport) booted() bool { return len(r.Proof) > 0 }

// summary is the demo's final report.
type summary struct {
	Machines []machineReport
	Took     time.Duration
	Now      time.Time
	TimedOut bool
	Aborted  bool
	Timeout  time.Duration
	Err      error // a failure of the demo itself, nil when it ran to the end
}

// ok reports whether every machine booted its installed OS.
func (s summary) ok() bool {
	if s.Err != nil || len(s.Machines) == 0 {
		return false
	}
	for _, m := range s.Machines {
		if !m.booted() {
			return false
		}
	}
	return true
}

// proofKeys are the proof facts the summary quotes, in this order.
var proofKeys = []string{"hostname", "kernel", "cmdline", "rootdev", "efi-current", "efi-order"}

// write prints the summary.
func (s summary) write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("summary after %s", humanize.Duration(s.Took))
	for _, m := range s.Machines {
		p("  %s  %s  boot MAC %s", m.Name, m.BMC, m.MAC)
		spans := []stateSpan(nil)
		if m.Machine != nil {
			spans = timeline(m.Machine.CreatedAt, m.Events, s.Now)
			if len(spans) == 0 {
				spans = []stateSpan{{State: m.Machine.State, At: m.Machine.StateChangedAt, Took: s.Now.Sub(m.Machine.StateChangedAt), Current: true}}
			}
		}
		if len(spans) == 0 {
			p("    states   unknown: bootyd never answered for it")
		}
		width := 0
		for _, sp := range spans {
			width = max(width, len(sp.State))
		}
		for i, sp := range spans {
			head := "    states  "
			if i > 0 {
				head = "            "
			}
			took := humanize.Duration(sp.Took)
			if sp.Current {
				took += " so far"
			}
			p("%s %s  %-*s  %s", head, sp.At.Local().Format("15:04:05"), width, sp.State, took)
		}
		if m.Machine != nil && m.Machine.Error != nil && m.Machine.Error.Message != "" {
			p("    error    %s: %s", m.Machine.Error.Type, m.Machine.Error.Message)
		}
		p("    boots    %s (each power on or reset, as its BMC saw it)", bootList(m.Boots))
		if len(m.KexecProof) > 0 {
			p("    kexec    the agent kexec'd into the installed OS, which printed its proof (%d lines)", len(m.KexecProof))
		}
		if m.booted() {
			p("    proof    the firmware booted the installed OS from the disk (BMC boot device %s); it printed %d BOOTY-PROOF lines, ending in done:", bootName(m.ProofBoot), len(m.Proof))
			facts := proofFacts(m.Proof)
			for _, k := range proofKeys {
				if v, ok := facts[k]; ok {
					p("               %s=%s", k, v)
				}
			}
			p("    result   OK: booted its installed OS from its disk")
		} else {
			p("    proof    none: the firmware booted no installed OS that printed a complete BOOTY-PROOF (console: %s)", m.Console)
			last := "no state"
			if m.Machine != nil {
				last = m.Machine.State
			}
			p("    result   NOT BOOTED: %s", last)
		}
	}
	switch {
	case s.ok():
		p("  result     OK: both machines booted their installed OS")
	case s.Err != nil:
		p("  result     FAILED: %v", s.Err)
	case s.Aborted:
		p("  result     ABORTED after %s", humanize.Duration(s.Took))
	case s.TimedOut:
		p("  result     TIMEOUT: not every machine booted its installed OS within %s", s.Timeout)
	default:
		p("  result     FAILED: not every machine booted its installed OS")
	}
}

// proofFacts turns "key=value" proof lines into a map.
func proofFacts(lines []string) map[string]string {
	f := map[string]string{}
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.Contains(k, " ") {
			f[k] = v
		}
	}
	return f
}

func bootName(d bmc.Device) string {
	if d == "" {
		return "firmware-order"
	}
	return string(d)
}

func bootList(ds []bmc.Device) string {
	if len(ds) == 0 {
		return "none"
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = bootName(d)
	}
	return strings.Join(names, ", ")
}
