package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/booty-dev/booty/hack/internal/benchutil"
)

// report is serve.json; serve.md renders it.
type report struct {
	Date        string      `json:"date"`
	Duration    string      `json:"duration"`
	Config      config      `json:"config"`
	Machine     machine     `json:"machine"`
	ImageSHA256 string      `json:"image_sha256"`
	Runs        []runResult `json:"runs"`
	Summary     []summary   `json:"summary"`
	Targets     []target    `json:"targets"`
}

// machine says where the figures come from.
type machine struct {
	CPUs    int    `json:"cpus"`
	CPU     string `json:"cpu"`
	Kernel  string `json:"kernel"`
	Load    string `json:"loadavg_end"`
	Bootyd  string `json:"bootyd"`
	Nginx   string `json:"nginx"`
	GoBuild string `json:"go"`
}

// summary is the medians of one server under one load.
type summary struct {
	Server     string    `json:"server"`
	Load       string    `json:"load"`
	Runs       int       `json:"runs"`
	MiBps      float64   `json:"mib_per_s"`
	AllMiBps   []float64 `json:"mib_per_s_runs"`
	P50        float64   `json:"p50_s"`
	P99        float64   `json:"p99_s"`
	CPUSeconds float64   `json:"server_cpu_s"`
	CPUPercent float64   `json:"server_cpu_percent"`
	PeakRSSMiB float64   `json:"server_peak_rss_mib"` // largest over the runs
}

// target is one of the targets with its measured ratio.
type target struct {
	Name  string  `json:"name"`
	Ratio float64 `json:"ratio"`
	Limit float64 `json:"limit"` // ratio must be at least this; 0: for information
	Pass  bool    `json:"pass"`
}

func (t target) verdict() string {
	switch {
	case t.Limit == 0:
		return "(information)"
	case t.Pass:
		return "PASS"
	}
	return "FAIL"
}

func describeMachine(cfg config) machine {
	m := machine{CPUs: runtime.NumCPU(), GoBuild: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.CPU = benchutil.CPUModel()
	if out, err := exec.Command(cfg.Bootyd, "--version").CombinedOutput(); err == nil && !strings.Contains(string(out), "unknown flag") {
		m.Bootyd = strings.TrimSpace(string(out))
	} else {
		m.Bootyd = cfg.Bootyd
	}
	if out, err := exec.Command(cfg.Nginx, "-v").CombinedOutput(); err == nil {
		m.Nginx = strings.TrimSpace(string(out))
	}
	return m
}

func lookPath(p string) (string, error) { return exec.LookPath(p) }

// summarize computes the medians per server and load and the targets.
func (r *report) summarize() {
	r.Machine.Load = benchutil.LoadAvg()
	r.Summary = nil
	for _, load := range []string{loadRange, loadAgents} {
		for _, srv := range []string{bootydHTTP.Name, nginxHTTP.Name, bootydTLS.Name, nginxTLS.Name} {
			var s summary
			var p50, p99, cpu, pct []float64
			for _, run := range r.Runs {
				if run.Server != srv || run.Load != load {
					continue
				}
				s.AllMiBps = append(s.AllMiBps, run.MiBps)
				p50, p99 = append(p50, run.P50), append(p99, run.P99)
				cpu, pct = append(cpu, run.CPUSeconds), append(pct, run.CPUPercent)
				s.PeakRSSMiB = max(s.PeakRSSMiB, run.PeakRSSMiB)
			}
			if len(s.AllMiBps) == 0 {
				continue
			}
			s.Server, s.Load, s.Runs = srv, load, len(s.AllMiBps)
			s.MiBps, s.P50, s.P99 = benchutil.Median(s.AllMiBps), benchutil.Median(p50), benchutil.Median(p99)
			s.CPUSeconds, s.CPUPercent = benchutil.Median(cpu), benchutil.Median(pct)
			r.Summary = append(r.Summary, s)
		}
	}
	get := func(srv, load string) float64 {
		for _, s := range r.Summary {
			if s.Server == srv && s.Load == load {
				return s.MiBps
			}
		}
		return 0
	}
	r.Targets = nil
	add := func(name string, a, b, limit float64) {
		if a == 0 || b == 0 {
			return
		}
		t := target{Name: name, Ratio: a / b, Limit: limit}
		t.Pass = limit == 0 || t.Ratio >= limit
		r.Targets = append(r.Targets, t)
	}
	add("range clients, plain HTTP: bootyd ÷ nginx aggregate MiB/s", get(bootydHTTP.Name, loadRange), get(nginxHTTP.Name, loadRange), 0.9)
	add("agents, plain HTTP: bootyd ÷ nginx aggregate MiB/s", get(bootydHTTP.Name, loadAgents), get(nginxHTTP.Name, loadAgents), 0.9)
	add("range clients, TLS: bootyd ÷ nginx aggregate MiB/s", get(bootydTLS.Name, loadRange), get(nginxTLS.Name, loadRange), 0)
	add("range clients: bootyd TLS ÷ bootyd plain HTTP", get(bootydTLS.Name, loadRange), get(bootydHTTP.Name, loadRange), 0)
	add("agents: bootyd TLS ÷ bootyd plain HTTP", get(bootydTLS.Name, loadAgents), get(bootydHTTP.Name, loadAgents), 0)
}

// write writes serve.md and serve.json into dir and returns their paths.
func (r *report) write(dir string) (string, string, error) {
	return benchutil.WriteReport(dir, "serve", r, r.markdown())
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	c := r.Config
	p("# bench-serve: one bootyd, a rack at once")
	p("")
	p("%s, took %s. `make bench-serve`; how to read this: docs/bench.md.", r.Date, r.Duration)
	p("")
	p("- machine: %d CPUs (%s), kernel %s, load average at the end %s", r.Machine.CPUs, r.Machine.CPU, r.Machine.Kernel, r.Machine.Load)
	p("- bootyd: %s; nginx: %s", r.Machine.Bootyd, r.Machine.Nginx)
	p("- image: %d MiB (per 4 MiB: 2 MiB pseudo-random, 2 MiB zeros), sha256 %s…", c.SizeMiB, r.ImageSHA256[:16])
	p("- range clients: %d at once, each the whole image in %d MiB Range requests over one HTTP/1.1 keep-alive connection; %d rounds, servers in turns", c.Clients, c.RangeMiB, c.Runs)
	if c.Agents > 0 {
		p("- agents: %d at once, each `image.Write` (booty write-image's pipeline: one GET, sha256 of the served file, sparse O_DIRECT writes to a file) of the image; one run per server", c.Agents)
	}
	if c.Quick {
		p("- **quick mode: the figures mean nothing**")
	}
	p("")
	p("## Targets")
	p("")
	p("| target | ratio | limit | verdict |")
	p("|---|---:|---:|---|")
	for _, t := range r.Targets {
		lim := "–"
		if t.Limit > 0 {
			lim = fmt.Sprintf("≥ %.2f", t.Limit)
		}
		v := t.verdict()
		if v == "FAIL" {
			v = "**FAIL**"
		}
		p("| %s | %.2f | %s | %s |", t.Name, t.Ratio, lim, v)
	}
	for _, load := range []string{loadRange, loadAgents} {
		var rows []summary
		for _, s := range r.Summary {
			if s.Load == load {
				rows = append(rows, s)
			}
		}
		if len(rows) == 0 {
			continue
		}
		p("")
		p("## %s (medians)", strings.ToUpper(load[:1])+load[1:])
		p("")
		p("| server | aggregate MiB/s | runs MiB/s | per-client p50 s | p99 s | server CPU s | server CPU %% of a core | server peak RSS MiB |")
		p("|---|---:|---|---:|---:|---:|---:|---:|")
		for _, s := range rows {
			runs := make([]string, len(s.AllMiBps))
			for i, v := range s.AllMiBps {
				runs[i] = fmt.Sprintf("%.0f", v)
			}
			p("| %s | %.0f | %s | %.2f | %.2f | %.1f | %.0f | %.1f |", s.Server, s.MiBps, strings.Join(runs, ", "), s.P50, s.P99, s.CPUSeconds, s.CPUPercent, s.PeakRSSMiB)
		}
	}
	p("")
	p("Aggregate MiB/s is all bytes served over the wall time from the common start to the last client's end;")
	p("per-client times count from that start. Server CPU is user+system time of the server's processes")
	p("(nginx: master and workers) over the run, from /proc/PID/stat; peak RSS the largest sum of VmRSS")
	p("sampled every 100 ms. The clients run on the same %d cores, so every figure includes the competition", r.Machine.CPUs)
	p("for CPU between servers and clients. Every run: serve.json.")
	return b.String()
}
