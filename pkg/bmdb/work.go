package bmdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// Process names a kind of work on a machine ("provision", "recover").
type Process string

// WorkEventKind is an entry type of the work history.
type WorkEventKind string

// The work history events.
const (
	WorkStarted   WorkEventKind = "started"
	WorkFinished  WorkEventKind = "finished"
	WorkFailed    WorkEventKind = "failed"
	WorkCancelled WorkEventKind = "cancelled"
)

// Filter says which machines a Claim may pick. Beyond it, a machine is
// picked only if no live session holds work on it for the process (or for
// the Exclusive processes) and no backoff of the process is in force.
type Filter struct {
	// MachineID restricts the claim to one machine.
	MachineID string
	// States keeps machines in one of these states (any when empty).
	States []State
	// AgentSilentFor, when set, keeps machines whose agent session is ended,
	// missing, or has not heartbeat for this long (recovery).
	AgentSilentFor time.Duration
	// Exclusive lists other processes whose work on the machine also keeps
	// it from being claimed.
	Exclusive []Process
}

// Work is a machine claimed by a session for a process. Exactly one of
// Finish, Fail or Cancel ends it; until then no other session can claim the
// machine for the process (unless this session's lease lapses).
type Work struct {
	MachineID string
	Process   Process
	s         *Session
	mu        sync.Mutex
	done      bool
}

// claimAttempts bounds the retries of a claim that lost a race (another
// session inserted the same work row first).
const claimAttempts = 10

// Claim picks one machine that matches f and is free for process p, and
// claims it, in one transaction: it checks the session is alive, finds a
// candidate (on PostgreSQL locking its row, skipping rows others hold),
// reclaims the work row of an expired session (history: cancelled), inserts
// the work row (UNIQUE per machine and process) and appends "started" to
// the work history. Losing a race to another session retries with another
// candidate. No candidate gives ErrNothingToDo; a lapsed session
// ErrSessionExpired.
func (s *Session) Claim(ctx context.Context, p Process, f Filter) (*Work, error) {
	if p == "" {
		return nil, fmt.Errorf("claim: empty process: %w", ErrInvalid)
	}
	for _, st := range f.States {
		if !st.Known() {
			return nil, fmt.Errorf("claim %s: unknown state %q: %w", p, st, ErrInvalid)
		}
	}
	delay := 2 * time.Millisecond
	for attempt := 1; ; attempt++ {
		w, err := s.claimOnce(ctx, p, f)
		if err == nil || !isUniqueViolation(err) || attempt == claimAttempts {
			return w, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("claim %s: %w", p, ctx.Err())
		case <-time.After(delay/2 + mrand.N(delay)):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

func (s *Session) claimOnce(ctx context.Context, p Process, f Filter) (*Work, error) {
	db := s.db
	var id string
	err := db.write(ctx, "claim "+string(p), func(tx *sql.Tx) error {
		id = ""
		if err := s.checkTx(ctx, tx); err != nil {
			return err
		}
		t := ms(now())
		procs := append([]Process{p}, f.Exclusive...)
		query := `SELECT m.id FROM machines m WHERE NOT EXISTS (
			SELECT 1 FROM work w JOIN sessions s ON s.id = w.session_id
			WHERE w.machine_id = m.id AND w.process IN (` + placeholders(len(procs)) + `) AND s.deadline > ?)
			AND NOT EXISTS (SELECT 1 FROM work_backoff b WHERE b.machine_id = m.id AND b.process = ? AND b.until_at > ?)`
		var args []any
		for _, pr := range procs {
			args = append(args, string(pr))
		}
		args = append(args, t, string(p), t)
		if f.MachineID != "" {
			query += " AND m.id = ?"
			args = append(args, f.MachineID)
		}
		if len(f.States) > 0 {
			query += " AND m.state IN (" + placeholders(len(f.States)) + ")"
			for _, st := range f.States {
				args = append(args, string(st))
			}
		}
		if f.AgentSilentFor > 0 {
			query += ` AND NOT EXISTS (SELECT 1 FROM agent_sessions a WHERE a.machine_id = m.id
				AND a.ended_at IS NULL AND a.heartbeat_at > ?)`
			args = append(args, t-f.AgentSilentFor.Milliseconds())
		}
		// No ORDER BY: sorting every candidate costs O(n) a claim; any first
		// match will do (a machine in backoff or held is skipped anyway).
		query += " LIMIT 1"
		if db.engine == EnginePostgres {
			query += " FOR UPDATE OF m SKIP LOCKED"
		}
		err := tx.QueryRowContext(ctx, db.q(query), args...).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("claim %s: %w", p, ErrNothingToDo)
		}
		if err != nil {
			return fmt.Errorf("claim %s: find a machine: %w", p, err)
		}
		// Reclaim the row of an expired session, if any: do better than
		// Monogon, whose crashed workers left machines locked forever.
		rows, err := tx.QueryContext(ctx, db.q(`SELECT session_id FROM work WHERE machine_id = ? AND process = ?
			AND session_id NOT IN (SELECT id FROM sessions WHERE deadline > ?)`), id, string(p), t)
		if err != nil {
			return fmt.Errorf("claim %s on %s: find expired work: %w", p, id, err)
		}
		var stale []string
		for rows.Next() {
			var sid string
			if err := rows.Scan(&sid); err != nil {
				rows.Close()
				return fmt.Errorf("claim %s on %s: %w", p, id, err)
			}
			stale = append(stale, sid)
		}
		rows.Close()
		for _, sid := range stale {
			if _, err := tx.ExecContext(ctx, db.q("DELETE FROM work WHERE machine_id = ? AND process = ? AND session_id = ?"), id, string(p), sid); err != nil {
				return fmt.Errorf("claim %s on %s: reclaim: %w", p, id, err)
			}
			if err := db.addWorkHistory(ctx, tx, id, p, sid, WorkCancelled, "reclaimed: session "+sid+" expired"); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, db.q("INSERT INTO work (machine_id, process, session_id, started_at) VALUES (?, ?, ?, ?)"),
			id, string(p), s.id, t); err != nil {
			return fmt.Errorf("claim %s on %s: %w", p, id, err)
		}
		return db.addWorkHistory(ctx, tx, id, p, s.id, WorkStarted, "")
	})
	if err != nil {
		if errors.Is(err, ErrSessionExpired) {
			s.end(err)
		}
		return nil, err
	}
	return &Work{MachineID: id, Process: p, s: s}, nil
}

func (db *DB) addWorkHistory(ctx context.Context, tx *sql.Tx, machine string, p Process, session string, ev WorkEventKind, cause string) error {
	if len(cause) > maxEventMessage {
		cause = truncateUTF8(cause, maxEventMessage)
	}
	_, err := tx.ExecContext(ctx, db.q(`INSERT INTO work_history (machine_id, process, session_id, event, at, cause)
		VALUES (?, ?, ?, ?, ?, ?)`), machine, string(p), session, string(ev), ms(now()), cause)
	if err != nil {
		return fmt.Errorf("work history of %s on %s: %w", p, machine, err)
	}
	if ev != WorkStarted {
		return nil
	}
	// Bound the machine's history, pruning once per claim.
	_, err = tx.ExecContext(ctx, db.q(`DELETE FROM work_history WHERE machine_id = ? AND id <=
		(SELECT id FROM work_history WHERE machine_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`),
		machine, machine, db.opts.workHistoryLimit)
	if err != nil {
		return fmt.Errorf("prune work history of %s: %w", machine, err)
	}
	return nil
}

// end runs fn with the work row still held by this session, deletes the row
// and appends ev to the history, in one transaction. A session that lapsed
// gives ErrSessionExpired; a row another session reclaimed ErrWorkLost.
func (w *Work) end(ctx context.Context, ev WorkEventKind, cause string, fn func(tx *sql.Tx) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("%s work %s on %s: already ended: %w", ev, w.Process, w.MachineID, ErrConflict)
	}
	db := w.s.db
	err := db.write(ctx, string(ev)+" work", func(tx *sql.Tx) error {
		if ev != WorkCancelled {
			if err := w.s.checkTx(ctx, tx); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, db.q("DELETE FROM work WHERE machine_id = ? AND process = ? AND session_id = ?"),
			w.MachineID, string(w.Process), w.s.id)
		if err != nil {
			return fmt.Errorf("%s work %s on %s: %w", ev, w.Process, w.MachineID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%s work %s on %s: %w", ev, w.Process, w.MachineID, ErrWorkLost)
		}
		if err := db.addWorkHistory(ctx, tx, w.MachineID, w.Process, w.s.id, ev, cause); err != nil {
			return err
		}
		if fn != nil {
			return fn(tx)
		}
		return nil
	})
	if err == nil || errors.Is(err, ErrWorkLost) || errors.Is(err, ErrSessionExpired) {
		w.done = true
	}
	return err
}

// Finish ends the work successfully: the work row and the backoff go, the
// history gets "finished", and t (when not nil) is applied to the machine
// (Transition), all in one transaction. If t fails, nothing is written and
// the work is still held.
func (w *Work) Finish(ctx context.Context, t *Transition) error {
	if t != nil {
		if err := t.check(); err != nil {
			return fmt.Errorf("finish work %s on %s: %w", w.Process, w.MachineID, err)
		}
	}
	changed := false
	err := w.end(ctx, WorkFinished, "", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, w.s.db.q("DELETE FROM work_backoff WHERE machine_id = ? AND process = ?"),
			w.MachineID, string(w.Process)); err != nil {
			return fmt.Errorf("finish work %s on %s: reset backoff: %w", w.Process, w.MachineID, err)
		}
		if t == nil {
			return nil
		}
		var err error
		_, changed, err = w.s.db.transitionTx(ctx, tx, w.MachineID, *t)
		return err
	})
	if changed {
		w.s.db.notify.changed(w.MachineID)
	}
	return err
}

// Cancel ends the work without a result: the work row goes, the history
// gets "cancelled" with the cause; the backoff is left as it is. Cancel works
// on a lapsed session too (if the row was not reclaimed yet).
func (w *Work) Cancel(ctx context.Context, cause string) error {
	return w.end(ctx, WorkCancelled, cause, nil)
}

// Fail ends the work with a failure: the work row goes, the history gets
// "failed" with the cause, and the process backs off the machine: the next
// interval is b's (see Backoff.Next) from the last one persisted, and the
// machine is not claimed for the process again before it passed.
func (w *Work) Fail(ctx context.Context, b Backoff, cause string) error {
	if err := b.check(); err != nil {
		return fmt.Errorf("fail work %s on %s: %w", w.Process, w.MachineID, err)
	}
	db := w.s.db
	return w.end(ctx, WorkFailed, cause, func(tx *sql.Tx) error {
		var last sql.NullInt64
		err := tx.QueryRowContext(ctx, db.q("SELECT last_interval_s FROM work_backoff WHERE machine_id = ? AND process = ?"),
			w.MachineID, string(w.Process)).Scan(&last)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("fail work %s on %s: read backoff: %w", w.Process, w.MachineID, err)
		}
		var prev time.Duration
		if last.Valid {
			prev = time.Duration(last.Int64) * time.Second
		}
		next := b.Next(prev)
		wait := b.jittered(next)
		t := now()
		_, err = tx.ExecContext(ctx, db.q(`INSERT INTO work_backoff (machine_id, process, until_at, cause, last_interval_s)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (machine_id, process) DO UPDATE SET until_at = excluded.until_at,
			cause = excluded.cause, last_interval_s = excluded.last_interval_s`),
			w.MachineID, string(w.Process), ms(t.Add(wait)), truncateUTF8(cause, maxEventMessage), int64(next/time.Second))
		if err != nil {
			return fmt.Errorf("fail work %s on %s: store backoff: %w", w.Process, w.MachineID, err)
		}
		return nil
	})
}

// Backoff is how long a process leaves a machine alone after a failure. The
// first failure waits Initial; each further failure (without a Finish in
// between) waits the last interval times Exponent, capped at Maximum and
// rounded up to whole seconds. Jitter (0..1) shortens each wait by up to that
// fraction, at random, so machines that failed together are not retried
// together; the interval the next one grows from is the un-jittered one.
// Only the last interval is persisted; Finish resets it.
type Backoff struct {
	Initial  time.Duration
	Maximum  time.Duration
	Exponent float64
	Jitter   float64
}

func (b Backoff) check() error {
	switch {
	case b.Initial < 0 || b.Maximum < 0:
		return fmt.Errorf("backoff: negative interval: %w", ErrInvalid)
	case b.Exponent != 0 && b.Exponent < 1:
		return fmt.Errorf("backoff: exponent %g below 1: %w", b.Exponent, ErrInvalid)
	case b.Jitter < 0 || b.Jitter >= 1:
		return fmt.Errorf("backoff: jitter %g outside [0, 1): %w", b.Jitter, ErrInvalid)
	}
	return nil
}

// Next returns the interval after a failure that follows one with interval
// last (0: the first failure), in whole seconds, at least 1 s.
func (b Backoff) Next(last time.Duration) time.Duration {
	initial := max(b.Initial, time.Second)
	maximum := max(b.Maximum, initial)
	exp := max(b.Exponent, 1)
	var next time.Duration
	switch {
	case last <= 0:
		next = initial
	case exp == 1:
		next = initial
	default:
		f := float64(max(last, time.Second)) * exp
		if f > float64(maximum) || math.IsInf(f, 0) {
			next = maximum
		} else {
			next = time.Duration(f)
		}
	}
	next = min(next, maximum)
	if r := next % time.Second; r != 0 {
		next += time.Second - r
	}
	return next
}

// jittered shortens d by up to Jitter of it, at random, rounded up to whole
// seconds, never under 1 s.
func (b Backoff) jittered(d time.Duration) time.Duration {
	if b.Jitter <= 0 {
		return d
	}
	w := d - time.Duration(mrand.Float64()*b.Jitter*float64(d))
	if r := w % time.Second; r != 0 {
		w += time.Second - r
	}
	return max(w, time.Second)
}

// WorkEvent is one entry of the work history.
type WorkEvent struct {
	ID        int64         `json:"id"`
	MachineID string        `json:"machineID"`
	Process   Process       `json:"process"`
	SessionID string        `json:"sessionID"`
	Event     WorkEventKind `json:"event"`
	Time      time.Time     `json:"time"`
	Cause     string        `json:"cause,omitempty"`
}

// WorkHistory returns the work history, oldest first, of one machine, or of
// every machine when machineID is "".
func (db *DB) WorkHistory(ctx context.Context, machineID string) ([]WorkEvent, error) {
	query := "SELECT id, machine_id, process, session_id, event, at, cause FROM work_history"
	var args []any
	if machineID != "" {
		query += " WHERE machine_id = ?"
		args = append(args, machineID)
	}
	rows, err := db.sql.QueryContext(ctx, db.q(query+" ORDER BY id"), args...)
	if err != nil {
		return nil, fmt.Errorf("work history %s: %w", machineID, err)
	}
	defer rows.Close()
	var out []WorkEvent
	for rows.Next() {
		var e WorkEvent
		var p, ev string
		var at int64
		if err := rows.Scan(&e.ID, &e.MachineID, &p, &e.SessionID, &ev, &at, &e.Cause); err != nil {
			return nil, fmt.Errorf("work history %s: %w", machineID, err)
		}
		e.Process, e.Event, e.Time = Process(p), WorkEventKind(ev), fromMS(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// BackoffState is a persisted backoff of a (machine, process).
type BackoffState struct {
	Until        time.Time
	Cause        string
	LastInterval time.Duration
}

// GetBackoff returns the backoff of process p on a machine, or ErrNotFound.
func (db *DB) GetBackoff(ctx context.Context, machineID string, p Process) (BackoffState, error) {
	var b BackoffState
	var until, last int64
	err := db.sql.QueryRowContext(ctx, db.q(`SELECT until_at, cause, last_interval_s FROM work_backoff
		WHERE machine_id = ? AND process = ?`), machineID, string(p)).Scan(&until, &b.Cause, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return b, fmt.Errorf("backoff of %s on %s: %w", p, machineID, ErrNotFound)
	}
	if err != nil {
		return b, fmt.Errorf("backoff of %s on %s: %w", p, machineID, err)
	}
	b.Until, b.LastInterval = fromMS(until), time.Duration(last)*time.Second
	return b, nil
}
