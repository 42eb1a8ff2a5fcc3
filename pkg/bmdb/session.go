package bmdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// SessionConfig opens a component session.
type SessionConfig struct {
	// Component names the worker ("provisioner", "recoverer"); required.
	Component string
	// RuntimeInfo says where it runs (host name, PID); for operators.
	RuntimeInfo string
	// Interval is the lease: the session stays alive while it is poked at
	// least once an Interval (at least 1 s; default 10 s).
	Interval time.Duration
}

// Session is a component's lease in the database (seed 004). While it is
// alive it can claim work; a keeper goroutine pokes its deadline forward
// every Interval/3 and retries a failed poke until the lease would lapse, so
// one failure does not end it. When the lease lapses (or Close is called) the
// session ends: Done is closed, Err says why, claims fail with
// ErrSessionExpired, and its work may be reclaimed by other sessions.
type Session struct {
	db       *DB
	id       string
	interval time.Duration
	log      *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
	// validUntil is this process's conservative view of the deadline: the
	// time a successful poke was started plus the interval, minus a margin.
	validUntil time.Time
	kept       chan struct{} // closed when the keeper goroutine exited
}

// StartSession opens a component session and starts its keeper, which runs
// until ctx ends, Close is called or the lease lapses. Sessions whose
// deadline passed are first reclaimed (ReclaimExpired, best effort).
func (db *DB) StartSession(ctx context.Context, c SessionConfig) (*Session, error) {
	if c.Component == "" {
		return nil, fmt.Errorf("start session: empty component name: %w", ErrInvalid)
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Interval < time.Second {
		return nil, fmt.Errorf("start session %s: interval %s is under 1s: %w", c.Component, c.Interval, ErrInvalid)
	}
	if _, err := db.ReclaimExpired(ctx); err != nil {
		db.log.Warn("reclaim expired sessions", "err", err)
	}
	id := newID()
	start := now()
	err := db.write(ctx, "start session "+c.Component, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, db.q(`INSERT INTO sessions (id, component, runtime_info, interval_ms, created_at, deadline)
			VALUES (?, ?, ?, ?, ?, ?)`), id, c.Component, c.RuntimeInfo, c.Interval.Milliseconds(), ms(start), ms(start.Add(c.Interval)))
		if err != nil {
			return fmt.Errorf("start session %s: %w", c.Component, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Session{
		db: db, id: id, interval: c.Interval, ctx: sctx, cancel: cancel,
		log:        db.log.With("session", id, "session_component", c.Component),
		validUntil: start.Add(c.Interval - c.Interval/10),
		kept:       make(chan struct{}),
	}
	go func() {
		select {
		case <-ctx.Done():
			s.end(fmt.Errorf("session %s: %w", id, ctx.Err()))
		case <-sctx.Done():
		}
	}()
	go s.keep()
	s.log.Info("session started", "interval", c.Interval)
	return s, nil
}

// ID returns the session's ID.
func (s *Session) ID() string { return s.id }

// Done is closed when the session ended.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns why the session ended (wrapping ErrSessionExpired when the
// lease lapsed), or nil while it is alive.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// alive returns nil when the session is alive by this process's view, else
// the reason it is not.
func (s *Session) alive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if time.Now().After(s.validUntil) {
		s.err = fmt.Errorf("session %s: lease lapsed at %s: %w", s.id, s.validUntil.Format(time.RFC3339Nano), ErrSessionExpired)
		s.cancel()
		return s.err
	}
	return nil
}

func (s *Session) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cancel()
}

// keep pokes the session every interval/3. A failed poke is retried after a
// short jittered pause until the lease would lapse; only then, or when the
// database says the session is gone, does the session end.
func (s *Session) keep() {
	defer close(s.kept)
	every := s.interval / 3
	retry := max(s.interval/20, 50*time.Millisecond)
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C:
		}
		if err := s.alive(); err != nil {
			s.log.Warn("session ended", "err", err)
			return
		}
		start := now()
		pctx, cancel := context.WithTimeout(s.ctx, every)
		err := s.poke(pctx, start)
		cancel()
		switch {
		case err == nil:
			s.mu.Lock()
			s.validUntil = start.Add(s.interval - s.interval/10)
			s.mu.Unlock()
			timer.Reset(every)
		case errors.Is(err, ErrSessionExpired):
			s.end(err)
			s.log.Warn("session ended", "err", err)
			return
		default:
			s.log.Warn("session poke failed; retrying until the lease lapses", "err", err)
			timer.Reset(retry/2 + mrand.N(retry))
		}
	}
}

// poke moves the deadline to start+interval if the session is still alive
// in the database; a session past its deadline or gone gives
// ErrSessionExpired.
func (s *Session) poke(ctx context.Context, start time.Time) error {
	return s.db.write(ctx, "poke session", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.q("UPDATE sessions SET deadline = ? WHERE id = ? AND deadline > ?"),
			ms(start.Add(s.interval)), s.id, ms(start))
		if err != nil {
			return fmt.Errorf("poke session %s: %w", s.id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("poke session %s: gone or past its deadline: %w", s.id, ErrSessionExpired)
		}
		return nil
	})
}

// checkTx checks inside a transaction that the session is alive both in
// this process's view and in the database.
func (s *Session) checkTx(ctx context.Context, tx *sql.Tx) error {
	if err := s.alive(); err != nil {
		return err
	}
	var deadline int64
	err := tx.QueryRowContext(ctx, s.db.q("SELECT deadline FROM sessions WHERE id = ?"), s.id).Scan(&deadline)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("session %s: gone: %w", s.id, ErrSessionExpired)
	}
	if err != nil {
		return fmt.Errorf("session %s: check: %w", s.id, err)
	}
	if deadline <= ms(now()) {
		return fmt.Errorf("session %s: past its deadline: %w", s.id, ErrSessionExpired)
	}
	return nil
}

// Close ends the session: the keeper stops, the work it holds is released
// (history: cancelled, "session closed") and the session row is deleted.
func (s *Session) Close(ctx context.Context) error {
	s.end(fmt.Errorf("session %s: closed: %w", s.id, ErrSessionExpired))
	<-s.kept
	return s.db.write(ctx, "close session", func(tx *sql.Tx) error {
		return s.db.dropSessions(ctx, tx, []string{s.id}, "session closed")
	})
}

// dropSessions releases the work of the given sessions (history: cancelled
// with cause) and deletes them.
func (db *DB) dropSessions(ctx context.Context, tx *sql.Tx, ids []string, cause string) error {
	t := ms(now())
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO work_history (machine_id, process, session_id, event, at, cause)
			SELECT machine_id, process, session_id, ?, ?, ? FROM work WHERE session_id = ?`),
			string(WorkCancelled), t, cause, id); err != nil {
			return fmt.Errorf("release work of session %s: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, db.q("DELETE FROM work WHERE session_id = ?"), id); err != nil {
			return fmt.Errorf("release work of session %s: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, db.q("DELETE FROM sessions WHERE id = ?"), id); err != nil {
			return fmt.Errorf("delete session %s: %w", id, err)
		}
	}
	return nil
}

// ReclaimExpired deletes every session past its deadline and releases its
// work (history: cancelled, "session expired"), so those machines can be
// claimed again. Claim also reclaims such work one machine at a time; this
// sweeps the rest. It returns how many sessions it removed.
func (db *DB) ReclaimExpired(ctx context.Context) (int, error) {
	var n int
	err := db.write(ctx, "reclaim expired sessions", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, db.q("SELECT id FROM sessions WHERE deadline <= ? LIMIT 1000"), ms(now()))
		if err != nil {
			return fmt.Errorf("reclaim expired sessions: %w", err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("reclaim expired sessions: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reclaim expired sessions: %w", err)
		}
		n = len(ids)
		return db.dropSessions(ctx, tx, ids, "reclaimed: session expired")
	})
	return n, err
}
