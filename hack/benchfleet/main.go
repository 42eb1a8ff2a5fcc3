// Command benchfleet is `make bench-fleet`: it runs bootyd (the built
// binary) on loopback and a fleet of simulated booty agents against it, and
// writes out/bench/fleet.md. The agents enroll, heartbeat every 10 s (10,000
// agents ≈ 1,000 heartbeats/s), long-poll for commands, and the ones the
// simulated operator provisions report steps, progress and logs as a real
// provision does. It measures throughput, p50/p99 latency per endpoint,
// bootyd's RSS (/proc) and the database's size, for: one bootyd on SQLite;
// two bootyd replicas sharing one PostgreSQL (started like the BMDB tests
// start it), the agents split between them; and fleets of growing size on
// SQLite until the p99 goal is missed.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	bootyd        string
	out           string
	agents        int
	duration      time.Duration
	heartbeat     time.Duration
	pollWait      time.Duration
	provisions    int
	writeTime     time.Duration
	scenarios     string
	steps         string
	stepDuration  time.Duration
	enrollConc    int
	goalP99       time.Duration
	goalRSS       int64
	pgDurable     bool
	keepDir       bool
	registerConc  int
	watchInterval time.Duration
	bootydEnv     string
	pprofDir      string
}

func main() {
	var c config
	flag.StringVar(&c.bootyd, "bootyd", "out/bootyd", "the bootyd binary to run")
	flag.StringVar(&c.out, "out", "out/bench", "directory of the report (fleet.md)")
	flag.IntVar(&c.agents, "agents", 10000, "simulated agents of the SQLite and PostgreSQL runs")
	flag.DurationVar(&c.duration, "duration", 60*time.Second, "length of the measured steady phase of each run")
	flag.DurationVar(&c.heartbeat, "heartbeat", 10*time.Second, "heartbeat interval of each agent (±10 % jitter)")
	flag.DurationVar(&c.pollWait, "poll-wait", 30*time.Second, "wait= of each agent's command long poll; 0: no long poll, agents ask for a command every heartbeat interval (a diagnostic: what the held connections cost)")
	flag.IntVar(&c.provisions, "provisions", 0, "machines the operator provisions during each run (default: 1 % of the agents)")
	flag.DurationVar(&c.writeTime, "write-time", 20*time.Second, "how long a simulated image write takes")
	flag.StringVar(&c.scenarios, "scenarios", "sqlite,postgres,stepup,nopoll", "runs, comma separated: sqlite, postgres, stepup, nopoll (SQLite without long polls: what the held connections cost)")
	flag.StringVar(&c.steps, "step-agents", "12500,15000,17500,20000,30000", "fleet sizes of the step-up runs on SQLite, ascending; it stops at the first that misses the p99 goal and skips those RLIMIT_NOFILE cannot hold")
	flag.DurationVar(&c.stepDuration, "step-duration", 30*time.Second, "steady phase of each step-up run")
	flag.IntVar(&c.enrollConc, "enroll-concurrency", 32, "agents enrolling at once (setup)")
	flag.IntVar(&c.registerConc, "register-concurrency", 16, "operator registrations at once (setup)")
	flag.DurationVar(&c.watchInterval, "watch-interval", time.Second, "how often the simulated operator lists provisioning machines (as bootyctl machines watch --state provisioning)")
	flag.DurationVar(&c.goalP99, "goal-p99", 100*time.Millisecond, "p99 latency goal of every endpoint in the steady phase")
	goalRSSMiB := flag.Int64("goal-rss-mib", 512, "bootyd RSS goal, MiB")
	flag.BoolVar(&c.pgDurable, "pg-durable", true, "run PostgreSQL with fsync and synchronous commit, as in production")
	flag.StringVar(&c.bootydEnv, "bootyd-env", "", "extra environment of bootyd, comma separated KEY=VALUE (e.g. GOMEMLIMIT=384MiB)")
	flag.StringVar(&c.pprofDir, "pprof", "", "directory for profiles of each bootyd (served with --debug-pprof-listen on loopback): heap and goroutines at the middle of each steady phase, CPU over its second quarter")
	flag.BoolVar(&c.keepDir, "keep", false, "keep the work directory (databases, bootyd logs)")
	flag.Parse()
	c.goalRSS = *goalRSSMiB << 20
	if c.provisions == 0 {
		c.provisions = max(1, c.agents/100)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log, os.Stdout); err != nil {
		log.Error("bench-fleet", "err", err)
		os.Exit(1)
	}
}

// checkConfig validates the flags; every error names the flag.
func checkConfig(c config) ([]int, []string, error) {
	if _, err := os.Stat(c.bootyd); err != nil {
		return nil, nil, fmt.Errorf("-bootyd %s: %w (run make build)", c.bootyd, err)
	}
	if c.agents < 1 {
		return nil, nil, fmt.Errorf("-agents %d: want 1 or more", c.agents)
	}
	if c.heartbeat < time.Second || (c.pollWait != 0 && c.pollWait < time.Second) || c.pollWait > 60*time.Second {
		return nil, nil, fmt.Errorf("-heartbeat %s, -poll-wait %s: want a heartbeat of 1s or more, a poll wait of 0 or 1s to 60s", c.heartbeat, c.pollWait)
	}
	if c.duration < 10*time.Second || c.stepDuration < 10*time.Second {
		return nil, nil, fmt.Errorf("-duration %s, -step-duration %s: want 10s or more", c.duration, c.stepDuration)
	}
	var steps []int
	for _, s := range strings.Split(c.steps, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || (len(steps) > 0 && n <= steps[len(steps)-1]) {
			return nil, nil, fmt.Errorf("-step-agents %q: want ascending counts, comma separated", c.steps)
		}
		steps = append(steps, n)
	}
	if c.bootydEnv != "" {
		for _, kv := range strings.Split(c.bootydEnv, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return nil, nil, fmt.Errorf("-bootyd-env %q: want KEY=VALUE[,KEY=VALUE…]", c.bootydEnv)
			}
		}
	}
	var scen []string
	for _, s := range strings.Split(c.scenarios, ",") {
		switch s = strings.TrimSpace(s); s {
		case "sqlite", "postgres", "stepup", "nopoll":
			scen = append(scen, s)
		case "":
		default:
			return nil, nil, fmt.Errorf("-scenarios %q: want sqlite, postgres, stepup or nopoll, comma separated", c.scenarios)
		}
	}
	return steps, scen, nil
}

// run runs the chosen scenarios and writes the report.
func run(ctx context.Context, c config, log *slog.Logger, stdout io.Writer) error {
	steps, scen, err := checkConfig(c)
	if err != nil {
		return err
	}
	maxAgents := c.agents
	if len(steps) > 0 {
		maxAgents = max(maxAgents, steps[len(steps)-1])
	}
	nofile, err := raiseNoFile(uint64(2*maxAgents + fdReserve))
	if err != nil {
		return err
	}
	fdAgents := int(nofile) - fdReserve
	if c.agents > fdAgents {
		return fmt.Errorf("-agents %d: RLIMIT_NOFILE is %d here (its hard limit; raising it needs CAP_SYS_RESOURCE), enough for %d agents: each agent's long poll holds a connection in bootyd and in the generator", c.agents, nofile, fdAgents)
	}
	dir, err := os.MkdirTemp("", "benchfleet-")
	if err != nil {
		return err
	}
	if c.keepDir {
		log.Info("work directory kept", "dir", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	tok := make([]byte, 24)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	tokenFile := filepath.Join(dir, "operator-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	env := runEnv{c: c, dir: dir, tokenFile: tokenFile, token: token, log: log}
	rep := report{c: c, started: time.Now(), nofile: nofile, fdAgents: fdAgents}
	for _, s := range scen {
		switch s {
		case "sqlite":
			rep.results = append(rep.results, env.runOne(ctx, scenario{name: "SQLite, one bootyd", engine: "sqlite", agents: c.agents, replicas: 1, duration: c.duration, goal: true}))
		case "postgres":
			rep.results = append(rep.results, env.runOne(ctx, scenario{name: "PostgreSQL, two bootyd replicas", engine: "postgres", agents: c.agents, replicas: 2, duration: c.duration, goal: true}))
		case "nopoll":
			rep.results = append(rep.results, env.runOne(ctx, scenario{name: "diagnostic: SQLite, one bootyd, no long polls", engine: "sqlite", agents: c.agents, replicas: 1, duration: c.duration, noPoll: true}))
		case "stepup":
			for _, n := range steps {
				if n > fdAgents {
					rep.skipped = append(rep.skipped, n)
					continue
				}
				r := env.runOne(ctx, scenario{name: fmt.Sprintf("step-up: %d agents on SQLite", n), engine: "sqlite", agents: n, replicas: 1, duration: c.stepDuration, step: true})
				rep.steps = append(rep.steps, r)
				if r.err != nil || !r.meetsP99(c.goalP99) {
					break
				}
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	env.stopPostgres()
	rep.finished = time.Now()
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(c.out, "fleet.md")
	md := rep.markdown()
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, md)
	log.Info("report written", "path", path)
	for _, r := range rep.results {
		if r.err != nil {
			return errors.Join(errors.New("a run failed; see the report"), r.err)
		}
	}
	return nil
}

// raiseNoFile raises RLIMIT_NOFILE's soft limit to n, and the hard limit
// too when the process may (CAP_SYS_RESOURCE); else to the hard limit. It
// returns the limit in force. bootyd, a child, inherits it.
func raiseNoFile(n uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if l.Cur >= n {
		return l.Cur, nil
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, l.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
		return n, nil
	}
	want = syscall.Rlimit{Cur: l.Max, Max: l.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return 0, fmt.Errorf("raise RLIMIT_NOFILE to its hard limit %d: %w", l.Max, err)
	}
	return l.Max, nil
}

// fdReserve is what a process needs beyond one descriptor per agent (each
// agent's long poll holds a connection in the generator and in bootyd).
const fdReserve = 1500
