package bmdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// State is a machine's provisioning state, in metal3's names.
type State string

// The provisioning states (metal3's BareMetalHost states).
const (
	StateRegistering             State = "registering"
	StateInspecting              State = "inspecting"
	StateAvailable               State = "available"
	StatePreparing               State = "preparing"
	StateProvisioning            State = "provisioning"
	StateProvisioned             State = "provisioned"
	StateDeprovisioning          State = "deprovisioning"
	StateExternallyProvisioned   State = "externally provisioned"
	StatePoweringOffBeforeDelete State = "powering off before delete"
	StateDeleting                State = "deleting"
)

// OperationalStatus is metal3's operational status, kept beside the state.
type OperationalStatus string

// The operational statuses.
const (
	StatusOK         OperationalStatus = "OK"
	StatusDiscovered OperationalStatus = "discovered"
	StatusError      OperationalStatus = "error"
	StatusDetached   OperationalStatus = "detached"
)

// ErrorType says which operation failed, in metal3's names.
type ErrorType string

// The error types.
const (
	ErrorRegistration    ErrorType = "registration error"
	ErrorInspection      ErrorType = "inspection error"
	ErrorPreparation     ErrorType = "preparation error"
	ErrorProvisioning    ErrorType = "provisioning error"
	ErrorPowerManagement ErrorType = "power management error"
	ErrorDetach          ErrorType = "detach error"
)

// ErrorInfo is a machine's last error; Count is how many failures in a row.
type ErrorInfo struct {
	Type    ErrorType `json:"type,omitempty"`
	Message string    `json:"message,omitempty"`
	Count   int       `json:"count"`
}

// CommandKind is a command for a machine's agent.
type CommandKind string

// The commands an agent runs.
const (
	CommandInspect     CommandKind = "inspect"
	CommandProvision   CommandKind = "provision"
	CommandDeprovision CommandKind = "deprovision"
	CommandReboot      CommandKind = "reboot"
	CommandPowerOff    CommandKind = "poweroff"
)

// Event types, as Kubernetes names them.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// transitions is the lifecycle: from each state, the states it may move to.
// Any state but deleting may also go to powering off before delete and to
// deleting (added in init). Staying in the same state is allowed when the
// transition issues a command, records an error or changes the status.
var transitions = map[State][]State{
	StateRegistering:             {StateInspecting, StateAvailable, StateExternallyProvisioned},
	StateInspecting:              {StateAvailable, StateRegistering},
	StateAvailable:               {StateInspecting, StatePreparing, StateProvisioning, StateExternallyProvisioned},
	StatePreparing:               {StateAvailable, StateProvisioning},
	StateProvisioning:            {StateProvisioned, StateDeprovisioning},
	StateProvisioned:             {StateDeprovisioning},
	StateExternallyProvisioned:   {StateDeprovisioning, StateInspecting, StateAvailable},
	StateDeprovisioning:          {StateAvailable},
	StatePoweringOffBeforeDelete: {StateDeleting},
	StateDeleting:                {},
}

func init() {
	for s := range transitions {
		if s == StateDeleting || s == StatePoweringOffBeforeDelete {
			continue
		}
		transitions[s] = append(transitions[s], StatePoweringOffBeforeDelete, StateDeleting)
	}
}

// commandStates says in which state (after the transition) each command may
// be issued.
var commandStates = map[CommandKind][]State{
	CommandInspect:     {StateInspecting},
	CommandProvision:   {StateProvisioning},
	CommandDeprovision: {StateDeprovisioning},
	CommandReboot:      {StateRegistering, StateInspecting, StateAvailable, StateProvisioned, StateExternallyProvisioned},
	CommandPowerOff:    {StateAvailable, StateProvisioned, StateExternallyProvisioned, StatePoweringOffBeforeDelete},
}

// AllowedTransition reports whether the lifecycle allows from → to (a move
// to another state; staying is decided by Transition).
func AllowedTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Known reports whether s is one of the provisioning states.
func (s State) Known() bool { _, ok := transitions[s]; return ok }

// Transition asks Transition to move a machine through its lifecycle.
type Transition struct {
	// To is the state after the transition (may equal the current state).
	To State
	// Generation, when non-zero, must be the machine's current generation,
	// else ErrStaleGeneration.
	Generation int64
	// Command is issued to the agent with the transition, which bumps the
	// generation. A change of state without a command clears the pending one.
	Command CommandKind
	// Reason (required, CamelCase) and Message go into the event.
	Reason  string
	Message string
	// Error, when set, records a failure: status error, the error type and
	// message, the count plus one. A transition without it out of an error
	// clears the status back to OK (the count stays until a success).
	Error *ErrorInfo
	// Status, when set, is the operational status afterwards (detached, OK).
	Status OperationalStatus
}

// Transition applies t to the machine in one transaction: it checks the
// lifecycle table, the generation and the command, updates the machine and
// appends an event. A call that finds the machine already where t leads (same
// state, same pending command, no error to record) changes nothing, appends
// no event and returns the machine: retries are harmless. A disallowed move
// gives ErrInvalidTransition, a stale generation ErrStaleGeneration; both
// change nothing.
func (db *DB) Transition(ctx context.Context, id string, t Transition) (Machine, error) {
	if err := t.check(); err != nil {
		return Machine{}, fmt.Errorf("transition machine %s: %w", id, err)
	}
	var changed bool
	err := db.write(ctx, "transition machine "+id, func(tx *sql.Tx) error {
		var err error
		_, changed, err = db.transitionTx(ctx, tx, id, t)
		return err
	})
	if err != nil {
		return Machine{}, err
	}
	if changed {
		db.notify.changed(id)
	}
	return db.GetMachine(ctx, id)
}

func (t Transition) check() error {
	if !t.To.Known() {
		return fmt.Errorf("unknown state %q: %w", t.To, ErrInvalid)
	}
	if t.Reason == "" {
		return fmt.Errorf("transition to %s has no reason: %w", t.To, ErrInvalid)
	}
	if t.Command != "" {
		states, ok := commandStates[t.Command]
		if !ok {
			return fmt.Errorf("unknown command %q: %w", t.Command, ErrInvalid)
		}
		okState := false
		for _, s := range states {
			okState = okState || s == t.To
		}
		if !okState {
			return fmt.Errorf("command %s cannot be issued in state %s: %w", t.Command, t.To, ErrInvalidTransition)
		}
	}
	switch t.Status {
	case "", StatusOK, StatusDiscovered, StatusDetached:
	case StatusError:
		return fmt.Errorf("status error is set through Error, not Status: %w", ErrInvalid)
	default:
		return fmt.Errorf("unknown status %q: %w", t.Status, ErrInvalid)
	}
	if t.Error != nil && t.Error.Type == "" {
		return fmt.Errorf("error without a type: %w", ErrInvalid)
	}
	return nil
}

// transitionTx is Transition inside the caller's transaction. It returns the
// machine as it was before and whether anything changed.
func (db *DB) transitionTx(ctx context.Context, tx *sql.Tx, id string, t Transition) (Machine, bool, error) {
	m, err := db.lockMachine(ctx, tx, id)
	if err != nil {
		return Machine{}, false, fmt.Errorf("transition machine %s: %w", id, err)
	}
	same := m.State == t.To
	if same && t.Command == m.Command && t.Error == nil && (t.Status == "" || t.Status == m.Status) {
		return m, false, nil // already there: idempotent
	}
	if t.Generation != 0 && t.Generation != m.Generation {
		return m, false, fmt.Errorf("transition machine %s to %s: generation %d, machine is at %d: %w",
			m.Name, t.To, t.Generation, m.Generation, ErrStaleGeneration)
	}
	if !same && !AllowedTransition(m.State, t.To) {
		return m, false, fmt.Errorf("transition machine %s: %s → %s: %w", m.Name, m.State, t.To, ErrInvalidTransition)
	}
	if same && t.Command == "" && t.Error == nil && t.Status == "" {
		return m, false, fmt.Errorf("transition machine %s: %s → %s with nothing to do: %w", m.Name, m.State, t.To, ErrInvalidTransition)
	}
	tm := now()
	gen := m.Generation
	cmd, cmdGen, cmdAt := m.Command, m.CommandGeneration, ms(m.CommandIssuedAt)
	if m.CommandIssuedAt.IsZero() {
		cmdAt = 0
	}
	switch {
	case t.Command != "" && t.Command != m.Command:
		gen++
		cmd, cmdGen, cmdAt = t.Command, gen, ms(tm)
	case t.Command != "":
		// The same command again (a retry after a failure cleared it is
		// handled above as a new command): keep it.
	case !same && m.Command != "":
		gen++
		cmd, cmdGen, cmdAt = "", 0, 0
	}
	status, errType, errMsg, errCount := m.Status, m.Error.Type, m.Error.Message, m.Error.Count
	evType := EventNormal
	if t.Error != nil {
		status, errType, errMsg, errCount = StatusError, t.Error.Type, t.Error.Message, m.Error.Count+1
		evType = EventWarning
	} else if m.Status == StatusError {
		status, errType, errMsg = StatusOK, "", ""
	}
	if t.Status != "" {
		status = t.Status
	}
	changedAt := ms(m.StateChangedAt)
	if !same {
		changedAt = ms(tm)
	}
	_, err = tx.ExecContext(ctx, db.q(`UPDATE machines SET state = ?, status = ?, error_type = ?, error_message = ?,
		error_count = ?, command = ?, command_generation = ?, command_issued_at = ?, generation = ?,
		updated_at = ?, state_changed_at = ? WHERE id = ?`),
		string(t.To), string(status), string(errType), errMsg, errCount, string(cmd), cmdGen, cmdAt, gen,
		ms(tm), changedAt, id)
	if err != nil {
		return m, false, fmt.Errorf("transition machine %s: %w", m.Name, err)
	}
	if cmd != "" && cmdGen == gen && gen != m.Generation && (cmd == CommandProvision || cmd == CommandDeprovision) {
		if err := db.addInstall(ctx, tx, m, cmd, gen, tm); err != nil {
			return m, false, err
		}
	}
	msg := fmt.Sprintf("%s → %s", m.State, t.To)
	if cmd != m.Command && cmd != "" {
		msg += fmt.Sprintf(", command %s at generation %d", cmd, gen)
	}
	if t.Error != nil {
		msg += fmt.Sprintf(", %s: %s", t.Error.Type, t.Error.Message)
	}
	if t.Message != "" {
		msg += ": " + t.Message
	}
	if err := db.addEvent(ctx, tx, id, evType, t.Reason, msg, gen); err != nil {
		return m, false, err
	}
	return m, true, db.notifyTx(ctx, tx, id)
}

// addInstall records the install request of a provision or deprovision
// command with the spec it was issued with, dropping the oldest installs
// beyond the per-machine bound.
func (db *DB) addInstall(ctx context.Context, tx *sql.Tx, m Machine, kind CommandKind, gen int64, t time.Time) error {
	spec, err := json.Marshal(m.Spec)
	if err != nil {
		return fmt.Errorf("machine %s: encode install spec: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO installs (machine_id, generation, kind, spec, requested_at)
		VALUES (?, ?, ?, ?, ?)`), m.ID, gen, string(kind), string(spec), ms(t)); err != nil {
		return fmt.Errorf("machine %s: record install request at generation %d: %w", m.Name, gen, err)
	}
	_, err = tx.ExecContext(ctx, db.q(`DELETE FROM installs WHERE machine_id = ? AND generation <=
		(SELECT generation FROM installs WHERE machine_id = ? ORDER BY generation DESC LIMIT 1 OFFSET ?)`),
		m.ID, m.ID, db.opts.installsPerMachine)
	if err != nil {
		return fmt.Errorf("machine %s: prune installs: %w", m.Name, err)
	}
	return nil
}

// Event is one entry of a machine's history.
type Event struct {
	ID         int64     `json:"id"`
	MachineID  string    `json:"machineID"`
	Time       time.Time `json:"time"`
	Type       string    `json:"type"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message"`
	Generation int64     `json:"generation"`
}

// maxEventMessage bounds an event's message in bytes.
const maxEventMessage = 4096

// addEvent appends an event and drops the machine's oldest events beyond
// the per-machine bound.
func (db *DB) addEvent(ctx context.Context, tx *sql.Tx, id, typ, reason, message string, gen int64) error {
	if len(message) > maxEventMessage {
		message = message[:maxEventMessage] + "…"
	}
	if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO events (machine_id, at, type, reason, message, generation)
		VALUES (?, ?, ?, ?, ?, ?)`), id, ms(now()), typ, reason, message, gen); err != nil {
		return fmt.Errorf("machine %s: append event %s: %w", id, reason, err)
	}
	_, err := tx.ExecContext(ctx, db.q(`DELETE FROM events WHERE machine_id = ? AND id <=
		(SELECT id FROM events WHERE machine_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`),
		id, id, db.opts.eventsPerMachine)
	if err != nil {
		return fmt.Errorf("machine %s: prune events: %w", id, err)
	}
	return nil
}

// RecordEvent appends an event to a machine's history (ErrNotFound if the
// machine does not exist).
func (db *DB) RecordEvent(ctx context.Context, id, typ, reason, message string) error {
	if typ != EventNormal && typ != EventWarning {
		return fmt.Errorf("record event for machine %s: type %q (want Normal or Warning): %w", id, typ, ErrInvalid)
	}
	if reason == "" {
		return fmt.Errorf("record event for machine %s: empty reason: %w", id, ErrInvalid)
	}
	return db.write(ctx, "record event for machine "+id, func(tx *sql.Tx) error {
		m, err := db.lockMachine(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("record event: %w", err)
		}
		return db.addEvent(ctx, tx, id, typ, reason, message, m.Generation)
	})
}

// Events returns a machine's events after the event ID after (0: from the
// oldest kept), oldest first, at most limit (default and maximum 1000).
func (db *DB) Events(ctx context.Context, id string, after int64, limit int) ([]Event, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT id, machine_id, at, type, reason, message, generation
		FROM events WHERE machine_id = ? AND id > ? ORDER BY id LIMIT ?`), id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("events of machine %s: %w", id, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at int64
		if err := rows.Scan(&e.ID, &e.MachineID, &at, &e.Type, &e.Reason, &e.Message, &e.Generation); err != nil {
			return nil, fmt.Errorf("events of machine %s: %w", id, err)
		}
		e.Time = fromMS(at)
		out = append(out, e)
	}
	return out, rows.Err()
}
