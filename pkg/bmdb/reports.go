package bmdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Install is an install request (a provision or deprovision command and the
// spec it was issued with) and what the agent reported about it.
type Install struct {
	MachineID   string      `json:"machineID"`
	Generation  int64       `json:"generation"`
	Kind        CommandKind `json:"kind"`
	Spec        Spec        `json:"spec"`
	RequestedAt time.Time   `json:"requestedAt"`
	FinishedAt  time.Time   `json:"finishedAt,omitzero"`
	// Result is "" while running, then "succeeded" or "failed" (Error).
	Result   string       `json:"result,omitempty"`
	Error    string       `json:"error,omitempty"`
	Progress Progress     `json:"progress"`
	Steps    []StepReport `json:"steps,omitempty"`
}

// Step results.
const (
	StepStarted   = "started"
	StepSucceeded = "succeeded"
	StepFailed    = "failed"
)

// StepReport is what the agent said about one step of an install.
type StepReport struct {
	Index    int               `json:"index"` // 1-based position in the plan
	Total    int               `json:"total"`
	Name     string            `json:"name"`
	Result   string            `json:"result"` // started, succeeded, failed
	Duration time.Duration     `json:"duration"`
	Error    string            `json:"error,omitempty"`
	Detail   map[string]string `json:"detail,omitempty"`
	Time     time.Time         `json:"time"`
}

// Progress is how far the long step of an install is.
type Progress struct {
	Step       string    `json:"step,omitempty"`
	BytesDone  int64     `json:"bytesDone"`
	BytesTotal int64     `json:"bytesTotal"` // 0 when unknown
	Time       time.Time `json:"time,omitzero"`
}

// Bounds of one report.
const (
	maxStepIndex   = 1000
	maxStepName    = 128
	maxStepError   = 8192
	maxStepDetail  = 64
	maxDetailBytes = 16 << 10
)

// checkInstall checks that a report at generation gen belongs to machine
// id's latest install, else ErrStaleGeneration (a newer install superseded
// it, or there is none).
func (db *DB) checkInstall(ctx context.Context, tx *sql.Tx, id string, gen int64, what string) (Machine, error) {
	m, err := db.lockMachine(ctx, tx, id)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	var latest sql.NullInt64
	if err := tx.QueryRowContext(ctx, db.q("SELECT MAX(generation) FROM installs WHERE machine_id = ?"), id).Scan(&latest); err != nil {
		return m, fmt.Errorf("%s of machine %s: %w", what, m.Name, err)
	}
	if !latest.Valid || gen != latest.Int64 {
		return m, fmt.Errorf("%s of machine %s: generation %d, the latest install is at %d: %w", what, m.Name, gen, latest.Int64, ErrStaleGeneration)
	}
	return m, nil
}

// ReportStep records (or updates) the report of one step of the install at
// generation gen. A stale generation gives ErrStaleGeneration, a malformed
// report ErrInvalid; neither changes anything.
func (db *DB) ReportStep(ctx context.Context, id string, gen int64, s StepReport) error {
	if err := s.check(); err != nil {
		return fmt.Errorf("report step of machine %s: %w", id, err)
	}
	detail, err := json.Marshal(s.Detail)
	if err != nil || len(detail) > maxDetailBytes {
		return fmt.Errorf("report step %s of machine %s: detail is not a small string map: %w", s.Name, id, ErrInvalid)
	}
	if s.Detail == nil {
		detail = []byte("{}")
	}
	if len(s.Error) > maxStepError {
		s.Error = truncateUTF8(s.Error, maxStepError)
	}
	t := s.Time
	if t.IsZero() {
		t = now()
	}
	// One statement when the report is for the latest install (the usual
	// case: a round trip on PostgreSQL). Otherwise it changes nothing, and
	// the transaction below says why or, should the install have become
	// the latest meanwhile, writes the step.
	query := `INSERT INTO install_steps (machine_id, generation, idx, total, name, result,
		duration_ms, error, detail, updated_at)
		SELECT CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS INTEGER), CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS TEXT),
		CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT)
		WHERE CAST(? AS BIGINT) = (SELECT MAX(generation) FROM installs WHERE machine_id = ?)
		ON CONFLICT (machine_id, generation, idx) DO UPDATE SET total = excluded.total, name = excluded.name,
		result = excluded.result, duration_ms = excluded.duration_ms, error = excluded.error,
		detail = excluded.detail, updated_at = excluded.updated_at`
	args := []any{id, gen, s.Index, s.Total, s.Name, s.Result, s.Duration.Milliseconds(), s.Error, string(detail), ms(t), gen, id}
	return db.latestInstallWrite(ctx, id, gen, "report step "+s.Name, query, args)
}

// latestInstallWrite runs a report's statement, which changes something
// only when gen is machine id's latest install: alone first, and when it
// changed nothing, again in a transaction after checkInstall, which gives
// ErrNotFound or ErrStaleGeneration.
func (db *DB) latestInstallWrite(ctx context.Context, id string, gen int64, what, query string, args []any) error {
	n, err := db.writeOne(ctx, what, query, args...)
	if err != nil {
		return fmt.Errorf("%s of machine %s: %w", what, id, err)
	}
	if n > 0 {
		return nil
	}
	return db.write(ctx, what, func(tx *sql.Tx) error {
		if _, err := db.checkInstall(ctx, tx, id, gen, what); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, db.q(query), args...); err != nil {
			return fmt.Errorf("%s of machine %s: %w", what, id, err)
		}
		return nil
	})
}

func (s StepReport) check() error {
	switch {
	case s.Name == "" || len(s.Name) > maxStepName:
		return fmt.Errorf("step name %q is empty or longer than %d: %w", s.Name, maxStepName, ErrInvalid)
	case s.Index < 1 || s.Index > maxStepIndex:
		return fmt.Errorf("step %s: index %d outside 1..%d: %w", s.Name, s.Index, maxStepIndex, ErrInvalid)
	case s.Total < 0 || s.Total > maxStepIndex:
		return fmt.Errorf("step %s: total %d outside 0..%d: %w", s.Name, s.Total, maxStepIndex, ErrInvalid)
	case s.Result != StepStarted && s.Result != StepSucceeded && s.Result != StepFailed:
		return fmt.Errorf("step %s: result %q (want started, succeeded or failed): %w", s.Name, s.Result, ErrInvalid)
	case s.Duration < 0:
		return fmt.Errorf("step %s: negative duration: %w", s.Name, ErrInvalid)
	case len(s.Detail) > maxStepDetail:
		return fmt.Errorf("step %s: %d detail entries, at most %d: %w", s.Name, len(s.Detail), maxStepDetail, ErrInvalid)
	}
	return nil
}

// ReportProgress records how far the install at generation gen is.
func (db *DB) ReportProgress(ctx context.Context, id string, gen int64, p Progress) error {
	if p.BytesDone < 0 || p.BytesTotal < 0 || len(p.Step) > maxStepName {
		return fmt.Errorf("report progress of machine %s: negative byte counts or step name longer than %d: %w", id, maxStepName, ErrInvalid)
	}
	t := p.Time
	if t.IsZero() {
		t = now()
	}
	return db.latestInstallWrite(ctx, id, gen, "report progress", `UPDATE installs SET progress_step = ?, bytes_done = ?,
		bytes_total = ?, progress_at = ? WHERE machine_id = ? AND generation = ?
		AND generation = (SELECT MAX(generation) FROM installs WHERE machine_id = ?)`,
		[]any{p.Step, p.BytesDone, p.BytesTotal, ms(t), id, gen, id})
}

// GetInstall returns the install of machine id at generation gen with its
// steps; gen 0 means the latest. ErrNotFound when there is none.
func (db *DB) GetInstall(ctx context.Context, id string, gen int64) (Install, error) {
	query := `SELECT generation, kind, spec, requested_at, finished_at, result, error, progress_step, bytes_done,
		bytes_total, progress_at FROM installs WHERE machine_id = ?`
	args := []any{id}
	if gen != 0 {
		query += " AND generation = ?"
		args = append(args, gen)
	}
	query += " ORDER BY generation DESC LIMIT 1"
	in := Install{MachineID: id}
	var kind, spec string
	var req int64
	var fin, pat sql.NullInt64
	err := db.sql.QueryRowContext(ctx, db.q(query), args...).Scan(&in.Generation, &kind, &spec, &req, &fin, &in.Result,
		&in.Error, &in.Progress.Step, &in.Progress.BytesDone, &in.Progress.BytesTotal, &pat)
	if errors.Is(err, sql.ErrNoRows) {
		return Install{}, fmt.Errorf("install of machine %s at generation %d: %w", id, gen, ErrNotFound)
	}
	if err != nil {
		return Install{}, fmt.Errorf("install of machine %s: %w", id, err)
	}
	in.Kind, in.RequestedAt, in.FinishedAt, in.Progress.Time = CommandKind(kind), fromMS(req), fromNullMS(fin), fromNullMS(pat)
	if err := json.Unmarshal([]byte(spec), &in.Spec); err != nil {
		return Install{}, fmt.Errorf("install of machine %s: decode spec: %w", id, err)
	}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT idx, total, name, result, duration_ms, error, detail, updated_at
		FROM install_steps WHERE machine_id = ? AND generation = ? ORDER BY idx`), id, in.Generation)
	if err != nil {
		return Install{}, fmt.Errorf("steps of machine %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s StepReport
		var dur, at int64
		var detail string
		if err := rows.Scan(&s.Index, &s.Total, &s.Name, &s.Result, &dur, &s.Error, &detail, &at); err != nil {
			return Install{}, fmt.Errorf("steps of machine %s: %w", id, err)
		}
		s.Duration, s.Time = time.Duration(dur)*time.Millisecond, fromMS(at)
		if err := json.Unmarshal([]byte(detail), &s.Detail); err != nil {
			return Install{}, fmt.Errorf("steps of machine %s: decode detail: %w", id, err)
		}
		if len(s.Detail) == 0 {
			s.Detail = nil
		}
		in.Steps = append(in.Steps, s)
	}
	return in, rows.Err()
}

// LogLine is one line of an agent's log.
type LogLine struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// logLineOverhead is what a line costs beyond its level and message, so a
// flood of empty lines is bounded too.
const logLineOverhead = 32

// maxLogBatch bounds the lines of one AppendLogs call.
const maxLogBatch = 1000

func (l LogLine) size() int64 { return int64(len(l.Level) + len(l.Message) + logLineOverhead) }

// AppendLogs appends log lines to machine id's log. A line longer than a
// quarter of the per-machine bound (or 16 KiB) is cut. When the log exceeds
// its bound in bytes, the oldest lines are dropped until it is under three
// quarters of it, so the kept log never exceeds the bound.
func (db *DB) AppendLogs(ctx context.Context, id string, lines []LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	if len(lines) > maxLogBatch {
		return fmt.Errorf("append logs of machine %s: %d lines, at most %d per call: %w", id, len(lines), maxLogBatch, ErrLimit)
	}
	limit := db.opts.logBytesPerMachine
	maxLine := min(limit/4, 16<<10)
	t := now()
	var added int64
	for i := range lines {
		if len(lines[i].Level) > 16 {
			lines[i].Level = truncateUTF8(lines[i].Level, 16)
		}
		if int64(len(lines[i].Message)) > maxLine-logLineOverhead-16 {
			lines[i].Message = truncateUTF8(lines[i].Message, int(maxLine-logLineOverhead-16-3)) + "…"
		}
		if lines[i].Time.IsZero() {
			lines[i].Time = t
		}
		added += lines[i].size()
	}
	return db.write(ctx, "append logs", func(tx *sql.Tx) error {
		if _, err := db.lockMachine(ctx, tx, id); err != nil {
			return fmt.Errorf("append logs: %w", err)
		}
		if err := db.insertLogs(ctx, tx, id, lines); err != nil {
			return err
		}
		var total int64
		err := tx.QueryRowContext(ctx, db.q(`INSERT INTO log_usage (machine_id, bytes) VALUES (?, ?)
			ON CONFLICT (machine_id) DO UPDATE SET bytes = log_usage.bytes + excluded.bytes RETURNING bytes`), id, added).Scan(&total)
		if err != nil {
			return fmt.Errorf("append logs of machine %s: count bytes: %w", id, err)
		}
		if total <= limit {
			return nil
		}
		return db.pruneLogs(ctx, tx, id, total, limit*3/4)
	})
}

// insertLogs inserts lines, in order, into machine id's log: one statement
// on PostgreSQL (a round trip per line was a tenth of its statements under a
// fleet's provisions), a prepared one per line on SQLite, in process.
func (db *DB) insertLogs(ctx context.Context, tx *sql.Tx, id string, lines []LogLine) error {
	if db.engine == EnginePostgres {
		ats, sizes := make([]int64, len(lines)), make([]int64, len(lines))
		levels, msgs := make([]string, len(lines)), make([]string, len(lines))
		for i, l := range lines {
			ats[i], levels[i], msgs[i], sizes[i] = ms(l.Time), l.Level, l.Message, l.size()
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO logs (machine_id, at, level, message, size)
			SELECT $1, v.at, v.level, v.message, v.size
			FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[]) WITH ORDINALITY AS v(at, level, message, size, n)
			ORDER BY v.n`, id, ats, levels, msgs, sizes)
		if err != nil {
			return fmt.Errorf("append %d log lines of machine %s: %w", len(lines), id, err)
		}
		return nil
	}
	st, err := tx.PrepareContext(ctx, "INSERT INTO logs (machine_id, at, level, message, size) VALUES (?, ?, ?, ?, ?)")
	if err != nil {
		return fmt.Errorf("append logs of machine %s: %w", id, err)
	}
	defer st.Close()
	for _, l := range lines {
		if _, err := st.ExecContext(ctx, id, ms(l.Time), l.Level, l.Message, l.size()); err != nil {
			return fmt.Errorf("append logs of machine %s: %w", id, err)
		}
	}
	return nil
}

// pruneLogs drops machine id's oldest log lines until at most target bytes
// remain.
func (db *DB) pruneLogs(ctx context.Context, tx *sql.Tx, id string, total, target int64) error {
	rows, err := tx.QueryContext(ctx, db.q("SELECT id, size FROM logs WHERE machine_id = ? ORDER BY id"), id)
	if err != nil {
		return fmt.Errorf("prune logs of machine %s: %w", id, err)
	}
	var cut, dropped int64
	for rows.Next() && total-dropped > target {
		var lid, size int64
		if err := rows.Scan(&lid, &size); err != nil {
			rows.Close()
			return fmt.Errorf("prune logs of machine %s: %w", id, err)
		}
		cut, dropped = lid, dropped+size
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("prune logs of machine %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, db.q("DELETE FROM logs WHERE machine_id = ? AND id <= ?"), id, cut); err != nil {
		return fmt.Errorf("prune logs of machine %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, db.q("UPDATE log_usage SET bytes = bytes - ? WHERE machine_id = ?"), dropped, id); err != nil {
		return fmt.Errorf("prune logs of machine %s: %w", id, err)
	}
	return nil
}

// Logs returns machine id's most recent log lines, oldest first, at most
// limit (default and maximum 10,000).
func (db *DB) Logs(ctx context.Context, id string, limit int) ([]LogLine, error) {
	if limit <= 0 || limit > 10000 {
		limit = 10000
	}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT at, level, message FROM logs WHERE machine_id = ?
		ORDER BY id DESC LIMIT ?`), id, limit)
	if err != nil {
		return nil, fmt.Errorf("logs of machine %s: %w", id, err)
	}
	defer rows.Close()
	var out []LogLine
	for rows.Next() {
		var l LogLine
		var at int64
		if err := rows.Scan(&at, &l.Level, &l.Message); err != nil {
			return nil, fmt.Errorf("logs of machine %s: %w", id, err)
		}
		l.Time = fromMS(at)
		out = append(out, l)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, rows.Err()
}

// LogBytes returns the bytes machine id's kept log lines count for.
func (db *DB) LogBytes(ctx context.Context, id string) (int64, error) {
	var n sql.NullInt64
	if err := db.sql.QueryRowContext(ctx, db.q("SELECT SUM(size) FROM logs WHERE machine_id = ?"), id).Scan(&n); err != nil {
		return 0, fmt.Errorf("log bytes of machine %s: %w", id, err)
	}
	return n.Int64, nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
