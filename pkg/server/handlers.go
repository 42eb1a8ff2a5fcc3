package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// apiDeadline bounds reading the body of and writing the answer to every
// route except /files/.
const apiDeadline = 30 * time.Second

// routes builds the mux. Method mismatches get 405 from the mux itself.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/boot.ipxe", s.handleChainIPXE)
	mux.HandleFunc("GET /v1/machines", s.handleMachines)
	mux.HandleFunc("GET /v1/machines/{mac}", s.handleMachine)
	mux.HandleFunc("GET /v1/machines/{mac}/config", s.handleConfig)
	mux.HandleFunc("GET /v1/machines/{mac}/ipxe", s.handleMachineIPXE)
	mux.HandleFunc("POST /v1/machines/{mac}/status", s.handleStatus)
	mux.HandleFunc("POST /v1/machines/{mac}/progress", s.handleProgress)
	mux.HandleFunc("POST /v1/machines/{mac}/logs", s.handleLogs)
	mux.HandleFunc("GET /files/{path...}", s.handleFile)
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

// handleConfig serves the machine's config file byte for byte. The body
// holds the machine's token, so it must not be cached by intermediaries.
func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	mac, ok := pathMAC(w, r)
	if !ok {
		return
	}
	c, ok := s.machineConfig(w, mac)
	if !ok {
		return
	}
	s.log.Info("serve config", "mac", mac, "path", c.Path, "default", c.Default)
	w.Header().Set("Content-Type", c.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(c.Data)
}

// authorize checks the request's bearer token against the machine config's
// server.token in constant time. It answers 400 (bad MAC), 404 (no config),
// 500 (config unreadable), 403 (config has no token and AllowNoToken is off)
// or 401 (token missing or wrong) and returns false; true means go ahead.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (string, bool) {
	mac, ok := pathMAC(w, r)
	if !ok {
		return "", false
	}
	c, ok := s.machineConfig(w, mac)
	if !ok {
		return "", false
	}
	want, err := c.token()
	if err != nil {
		s.log.Error("authorize report", "mac", mac, "err", err)
		writeError(w, http.StatusInternalServerError, "%v", err)
		return "", false
	}
	if want == "" {
		if s.opts.AllowNoToken {
			return mac, true
		}
		s.log.Warn("refuse report: config lacks server.token", "mac", mac, "config", c.Path)
		writeError(w, http.StatusForbidden, "config %s for machine %s lacks server.token; add one, or start bootyd with --allow-no-token", c.Path, mac)
		return "", false
	}
	got, found := bearer(r.Header.Get("Authorization"))
	if !found {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bootyd"`)
		writeError(w, http.StatusUnauthorized, "missing Authorization: Bearer <token> for machine %s", mac)
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		s.log.Warn("refuse report: wrong token", "mac", mac, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="bootyd", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "bearer token does not match server.token of machine %s", mac)
		return "", false
	}
	return mac, true
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
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
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
		writeError(w, http.StatusRequestEntityTooLarge, "decode %s: body larger than %d bytes", what, s.opts.MaxBodyBytes)
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
	mac, ok := s.authorize(w, r)
	if !ok {
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
	st := s.update(mac, func(m *api.MachineState) {
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
	mac, ok := s.authorize(w, r)
	if !ok {
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
	st := s.update(mac, func(m *api.MachineState) {
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
	mac, ok := s.authorize(w, r)
	if !ok {
		return
	}
	var batch api.LogBatch
	if !s.decodeBody(w, r, &batch, "LogBatch") {
		return
	}
	now := s.opts.Now().UTC()
	for i := range batch.Lines {
		if batch.Lines[i].Time.IsZero() {
			batch.Lines[i].Time = now
		}
	}
	max := s.opts.MaxLogLines
	s.update(mac, func(m *api.MachineState) {
		m.Logs = append(m.Logs, batch.Lines...)
		if n := len(m.Logs); n > max {
			m.Logs = append(m.Logs[:0], m.Logs[n-max:]...)
		}
	})
	s.printLogs(mac, batch.Lines)
	writeJSON(w, http.StatusOK, okBody)
}

// handleMachines answers with every recorded machine, sorted by MAC.
func (s *Server) handleMachines(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Machines())
}

// handleMachine answers with one machine's state, 404 when nothing was recorded.
func (s *Server) handleMachine(w http.ResponseWriter, r *http.Request) {
	mac, ok := pathMAC(w, r)
	if !ok {
		return
	}
	m, found := s.Machine(mac)
	if !found {
		writeError(w, http.StatusNotFound, "nothing recorded for machine %s", mac)
		return
	}
	writeJSON(w, http.StatusOK, m)
}
