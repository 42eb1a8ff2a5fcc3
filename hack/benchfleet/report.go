package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/humanize"
)

// report is out/bench/fleet.md.
type report struct {
	c                 config
	started, finished time.Time
	results           []result
	steps             []result
	// nofile is RLIMIT_NOFILE in force; fdAgents the fleet it holds;
	// skipped the step sizes above it.
	nofile   uint64
	fdAgents int
	skipped  []int
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown"
}

func gitDescribe() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func (rep report) markdown() string {
	var b strings.Builder
	c := rep.c
	fmt.Fprintf(&b, "# `make bench-fleet`: bootyd under a simulated fleet\n\n")
	fmt.Fprintf(&b, "Run %s, %s (commit %s), on %d CPUs (%s), %s. bootyd: `%s`.\n\n",
		rep.started.UTC().Format(time.RFC3339), humanize.Duration(rep.finished.Sub(rep.started).Round(time.Second)), gitDescribe(),
		runtime.NumCPU(), cpuModel(), runtime.Version(), c.bootyd)
	if c.bootydEnv != "" {
		fmt.Fprintf(&b, "bootyd's extra environment: `%s`.\n\n", c.bootydEnv)
	}
	poll := fmt.Sprintf("long-polls for a command (wait=%s)", c.pollWait)
	if c.pollWait == 0 {
		poll = fmt.Sprintf("asks for a command every %s (no long poll: -poll-wait 0)", c.heartbeat)
	}
	fmt.Fprintf(&b, "Each simulated agent enrolls, heartbeats every %s (±10 %% jitter) and %s. "+
		"The simulated operator registered every machine first; during the steady phase it inspects and provisions 1 %% of the fleet "+
		"(each agent then reports %d steps, progress every second and 10 log lines every 2 s over a %s image write, then the result), "+
		"and lists the provisioning machines every %s as `bootyctl machines watch --state provisioning` does. "+
		"Everything runs on loopback; the generator shares the CPUs with bootyd and the database.\n\n",
		c.heartbeat, poll, 8, c.writeTime, c.watchInterval)
	fmt.Fprintf(&b, "Goal: %d agents at %.0f heartbeats/s with p99 < %s on every endpoint and bootyd RSS < %s, on SQLite and on two replicas sharing PostgreSQL.\n\n",
		c.agents, float64(c.agents)/c.heartbeat.Seconds(), c.goalP99, humanize.Bytes(c.goalRSS))

	b.WriteString("## Verdict\n\n| run | heartbeats/s | worst p99 (endpoint) | peak RSS | DB size | provisioned | 5xx/errors | result |\n|---|---|---|---|---|---|---|---|\n")
	all := append(append([]result{}, rep.results...), rep.steps...)
	for _, r := range all {
		worst, ep := r.worstP99()
		rss := []string{}
		for _, p := range r.peakRSS {
			rss = append(rss, humanize.Bytes(p))
		}
		fmt.Fprintf(&b, "| %s | %.0f of %.0f | %s (%s) | %s | %s | %d of %d | %d | %s |\n", r.sc.name, r.heartbeatRate, r.heartbeatGoal,
			ms(worst), ep, strings.Join(rss, " + "), humanize.Bytes(r.dbBytes), r.provisioned, r.provisionsIssued, r.serverErrors(), r.verdict(c))
	}
	sqliteRuns := 0
	for _, r := range all {
		if r.sc.engine == "sqlite" && !r.sc.noPoll {
			sqliteRuns++
		}
	}
	if sqliteRuns > 0 {
		largest := 0
		for _, r := range all {
			if r.sc.engine == "sqlite" && !r.sc.noPoll && r.meetsP99(c.goalP99) && r.serverErrors() == 0 && r.sc.agents > largest {
				largest = r.sc.agents
			}
		}
		last := all[len(all)-1]
		if largest == 0 {
			fmt.Fprintf(&b, "\nLargest fleet on SQLite with every p99 under %s: **none of the fleets run**.\n", c.goalP99)
		} else {
			fmt.Fprintf(&b, "\nLargest fleet on SQLite with every p99 under %s: **%d agents**", c.goalP99, largest)
			if last.sc.step && last.meetsP99(c.goalP99) {
				fmt.Fprintf(&b, " (the largest step run; it may hold more)")
			}
			b.WriteString(".\n")
		}
	}
	if len(rep.skipped) > 0 {
		fmt.Fprintf(&b, "\nNot run: step-up to %v agents. RLIMIT_NOFILE here is %d and cannot be raised (no CAP_SYS_RESOURCE), "+
			"which holds at most %d agents: every agent's long poll keeps a connection open in bootyd and in the generator. "+
			"Where the limit can be raised (root with CAP_SYS_RESOURCE, or `ulimit -Hn`), the generator raises it itself.\n", rep.skipped, rep.nofile, rep.fdAgents)
	}

	for _, r := range all {
		fmt.Fprintf(&b, "\n## %s\n\n", r.sc.name)
		fmt.Fprintf(&b, "%d agents, %d bootyd, %s. ", r.sc.agents, r.sc.replicas, r.dbDesc)
		if r.sc.noPoll {
			fmt.Fprintf(&b, "No agent holds a long poll: each asks for a command (wait=0) every %s, so commands arrive up to that late; everything else as in the SQLite run. When the CPU keeps up (no queued requests), the difference in RSS from that run is what bootyd spends on held long polls. ", c.heartbeat)
		}
		if r.err != nil {
			fmt.Fprintf(&b, "\n\n**The run failed:** `%s`\n", strings.ReplaceAll(firstLine(r.err.Error()), "`", "'"))
		}
		fmt.Fprintf(&b, "Setup: registering took %s, enrolling %s. Measured steady phase: %s after a warm-up of %s. Load average at its end: %s (%d CPUs, shared).\n\n",
			r.registerTook.Round(time.Millisecond), r.enrollTook.Round(time.Millisecond), r.window.Round(time.Millisecond), c.heartbeat, r.load, runtime.NumCPU())
		for i := range r.peakRSS {
			fmt.Fprintf(&b, "- bootyd%d RSS: peak %s, at the end %s\n", i+1, humanize.Bytes(r.peakRSS[i]), humanize.Bytes(r.endRSS[i]))
		}
		fmt.Fprintf(&b, "- database size at the end: %s\n", humanize.Bytes(r.dbBytes))
		fmt.Fprintf(&b, "- provisions: %d issued, %d reported done", r.provisionsIssued, r.provisioned)
		if r.provisionIssueFailures > 0 {
			fmt.Fprintf(&b, ", %d could not be issued", r.provisionIssueFailures)
		}
		b.WriteString("\n\n")
		b.WriteString("| phase | endpoint | requests | per second | p50 | p99 | max | non-2xx |\n|---|---|---|---|---|---|---|---|\n")
		for _, s := range r.setup {
			fmt.Fprintf(&b, "| setup | %s | %d | %s | %s | %s | %s | %s |\n", s.Endpoint, s.Count, "-", ms(s.P50), ms(s.P99), ms(s.Max), s.failures())
		}
		for _, s := range r.steady {
			note := ""
			if latencyExempt[s.Endpoint] {
				note = " †"
			}
			fmt.Fprintf(&b, "| steady | %s%s | %d | %.1f | %s | %s | %s | %s |\n", s.Endpoint, note, s.Count, s.Rate, ms(s.P50), ms(s.P99), ms(s.Max), s.failures())
		}
		b.WriteString(r.costMarkdown())
	}
	b.WriteString("\n† a wait, not a latency: a long poll lasts until a command comes or wait= passes; the delivery is the time from the operator's answer to the agent having the command (goal: within 1 s). Neither is held to the p99 goal. " +
		"Setup rows (registering and enrolling the whole fleet at once, as fast as the concurrency flags allow) are a burst no fleet sends and are not held to it either.\n")
	fmt.Fprintf(&b, "\nReproduce: `make bench-fleet` (flags: `make bench-fleet BENCHFLEETFLAGS='-agents 10000 -duration 60s -scenarios sqlite'`; `go run ./hack/benchfleet -h`).\n")
	return b.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// verdict is PASS or FAIL with the reasons, for the runs held to the goal;
// step-up runs only report whether the p99 held.
func (r result) verdict(c config) string {
	if r.err != nil {
		return "FAIL (run failed)"
	}
	var why []string
	if !r.meetsP99(c.goalP99) {
		why = append(why, "p99")
	}
	if r.serverErrors() > 0 {
		why = append(why, "errors")
	}
	if r.sc.goal {
		if r.heartbeatRate < 0.95*r.heartbeatGoal {
			why = append(why, "heartbeat rate")
		}
		for _, p := range r.peakRSS {
			if p >= c.goalRSS {
				why = append(why, "RSS")
				break
			}
		}
		if r.provisioned < int64(r.provisionsIssued) {
			why = append(why, "provisions")
		}
	}
	if len(why) == 0 {
		return "PASS"
	}
	return "FAIL (" + strings.Join(why, ", ") + ")"
}

// costMarkdown says what the steady phase cost in CPU and, on PostgreSQL,
// in transactions and statements, per second and per request.
func (r result) costMarkdown() string {
	c := r.cost
	if c.requests == 0 || r.window <= 0 {
		return ""
	}
	var b strings.Builder
	secs := r.window.Seconds()
	fmt.Fprintf(&b, "\nCost of the steady phase (%d requests, the long polls' included): CPU ", c.requests)
	var total time.Duration
	for i, d := range c.bootydCPU {
		total += d
		fmt.Fprintf(&b, "bootyd%d %.1f s (%.0f %% of a core), ", i+1, d.Seconds(), 100*d.Seconds()/secs)
	}
	fmt.Fprintf(&b, "**%s of bootyd CPU per request**", c.perRequest(total))
	if r.sc.engine == "postgres" {
		fmt.Fprintf(&b, "; PostgreSQL %.1f s (%.0f %% of a core), **%s per request**. "+
			"PostgreSQL committed %d transactions (%.0f/s) and ran %d statements (%.0f/s, **%.2f per request**)",
			c.postgresCPU.Seconds(), 100*c.postgresCPU.Seconds()/secs, c.perRequest(c.postgresCPU),
			c.xacts, float64(c.xacts)/secs, c.calls, float64(c.calls)/secs, float64(c.calls)/float64(c.requests))
		if len(c.conns) > 0 {
			var names []string
			for k := range c.conns {
				names = append(names, k)
			}
			slices.Sort(names)
			var parts []string
			for _, k := range names {
				name := k
				if name == "" {
					name = "others"
				}
				parts = append(parts, fmt.Sprintf("%s %d", name, c.conns[k]))
			}
			fmt.Fprintf(&b, "; connections at the end: %s; %d opened in the window", strings.Join(parts, ", "), c.sessions)
		}
	}
	b.WriteString(".\n")
	if len(c.top) > 0 {
		b.WriteString("\nPostgreSQL's statements in the steady phase by execution time (pg_stat_statements):\n\n" +
			"| calls/s | per request | mean | share of these rows' time | statement |\n|---|---|---|---|---|\n")
		var sum float64
		for _, s := range c.top {
			sum += s.TotalMS
		}
		for _, s := range c.top {
			mean := 0.0
			if s.Calls > 0 {
				mean = s.TotalMS / float64(s.Calls)
			}
			fmt.Fprintf(&b, "| %.1f | %.3f | %.3f ms | %.0f %% | `%s` |\n", float64(s.Calls)/secs, float64(s.Calls)/float64(c.requests),
				mean, 100*s.TotalMS/max(sum, 1e-9), shortSQL(s.Query, 110))
		}
	}
	return b.String()
}

// shortSQL puts a statement on one line, at most n characters, fit for a
// Markdown table cell.
func shortSQL(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	q = strings.NewReplacer("|", "\\|", "`", "'").Replace(q)
	if len(q) > n {
		q = q[:n] + "…"
	}
	return q
}
