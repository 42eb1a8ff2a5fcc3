package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// apiDeadline bounds reading the body of and writing the answer to every
// route except /files/.
const apiDeadline = 30 * time.Second

// routes builds the mux. Method mismatches get 405 from the mux itself.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/boot.ipxe", s.handleChainIPXE)
	mux.HandleFunc("GET /v1/machines/{mac}/ipxe", s.handleMachineIPXE)
	mux.HandleFunc("GET /files/{path...}", s.handleFile)
	mux.HandleFunc("GET /v1/agent/boot", s.handleAgentBoot) // takeover.go
	// The agent protocol (machine token).
	mux.HandleFunc("POST /v1/enroll", s.handleEnroll)
	mux.HandleFunc("POST /v1/machines/{mac}/heartbeat", s.handleHeartbeat)
	mux.HandleFunc("GET /v1/machines/{mac}/command", s.handleCommand)
	mux.HandleFunc("POST /v1/machines/{mac}/command", s.handleCommandResult)
	mux.HandleFunc("GET /v1/machines/{mac}/config", s.handleConfig)
	mux.HandleFunc("POST /v1/machines/{mac}/status", s.handleStatus)
	mux.HandleFunc("POST /v1/machines/{mac}/progress", s.handleProgress)
	mux.HandleFunc("POST /v1/machines/{mac}/logs", s.handleLogs)
	mux.HandleFunc("POST /v1/machines/{mac}/health", s.handleHealth)
	mux.HandleFunc("POST /v1/machines/{mac}/hardware", s.handleHardware)
	// The operator API (operator token).
	mux.HandleFunc("GET /v1/machines", s.operator(s.handleList))
	mux.HandleFunc("POST /v1/machines", s.operator(s.handleRegister))
	mux.HandleFunc("GET /v1/machines/{machine}", s.operator(s.handleShow))
	mux.HandleFunc("PATCH /v1/machines/{machine}", s.operator(s.handleUpdate))
	mux.HandleFunc("DELETE /v1/machines/{machine}", s.operator(s.handleDelete))
	for name := range actions {
		mux.HandleFunc("POST /v1/machines/{machine}/"+name, s.operator(s.handleAction(name)))
	}
	mux.HandleFunc("GET /v1/machines/{machine}/events", s.operator(s.handleEvents))
	mux.HandleFunc("GET /v1/machines/{machine}/logs", s.operator(s.handleMachineLogs))
	s.bmcRoutes(mux)
	return s.logRequests(mux)
}

// statusWriter records the answer's status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// ReadFrom hands src to the underlying writer's ReadFrom, so that a file
// body still reaches net.TCPConn.ReadFrom (sendfile) through this wrapper;
// without it every body would be copied through a 32 KiB user-space buffer.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(struct{ io.Writer }{w.ResponseWriter}, src)
	}
	w.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests logs every request at debug level (method, path, status,
// size, duration, remote address; never headers, so never tokens) and puts
// read/write deadlines on every route but /files/.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if !strings.HasPrefix(r.URL.Path, "/files/") {
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(start.Add(apiDeadline)) // unsupported in httptest recorders
			_ = rc.SetWriteDeadline(start.Add(apiDeadline))
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"bytes", sw.bytes, "duration", time.Since(start), "remote", r.RemoteAddr)
	})
}

// writeJSON answers with v as JSON and the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers with api.Error{msg}.
func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, api.Error{Error: fmt.Sprintf(format, args...)})
}

// pathMAC normalises the {mac} path value, answering 400 when malformed.
func pathMAC(w http.ResponseWriter, r *http.Request) (string, bool) {
	mac, err := NormalizeMAC(r.PathValue("mac"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return "", false
	}
	return mac, true
}

// machineConfig finds the MAC's config, answering 404 when there is none
// and 500 on I/O errors or ambiguous file names.
func (s *Server) machineConfig(w http.ResponseWriter, mac string) (machineConfig, bool) {
	c, err := s.lookupConfig(mac)
	switch {
	case err == nil:
		return c, true
	case errors.Is(err, ErrNoConfig):
		writeError(w, http.StatusNotFound, "no config for machine %s", mac)
	default:
		s.log.Error("look up machine config", "mac", mac, "err", err)
		writeError(w, http.StatusInternalServerError, "%v", err)
	}
	return machineConfig{}, false
}

// handleConfig serves an enrolled agent the config of its pending (or
// last) provision or deprovision, rendered from the machine's spec; an
// agent with a static config token gets its config file as-is. Both need
// the machine's token: a config holds user data.
func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	a, ok := s.authorizeAgent(w, r)
	if !ok {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if a.legacy {
		c, ok := s.machineConfig(w, a.mac)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", c.ContentType)
		_, _ = w.Write(c.Data)
		return
	}
	kind := bmdb.CommandProvision
	m, err := s.db.GetMachine(r.Context(), a.id)
	if err != nil {
		s.dbError(w, "read machine", err)
		return
	}
	spec := m.Spec
	if in, err := s.db.GetInstall(r.Context(), a.id, 0); err == nil {
		kind, spec = in.Kind, in.Spec
	}
	cfg, err := s.renderConfig(spec, kind)
	if err != nil {
		writeError(w, http.StatusConflict, "machine %s: %v", m.Name, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(cfg)
}

// bearer extracts the token from an "Authorization: Bearer <token>" value;
// the scheme is case-insensitive.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// decodeBody reads one JSON value of at most MaxBodyBytes into v. On failure
// it answers 413 (too large) or 400 naming the type and the problem.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	return s.decodeBodyMax(w, r, v, what, s.opts.MaxBodyBytes)
}

// decodeBodyMax is decodeBody with its own bound.
func (s *Server) decodeBodyMax(w http.ResponseWriter, r *http.Request, v any, what string, limit int64) bool {
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "decode %s: body larger than %d bytes", what, limit)
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, "decode %s: empty body", what)
	default:
		writeError(w, http.StatusBadRequest, "decode %s: %v", what, err)
	}
	return false
}

// okBody is the answer to an accepted report.
var okBody = struct{}{}

// terminal reports whether a machine state ends a run.
func terminal(state string) bool {
	switch state {
	case api.StateProvisioned, api.StateDeprovisioned, api.StateError:
		return true
	}
	return false
}

// validStatus names what is wrong with a StatusReport, or returns nil.
func validStatus(rep api.StatusReport) error {
	if rep.Step == "" {
		return errors.New("step is empty")
	}
	if rep.Step == api.StepMachine {
		if !terminal(rep.State) {
			return fmt.Errorf("state %q of step %q is not one of %q, %q, %q", rep.State, rep.Step,
				api.StateProvisioned, api.StateDeprovisioned, api.StateError)
		}
		return nil
	}
	switch rep.State {
	case api.StateStarted, api.StateSucceeded, api.StateFailed:
		return nil
	}
	return fmt.Errorf("state %q of step %q is not one of %q, %q, %q", rep.State, rep.Step,
		api.StateStarted, api.StateSucceeded, api.StateFailed)
}

// handleStatus records a StatusReport. A step report makes the machine
// "running"; one that starts a step after a finished run (provisioned,
// deprovisioned, error) begins a new run and clears the old steps and
// progress. A report for api.StepMachine sets the machine's state.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	a, ok := s.authorizeAgent(w, r)
	if !ok {
		return
	}
	mac := a.mac
	if !s.allow(w, mac, 1) {
		return
	}
	var rep api.StatusReport
	if !s.decodeBody(w, r, &rep, "StatusReport") {
		return
	}
	if err := validStatus(rep); err != nil {
		writeError(w, http.StatusBadRequest, "invalid StatusReport: %v", err)
		return
	}
	if rep.Time.IsZero() {
		rep.Time = s.opts.Now().UTC()
	}
	// Steps of the plan go to the BMDB; pseudo-steps (load-config, the
	// machine's outcome) have no place in the plan: the command's result
	// carries them.
	if rep.Generation > 0 && rep.Step != api.StepMachine && rep.Index > 0 && !s.reportToDB(w, r, a, func(ctx context.Context) error {
		return s.db.ReportStep(ctx, a.id, rep.Generation, bmdb.StepReport{Index: rep.Index, Total: rep.Total, Name: rep.Step,
			Result: rep.State, Duration: time.Duration(rep.DurationMS) * time.Millisecond, Error: rep.Error, Detail: rep.Detail, Time: rep.Time})
	}) {
		return
	}
	st := s.updateView(mac, a.legacy, func(m *api.MachineState) {
		if rep.Step == api.StepMachine {
			m.State = rep.State
		} else if rep.State == api.StateStarted && terminal(m.State) {
			m.Steps = m.Steps[:0]
			m.Progress = nil
			m.State = StateRunning
		} else if m.State == "" {
			m.State = StateRunning
		}
		m.Steps = append(m.Steps, rep)
		if n := len(m.Steps); n > maxSteps {
			m.Steps = append(m.Steps[:0], m.Steps[n-maxSteps:]...)
		}
	})
	s.printStatus(mac, rep, st)
	if rep.Step == api.StepMachine || rep.State == api.StateFailed {
		s.log.Info("machine report", "mac", mac, "step", rep.Step, "state", rep.State, "error", rep.Error)
	}
	writeJSON(w, http.StatusOK, okBody)
}

// handleProgress records the last ProgressReport and prints it.
func (s *Server) handleProgress(w http.ResponseWriter, r *http.Request) {
	a, ok := s.authorizeAgent(w, r)
	if !ok {
		return
	}
	mac := a.mac
	if !s.allow(w, mac, 1) {
		return
	}
	var rep api.ProgressReport
	if !s.decodeBody(w, r, &rep, "ProgressReport") {
		return
	}
	switch {
	case rep.Step == "":
		writeError(w, http.StatusBadRequest, "invalid ProgressReport: step is empty")
		return
	case rep.BytesDone < 0 || rep.BytesTotal < 0:
		writeError(w, http.StatusBadRequest, "invalid ProgressReport: negative byte count (bytesDone %d, bytesTotal %d)", rep.BytesDone, rep.BytesTotal)
		return
	}
	if rep.Time.IsZero() {
		rep.Time = s.opts.Now().UTC()
	}
	if rep.Generation > 0 && !s.reportToDB(w, r, a, func(ctx context.Context) error {
		return s.db.ReportProgress(ctx, a.id, rep.Generation, bmdb.Progress{Step: rep.Step, BytesDone: rep.BytesDone, BytesTotal: rep.BytesTotal, Time: rep.Time})
	}) {
		return
	}
	st := s.updateView(mac, a.legacy, func(m *api.MachineState) {
		p := rep
		m.Progress = &p
		if m.State == "" {
			m.State = StateRunning
		}
	})
	s.printProgress(mac, rep, st)
	writeJSON(w, http.StatusOK, okBody)
}

// handleLogs appends agent log lines to the machine's bounded ring and prints them.
func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	a, ok := s.authorizeAgent(w, r)
	if !ok {
		return
	}
	mac := a.mac
	var batch api.LogBatch
	if !s.decodeBody(w, r, &batch, "LogBatch") {
		return
	}
	if !s.allow(w, mac, len(batch.Lines)) {
		return
	}
	for i := range batch.Lines {
		batch.Lines[i].Message = truncate(batch.Lines[i].Message, MaxLogLineBytes)
		batch.Lines[i].Level = truncate(batch.Lines[i].Level, 16)
	}
	now := s.opts.Now().UTC()
	for i := range batch.Lines {
		if batch.Lines[i].Time.IsZero() {
			batch.Lines[i].Time = now
		}
	}
	if !s.reportToDB(w, r, a, func(ctx context.Context) error {
		lines := make([]bmdb.LogLine, len(batch.Lines))
		for i, l := range batch.Lines {
			lines[i] = bmdb.LogLine{Time: l.Time, Level: l.Level, Message: l.Message}
		}
		return s.db.AppendLogs(ctx, a.id, lines)
	}) {
		return
	}
	max := s.opts.MaxLogLines
	s.updateView(mac, a.legacy, func(m *api.MachineState) {
		for _, l := range batch.Lines {
			l.Message = truncate(l.Message, maxViewLine)
			m.Logs = append(m.Logs, l)
		}
		if n := len(m.Logs); n > max {
			m.Logs = append(m.Logs[:0], m.Logs[n-max:]...)
		}
	})
	s.printLogs(mac, batch.Lines)
	writeJSON(w, http.StatusOK, okBody)
}
