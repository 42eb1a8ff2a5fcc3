package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/booty-dev/booty/hack/internal/benchutil"
)

// report is boot.json; boot.md renders it.
type report struct {
	Date     string    `json:"date"`
	Duration string    `json:"duration"`
	Options  options   `json:"options"`
	Kernel   string    `json:"kernel"`
	Initrd   string    `json:"initrd"`
	Machine  string    `json:"machine"`
	Skipped  []string  `json:"skipped,omitempty"`
	Runs     []bootRun `json:"runs"`
	Targets  []target  `json:"targets"`
}

// target is PID 1 start → first image byte against the limit.
type target struct {
	Accel   string  `json:"accel"`
	Median  float64 `json:"median_s"`
	Limit   float64 `json:"limit_s"`
	Binding bool    `json:"binding"` // the target is under TCG; KVM is for information
	Pass    bool    `json:"pass"`
}

func (t target) verdict() string {
	switch {
	case !t.Binding:
		return "(information)"
	case t.Pass:
		return "PASS"
	}
	return "FAIL"
}

func (t target) line() string {
	return fmt.Sprintf("%s: PID 1 start → first image byte %.2f s (median; target < %.2f s) %s", t.Accel, t.Median, t.Limit, t.verdict())
}

const (
	pid1      = "agent (PID 1) start"
	firstByte = "first image byte"
)

// finish computes the targets and the duration and returns r.
func (r *report) finish(started time.Time) *report {
	r.Duration = time.Since(started).Round(time.Second).String()
	r.Machine = benchutil.Machine()
	r.Targets = nil
	for _, accel := range r.accels() {
		var xs []float64
		for _, run := range r.runsOf(accel) {
			a, okA := run.Milestones[pid1]
			b, okB := run.Milestones[firstByte]
			if okA && okB {
				xs = append(xs, b-a)
			}
		}
		if len(xs) == 0 {
			continue
		}
		t := target{Accel: accel, Median: benchutil.Median(xs), Limit: float64(r.Options.TargetMS) / 1000, Binding: accel == "tcg"}
		t.Pass = t.Median < t.Limit
		r.Targets = append(r.Targets, t)
	}
	return r
}

func (r *report) accels() []string {
	var as []string
	for _, run := range r.Runs {
		if !slices.Contains(as, run.Accel) {
			as = append(as, run.Accel)
		}
	}
	return as
}

func (r *report) runsOf(accel string) []bootRun {
	var rs []bootRun
	for _, run := range r.Runs {
		if run.Accel == accel {
			rs = append(rs, run)
		}
	}
	return rs
}

// write writes boot.md and boot.json into dir and returns their paths.
func (r *report) write(dir string) (string, string, error) {
	return benchutil.WriteReport(dir, "boot", r, r.markdown())
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# bench-boot: from kernel start to the first image byte")
	p("")
	p("%s, took %s. `make bench-boot`; how to read this: docs/bench.md.", r.Date, r.Duration)
	p("")
	p("- machine: %s", r.Machine)
	p("- kernel %s, initramfs %s", r.Kernel, r.Initrd)
	p("- the demo: bootyd in-process, demo.img.zst onto a 256 MiB virtio disk, poweroff; %d MiB, 1 vCPU, direct kernel boot (SeaBIOS); extra kernel parameters `printk.time=1 %s`", r.Options.Memory, r.Options.Append)
	for _, s := range r.Skipped {
		p("- not measured: %s", s)
	}
	p("")
	p("## Target: PID 1 start → first image byte")
	p("")
	p("| accelerator | median s | runs s | target | verdict |")
	p("|---|---:|---|---:|---|")
	for _, t := range r.Targets {
		var runs []string
		for _, run := range r.runsOf(t.Accel) {
			runs = append(runs, fmt.Sprintf("%.2f", run.Milestones[firstByte]-run.Milestones[pid1]))
		}
		v := t.verdict()
		if v == "FAIL" {
			v = "**FAIL**"
		}
		p("| %s | %.2f | %s | < %.2f | %s |", t.Accel, t.Median, strings.Join(runs, ", "), t.Limit, v)
	}
	for _, accel := range r.accels() {
		runs := r.runsOf(accel)
		p("")
		p("## %s: milestones, seconds since kernel start (medians of %d boots)", strings.ToUpper(accel), len(runs))
		p("")
		head := "| milestone | median | since previous |"
		sep := "|---|---:|---:|"
		for i := range runs {
			head += fmt.Sprintf(" run %d |", i+1)
			sep += "---:|"
		}
		p("%s", head)
		p("%s", sep)
		var q []float64
		for _, run := range runs {
			q = append(q, run.QEMUToKern)
		}
		row := fmt.Sprintf("| QEMU start → kernel start (firmware, kernel load) | %.2f | |", benchutil.Median(q))
		for _, v := range q {
			row += fmt.Sprintf(" %.2f |", v)
		}
		p("%s", row)
		prev := 0.0
		for _, ms := range milestones {
			var xs []float64
			cells := ""
			for _, run := range runs {
				if v, ok := run.Milestones[ms.Name]; ok {
					xs = append(xs, v)
					cells += fmt.Sprintf(" %.2f |", v)
				} else {
					cells += " – |"
				}
			}
			name := ms.Name
			if ms.Info {
				name = "(" + name + ")"
			}
			if len(xs) == 0 {
				p("| %s | – | |%s", name, cells)
				continue
			}
			m := benchutil.Median(xs)
			step := ""
			if !ms.Info {
				step = fmt.Sprintf("%.2f", m-prev)
				prev = m
			}
			p("| %s | %.2f | %s |%s", name, m, step, cells)
		}
	}
	p("")
	p("## Where each milestone comes from")
	p("")
	p("| milestone | console line |")
	p("|---|---|")
	for _, ms := range milestones {
		p("| %s | %s |", ms.Name, ms.Note)
	}
	p("")
	p("Kernel lines carry printk times; agent lines the guest's wall clock, put on the kernel's clock")
	p("through the host's arrival time of each line (docs/bench.md). \"since previous\" is the difference")
	p("of the medians; rows in parentheses are for reference and left out of it. Consoles with arrival")
	p("times: boot-console/. Every run: boot.json.")
	return b.String()
}
