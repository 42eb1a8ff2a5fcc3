package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/booty-dev/booty/pkg/api"
)

// StateRunning is MachineState.State once any step of a run has started.
const StateRunning = "running"

// maxSteps bounds MachineState.Steps; the oldest reports are dropped first.
const maxSteps = 1000

// record is one machine's state plus the version used to order persistence.
type record struct {
	state   api.MachineState
	version uint64 // bumped on every change
	saved   uint64 // last version written to the state dir
}

// cloneState deep-copies a MachineState so callers never share slices with the store.
func cloneState(m api.MachineState) api.MachineState {
	m.Steps = slices.Clone(m.Steps)
	if m.Steps == nil {
		m.Steps = []api.StatusReport{}
	}
	for i := range m.Steps {
		if m.Steps[i].Detail != nil {
			d := make(map[string]string, len(m.Steps[i].Detail))
			for k, v := range m.Steps[i].Detail {
				d[k] = v
			}
			m.Steps[i].Detail = d
		}
	}
	m.Logs = slices.Clone(m.Logs)
	if m.Progress != nil {
		p := *m.Progress
		m.Progress = &p
	}
	return m
}

// update applies fn to the machine's record under the store lock, wakes
// WaitFor callers, and persists the result when a state dir is set. A failed
// write is logged, not returned: the report is already recorded in memory.
func (s *Server) update(mac string, fn func(m *api.MachineState)) api.MachineState {
	return s.updateView(mac, true, fn)
}

// maxViews bounds the machines whose last run bootyd keeps in memory; the
// least recently updated is dropped first (the BMDB keeps everything).
const maxViews = 1024

// maxViewLine bounds a log line kept in the in-memory view (the BMDB keeps
// up to MaxLogLineBytes).
const maxViewLine = 512

// updateView is update; persist false keeps the JSON file out of it (for
// enrolled agents, whose reports the BMDB records).
func (s *Server) updateView(mac string, persist bool, fn func(m *api.MachineState)) api.MachineState {
	s.mu.Lock()
	r, ok := s.machines[mac]
	if !ok {
		if len(s.machines) >= maxViews {
			oldest := ""
			for k, v := range s.machines {
				if oldest == "" || v.state.Updated.Before(s.machines[oldest].state.Updated) {
					oldest = k
				}
			}
			delete(s.machines, oldest)
		}
		r = &record{state: api.MachineState{MAC: mac, Steps: []api.StatusReport{}}}
		s.machines[mac] = r
	}
	fn(&r.state)
	r.state.Updated = s.opts.Now().UTC()
	r.version++
	snap := cloneState(r.state)
	version := r.version
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()

	if persist && s.opts.StateDir != "" {
		s.persist(mac, snap, version)
	}
	return snap
}

// persist writes snap to <state-dir>/<aa-bb-cc-dd-ee-ff>.json atomically
// (temp file, fsync, rename). Writes are serialised and a snapshot older than
// the last one written is skipped, so the file never goes back in time.
func (s *Server) persist(mac string, snap api.MachineState, version uint64) {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	s.mu.Lock()
	r := s.machines[mac]
	stale := r != nil && r.saved >= version
	s.mu.Unlock()
	if stale {
		return
	}
	if err := writeStateFile(s.opts.StateDir, snap); err != nil {
		s.log.Error("persist machine state", "mac", mac, "err", err)
		return
	}
	s.mu.Lock()
	if r != nil && r.saved < version {
		r.saved = version
	}
	s.mu.Unlock()
}

// writeStateFile writes one machine's state atomically into dir.
func writeStateFile(dir string, m api.MachineState) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state of %s: %w", m.MAC, err)
	}
	final := filepath.Join(dir, macFileName(m.MAC)+".json")
	f, err := os.CreateTemp(dir, ".tmp-"+macFileName(m.MAC)+"-*")
	if err != nil {
		return fmt.Errorf("create temp state file in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, final, err)
	}
	return nil
}

// loadState reads every <mac>.json in the state dir into memory. Temp files
// are ignored; an unreadable or malformed file is logged and skipped so one
// bad file does not keep bootyd from starting. A missing dir is created.
func (s *Server) loadState() error {
	dir := s.opts.StateDir
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list state directory %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			s.log.Warn("skip state file", "path", p, "err", err)
			continue
		}
		var m api.MachineState
		if err := json.Unmarshal(data, &m); err != nil {
			s.log.Warn("skip state file", "path", p, "err", fmt.Errorf("decode: %w", err))
			continue
		}
		mac, err := NormalizeMAC(m.MAC)
		if err != nil {
			s.log.Warn("skip state file", "path", p, "err", err)
			continue
		}
		m.MAC = mac
		if m.Steps == nil {
			m.Steps = []api.StatusReport{}
		}
		s.machines[mac] = &record{state: m, version: 1, saved: 1}
	}
	return nil
}

// Machine returns what bootyd recorded about the MAC (any accepted
// spelling), and false when nothing was recorded or the MAC is malformed.
func (s *Server) Machine(mac string) (api.MachineState, bool) {
	m, err := NormalizeMAC(mac)
	if err != nil {
		return api.MachineState{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.machines[m]
	if !ok {
		return api.MachineState{}, false
	}
	return cloneState(r.state), true
}

// Machines returns every recorded machine, sorted by MAC.
func (s *Server) Machines() []api.MachineState {
	s.mu.Lock()
	out := make([]api.MachineState, 0, len(s.machines))
	for _, r := range s.machines {
		out = append(out, cloneState(r.state))
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].MAC < out[j].MAC })
	return out
}

// WaitFor blocks until the machine's recorded state satisfies cond, and
// returns that state. cond is evaluated at once and after every change to the
// machine; it is not called while nothing is recorded for the MAC. When ctx
// ends first, WaitFor returns the last recorded state (zero if none) and an
// error wrapping ctx.Err().
func (s *Server) WaitFor(ctx context.Context, mac string, cond func(api.MachineState) bool) (api.MachineState, error) {
	m, err := NormalizeMAC(mac)
	if err != nil {
		return api.MachineState{}, fmt.Errorf("wait for machine: %w", err)
	}
	for {
		s.mu.Lock()
		var (
			st    api.MachineState
			found bool
		)
		if r, ok := s.machines[m]; ok {
			st, found = cloneState(r.state), true
		}
		ch := s.changed
		s.mu.Unlock()
		if found && cond(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("wait for machine %s (state %q): %w", m, st.State, ctx.Err())
		case <-ch:
		}
	}
}
