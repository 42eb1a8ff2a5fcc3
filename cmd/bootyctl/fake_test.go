package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// fakeBootyd answers the operator routes of package api from memory, for
// the tests of bootyctl's output formats and flags only; the tests against
// a real bootyd are in bootyd_test.go.
type fakeBootyd struct {
	mu       sync.Mutex
	token    string
	machines map[string]*api.MachineDetail
	events   []api.Event
	logs     []api.LogLine
	requests []*http.Request
	bodies   []string
}

func newFakeBootyd(t *testing.T, token string) (*fakeBootyd, *httptest.Server) {
	f := &fakeBootyd{token: token, machines: map[string]*api.MachineDetail{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeBootyd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var body strings.Builder
	if r.Body != nil {
		buf := make([]byte, 1<<16)
		n, _ := r.Body.Read(buf)
		body.Write(buf[:n])
	}
	f.requests = append(f.requests, r)
	f.bodies = append(f.bodies, body.String())
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		reply(http.StatusUnauthorized, api.Error{Error: "unauthorized"})
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/machines"), "/")
	switch {
	case r.URL.Path == "/v1/machines" && r.Method == http.MethodGet:
		l := api.MachineList{Machines: []api.Machine{}}
		for _, m := range f.machines {
			l.Machines = append(l.Machines, m.Machine)
		}
		sort.Slice(l.Machines, func(i, j int) bool { return l.Machines[i].Name < l.Machines[j].Name })
		reply(http.StatusOK, l)
	case r.URL.Path == "/v1/machines" && r.Method == http.MethodPost:
		var req api.RegisterRequest
		if err := json.Unmarshal([]byte(body.String()), &req); err != nil {
			reply(http.StatusBadRequest, api.Error{Error: err.Error()})
			return
		}
		m := &api.MachineDetail{Machine: api.Machine{ID: "id-" + req.Name, Name: req.Name, BootMAC: req.BootMAC,
			MACs: append([]string{req.BootMAC}, req.MACs...), State: api.MachineRegistering, Status: api.StatusOK, Generation: 1}, Spec: req.Spec}
		f.machines[req.Name] = m
		reply(http.StatusCreated, m)
	case len(parts) >= 2:
		m, ok := f.machines[parts[1]]
		if !ok {
			reply(http.StatusNotFound, api.Error{Error: "machine " + parts[1] + " not found"})
			return
		}
		sub := ""
		if len(parts) > 2 {
			sub = parts[2]
		}
		switch sub {
		case "":
			reply(http.StatusOK, m)
		case "events":
			reply(http.StatusOK, api.EventList{Events: f.events})
		case "logs":
			reply(http.StatusOK, api.LogList{Lines: f.logs})
		case "provision":
			m.State = api.MachineProvisioning
			m.Generation++
			reply(http.StatusOK, m.Machine)
		default:
			reply(http.StatusNotFound, api.Error{Error: "no route"})
		}
	default:
		reply(http.StatusNotFound, api.Error{Error: "no route"})
	}
}

func (f *fakeBootyd) add(m api.Machine) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machines[m.Name] = &api.MachineDetail{Machine: m}
}

func (f *fakeBootyd) set(name string, fn func(m *api.MachineDetail)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.machines[name])
}

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
