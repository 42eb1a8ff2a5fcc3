package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// Agent protocol defaults.
const (
	DefaultHeartbeatInterval = 10 * time.Second
	// MaxPollWait bounds one command long poll, under apiDeadline.
	MaxPollWait     = 25 * time.Second
	maxEnrollBodies = 4 << 20
)

// agentAuth is who an agent request comes from: the machine ID (from its
// enrollment token) or, for a legacy agent reporting with the static
// server.token of its config file, "" with legacy set.
type agentAuth struct {
	mac    string
	id     string
	legacy bool
}

// authorizeAgent checks the bearer token of a request for {mac}: the token
// of the machine's agent session, or (agents configured by a file, config
// drive or /deploy) the server.token of the MAC's config file. Every failure
// (malformed or unknown MAC, no session, wrong token, no token) gets the
// same 401, so a MAC's existence is not revealed.
func (s *Server) authorizeAgent(w http.ResponseWriter, r *http.Request) (agentAuth, bool) {
	deny := func() (agentAuth, bool) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bootyd"`)
		writeError(w, http.StatusUnauthorized, "unauthorized: this MAC has no agent session with this token")
		return agentAuth{}, false
	}
	mac, err := NormalizeMAC(r.PathValue("mac"))
	tok, found := bearer(r.Header.Get("Authorization"))
	if err != nil {
		return deny()
	}
	if found {
		id, err := s.db.Authenticate(r.Context(), mac, tok)
		if err == nil {
			return agentAuth{mac: mac, id: id}, true
		}
		if !errors.Is(err, bmdb.ErrUnauthorized) {
			s.log.Error("authenticate agent", "mac", mac, "err", err)
			writeError(w, http.StatusServiceUnavailable, "authenticate agent: database unavailable")
			return agentAuth{}, false
		}
	}
	c, err := s.lookupConfig(mac)
	if err != nil || c.Default {
		return deny()
	}
	want, err := c.token()
	if err != nil {
		return deny()
	}
	if want == "" && s.opts.AllowNoToken {
		return agentAuth{mac: mac, legacy: true}, true
	}
	if want == "" || !found || !constantEqual(tok, want) {
		if found {
			s.log.Warn("refuse agent request: wrong token", "mac", mac, "remote", r.RemoteAddr)
		}
		return deny()
	}
	a := agentAuth{mac: mac, legacy: true}
	if m, err := s.db.MachineByMAC(r.Context(), mac); err == nil {
		a.id = m.ID
	} else if errors.Is(err, bmdb.ErrNotFound) {
		s.registerFromConfig(r.Context(), mac, c)
		if m, err := s.db.MachineByMAC(r.Context(), mac); err == nil {
			a.id = m.ID
		}
	}
	return a, true
}

// dbError answers for a bmdb error: the sentinels as the HTTP layer maps
// them (doc.go), 503 for anything else (logged, not shown).
func (s *Server) dbError(w http.ResponseWriter, op string, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, bmdb.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, bmdb.ErrUnauthorized):
		status = http.StatusUnauthorized
	case errors.Is(err, bmdb.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, bmdb.ErrConflict), errors.Is(err, bmdb.ErrInvalidTransition), errors.Is(err, bmdb.ErrStaleGeneration):
		status = http.StatusConflict
	case errors.Is(err, bmdb.ErrLimit):
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "10")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	default:
		s.log.Error(op, "err", err)
		writeError(w, http.StatusServiceUnavailable, "%s: database unavailable", op)
		return
	}
	writeError(w, status, "%s: %v", op, err)
}

// handleEnroll enrolls an agent: the config file of any of its MACs
// registers its machine first; then bmdb.Enroll links it (or discovers
// one) and issues this boot's token; a machine with a config file (or a
// discovered one under --default-config) gets the file's command.
func (s *Server) handleEnroll(w http.ResponseWriter, r *http.Request) {
	var req api.EnrollRequest
	if !s.decodeBodyMax(w, r, &req, "EnrollRequest", max(s.opts.MaxBodyBytes, maxEnrollBodies)) {
		return
	}
	macs := req.MACs
	if req.BootMAC != "" {
		macs = append([]string{req.BootMAC}, macs...)
	}
	if len(macs) == 0 {
		writeError(w, http.StatusBadRequest, "enroll: no MACs")
		return
	}
	ctx := r.Context()
	var file machineConfig
	hasFile := false
	for _, m := range macs {
		mac, err := NormalizeMAC(m)
		if err != nil {
			writeError(w, http.StatusBadRequest, "enroll: %v", err)
			return
		}
		if c, ok := s.configFor(mac, false); ok && !hasFile {
			s.registerFromConfig(ctx, mac, c)
			file, hasFile = c, true
		}
	}
	var hw []byte
	if req.Hardware != nil {
		hw, _ = json.Marshal(req.Hardware)
	}
	en, err := s.db.Enroll(ctx, bmdb.Enrollment{MACs: macs, Hardware: hw})
	if err != nil {
		s.dbError(w, "enroll", err)
		return
	}
	m := en.Machine
	if !hasFile && en.Discovered {
		if c, ok := s.configFor(m.BootMAC, true); ok {
			file, hasFile = c, true
		}
	}
	if hasFile {
		if err := s.replayConfig(ctx, m.ID, file); err != nil {
			s.log.Warn("give the config file's command", "machine", m, "err", err)
		}
	}
	s.println("%s enrolled as %s (%s, %s)", m.BootMAC, m.Name, m.State, m.Status)
	writeJSON(w, http.StatusOK, api.EnrollResponse{MachineID: m.ID, Name: m.Name, MAC: m.BootMAC, Token: en.Token,
		HeartbeatSeconds: int(s.opts.HeartbeatInterval / time.Second), PollSeconds: int(MaxPollWait / time.Second)})
}

// agentSession authorizes an agent route that needs an enrollment (not a
// static config token).
func (s *Server) agentSession(w http.ResponseWriter, r *http.Request) (agentAuth, bool) {
	a, ok := s.authorizeAgent(w, r)
	if !ok {
		return a, false
	}
	if a.legacy || a.id == "" {
		writeError(w, http.StatusUnauthorized, "unauthorized: enroll first (POST /v1/enroll)")
		return agentAuth{}, false
	}
	return a, true
}

// handleHeartbeat records a heartbeat: authenticated (the session is
// live), then buffered and written with the others within HeartbeatFlush.
func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	a, ok := s.agentSession(w, r)
	if !ok {
		return
	}
	var hb api.Heartbeat
	if r.ContentLength != 0 && !s.decodeBody(w, r, &hb, "Heartbeat") {
		return
	}
	s.heartbeat(a.id)
	writeJSON(w, http.StatusOK, api.HeartbeatResponse{})
}

// handleCommand is the agent's long poll: the pending command with the
// config rendered from the machine's spec, or 204 after ?wait= seconds
// (default and at most MaxPollWait). An HTTP/1.1 poll that finds no
// command is parked (longpoll.go): bootyd keeps its connection, not a
// goroutine, until a command comes or the wait ends. A poll that cannot be
// parked waits in bmdb.WaitCommand.
func (s *Server) handleCommand(w http.ResponseWriter, r *http.Request) {
	a, ok := s.agentSession(w, r)
	if !ok {
		return
	}
	wait := MaxPollWait
	if v := r.URL.Query().Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "wait=%q is not a number of seconds", v)
			return
		}
		wait = min(time.Duration(n)*time.Second, MaxPollWait)
	}
	if wait > 0 && s.park(w, r, a, wait) {
		return
	}
	c, err := s.db.WaitCommand(r.Context(), a.id, wait)
	s.answerCommand(r.Context(), w, a, c, err)
}

// answerCommand answers a command poll with what it found: the database's
// error, 204 without a command, else the command with its rendered config.
// A spec that renders no config fails the command here, visibly, and
// answers 204.
func (s *Server) answerCommand(ctx context.Context, w http.ResponseWriter, a agentAuth, c *bmdb.Command, err error) {
	if err != nil {
		s.dbError(w, "wait for a command", err)
		return
	}
	if c == nil {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	out := api.AgentCommand{Kind: string(c.Kind), Generation: c.Generation, IssuedAt: c.IssuedAt}
	if c.Kind == bmdb.CommandProvision || c.Kind == bmdb.CommandDeprovision {
		cfg, err := s.renderConfig(c.Spec, c.Kind)
		if err != nil && cfg != nil {
			// A config file that is not a valid config: the agent reports
			// it under load-config, as it always did.
			s.log.Warn("the machine's config is not valid; the agent reports it", "machine", a.id, "err", err)
		} else if err != nil {
			// The operator's spec does not make a config: the command fails
			// here, visibly, instead of on the machine.
			msg := "bootyd could not render the config: " + err.Error()
			if _, cerr := s.db.CompleteCommand(ctx, a.id, c.Generation, bmdb.CommandResult{Error: msg}); cerr != nil {
				s.log.Warn("fail command", "machine", a.id, "err", cerr)
			}
			s.println("%s %s FAILED: %s", a.mac, c.Kind, clean(msg))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		out.Config = cfg
	}
	s.println("%s command %s (generation %d)", a.mac, c.Kind, c.Generation)
	writeJSON(w, http.StatusOK, out)
}

// handleCommandResult records that the agent ran a command; an inspection
// brings the hardware.
func (s *Server) handleCommandResult(w http.ResponseWriter, r *http.Request) {
	a, ok := s.agentSession(w, r)
	if !ok {
		return
	}
	var res api.CommandResult
	if !s.decodeBodyMax(w, r, &res, "CommandResult", max(s.opts.MaxBodyBytes, maxEnrollBodies)) {
		return
	}
	if res.Generation <= 0 {
		writeError(w, http.StatusBadRequest, "invalid CommandResult: generation %d", res.Generation)
		return
	}
	ctx := r.Context()
	if res.Hardware != nil {
		hw, _ := json.Marshal(res.Hardware)
		if err := s.db.ReportHardware(ctx, a.id, hw); err != nil {
			s.dbError(w, "record hardware", err)
			return
		}
	}
	m, err := s.db.CompleteCommand(ctx, a.id, res.Generation, bmdb.CommandResult{Error: res.Error})
	if err != nil {
		s.dbError(w, "complete command", err)
		return
	}
	if res.Error != "" {
		s.println("%s %s FAILED: %s", a.mac, res.Kind, clean(res.Error))
	} else {
		s.println("%s %s done: %s", a.mac, res.Kind, m.State)
	}
	writeJSON(w, http.StatusOK, okBody)
}
