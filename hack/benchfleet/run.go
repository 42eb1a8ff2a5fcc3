package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

// runEnv is what every run shares: flags, work directory, operator token,
// the PostgreSQL server once started.
type runEnv struct {
	c         config
	dir       string
	tokenFile string
	token     string
	log       *slog.Logger
	pg        *bmdbtest.Server
	runs      int
}

func (e *runEnv) stopPostgres() {
	if e.pg != nil {
		e.pg.Stop()
		e.pg = nil
	}
}

// scenario is one run.
type scenario struct {
	name     string
	engine   string // sqlite, postgres
	agents   int
	replicas int
	duration time.Duration
	goal     bool // held to the 10,000-agent goal
	step     bool
	// noPoll: agents ask for a command every heartbeat interval instead of
	// holding a long poll (a diagnostic of what held connections cost).
	noPoll bool
}

// result is what one run measured.
type result struct {
	sc                     scenario
	err                    error
	setup, steady          []endpointStats
	registerTook           time.Duration
	enrollTook             time.Duration
	window                 time.Duration
	peakRSS, endRSS        []int64
	dbBytes                int64
	provisionsIssued       int
	provisioned            int64
	heartbeatRate          float64
	heartbeatGoal          float64
	enrolled               int
	dbDesc                 string
	provisionIssueFailures int
	load                   string // /proc/loadavg at the end of the steady phase
	cost                   cost
}

// loadAvg is the 1, 5 and 15 minute load averages: the machine is shared.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// meetsP99 says whether every steady endpoint held to a latency has p99
// under goal.
func (r result) meetsP99(goal time.Duration) bool {
	if r.err != nil {
		return false
	}
	for _, s := range r.steady {
		if !latencyExempt[s.Endpoint] && s.P99 >= goal {
			return false
		}
	}
	return true
}

// worstP99 is the highest p99 of the endpoints held to a latency.
func (r result) worstP99() (time.Duration, string) {
	var worst time.Duration
	ep := ""
	for _, s := range r.steady {
		if !latencyExempt[s.Endpoint] && s.P99 > worst {
			worst, ep = s.P99, s.Endpoint
		}
	}
	return worst, ep
}

// serverErrors counts 5xx answers and transport errors in the steady phase.
func (r result) serverErrors() int {
	n := 0
	for _, s := range r.steady {
		for k, v := range s.Outcomes {
			if strings.HasPrefix(k, "5") || strings.HasPrefix(k, "error") {
				n += v
			}
		}
	}
	return n
}

// runOne runs one scenario: database, bootyd replicas, registration of
// every machine, enrollment of every agent, then the measured steady phase.
func (e *runEnv) runOne(ctx context.Context, sc scenario) (r result) {
	r.sc = sc
	e.runs++
	e.log.Info("run", "scenario", sc.name, "agents", sc.agents, "replicas", sc.replicas, "duration", sc.duration)
	defer func() {
		if r.err != nil {
			e.log.Error("run failed", "scenario", sc.name, "err", r.err)
		}
	}()
	runDir := filepath.Join(e.dir, "run"+strconv.Itoa(e.runs))
	var dsn, dbName, sqlitePath string
	switch sc.engine {
	case "sqlite":
		sqlitePath = filepath.Join(runDir, "bmdb.db")
		dsn = sqlitePath
		r.dbDesc = "SQLite (WAL, synchronous=NORMAL), one file"
	case "postgres":
		if e.pg == nil {
			pg, err := bmdbtest.StartWith(bmdbtest.StartOptions{Durable: e.c.pgDurable, TrackStatements: true})
			if err != nil {
				r.err = fmt.Errorf("start PostgreSQL: %w", err)
				return r
			}
			e.pg = pg
		}
		dbName = "fleet" + strconv.Itoa(e.runs)
		var err error
		if dsn, err = e.pg.CreateDatabase(ctx, dbName); err != nil {
			r.err = err
			return r
		}
		r.dbDesc = "PostgreSQL on a unix socket"
		if e.c.pgDurable {
			r.dbDesc += " (fsync on, synchronous_commit on)"
		} else {
			r.dbDesc += " (fsync off, synchronous_commit off)"
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var servers []*bootyd
	defer func() {
		for _, b := range servers {
			b.stop()
		}
	}()
	for i := 0; i < sc.replicas; i++ {
		var env []string
		if e.c.bootydEnv != "" {
			env = strings.Split(e.c.bootydEnv, ",")
		}
		name := fmt.Sprintf("bootyd%d", i+1)
		bdsn := dsn
		if sc.engine == "postgres" {
			bdsn += "&application_name=" + name // its connections, in pg_stat_activity
		}
		b, err := startBootyd(rctx, e.c.bootyd, name, runDir, bdsn, e.tokenFile, env, e.c.pprofDir != "")
		if err != nil {
			r.err = err
			return r
		}
		servers = append(servers, b)
	}

	k := max(1, (2*sc.agents+19999)/20000)
	transports := newTransports(k, sc.agents)
	defer func() {
		for _, t := range transports {
			t.CloseIdleConnections()
		}
	}()
	setupRec := newRecorder(time.Time{})
	pollWait := e.c.pollWait
	if sc.noPoll {
		pollWait = 0
	}
	g := &gen{rec: setupRec, operator: e.token, heartbeat: e.c.heartbeat, pollWait: pollWait, writeTime: e.c.writeTime,
		imageBytes: 4 << 30, steps: []string{"load-config", "select-disk", "wipe-signatures", "stream-image", "grow-partition", "configure", "boot-entry", "handoff"}}
	agents := make([]*agent, sc.agents)
	for i := range agents {
		agents[i] = &agent{idx: i, name: fmt.Sprintf("fleet-%05d", i), mac: macOf(i), server: servers[i%len(servers)].url,
			hc:        &http.Client{Transport: transports[i%k], Timeout: e.c.pollWait + 30*time.Second},
			inspected: make(chan struct{}), stopped: make(chan struct{})}
	}
	opClient := &http.Client{Transport: transports[0], Timeout: 60 * time.Second}

	// Setup 1: the operator registers every machine with its spec.
	sum := "sha256:" + strings.Repeat("5e", 32)
	start := time.Now()
	err := parallel(rctx, sc.agents, e.c.registerConc, func(i int) error {
		a := agents[i]
		_, err := g.call(rctx, opClient, epRegister, http.MethodPost, servers[0].url+"/v1/machines", e.token, api.RegisterRequest{
			Name: a.name, BootMAC: a.mac, Labels: map[string]string{"rack": fmt.Sprintf("r%02d", i%40)},
			Spec: api.MachineSpec{Image: api.ImageSpec{URL: servers[0].url + "/files/debian.raw.zst", Checksum: sum},
				Hostname: a.name, RootDeviceHints: &api.RootDeviceHints{MinSizeGigabytes: 100}},
		}, nil)
		return err
	})
	r.registerTook = time.Since(start)
	if err != nil {
		r.err = fmt.Errorf("register machines: %w", err)
		r.setup = setupRec.snapshot(r.registerTook)
		return r
	}
	e.log.Info("registered", "machines", sc.agents, "took", r.registerTook.Round(time.Millisecond))

	// Setup 2: every agent enrolls.
	start = time.Now()
	err = parallel(rctx, sc.agents, e.c.enrollConc, func(i int) error { return g.enroll(rctx, agents[i]) })
	r.enrollTook = time.Since(start)
	r.setup = setupRec.snapshot(0)
	if err != nil {
		r.err = fmt.Errorf("enroll agents: %w", err)
		return r
	}
	r.enrolled = sc.agents
	e.log.Info("enrolled", "agents", sc.agents, "took", r.enrollTook.Round(time.Millisecond))

	// Steady phase: heartbeats, long polls, the operator's provisions and watch.
	// The measured window starts after a warm-up of one heartbeat interval,
	// when every agent heartbeats and long-polls.
	warmup := e.c.heartbeat
	rec := newRecorder(time.Now().Add(warmup))
	g.rec = rec
	steadyCtx, stopSteady := context.WithTimeout(rctx, warmup+sc.duration)
	defer stopSteady()
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(2)
		// Agents boot at different times: their heartbeats and long polls
		// are spread over an interval, not in lockstep.
		first, firstPoll := rand.N(e.c.heartbeat), rand.N(e.c.heartbeat)
		go func() { defer wg.Done(); g.heartbeats(steadyCtx, a, first) }()
		go func() { defer wg.Done(); g.commands(steadyCtx, a, firstPoll) }()
	}
	provisions := min(sc.agents, max(1, sc.agents/100))
	if e.c.provisions > 0 && !sc.step {
		provisions = min(sc.agents, e.c.provisions)
	}
	r.provisionsIssued = provisions
	var issueFailures int
	var ifMu sync.Mutex
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Spread the provisions over the first half of the phase, leaving
		// time for the writes to end.
		select {
		case <-steadyCtx.Done():
			return
		case <-time.After(warmup):
		}
		spread := max(sc.duration/2-e.c.writeTime/2, time.Second)
		perm := rand.Perm(sc.agents)[:provisions]
		var pwg sync.WaitGroup
		for j, i := range perm {
			select {
			case <-steadyCtx.Done():
				return
			case <-time.After(spread / time.Duration(provisions)):
			}
			_ = j
			pwg.Add(1)
			go func(a *agent) {
				defer pwg.Done()
				if err := e.operate(steadyCtx, g, opClient, servers[0].url, a); err != nil && steadyCtx.Err() == nil {
					ifMu.Lock()
					issueFailures++
					ifMu.Unlock()
					e.log.Warn("operator", "machine", a.name, "err", err)
				}
			}(agents[i])
		}
		pwg.Wait()
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(e.c.watchInterval)
		defer t.Stop()
		for {
			select {
			case <-steadyCtx.Done():
				return
			case <-t.C:
			}
			g.call(steadyCtx, opClient, epList, http.MethodGet, servers[0].url+"/v1/machines?state=provisioning", e.token, nil, nil)
		}
	}()
	meter := newCostMeter(rctx, servers, e.pg, dbName)
	defer meter.close()
	startCost := make(chan costSample, 1)
	go func() {
		select {
		case <-steadyCtx.Done():
		case <-time.After(warmup):
		}
		startCost <- meter.sample(rctx, true)
	}()
	if e.c.pprofDir != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.profile(steadyCtx, servers, fmt.Sprintf("run%d-%s", e.runs, strings.ReplaceAll(sc.name, " ", "_")), warmup, sc.duration)
		}()
	}
	<-steadyCtx.Done()
	r.window = time.Since(rec.from)
	r.load = loadAvg()
	endCost := meter.sample(rctx, false)
	r.cost.conns = meter.connections(rctx)
	r.cost.calls = meter.totalCalls(rctx)
	r.cost.top, _ = meter.statements(rctx, 16)
	begin := <-startCost
	for i := range endCost.bootyd {
		r.cost.bootydCPU = append(r.cost.bootydCPU, endCost.bootyd[i]-begin.bootyd[i])
	}
	r.cost.postgresCPU = endCost.postgres - begin.postgres
	r.cost.xacts = endCost.xacts - begin.xacts
	r.cost.sessions = endCost.sessions - begin.sessions
	// Measure the database before the agents' last requests drain.
	if sqlitePath != "" {
		r.dbBytes = fileSizes(sqlitePath)
	} else if n, err := e.pg.DatabaseSize(context.Background(), dbName); err == nil {
		r.dbBytes = n
	}
	for _, b := range servers {
		p, l := b.rss()
		r.peakRSS = append(r.peakRSS, p)
		r.endRSS = append(r.endRSS, l)
	}
	waitBounded(&wg, 30*time.Second)
	r.steady = rec.snapshot(r.window)
	for _, s := range r.steady {
		if s.Endpoint != epCmdDelivery {
			r.cost.requests += s.Count
		}
	}
	r.provisioned = g.provisioned.Load()
	r.provisionIssueFailures = issueFailures
	for _, s := range r.steady {
		if s.Endpoint == epHeartbeat {
			r.heartbeatRate = float64(s.ok()) / r.window.Seconds()
		}
	}
	r.heartbeatGoal = float64(sc.agents) / e.c.heartbeat.Seconds()
	for _, b := range servers {
		select {
		case err := <-b.done:
			r.err = errors.Join(r.err, fmt.Errorf("%s exited during the run: %v\n%s", b.name, err, b.stderr()))
		default:
		}
	}
	e.log.Info("run done", "scenario", sc.name, "heartbeats/s", fmt.Sprintf("%.0f", r.heartbeatRate), "provisioned", r.provisioned)
	return r
}

// operate is the operator's side of one provision: inspect the machine,
// wait for the agent's inspection, provision it.
func (e *runEnv) operate(ctx context.Context, g *gen, hc *http.Client, server string, a *agent) error {
	a.issued.Store(time.Now().UnixNano())
	if _, err := g.call(ctx, hc, epInspect, http.MethodPost, server+"/v1/machines/"+a.name+"/inspect", e.token, api.ActionRequest{Message: "bench"}, nil); err != nil {
		a.issued.Store(0)
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-a.inspected:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("machine %s: no inspection within 60s", a.name)
	}
	a.issued.Store(time.Now().UnixNano())
	if _, err := g.call(ctx, hc, epProvision, http.MethodPost, server+"/v1/machines/"+a.name+"/provision", e.token, api.ProvisionRequest{Message: "bench"}, nil); err != nil {
		a.issued.Store(0)
		return err
	}
	return nil
}

// parallel runs f(0..n-1) with at most conc at once; the first error stops
// new calls and is returned.
func parallel(ctx context.Context, n, conc int, f func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idx := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := f(i); err != nil {
					cancel(fmt.Errorf("item %d: %w", i, err))
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case idx <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(idx)
	wg.Wait()
	return context.Cause(ctx)
}

// waitBounded waits for wg at most d.
func waitBounded(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// profile takes each bootyd's CPU profile over the second quarter of the
// measured phase, then its heap and goroutines at the middle, into
// -pprof DIR as <prefix>-<bootyd>-{cpu,heap,goroutine}.pprof and -heap.txt. Failures are
// logged: profiles are a diagnostic, not part of the verdict.
func (e *runEnv) profile(ctx context.Context, servers []*bootyd, prefix string, warmup, d time.Duration) {
	if err := os.MkdirAll(e.c.pprofDir, 0o755); err != nil {
		e.log.Warn("profiles", "err", err)
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(warmup + d/4):
	}
	var pw sync.WaitGroup
	for _, b := range servers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			base := filepath.Join(e.c.pprofDir, prefix+"-"+b.name)
			secs := max(1, int(d/4/time.Second))
			for _, p := range []struct{ path, file string }{
				{fmt.Sprintf("profile?seconds=%d", secs), base + "-cpu.pprof"},
				{"heap", base + "-heap.pprof"},
				{"heap?debug=1", base + "-heap.txt"}, // ends with runtime.MemStats: heap, stacks, GC
				{"goroutine", base + "-goroutine.pprof"},
			} {
				if err := b.saveProfile(ctx, p.path, p.file); err != nil {
					e.log.Warn("profiles", "err", err)
					return
				}
			}
			e.log.Info("profiles saved", "bootyd", b.name, "to", base+"-*.pprof")
		}()
	}
	pw.Wait()
}
