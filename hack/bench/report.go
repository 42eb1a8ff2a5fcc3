package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// sample is one run.
type sample struct {
	Seconds   float64 `json:"seconds"`
	MaxRSSKiB int64   `json:"max_rss_kib"`
	// CPUSeconds is user+sys of every process of the run (GNU time's %U
	// and %S): unlike wall time it hardly moves when others load the machine.
	CPUSeconds float64 `json:"cpu_seconds"`
	Verified   bool    `json:"verified,omitempty"` // the target held the image afterwards
	// Untimed work around the run: discard, cache flush and warm-up before,
	// reading back and hashing the target after.
	PrepSeconds   float64 `json:"prep_seconds"`
	VerifySeconds float64 `json:"verify_seconds,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// result is every run of one job, with its summary.
type result struct {
	Image   string   `json:"image"`
	Kind    string   `json:"kind"` // "write" or "floor"
	Name    string   `json:"name"`
	Source  string   `json:"source"`
	Command string   `json:"command"`
	Samples []sample `json:"samples"`

	Median    float64 `json:"median_seconds"`
	Min       float64 `json:"min_seconds"`
	Max       float64 `json:"max_seconds"`
	MaxRSSKiB int64   `json:"max_rss_kib"` // over all runs
	MedianCPU float64 `json:"median_cpu_seconds"`
}

// finish fills the summaries from the samples that succeeded.
func finish(rs []result) []result {
	for i := range rs {
		var secs, cpu []float64
		for _, s := range rs[i].Samples {
			if s.Error == "" {
				secs = append(secs, s.Seconds)
				cpu = append(cpu, s.CPUSeconds)
				rs[i].MaxRSSKiB = max(rs[i].MaxRSSKiB, s.MaxRSSKiB)
			}
		}
		if len(secs) == 0 {
			continue
		}
		slices.Sort(secs)
		rs[i].Min, rs[i].Max = secs[0], secs[len(secs)-1]
		rs[i].Median = median(secs)
		slices.Sort(cpu)
		rs[i].MedianCPU = median(cpu)
	}
	return rs
}

// median of sorted xs.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// report is results.json, and what report.md is rendered from.
type report struct {
	Date      string        `json:"date"`
	Duration  string        `json:"duration"`
	Config    config        `json:"config"`
	Machine   machine       `json:"machine"`
	Features  bootyFeatures `json:"booty_features"`
	ImageDir  string        `json:"image_dir"`
	Loop      loopInfo      `json:"target"`
	LoadStart string        `json:"loadavg_start"`
	LoadEnd   string        `json:"loadavg_end"`
	Images    []benchImage  `json:"images"`
	Results   []result      `json:"results"`
	Targets   []targetCheck `json:"targets"`
}

// targetCheck is one of the targets, measured.
type targetCheck struct {
	What     string  `json:"what"`
	Measured float64 `json:"measured"` // a time ratio, or MiB for RSS
	Limit    float64 `json:"limit"`
	Unit     string  `json:"unit"` // "x" or "MiB"
	Pass     bool    `json:"pass"`
}

// find returns the result for image, name and source, or nil.
func (r *report) find(image, name, source string) *result {
	for i := range r.Results {
		x := &r.Results[i]
		if x.Image == image && x.Name == name && x.Source == source && x.Median > 0 {
			return x
		}
	}
	return nil
}

// bootyVariants are the booty contenders present, plain booty first.
func (r *report) bootyVariants() []string {
	var vs []string
	for _, x := range r.Results {
		if x.Kind == "write" && strings.HasPrefix(x.Name, "booty") && !slices.Contains(vs, x.Name) {
			vs = append(vs, x.Name)
		}
	}
	return vs
}

// checkTargets evaluates the targets for every booty variant.
func (r *report) checkTargets() {
	r.Targets = nil
	ratio := func(v, image, source, other string, limit float64) {
		b, o := r.find(image, v, source), r.find(image, other, source)
		if b == nil || o == nil {
			return
		}
		m := b.Median / o.Median
		r.Targets = append(r.Targets, targetCheck{
			What:     fmt.Sprintf("%s image, %s: %s time ÷ %s time", image, source, v, other),
			Measured: m, Limit: limit, Unit: "x", Pass: m <= limit,
		})
	}
	for _, v := range r.bootyVariants() {
		ratio(v, "sparse", "zst", "dd pipeline", 0.7)
		ratio(v, "sparse", "zst", "bmaptool", 0.7)
		ratio(v, "sparse", "gz", "dd pipeline", 0.5)
		ratio(v, "sparse", "gz", "bmaptool", 0.5)
		ratio(v, "dense", "zst", "dd pipeline", 1.0)
		ratio(v, "dense", "gz", "dd pipeline", 1.0)
	}
	var peak int64
	for _, x := range r.Results {
		if strings.HasPrefix(x.Name, "booty") {
			peak = max(peak, x.MaxRSSKiB)
		}
	}
	if peak > 0 {
		m := float64(peak) / 1024
		r.Targets = append(r.Targets, targetCheck{What: "peak RSS of booty write-image, any image, any run", Measured: m, Limit: 64, Unit: "MiB", Pass: m < 64})
	}
}

// write writes results.json and report.md into dir.
func (r *report) write(dir string) error {
	r.checkTargets()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

const mib = 1 << 20

func (r *report) image(name string) benchImage {
	for _, im := range r.Images {
		if im.Name == name {
			return im
		}
	}
	return benchImage{}
}

// spread is (max-min)/median of x.
func spread(x *result) float64 {
	if x.Median == 0 {
		return 0
	}
	return (x.Max - x.Min) / x.Median
}

// noisy is the spread above which a figure is flagged.
const noisy = 0.15

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# booty write-image benchmark\n\n")
	if r.Config.Quick {
		p("**Quick mode** (`--quick`): small images and one run; a smoke test of the bench, not a measurement. The targets below are not meaningful at this size.\n\n")
	}
	p("Made by `make bench` (`go run ./hack/bench`) on %s in %s. How to read it: docs/bench.md.\n\n", r.Date, r.Duration)

	p("## Machine\n\n| | |\n|---|---|\n")
	p("| CPUs | %d × %s |\n", r.Machine.CPUs, r.Machine.CPUModel)
	p("| memory | %s |\n", r.Machine.MemTotal)
	p("| kernel | %s |\n", r.Machine.Kernel)
	p("| target | loop device, direct I/O %s, over a sparse file in %s: %s; disk %s |\n",
		onOff(r.Loop.DirectIO), filepath.Dir(filepath.Dir(r.Loop.Backing)), r.Machine.TargetFS, r.Machine.TargetDev)
	p("| load average | %s at the start, %s at the end |\n", r.LoadStart, r.LoadEnd)
	p("| booty | %s (write-image extras: fresh-target %s, no-direct %s, bmap %s) |\n", r.Machine.Booty,
		yesNo(r.Features.FreshTarget), yesNo(r.Features.NoDirect), yesNo(r.Features.Bmap))
	tools := make([]string, 0, len(r.Machine.Tools))
	for _, k := range []string{"zstd", "gzip", "bmaptool", "curl", "dd"} {
		if v, ok := r.Machine.Tools[k]; ok {
			tools = append(tools, v)
		}
	}
	p("| tools | %s |\n\n", strings.Join(tools, "; "))

	p("## Method\n\n")
	p("- Images (hack/mkbenchimage.sh, in `%s`):\n", r.ImageDir)
	for _, im := range r.Images {
		p("  - `%s.img`: %.0f MiB, %.0f MiB of it allocated (the rest are holes); zst %.0f MiB, gz %.0f MiB\n", im.Name,
			float64(im.Size)/mib, float64(im.Allocated)/mib, float64(im.Files[im.file(".zst")])/mib, float64(im.Files[im.file(".gz")])/mib)
	}
	p("- Served by a Go `net/http` file server on 127.0.0.1, in the bench process. Before every run: the target is discarded (`blkdiscard`: all zeros, no blocks) and its page cache dropped (BLKFLSBUF), ")
	if r.Config.DropCaches {
		p("the whole page cache is synced and dropped, ")
	}
	p("and the served file is read back into the page cache (a server holds a hot image in RAM); the clock runs from the start of the first process to the exit of the last.\n")
	p("- After every write the first image-size bytes of the target are hashed and compared with the image's sha256: a writer that wrote wrong data fails the bench.\n")
	p("- %d run(s) of everything, in turns (round-robin, starting one further each round). Figures are medians; min–max shows the spread. Peak RSS is what GNU time reports (`%%M`, the process's `ru_maxrss`, including children it waited for: bmaptool's decompressor); for a pipeline, the largest of its processes. CPU s is the median of user+sys (GNU time's `%%U` + `%%S`) summed over the processes: on a shared machine it moves much less than wall time, so compare it when the load average is high.\n", r.Config.Runs)
	p("- booty verifies checksums: %s.\n\n", map[string]string{
		"both":   "`--checksum` (sha256 of the served file) and `--image-checksum` (sha256 of all decompressed bytes)",
		"source": "`--checksum` only (sha256 of the served file)",
		"image":  "`--image-checksum` only (sha256 of all decompressed bytes)",
	}[r.Config.BootyChecksum])

	for _, im := range r.Images {
		p("## %s.img (%.0f MiB): writers\n\n", im.Name, float64(im.Size)/mib)
		p("| contender | source | median s | min–max s | MiB/s of image | booty ÷ this | CPU s | peak RSS MiB |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
		for _, x := range r.Results {
			if x.Image != im.Name || x.Kind != "write" {
				continue
			}
			ratio := "–"
			if bt := r.find(im.Name, "booty", x.Source); bt != nil && x.Median > 0 {
				ratio = fmt.Sprintf("%.2f", bt.Median/x.Median)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", x.Name, x.Source, secs(x.Median), minMax(&x), rate(im.Size, x.Median), ratio, secs(x.MedianCPU), rss(x.MaxRSSKiB))
		}
		p("\n")
		if !r.Config.Floors {
			continue
		}
		p("## %s.img: floors\n\n", im.Name)
		p("Each part alone: the decoders from the cached file to nowhere (the CLIs, and the Go decoders booty uses: klauspost/compress with booty's options for a verified image: zstd on one goroutine, its frame checksum left to booty, in a helper; booty's zstd path also takes long zero runs past the decoder, so on a sparse image it can beat this floor), the HTTP fetch, and the raw write of the image from the cached raw file.\n\n")
		p("| floor | source | median s | min–max s | MiB/s of image | CPU s | peak RSS MiB |\n|---|---|--:|--:|--:|--:|--:|\n")
		for _, x := range r.Results {
			if x.Image != im.Name || x.Kind != "floor" {
				continue
			}
			p("| %s | %s | %s | %s | %s | %s | %s |\n", x.Name, x.Source, secs(x.Median), minMax(&x), rate(im.Size, x.Median), secs(x.MedianCPU), rss(x.MaxRSSKiB))
		}
		p("\n")
	}

	if r.Config.Floors {
		p("## Distance from the floor\n\n")
		p("On %d cores a pipelined writer can at best take as long as its slowest stage: floor = max(Go decode, data write), where hashing may run beside the decoder on another core; Go decode + sha256 (one goroutine, one after the other) is shown for reference. Data write is `dd conv=sparse oflag=direct` of the raw image onto the discarded target (the image's data blocks only); all-bytes write is the same without conv=sparse.\n\n", r.Machine.CPUs)
		p("| image | source | writer | writer s | Go decode s | Go decode + sha256 s | data write s | all-bytes write s | floor s | writer ÷ floor |\n|---|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, im := range r.Images {
			for _, src := range []string{"zst", "gz"} {
				for _, v := range r.bootyVariants() {
					bt := r.find(im.Name, v, src)
					name := "Go " + map[string]string{"zst": "zstd", "gz": "gzip"}[src]
					d := r.find(im.Name, name, src)
					dh := r.find(im.Name, name+" + sha256", src)
					w := r.find(im.Name, "dd raw, data only", "raw")
					all := r.find(im.Name, "dd raw, all bytes", "raw")
					if bt == nil || d == nil || dh == nil || w == nil || all == nil {
						continue
					}
					floor := max(d.Median, w.Median)
					p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n", im.Name, src, v, secs(bt.Median), secs(d.Median), secs(dh.Median),
						secs(w.Median), secs(all.Median), secs(floor), bt.Median/floor)
				}
			}
		}
		p("\n")
	}

	p("## Targets\n\n")
	if len(r.Targets) == 0 {
		p("Nothing to check (an image or a contender is missing).\n\n")
	} else {
		p("| target | measured | limit | |\n|---|--:|--:|---|\n")
		for _, t := range r.Targets {
			mark := "**FAIL**"
			if t.Pass {
				mark = "PASS"
			}
			if t.Unit == "x" {
				p("| %s | %.3fx | ≤ %.1fx | %s |\n", t.What, t.Measured, t.Limit, mark)
			} else {
				p("| %s | %.1f MiB | < %.0f MiB | %s |\n", t.What, t.Measured, t.Limit, mark)
			}
		}
		p("\n")
	}

	p("## Noise\n\n")
	var loud []string
	for _, x := range r.Results {
		if len(x.Samples) > 1 && spread(&x) > noisy {
			loud = append(loud, fmt.Sprintf("%s %s (%s): %.0f%%", x.Image, x.Name, x.Source, 100*spread(&x)))
		}
	}
	p("The machine is shared with other engineers' builds and tests, so figures can move between runs; the load average above shows how busy it was. ")
	if len(loud) > 0 {
		p("These figures spread by more than %.0f%% of their median between runs and are less certain than the rest: %s.\n", noisy*100, strings.Join(loud, "; "))
	} else if r.Config.Runs > 1 {
		p("No figure spread by more than %.0f%% of its median between runs.\n", noisy*100)
	} else {
		p("One run each: no spread to show.\n")
	}
	p("\n## Commands\n\n`$URL` is the loopback server, `$IMAGES` the image directory, `$DEV` the loop device.\n\n")
	seen := map[string]bool{}
	for _, x := range r.Results {
		k := x.Name + "|" + x.Source
		if seen[k] {
			continue
		}
		seen[k] = true
		p("- %s (%s): `%s`\n", x.Name, x.Source, x.Command)
	}
	return b.String()
}

func secs(s float64) string {
	if s == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", s)
}

func minMax(x *result) string {
	if x.Median == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f–%.2f", x.Min, x.Max)
}

func rate(size int64, s float64) string {
	if s == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", float64(size)/mib/s)
}

func rss(kib int64) string {
	if kib == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(kib)/1024)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "**off**"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// render reads the results.json of an earlier run and writes its report
// again into dir, with the current report code.
func render(results, dir string) error {
	js, err := os.ReadFile(results)
	if err != nil {
		return fmt.Errorf("render report: %w", err)
	}
	var r report
	if err := json.Unmarshal(js, &r); err != nil {
		return fmt.Errorf("render report: parse %s: %w", results, err)
	}
	return r.write(dir)
}
