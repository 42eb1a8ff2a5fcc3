package main

import (
	"strings"
	"testing"
)

// TestSummarize: medians per server and load, and the targets' ratios and
// verdicts, from the runs.
func TestSummarize(t *testing.T) {
	r := &report{Config: config{SizeMiB: 256, Clients: 50, RangeMiB: 8, Runs: 3, Agents: 50}, ImageSHA256: strings.Repeat("ab", 32)}
	add := func(server, load string, mibps ...float64) {
		for i, v := range mibps {
			r.Runs = append(r.Runs, runResult{Server: server, Load: load, Round: i + 1, MiBps: v, P50: v / 100, P99: v / 50, PeakRSSMiB: v / 10})
		}
	}
	add(bootydHTTP.Name, loadRange, 900, 1000, 950)
	add(nginxHTTP.Name, loadRange, 1000, 1100, 1200)
	add(bootydTLS.Name, loadRange, 500)
	add(nginxTLS.Name, loadRange, 400)
	add(bootydHTTP.Name, loadAgents, 300)
	add(nginxHTTP.Name, loadAgents, 400)
	r.summarize()

	if len(r.Summary) != 6 {
		t.Fatalf("%d summaries, want 6: %+v", len(r.Summary), r.Summary)
	}
	s := r.Summary[0]
	if s.Server != bootydHTTP.Name || s.Load != loadRange || s.MiBps != 950 || s.Runs != 3 || s.PeakRSSMiB != 100 || s.P99 != 19 {
		t.Errorf("bootyd http range summary %+v", s)
	}
	want := map[string]struct {
		ratio float64
		v     string
	}{
		"range clients, plain HTTP: bootyd ÷ nginx aggregate MiB/s": {950.0 / 1100, "FAIL"},
		"agents, plain HTTP: bootyd ÷ nginx aggregate MiB/s":        {0.75, "FAIL"},
		"range clients, TLS: bootyd ÷ nginx aggregate MiB/s":        {1.25, "(information)"},
		"range clients: bootyd TLS ÷ bootyd plain HTTP":             {500.0 / 950, "(information)"},
	}
	for _, tg := range r.Targets {
		w, ok := want[tg.Name]
		if !ok {
			continue
		}
		delete(want, tg.Name)
		if d := tg.Ratio - w.ratio; d > 1e-9 || d < -1e-9 || tg.verdict() != w.v {
			t.Errorf("%s: %.4f %s, want %.4f %s", tg.Name, tg.Ratio, tg.verdict(), w.ratio, w.v)
		}
	}
	if len(want) > 0 {
		t.Errorf("targets missing: %v", want)
	}
	md := r.markdown()
	for _, s := range []string{"| range clients, plain HTTP: bootyd ÷ nginx aggregate MiB/s | 0.86 | ≥ 0.90 | **FAIL** |", "| bootyd http | 950 | 900, 1000, 950 |"} {
		if !strings.Contains(md, s) {
			t.Errorf("serve.md lacks %q:\n%s", s, md)
		}
	}

	r.Runs[0].MiBps, r.Runs[1].MiBps, r.Runs[2].MiBps = 1100, 1100, 1100
	r.summarize()
	if tg := r.Targets[0]; !tg.Pass || tg.verdict() != "PASS" {
		t.Errorf("bootyd at 1.0 × nginx: %+v %s", tg, tg.verdict())
	}
}
