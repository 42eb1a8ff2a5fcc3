package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/httpfetch"
)

// The agent side of bootyd's fleet protocol (pkg/api/fleet.go): enroll,
// heartbeat, long-poll for a command, report its result.
var (
	// FleetReportBackoff bounds the retries of one step, progress or log
	// report of an enrolled agent: about a minute, so reports outlive a
	// bootyd restart.
	FleetReportBackoff = Backoff{Attempts: 10, Initial: 500 * time.Millisecond, Max: 10 * time.Second}
	// FleetResultBackoff bounds the retries of a command's result, which
	// moves the machine on: about five minutes.
	FleetResultBackoff = Backoff{Attempts: 25, Initial: time.Second, Max: 15 * time.Second}
	// enrollRetry is how long a refused enrollment (another agent session
	// of this machine is live, or bootyd is unreachable) waits before the
	// next try.
	enrollRetry = 5 * time.Second
	// pollRetryMax caps the wait after a failed long poll.
	pollRetryMax = 10 * time.Second
)

// pollWait is the ?wait= of a command long poll; the request's own bound
// is pollWait plus pollSlack.
const (
	pollWait  = 20 * time.Second
	pollSlack = 15 * time.Second
)

// CommandHandoff is returned by ServerProvider.Load when bootyd asked the
// machine to reboot or power off instead of running a config; the result
// is already reported.
type CommandHandoff struct {
	Kind string // api.CommandReboot or api.CommandPowerOff
}

func (c *CommandHandoff) Error() string { return "bootyd asked for " + c.Kind }

// fleetState is the enrollment of this boot.
type fleetState struct {
	id, name string
	cmd      api.AgentCommand // the command being run
	stopHB   context.CancelFunc
}

// enroll posts the machine's MACs and hardware and keeps the token. A
// refused enrollment (409: this machine's last agent session is still
// live) is retried every enrollRetry until ctx ends; transport errors,
// 429 and 5xx within p.Backoff, then they fail naming bootyd; a 404
// (auto-discovery off and the machine unknown) is config.ErrNoConfig.
func (p *ServerProvider) enroll(ctx context.Context, client *http.Client, macs []string) error {
	log := orDiscard(p.Log)
	req := api.EnrollRequest{BootMAC: p.BootMAC, MACs: macs}
	if p.Hardware != nil {
		hw, err := p.Hardware(ctx)
		if err != nil {
			log.Warn("hardware report incomplete", "error", err)
		}
		req.Hardware = hw
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("enroll: encode: %w", err)
	}
	u := strings.TrimRight(p.URL, "/") + "/" + api.Version + "/enroll"
	for {
		resp, err := fetch(ctx, client, p.Backoff, log, "enroll with bootyd", httpfetch.Request{Method: http.MethodPost, URL: u,
			Header: bearer("", "application/json"), Body: body, Idle: p.IdleTimeout},
			func(code int) bool { return code == http.StatusConflict || code == http.StatusNotFound })
		switch {
		case err == nil && resp.Code == http.StatusNotFound:
			return fmt.Errorf("%w: bootyd %s does not know this machine (%s) and discovers none", config.ErrNoConfig, redactURL(p.URL), strings.Join(macs, ", "))
		case err == nil && resp.Code == http.StatusConflict:
			log.Warn("bootyd refused the enrollment: this machine's previous agent session is still live; retrying", "retry_in", enrollRetry)
		case err == nil:
			var en api.EnrollResponse
			if err := json.Unmarshal(resp.Body, &en); err != nil || en.Token == "" || en.MAC == "" {
				return fmt.Errorf("enroll with bootyd %s: bad answer", redactURL(p.URL))
			}
			p.mu.Lock()
			p.rep = reportTarget{base: p.URL, mac: en.MAC, token: en.Token}
			p.ready = true
			p.fleet = &fleetState{id: en.MachineID, name: en.Name}
			p.mu.Unlock()
			log.Info("enrolled with bootyd", "server", redactURL(p.URL), "machine", en.Name, "mac", en.MAC)
			p.startHeartbeat(time.Duration(en.HeartbeatSeconds) * time.Second)
			if p.Enrolled != nil {
				p.Enrolled(p)
			}
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("enroll with bootyd %s: %w", redactURL(p.URL), ctx.Err())
		default:
			return fmt.Errorf("enroll with bootyd %s: %w", redactURL(p.URL), err)
		}
		if !sleepCtx(ctx, enrollRetry) {
			return fmt.Errorf("enroll with bootyd %s: %w", redactURL(p.URL), ctx.Err())
		}
	}
}

// startHeartbeat heartbeats every interval, shortened or lengthened by up
// to a fifth at random so a rack that booted together spreads out. It
// stops when the session is gone (401) or Close is called.
func (p *ServerProvider) startHeartbeat(interval time.Duration) {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	if p.fleet.stopHB != nil {
		p.fleet.stopHB()
	}
	p.fleet.stopHB = cancel
	p.mu.Unlock()
	go func() {
		for {
			d := time.Duration(float64(interval) * (0.8 + 0.4*rand.Float64()))
			if !sleepCtx(ctx, d) {
				return
			}
			code, err := p.post(ctx, "heartbeat", api.Heartbeat{Time: time.Now()}, Backoff{Attempts: 1})
			if code == http.StatusUnauthorized {
				return
			}
			if err != nil && ctx.Err() == nil {
				orDiscard(p.Log).Debug("heartbeat failed", "error", err)
			}
		}
	}()
}

// Close stops the heartbeats.
func (p *ServerProvider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fleet != nil && p.fleet.stopHB != nil {
		p.fleet.stopHB()
	}
}

// post sends v to the agent route {mac}/{what} with the machine token,
// retried within b; it returns the final status code.
func (p *ServerProvider) post(ctx context.Context, what string, v any, b Backoff) (int, error) {
	p.mu.Lock()
	t := p.rep
	p.mu.Unlock()
	body, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("%s: encode: %w", what, err)
	}
	client, err := p.client()
	if err != nil {
		return 0, err
	}
	resp, err := fetch(ctx, client, b, p.Log, what, httpfetch.Request{Method: http.MethodPost, URL: machineURL(t.base, t.mac, what),
		Header: bearer(t.token, "application/json"), Body: body, Idle: p.IdleTimeout}, nil)
	if err != nil {
		var se *httpfetch.StatusError
		if errors.As(err, &se) {
			return se.Code, err
		}
		return 0, err
	}
	return resp.Code, nil
}

// waitCommand long-polls bootyd until a provision or deprovision command
// comes, and returns its config; a config that does not parse is reported
// (load-config failed, the command failed) and returned as the error. Meanwhile it runs inspections (collect
// the hardware, report it) and answers reboot and poweroff with a
// *CommandHandoff after reporting them done. A lost session (401: bootyd
// lost its database, or the session ended) enrolls again. It returns
// when ctx ends.
func (p *ServerProvider) waitCommand(ctx context.Context, client *http.Client, macs []string) (*config.MachineConfig, error) {
	log := orDiscard(p.Log)
	retry := time.Second
	for {
		p.mu.Lock()
		t := p.rep
		p.mu.Unlock()
		u := machineURL(t.base, t.mac, "command") + fmt.Sprintf("?wait=%d", int(pollWait/time.Second))
		rctx, cancel := context.WithTimeout(ctx, pollWait+pollSlack)
		resp, err := fetch(rctx, client, Backoff{Attempts: 1}, log, "wait for a command", httpfetch.Request{URL: u,
			Header: bearer(t.token, ""), Idle: pollWait + pollSlack},
			func(code int) bool { return code == http.StatusNoContent || code == http.StatusUnauthorized })
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wait for a command from bootyd %s: %w", redactURL(p.URL), ctx.Err())
		}
		if err != nil {
			log.Warn("waiting for a command failed; retrying", "error", err, "retry_in", retry)
			if !sleepCtx(ctx, retry) {
				return nil, fmt.Errorf("wait for a command from bootyd %s: %w", redactURL(p.URL), ctx.Err())
			}
			retry = min(2*retry, pollRetryMax)
			continue
		}
		retry = time.Second
		switch resp.Code {
		case http.StatusNoContent:
			continue
		case http.StatusUnauthorized:
			log.Warn("bootyd no longer knows this agent session; enrolling again")
			if err := p.enroll(ctx, client, macs); err != nil {
				return nil, err
			}
			continue
		}
		var cmd api.AgentCommand
		if err := json.Unmarshal(resp.Body, &cmd); err != nil || cmd.Generation <= 0 {
			log.Warn("bootyd sent a command that is not one; ignoring it", "error", err)
			continue
		}
		log.Info("command from bootyd", "command", cmd.Kind, "generation", cmd.Generation)
		p.mu.Lock()
		p.fleet.cmd = cmd
		p.mu.Unlock()
		switch cmd.Kind {
		case api.CommandInspect:
			res := api.CommandResult{Kind: cmd.Kind, Generation: cmd.Generation}
			if p.Hardware == nil {
				res.Error = "this agent cannot collect hardware"
			} else if hw, err := p.Hardware(ctx); hw == nil {
				res.Error = fmt.Sprintf("collect hardware: %v", err)
			} else {
				res.Hardware = hw
			}
			if err := p.complete(ctx, res); err != nil {
				log.Warn("cannot report the inspection", "error", err)
			}
		case api.CommandReboot, api.CommandPowerOff:
			if err := p.complete(ctx, api.CommandResult{Kind: cmd.Kind, Generation: cmd.Generation}); err != nil {
				log.Warn("cannot report the command", "command", cmd.Kind, "error", err)
			}
			return nil, &CommandHandoff{Kind: cmd.Kind}
		case api.CommandProvision, api.CommandDeprovision:
			cfg, err := config.Parse(cmd.Config)
			if err != nil {
				// As a bad config file always was: reported under
				// load-config, and the boot fails.
				err = fmt.Errorf("config of command %s from bootyd %s: %w", cmd.Kind, redactURL(p.URL), err)
				now := time.Now()
				for _, r := range []api.StatusReport{
					{Step: api.StepLoadConfig, State: api.StateFailed, Error: err.Error(), Time: now},
					{Step: api.StepMachine, State: api.StateError, Error: "step " + api.StepLoadConfig + ": " + err.Error(), Time: now},
				} {
					if rerr := p.ReportStatus(ctx, r); rerr != nil {
						log.Warn("cannot report the bad config", "error", rerr)
					}
				}
				if cerr := p.complete(ctx, api.CommandResult{Kind: cmd.Kind, Generation: cmd.Generation, Error: err.Error()}); cerr != nil {
					log.Warn("cannot report the bad config", "error", cerr)
				}
				return nil, err
			}
			return cfg, nil
		default:
			log.Warn("unknown command from bootyd; ignoring it", "command", cmd.Kind)
		}
	}
}

// complete reports a command's result, retried within FleetResultBackoff.
// A 409 (the command is stale: the operator issued another) is not retried.
func (p *ServerProvider) complete(ctx context.Context, r api.CommandResult) error {
	_, err := p.post(ctx, "command", r, FleetResultBackoff)
	return err
}

// CompleteCommand reports the end of the provision or deprovision that
// Load returned the config of: runErr nil is success. Without a fleet
// command (a config from a file) it does nothing.
func (p *ServerProvider) CompleteCommand(ctx context.Context, runErr error) error {
	p.mu.Lock()
	f := p.fleet
	p.mu.Unlock()
	if f == nil || f.cmd.Generation == 0 {
		return nil
	}
	r := api.CommandResult{Kind: f.cmd.Kind, Generation: f.cmd.Generation}
	if runErr != nil {
		r.Error = runErr.Error()
	}
	return p.complete(ctx, r)
}

// generation is the generation of the command being run, 0 without one.
func (p *ServerProvider) generation() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fleet == nil {
		return 0
	}
	return p.fleet.cmd.Generation
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
