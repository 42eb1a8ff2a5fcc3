package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// constantEqual compares two secrets in constant time (of their hashes, so
// the length does not leak either).
func constantEqual(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// operator wraps an operator route: it needs "Authorization: Bearer
// <token>" with one of Options.OperatorTokens, compared in constant time
// against each; without configured tokens every request is refused.
func (s *Server) operator(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, found := bearer(r.Header.Get("Authorization"))
		ok := false
		if found {
			for _, t := range s.opts.OperatorTokens {
				if constantEqual(tok, t) {
					ok = true // no early exit: every token is compared
				}
			}
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bootyd operator"`)
			if len(s.opts.OperatorTokens) == 0 {
				writeError(w, http.StatusUnauthorized, "the operator API is off: start bootyd with --operator-token-file")
				return
			}
			writeError(w, http.StatusUnauthorized, "missing or wrong operator token (Authorization: Bearer <token>)")
			return
		}
		h(w, r)
	}
}

// lookupMachine resolves {machine}: a MAC, an ID or a name.
func (s *Server) lookupMachine(ctx context.Context, ref string) (bmdb.Machine, error) {
	if mac, err := bmdb.ParseMAC(ref); err == nil {
		return s.db.MachineByMAC(ctx, mac)
	}
	m, err := s.db.GetMachine(ctx, ref)
	if errors.Is(err, bmdb.ErrNotFound) {
		return s.db.MachineByName(ctx, ref)
	}
	return m, err
}

func (s *Server) pathMachine(w http.ResponseWriter, r *http.Request) (bmdb.Machine, bool) {
	ref := r.PathValue("machine")
	m, err := s.lookupMachine(r.Context(), ref)
	if err != nil {
		if errors.Is(err, bmdb.ErrNotFound) {
			writeError(w, http.StatusNotFound, "no machine %q (by name, ID or MAC)", ref)
			return m, false
		}
		s.dbError(w, "look up machine", err)
		return m, false
	}
	return m, true
}

func apiMachine(m bmdb.Machine) api.Machine {
	out := api.Machine{ID: m.ID, Name: m.Name, Labels: m.Labels, BootMAC: m.BootMAC, MACs: m.MACs,
		BMC:    api.BMCInfo{Address: m.BMC.Address, CredentialsRef: m.BMC.CredentialsRef, DisableCertificateVerification: m.BMC.DisableCertificateVerification},
		Online: m.Online,
		State:  string(m.State), Status: string(m.Status), Generation: m.Generation,
		Command: string(m.Command), CommandGeneration: m.CommandGeneration,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, StateChangedAt: m.StateChangedAt}
	if m.Error.Type != "" || m.Error.Message != "" || m.Error.Count > 0 {
		out.Error = &api.MachineError{Type: string(m.Error.Type), Message: m.Error.Message, Count: m.Error.Count}
	}
	return out
}

func apiSpec(s bmdb.Spec) api.MachineSpec {
	out := api.MachineSpec{Image: api.ImageSpec(s.Image), Hostname: s.Hostname, UserData: s.UserData,
		NetworkData: s.NetworkData, MetaData: s.MetaData, ConfigOverrides: s.ConfigOverrides}
	if s.RootDeviceHints != nil {
		h := api.RootDeviceHints(*s.RootDeviceHints)
		out.RootDeviceHints = &h
	}
	return out
}

func dbSpec(s api.MachineSpec) bmdb.Spec {
	out := bmdb.Spec{Image: bmdb.Image(s.Image), Hostname: s.Hostname, UserData: s.UserData,
		NetworkData: s.NetworkData, MetaData: s.MetaData, ConfigOverrides: s.ConfigOverrides}
	if s.RootDeviceHints != nil {
		h := bmdb.RootDeviceHints(*s.RootDeviceHints)
		out.RootDeviceHints = &h
	}
	return out
}

func apiProgress(p bmdb.Progress) *api.InstallProgress {
	if p.Time.IsZero() && p.BytesDone == 0 {
		return nil
	}
	return &api.InstallProgress{Step: p.Step, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Time: p.Time}
}

// decorate adds the agent session and, while installing, the progress.
func (s *Server) decorate(ctx context.Context, m bmdb.Machine) api.Machine {
	out := apiMachine(m)
	if as, err := s.db.GetAgentSession(ctx, m.ID); err == nil {
		out.Agent = &api.AgentInfo{StartedAt: as.StartedAt, LastHeartbeat: as.HeartbeatAt, EndedAt: as.EndedAt, EndReason: as.EndReason, Live: as.Live}
	}
	if m.State == bmdb.StateProvisioning || m.State == bmdb.StateDeprovisioning {
		if in, err := s.db.GetInstall(ctx, m.ID, 0); err == nil {
			out.Progress = apiProgress(in.Progress)
		}
	}
	return out
}

func (s *Server) detail(ctx context.Context, m bmdb.Machine) api.MachineDetail {
	d := api.MachineDetail{Machine: s.decorate(ctx, m), Spec: apiSpec(m.Spec)}
	if hw, at, err := s.db.Hardware(ctx, m.ID); err == nil && len(hw) > 0 {
		var h api.HardwareDetails
		if json.Unmarshal(hw, &h) == nil {
			d.Hardware, d.HardwareAt = &h, at
		}
	}
	if in, err := s.db.GetInstall(ctx, m.ID, 0); err == nil {
		ai := &api.Install{Generation: in.Generation, Kind: string(in.Kind), RequestedAt: in.RequestedAt,
			FinishedAt: in.FinishedAt, Result: in.Result, Error: in.Error, Progress: apiProgress(in.Progress)}
		for _, st := range in.Steps {
			ai.Steps = append(ai.Steps, api.InstallStep{Index: st.Index, Total: st.Total, Name: st.Name, Result: st.Result,
				DurationMS: st.Duration.Milliseconds(), Error: st.Error, Detail: st.Detail, Time: st.Time})
		}
		d.Install = ai
	}
	return d
}

func queryInt(r *http.Request, key string, def int) (int, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q is not a non-negative number", key, v)
	}
	return n, nil
}

// handleList answers GET /v1/machines.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", 1000)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	o := bmdb.ListOptions{AfterName: r.URL.Query().Get("after"), Limit: limit}
	if st := r.URL.Query().Get("state"); st != "" {
		for _, x := range strings.Split(st, ",") {
			if !bmdb.State(x).Known() {
				writeError(w, http.StatusBadRequest, "state %q is not a provisioning state", x)
				return
			}
			o.States = append(o.States, bmdb.State(x))
		}
	}
	ms, err := s.db.ListMachines(r.Context(), o)
	if err != nil {
		s.dbError(w, "list machines", err)
		return
	}
	out := api.MachineList{Machines: s.decorateAll(r.Context(), ms)}
	if o.Limit > 0 && len(ms) == o.Limit {
		out.Next = ms[len(ms)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
}

// handleShow answers GET /v1/machines/{machine}.
func (s *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	m, ok := s.pathMachine(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.detail(r.Context(), m))
}

// dbBMC returns the BMC to record and, when the request carries a user name
// or password, the credentials to store with it (under CredentialsRef,
// default "bmc-<machine name>"). Nothing is stored here: the BMDB writes
// the credentials in the machine's own transaction, so a refused request
// leaves none behind.
func dbBMC(name string, b *api.BMCRequest) (bmdb.BMC, *bmdb.Credentials) {
	out := bmdb.BMC{Address: b.Address, CredentialsRef: b.CredentialsRef, DisableCertificateVerification: b.DisableCertificateVerification}
	if b.Username == "" && b.Password == "" {
		return out, nil
	}
	if out.CredentialsRef == "" {
		out.CredentialsRef = "bmc-" + name
	}
	return out, &bmdb.Credentials{Username: b.Username, Password: b.Password}
}

// handleRegister answers POST /v1/machines.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	var req api.RegisterRequest
	if !s.decodeBody(w, r, &req, "RegisterRequest") {
		return
	}
	ctx := r.Context()
	nm := bmdb.NewMachine{Name: req.Name, BootMAC: req.BootMAC, MACs: req.MACs, Labels: req.Labels, Spec: dbSpec(req.Spec),
		Online: req.Online, Message: "registered through the operator API"}
	if req.ExternallyProvisioned {
		nm.State = bmdb.StateExternallyProvisioned
	}
	if req.BMC != nil {
		nm.BMC, nm.Credentials = dbBMC(req.Name, req.BMC)
	}
	m, err := s.db.CreateMachine(ctx, nm)
	if err != nil {
		s.dbError(w, "register machine", err)
		return
	}
	s.log.Info("machine registered", "machine", m)
	writeJSON(w, http.StatusCreated, s.detail(ctx, m))
}

// handleUpdate answers PATCH /v1/machines/{machine}.
func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	m, ok := s.pathMachine(w, r)
	if !ok {
		return
	}
	var req api.UpdateRequest
	if !s.decodeBody(w, r, &req, "UpdateRequest") {
		return
	}
	u := bmdb.MachineUpdate{Name: req.Name, Labels: req.Labels, MACs: req.MACs, Online: req.Online}
	if req.Spec != nil {
		sp := dbSpec(*req.Spec)
		u.Spec = &sp
	}
	if req.BMC != nil {
		b, creds := dbBMC(m.Name, req.BMC)
		u.BMC, u.Credentials = &b, creds
	}
	m, err := s.db.UpdateMachine(r.Context(), m.ID, req.Generation, u)
	if err != nil {
		s.dbError(w, "update machine", err)
		return
	}
	writeJSON(w, http.StatusOK, s.detail(r.Context(), m))
}

// handleDelete answers DELETE /v1/machines/{machine}: the machine moves to
// deleting (an event) and is removed.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	m, ok := s.pathMachine(w, r)
	if !ok {
		return
	}
	if _, err := s.db.Transition(r.Context(), m.ID, bmdb.Transition{To: bmdb.StateDeleting, Reason: "Delete", Message: "deleted through the operator API"}); err != nil {
		s.dbError(w, "delete machine", err)
		return
	}
	if err := s.db.DeleteMachine(r.Context(), m.ID); err != nil {
		s.dbError(w, "delete machine", err)
		return
	}
	s.log.Info("machine deleted", "machine", m)
	w.WriteHeader(http.StatusNoContent)
}

// action is one of the command-issuing operator routes.
type action struct {
	reason  string
	command bmdb.CommandKind
	// to is the state after; "" keeps the machine's.
	to bmdb.State
}

var actions = map[string]action{
	"inspect":     {"Inspect", bmdb.CommandInspect, bmdb.StateInspecting},
	"provision":   {"Provision", bmdb.CommandProvision, bmdb.StateProvisioning},
	"deprovision": {"Deprovision", bmdb.CommandDeprovision, bmdb.StateDeprovisioning},
	"reboot":      {"Reboot", bmdb.CommandReboot, ""},
	"poweroff":    {"PowerOff", bmdb.CommandPowerOff, ""},
}

// handleAction answers POST /v1/machines/{machine}/{action}. A provision
// may carry a new spec (applied first); its rendered config is checked
// before the command is issued, so a spec that cannot work is refused
// with 400 and nothing changes.
func (s *Server) handleAction(name string) http.HandlerFunc {
	a := actions[name]
	return func(w http.ResponseWriter, r *http.Request) {
		m, ok := s.pathMachine(w, r)
		if !ok {
			return
		}
		var req api.ProvisionRequest
		if r.ContentLength != 0 && !s.decodeBody(w, r, &req, "ActionRequest") {
			return
		}
		if req.Spec != nil && a.command != bmdb.CommandProvision {
			writeError(w, http.StatusBadRequest, "%s takes no spec", name)
			return
		}
		ctx := r.Context()
		gen := req.Generation
		if a.command == bmdb.CommandProvision || a.command == bmdb.CommandDeprovision {
			spec := m.Spec
			if req.Spec != nil {
				spec = dbSpec(*req.Spec)
			}
			if a.command == bmdb.CommandProvision && spec.Image.URL == "" && len(spec.ConfigOverrides) == 0 {
				writeError(w, http.StatusBadRequest, "provision machine %s: the spec has no image URL", m.Name)
				return
			}
			if _, err := s.renderConfig(spec, a.command); err != nil {
				writeError(w, http.StatusBadRequest, "provision machine %s: %v", m.Name, err)
				return
			}
			if req.Spec != nil {
				um, err := s.db.UpdateMachine(ctx, m.ID, gen, bmdb.MachineUpdate{Spec: &spec})
				if err != nil {
					s.dbError(w, name+" machine: update spec", err)
					return
				}
				m, gen = um, um.Generation
			}
		}
		to := a.to
		if to == "" {
			to = m.State
		}
		msg := req.Message
		if msg == "" {
			msg = name + " through the operator API"
		}
		m, err := s.db.Transition(ctx, m.ID, bmdb.Transition{To: to, Command: a.command, Generation: gen, Reason: a.reason, Message: msg})
		if err != nil {
			s.dbError(w, name+" machine", err)
			return
		}
		s.println("%s %s requested (generation %d)", m.BootMAC, name, m.Generation)
		writeJSON(w, http.StatusOK, s.decorate(ctx, m))
	}
}

// handleEvents answers GET /v1/machines/{machine}/events.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	m, ok := s.pathMachine(w, r)
	if !ok {
		return
	}
	after, err := queryInt(r, "after", 0)
	if err == nil {
		var limit int
		if limit, err = queryInt(r, "limit", 500); err == nil {
			evs, derr := s.db.Events(r.Context(), m.ID, int64(after), limit)
			if derr != nil {
				s.dbError(w, "list events", derr)
				return
			}
			out := api.EventList{Events: make([]api.Event, 0, len(evs))}
			for _, e := range evs {
				out.Events = append(out.Events, api.Event{ID: e.ID, Time: e.Time, Type: e.Type, Reason: e.Reason, Message: e.Message, Generation: e.Generation})
			}
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	writeError(w, http.StatusBadRequest, "%v", err)
}

// handleMachineLogs answers GET /v1/machines/{machine}/logs.
func (s *Server) handleMachineLogs(w http.ResponseWriter, r *http.Request) {
	m, ok := s.pathMachine(w, r)
	if !ok {
		return
	}
	limit, err := queryInt(r, "limit", 1000)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	lines, err := s.db.Logs(r.Context(), m.ID, limit)
	if err != nil {
		s.dbError(w, "read logs", err)
		return
	}
	out := api.LogList{Lines: make([]api.LogLine, 0, len(lines))}
	for _, l := range lines {
		out.Lines = append(out.Lines, api.LogLine{Time: l.Time, Level: l.Level, Message: l.Message})
	}
	writeJSON(w, http.StatusOK, out)
}

// reportToDB records an agent report in the BMDB for an enrolled agent:
// steps and progress under their generation (a stale one is refused with
// 409), logs always. It answers and returns false on failure.
func (s *Server) reportToDB(w http.ResponseWriter, r *http.Request, a agentAuth, fn func(ctx context.Context) error) bool {
	if a.id == "" {
		return true
	}
	if err := fn(r.Context()); err != nil {
		s.dbError(w, "record report", err)
		return false
	}
	return true
}
