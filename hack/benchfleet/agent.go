package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// Endpoint names in the report.
const (
	epRegister    = "POST /v1/machines (register)"
	epEnroll      = "POST /v1/enroll"
	epHeartbeat   = "POST …/heartbeat"
	epPoll        = "GET …/command (long poll)"
	epResult      = "POST …/command (result)"
	epStatus      = "POST …/status"
	epProgress    = "POST …/progress"
	epLogs        = "POST …/logs"
	epInspect     = "POST /v1/machines/{m}/inspect"
	epProvision   = "POST /v1/machines/{m}/provision"
	epList        = "GET /v1/machines (list, 1 page)"
	epCmdDelivery = "command delivery (issued → agent has it)"
)

// latencyExempt are the endpoints whose duration is a wait, not a latency:
// they are reported but not held to the p99 goal.
var latencyExempt = map[string]bool{epPoll: true, epCmdDelivery: true}

// newTransports builds k shared transports, each dialing from its own
// loopback source address (127.0.0.2, .3, …) so the fleet's connections do
// not exhaust one address's ephemeral ports; connections are reused
// (MaxIdleConnsPerHost covers every agent).
func newTransports(k, agents int) []*http.Transport {
	ts := make([]*http.Transport, k)
	for i := range ts {
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
			LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}}
		ts[i] = &http.Transport{
			DialContext:         d.DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: 2*agents/k + 64,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
	}
	return ts
}

// gen is the load generator of one run: its HTTP clients, the recorder,
// and what the simulated agents do.
type gen struct {
	rec         *recorder
	operator    string // operator token
	heartbeat   time.Duration
	pollWait    time.Duration
	writeTime   time.Duration
	imageBytes  int64
	steps       []string
	provisioned atomic.Int64
	failedCmds  atomic.Int64
}

// call sends one request and records it under endpoint; out, when
// non-nil, receives a 2xx JSON answer. It returns the status code.
func (g *gen) call(ctx context.Context, hc *http.Client, endpoint, method, url, token string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			g.rec.observe(endpoint, time.Since(start), "error: "+shortErr(err))
		}
		return 0, err
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	d := time.Since(start)
	if rerr != nil {
		if ctx.Err() == nil {
			g.rec.observe(endpoint, d, "error: "+shortErr(rerr))
		}
		return 0, rerr
	}
	g.rec.observe(endpoint, d, strconv.Itoa(resp.StatusCode))
	if resp.StatusCode/100 == 2 && out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: decode answer: %w", endpoint, err)
		}
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s: %d %s", endpoint, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode, nil
}

func shortErr(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[len(s)-60:]
	}
	return s
}

// agent is one simulated booty agent.
type agent struct {
	idx    int
	name   string
	mac    string
	server string
	hc     *http.Client
	token  string
	// issued is when the operator's command for this agent was answered
	// (UnixNano), for the delivery latency; inspected is signalled when the
	// inspection was reported.
	issued    atomic.Int64
	inspected chan struct{}
	// stopped ends the heartbeats before the provision's result is sent
	// (bootyd then ends the agent session: the OS boots, the agent is
	// gone); hbMu is held during a heartbeat, so none is in flight then.
	stopped chan struct{}
	hbMu    sync.Mutex
}

// stopHeartbeats ends the heartbeats and waits for one in flight.
func (a *agent) stopHeartbeats() {
	close(a.stopped)
	a.hbMu.Lock()
	a.hbMu.Unlock()
}

func macOf(i int) string {
	return fmt.Sprintf("02:b0:%02x:%02x:%02x:%02x", byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
}

// hardware is the report of a simulated machine: one disk, one NIC.
func hardware(a *agent) *api.HardwareDetails {
	return &api.HardwareDetails{
		RAMMebibytes: 65536,
		CPU:          api.CPU{Arch: "x86_64", Model: "Simulated CPU", Count: 32, ClockMegahertz: 2400},
		NIC:          []api.NIC{{Name: "eth0", MAC: a.mac, PXE: true, SpeedGbps: 25}},
		Storage: []api.Storage{{Name: "/dev/nvme0n1", Type: api.StorageNVMe, SizeBytes: 960 << 30,
			Model: "SIM NVMe", SerialNumber: "SIM" + strconv.Itoa(a.idx), WWN: fmt.Sprintf("eui.%016x", a.idx)}},
	}
}

func (a *agent) url(path string) string { return a.server + "/v1/machines/" + a.mac + path }

// enroll enrolls the agent and keeps its token.
func (g *gen) enroll(ctx context.Context, a *agent) error {
	var er api.EnrollResponse
	if _, err := g.call(ctx, a.hc, epEnroll, http.MethodPost, a.server+"/v1/enroll", "",
		api.EnrollRequest{BootMAC: a.mac, MACs: []string{a.mac}, Hardware: hardware(a)}, &er); err != nil {
		return err
	}
	if er.Token == "" {
		return fmt.Errorf("enroll %s: no token in the answer", a.mac)
	}
	a.token, a.mac = er.Token, er.MAC
	return nil
}

// heartbeats sends a heartbeat every g.heartbeat (±10 % jitter), the first
// after first, until ctx ends or the machine is provisioned.
func (g *gen) heartbeats(ctx context.Context, a *agent, first time.Duration) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.stopped:
			return
		case <-t.C:
		}
		a.hbMu.Lock()
		select {
		case <-a.stopped:
			a.hbMu.Unlock()
			return
		default:
		}
		g.call(ctx, a.hc, epHeartbeat, http.MethodPost, a.url("/heartbeat"), a.token,
			api.Heartbeat{Activity: "waiting", Time: time.Now()}, nil)
		a.hbMu.Unlock()
		j := time.Duration((rand.Float64()*0.2 - 0.1) * float64(g.heartbeat))
		t.Reset(g.heartbeat + j)
	}
}

// commands long-polls for commands, the first poll after first, and runs
// them until ctx ends or the machine is provisioned. A failed poll is
// retried after a backoff.
func (g *gen) commands(ctx context.Context, a *agent, first time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(first):
	}
	backoff := time.Second
	for ctx.Err() == nil {
		var c api.AgentCommand
		code, err := g.call(ctx, a.hc, epPoll, http.MethodGet,
			a.url("/command?wait="+strconv.Itoa(int(g.pollWait/time.Second))), a.token, nil, &c)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff + rand.N(backoff)):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if code == http.StatusNoContent || c.Kind == "" {
			if g.pollWait == 0 {
				// No long poll: ask again a heartbeat interval later.
				select {
				case <-ctx.Done():
					return
				case <-time.After(g.heartbeat):
				}
			}
			continue
		}
		if t := a.issued.Swap(0); t != 0 {
			g.rec.observe(epCmdDelivery, time.Since(time.Unix(0, t)), "200")
		}
		switch c.Kind {
		case api.CommandInspect:
			if _, err := g.call(ctx, a.hc, epResult, http.MethodPost, a.url("/command"), a.token,
				api.CommandResult{Kind: c.Kind, Generation: c.Generation, Hardware: hardware(a)}, nil); err == nil {
				close(a.inspected)
			}
		case api.CommandProvision:
			if g.provision(ctx, a, c.Generation) {
				g.provisioned.Add(1)
			}
			return
		default:
			g.call(ctx, a.hc, epResult, http.MethodPost, a.url("/command"), a.token,
				api.CommandResult{Kind: c.Kind, Generation: c.Generation}, nil)
		}
	}
}

// provision reports a provision as the real agent does: each step started
// and succeeded; during the image write, progress every second and a batch
// of log lines every two; then the command's result. It says whether the
// result was accepted.
func (g *gen) provision(ctx context.Context, a *agent, gen int64) bool {
	n := len(g.steps)
	post := func(ep, path string, body any) bool {
		_, err := g.call(ctx, a.hc, ep, http.MethodPost, a.url(path), a.token, body, nil)
		return err == nil
	}
	for i, step := range g.steps {
		start := time.Now()
		post(epStatus, "/status", api.StatusReport{Step: step, Index: i + 1, Total: n, State: api.StateStarted, Time: start, Generation: gen})
		if step == "stream-image" {
			ticks := int(g.writeTime / time.Second)
			for t := 1; t <= ticks; t++ {
				select {
				case <-ctx.Done():
					return false
				case <-time.After(time.Second):
				}
				done := g.imageBytes * int64(t) / int64(ticks)
				post(epProgress, "/progress", api.ProgressReport{Step: step, BytesDone: done, BytesTotal: g.imageBytes,
					RateBPS: float64(g.imageBytes) / g.writeTime.Seconds(), Time: time.Now(), Generation: gen})
				if t%2 == 0 {
					lines := make([]api.LogLine, 10)
					for k := range lines {
						lines[k] = api.LogLine{Time: time.Now(), Level: "info", Message: fmt.Sprintf("stream-image: wrote %d of %d bytes (extent %d)", done, g.imageBytes, k)}
					}
					post(epLogs, "/logs", api.LogBatch{Lines: lines, Generation: gen})
				}
			}
		}
		post(epStatus, "/status", api.StatusReport{Step: step, Index: i + 1, Total: n, State: api.StateSucceeded,
			DurationMS: time.Since(start).Milliseconds(), Time: time.Now(), Generation: gen})
	}
	a.stopHeartbeats()
	if !post(epResult, "/command", api.CommandResult{Kind: api.CommandProvision, Generation: gen}) {
		g.failedCmds.Add(1)
		return false
	}
	return true
}
